// Reading a file from outside whole, the one way every reader does it: the path must be a
// regular file (a named pipe would block, a device never end), its size is checked against a
// limit before anything is allocated, and it is read in one read into a buffer of that size
// (a stream buffer would double and copy it). Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace parity::spec {

// The whole of `path`. On a fault calls `refuse` with what is wrong, a phrase to follow the
// file's name ("does not exist; ...", "is not a file (a directory)", "is not a regular file
// (...)", "is 9 bytes, more than the 8 ...", "cannot be read to its end ..."); `refuse` must throw the caller's error, naming the file its own way and
// adding its remedy. Past `limit` the phrase ends in `limit_remedy`.
std::string read_whole_file(const std::string& path, uint64_t limit,
                            const std::string& limit_remedy,
                            const std::function<void(const std::string&)>& refuse);

}  // namespace parity::spec
