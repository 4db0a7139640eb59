// Tensors from the files PyTorch users have (docs/design.md section 2): torch.save
// archives and safetensors files. Each reader returns named tensors as stored (dtype, shape,
// raw little-endian bytes, row-major and contiguous), in the file's own order, for the
// comparison engine to consume as it consumes a dump (dumps/external.h).
//
// Every reader takes the whole file in memory and checks every length, offset and count
// against what is there before it reads: a damaged or hostile file gives a DumpError naming
// the file, what is wrong and, where there is one, the remedy; never a crash or a hang.
#pragma once

#include <string>
#include <vector>

#include "dumps/h5.h"

namespace parity::dumps {

struct NamedArray {
  std::string name;
  h5::Array array;
};

// torch.save's zip format (the default since torch 1.6): a dict of tensors, possibly nested
// (dict, OrderedDict, list or tuple), whose keys join with '.' ({"grads": {"w": t}} gives
// "grads.w"; list items are numbered). Tensors may be views: each is read as the contiguous
// row-major copy of what it shows. bf16, fp16, fp32, fp64, int64, int32 and uint8 tensors are
// read; any other dtype, or an object that is not a container of tensors, is refused naming
// its key. `source` names the file in errors.
std::vector<NamedArray> read_torch_save(const std::string& source, const std::string& bytes);

// safetensors: an 8-byte little-endian header length n, n bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__" of strings},
// then the buffer the offsets index. BF16, F16, F32, F64, I64, I32 and U8 are read; other
// dtypes, a name or key given twice, NUL bytes in the header, offsets outside the buffer,
// overlapping tensors, or a size that does not match the shape are refused naming the tensor.
// Buffer bytes no tensor uses are allowed. Tensors come back in buffer order. `source` names
// the file in errors.
std::vector<NamedArray> read_safetensors(const std::string& source, const std::string& bytes);

}  // namespace parity::dumps
