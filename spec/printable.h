// Text from a file, made safe to print on one terminal line: a tensor name or a group path
// comes from whoever wrote the file, and printed verbatim its escape and control bytes could
// rewrite the screen or forge a line of the report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace parity::spec {

// The length of the well-formed UTF-8 sequence that starts s[i] (1 to 4; shortest form, no
// surrogate, at most U+10FFFF), its code point in `cp`; 0 where s[i] starts none.
size_t utf8_sequence(std::string_view s, size_t i, uint32_t& cp);

// Whether all of `s` is well-formed UTF-8.
bool is_utf8(std::string_view s);

// `s` with every byte that is not part of a printable character written as \xNN: the C0
// controls (below 0x20), DEL, the bytes of a C1 control (U+0080 to U+009F, which terminals
// take as escape sequences), and bytes that are not well-formed UTF-8; with ascii_only, every
// byte from 0x80. Cut after `limit` bytes of `s` with "..." (never inside a character).
// Printable text comes back unchanged.
std::string printable(std::string_view s, size_t limit = 200, bool ascii_only = false);

}  // namespace parity::spec
