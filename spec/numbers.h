// Numbers (and paths) from text, read strictly: the whole text, no overflow, no wrap of a negative into an
// unsigned, every real finite. Each check returns "" when the text is good, else the problem in
// the words every refusal of parity uses, e.g. "0 is out of range; give an integer from 1 to
// 1000000". The command line's validators and the run specification's parser both use them.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace parity::spec {

// An integer from lo to hi, written in decimal (a leading '-' only where lo < 0).
std::string integer_problem(const std::string& text, int64_t lo, int64_t hi);

// An unsigned integer from 0 to UINT64_MAX (a seed): "-1" is refused, not wrapped.
std::string unsigned_problem(const std::string& text);

// A finite real x with lo < x <= hi (lo_open) or lo <= x <= hi.
std::string real_problem(const std::string& text, double lo, double hi, bool lo_open);

// A path: any non-empty text ("" is what an unset shell variable gives).
std::string path_problem(const std::string& text);

// The shortest decimal text that reads back to the same double ("0.0008" for 8e-4).
std::string shortest_text(double v);

}  // namespace parity::spec
