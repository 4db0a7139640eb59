#include "spec/printable.h"

namespace parity::spec {

std::string printable(std::string_view s, size_t limit, bool ascii_only) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() < limit ? s.size() : limit);
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == limit) {
      // Do not end inside a UTF-8 sequence: drop its continuation bytes and its lead byte.
      while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
      if (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0xC0) out.pop_back();
      return out + "...";
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F || (ascii_only && c >= 0x80)) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace parity::spec
