#include "spec/printable.h"

namespace parity::spec {

size_t utf8_sequence(std::string_view s, size_t i, uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t more = 0;
  uint32_t lowest = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    more = 1, cp = c & 0x1F, lowest = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    more = 2, cp = c & 0x0F, lowest = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    more = 3, cp = c & 0x07, lowest = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i <= more) return 0;
  for (size_t k = 1; k <= more; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (d & 0x3F);
  }
  if (cp < lowest || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return more + 1;
}

bool is_utf8(std::string_view s) {
  uint32_t cp = 0;
  for (size_t i = 0, n = 0; i < s.size(); i += n)
    if ((n = utf8_sequence(s, i, cp)) == 0) return false;
  return true;
}

std::string printable(std::string_view s, size_t limit, bool ascii_only) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() < limit ? s.size() : limit);
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  size_t i = 0;
  while (i < s.size()) {
    if (i >= limit) return out + "...";
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    const size_t n = ascii_only && c >= 0x80 ? 0 : utf8_sequence(s, i, cp);
    if (n == 0 || cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) {
      // Not a printable character: each of its bytes escaped (a C1 control's two).
      for (size_t k = 0; k < (n ? n : 1); ++k) escape(static_cast<unsigned char>(s[i + k]));
      i += n ? n : 1;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace parity::spec
