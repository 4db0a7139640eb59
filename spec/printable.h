// Text from a file, made safe to print on one terminal line: a tensor name or a group path
// comes from whoever wrote the file, and printed verbatim its escape and control bytes could
// rewrite the screen or forge a line of the report.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace parity::spec {

// `s` with each control byte (below 0x20, and 0x7F) written as \xNN, and, with ascii_only,
// each byte from 0x80 too; cut after `limit` bytes with "..." (never inside a UTF-8
// sequence). Printable text comes back unchanged.
std::string printable(std::string_view s, size_t limit = 200, bool ascii_only = false);

}  // namespace parity::spec
