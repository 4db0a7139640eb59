// What the torch.save reader's parts share (torch_save_detail.h).
#include "dumps/torch_save_detail.h"

#include <cstdio>

#include "dumps/dump.h"

namespace parity::dumps {

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw DumpError("'" + source + "': " + what);
}

uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

bool is_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int more = 0;
    uint32_t cp = 0, lowest = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      more = 1, cp = c & 0x1F, lowest = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      more = 2, cp = c & 0x0F, lowest = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      more = 3, cp = c & 0x07, lowest = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(more)) return false;
    for (int k = 1; k <= more; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = cp << 6 | (d & 0x3F);
    }
    if (cp < lowest || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += more + 1;
  }
  return true;
}

std::string shown(const std::string& name) {
  std::string out;
  size_t i = 0;
  while (i < name.size() && out.size() < 120) {
    const auto c = static_cast<unsigned char>(name[i]);
    const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if (len > 1 && name.size() - i >= len && is_utf8(std::string_view(name).substr(i, len))) {
      out.append(name, i, len);
      i += len;
    } else if (c >= 0x20 && c < 0x7F) {
      out += name[i++];
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      ++i;
    }
  }
  if (i < name.size()) out += "...";
  return out;
}

}  // namespace parity::dumps
