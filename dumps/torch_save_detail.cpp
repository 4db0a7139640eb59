// What the torch.save reader's parts share (torch_save_detail.h).
#include "dumps/torch_save_detail.h"

#include <cstdio>

#include "dumps/dump.h"
#include "spec/printable.h"

namespace parity::dumps {

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw DumpError("'" + source + "': " + what);
}

uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

std::string shown(const std::string& name) { return spec::printable(name, 120); }

}  // namespace parity::dumps
