// Any run a user hands to `parity compare`: parity's own dumps, torch.save archives,
// safetensors files, HDF5 files written by h5py (any flat or grouped layout), or a directory of
// such files (one per rank, merged by name). A file's kind comes from its content, never its
// name.
//
// A file other than a parity dump becomes a Dump of one step (step 1, or the step asked for)
// whose tensors are grouped by their names' first component: "grads.<fqn>" or "grads/<fqn>"
// gives the gradient of <fqn>, "params." / "params/" a parameter, "buffers." / "buffers/" a
// buffer, and any other name is a parameter under its whole name (a raw state_dict()). Its
// meta holds "kind" and "source"; it has no losses and no flavor.
#pragma once

#include <map>
#include <string>

#include "dumps/dump.h"
#include "dumps/tensor_file.h"

namespace parity::dumps {

// Dcp: a torch.distributed.checkpoint directory (dumps/dcp.h), read as one file.
enum class FileKind { ParityDump, Hdf5, TorchSave, Safetensors, Dcp, Unknown };
const char* to_string(FileKind k);  // "parity dump", "HDF5", "torch.save", "safetensors", ...

// The kind of one file, from its first bytes (and, for HDF5, whether /meta says parity-dump);
// Dcp for a DCP checkpoint directory.
FileKind detect_kind(const std::string& path);

// Renames applied to every tensor name after it is read (--map): exact names, and prefixes
// written with a trailing '*' ("model.layers.* layers.*" maps model.layers.3.w to layers.3.w).
struct NameMap {
  std::map<std::string, std::string> exact;
  std::vector<std::pair<std::string, std::string>> prefixes;  // in file order; first match wins
  std::string apply(const std::string& name) const;
  bool empty() const { return exact.empty() && prefixes.empty(); }
};

// One rule per line, "FROM TO" separated by whitespace; '#' starts a comment; blank lines are
// ignored. Throws DumpError naming the file and line.
NameMap read_name_map(const std::string& path);

// Reads a run of any kind. `step` numbers the one step of a file that is not a parity dump.
// `names` renames every tensor (and the FQN list). Throws DumpError naming the file, what is
// wrong and the remedy.
Dump read_run(const std::string& path, const NameMap& names = {}, int64_t step = 1);

// The named tensors of one file of another writer (torch.save, safetensors or HDF5), in the
// file's order. Throws DumpError for a parity dump, an unknown kind or a damaged file.
std::vector<NamedArray> read_tensor_file(const std::string& path);

// Whether a Dump came from parity (it has a flavor and losses) or from another writer.
bool is_parity_dump(const Dump& d);

}  // namespace parity::dumps
