// torch.distributed.checkpoint (DCP) directories: what torchtitan writes as its seed checkpoint
// and at every checkpoint step. [Note: the DCP layout] in dcp.cpp says what the files hold.
#pragma once

#include <string>
#include <vector>

#include "dumps/tensor_file.h"

namespace parity::dumps {

// Whether `path` is a directory that is, or was meant to be, a DCP checkpoint: it holds a
// `.metadata` file or a `__*.distcp` data file.
bool is_dcp_dir(const std::string& path);

// The tensors of the DCP checkpoint in directory `dir`, in the order of its metadata, each
// reassembled from its chunks (one for a tensor saved whole, several for a sharded one, from
// any of the data files). Non-tensor entries (the dataloader's or the train state's bytes) are
// skipped. Names are the checkpoint's flattened keys ("model.layers.0..." in older
// torchtitan checkpoints, "layers.0..." in newer ones). Throws DumpError, one line naming the
// file, what is wrong and the remedy, for anything it cannot read: a missing `.metadata`, a
// class in it that a DCP checkpoint does not hold, a chunk outside its tensor or its file, a
// gap or an overlap between chunks, a damaged chunk archive.
std::vector<NamedArray> read_dcp(const std::string& dir);

}  // namespace parity::dumps
