#include "spec/whole_file.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace parity::spec {

std::string read_whole_file(const std::string& path, uint64_t limit,
                            const std::string& limit_remedy,
                            const std::function<void(const std::string&)>& refuse) {
  // `refuse` throws; should it return, stop here all the same.
  auto fail = [&](const std::string& why) {
    refuse(why);
    throw std::logic_error("read_whole_file: the refusal for '" + path + "' did not throw");
  };
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) fail("does not exist; check the path");
  if (!fs::is_regular_file(st))
    fail(fs::is_directory(st) ? "is not a file (a directory)"
                              : "is not a regular file (a pipe, a device or a socket); copy what "
                                "it holds to a file and give that");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) fail("cannot be sized (" + ec.message() + "); check the file");
  if (size > limit)
    fail("is " + std::to_string(size) + " bytes, more than the " + std::to_string(limit) +
         " parity reads whole; " + limit_remedy);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot be opened; check its permissions");
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (in.gcount() != static_cast<std::streamsize>(size) || in.bad())
    fail("cannot be read to its end (did it change while read?); check the file");
  return bytes;
}

}  // namespace parity::spec
