// The torch.save reader's internals: what its parts share (zip_archive.cpp, unpickler.cpp and
// torch_save.cpp, the tree walk). Private to dumps/: nothing else includes this header.
//
// Every error of the reader is a DumpError "'<source>': <what>", raised through refuse().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dumps/h5.h"
#include "spec/printable.h"

namespace parity::dumps {

// The advice a torch.save error ends with where the file itself is at fault.
inline constexpr const char* kSaveRemedy =
    "save a dict of tensors with torch.save(obj, path) (torch >= 1.6)";

// Throws DumpError("'<source>': <what>").
[[noreturn]] void refuse(const std::string& source, const std::string& what);

// The one tensor a torch.save archive holds (torch.save(t, f)), as a contiguous row-major
// array: a DCP chunk is such an archive. `what` names the tensor in errors; the errors are
// read_torch_save's.
h5::Array read_torch_save_tensor(const std::string& source, const std::string& bytes,
                                 const std::string& what);

// n little-endian bytes at p (n <= 8).
uint64_t le(const unsigned char* p, int n);

// Well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF): Python
// refuses the rest when it unpickles, and names end up in JSON and HDF5 paths.
using spec::is_utf8;

// A name from the file as an error message shows it: spec::printable, cut after 120 bytes (one
// line of valid UTF-8: messages end up in JSON reports).
std::string shown(const std::string& name);

}  // namespace parity::dumps
