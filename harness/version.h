#pragma once

#include <string>

namespace parity::harness {
// "parity <version> (git <sha>), libtorch <v>, transports: ..." for --version and run metadata.
std::string version_text();
std::string git_sha();
}  // namespace parity::harness
