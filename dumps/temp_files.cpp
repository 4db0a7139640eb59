#include "dumps/temp_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace parity::dumps {

namespace {

constexpr int kSlots = 256;
constexpr size_t kPathMax = 4096;

struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 holds a file, 3 holds a directory
  char path[kPathMax];
};
Slot g_slots[kSlots];

std::string system_reason() { return std::strerror(errno); }

}  // namespace

std::string temp_path_for(const std::string& path) {
  return path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
}

namespace {

void add(const std::string& path, int kind) {
  if (path.size() >= kPathMax) return;
  for (auto& s : g_slots) {
    int expected = 0;
    if (!s.state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    s.state.store(kind, std::memory_order_release);
    return;
  }
}

void drop(const std::string& path, int kind) {
  for (auto& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) != kind || path != s.path) continue;
    s.state.store(0, std::memory_order_release);
    return;
  }
}

}  // namespace

void register_temp_file(const std::string& path) { add(path, 2); }
void unregister_temp_file(const std::string& path) { drop(path, 2); }
void register_temp_dir(const std::string& path) { add(path, 3); }
void unregister_temp_dir(const std::string& path) { drop(path, 3); }

std::string make_temp_dir(const std::string& path, std::error_code& ec) {
  ec.clear();
  if (std::filesystem::exists(path, ec) || ec) {
    // What create_directories says of an existing path: nothing for a directory, or that
    // it is not one.
    if (!ec && !std::filesystem::is_directory(path, ec) && !ec)
      ec = std::make_error_code(std::errc::not_a_directory);
    return "";
  }
  const std::string made = std::filesystem::absolute(path, ec).string();
  if (ec) return "";
  register_temp_dir(made);
  std::filesystem::create_directories(path, ec);
  if (!ec) return made;
  unregister_temp_dir(made);
  return "";
}

void remove_temp_files() noexcept {
  for (auto& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  for (int pass = 0; pass < 2; ++pass)  // a nested directory first, then its parent
    for (auto& s : g_slots)
      if (s.state.load(std::memory_order_acquire) == 3) ::rmdir(s.path);
}

AtomicTextFile::AtomicTextFile(std::string path) : path_(std::move(path)), temp_(temp_path_for(path_)) {
  register_temp_file(temp_);  // before it exists, so that no stop can fall between the two
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const std::string reason = system_reason();
    unregister_temp_file(temp_);
    throw std::runtime_error("cannot write '" + path_ + "': " + reason);
  }
}

AtomicTextFile::~AtomicTextFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
  unregister_temp_file(temp_);
}

void AtomicTextFile::write(const std::string& text) {
  if (fd_ < 0) throw std::runtime_error("'" + path_ + "' is already committed");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("cannot write '" + path_ + "': " + system_reason());
    done += static_cast<size_t>(n);
  }
}

void AtomicTextFile::commit() {
  if (fd_ < 0) return;
  const bool synced = ::fsync(fd_) == 0;
  const std::string why = synced ? "" : system_reason();
  ::close(fd_);
  fd_ = -1;
  if (!synced || std::rename(temp_.c_str(), path_.c_str()) != 0) {
    const std::string reason = synced ? system_reason() : why;
    ::unlink(temp_.c_str());
    unregister_temp_file(temp_);
    throw std::runtime_error("cannot write '" + path_ + "': " + reason);
  }
  unregister_temp_file(temp_);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicTextFile f(path);
  f.write(text);
  f.commit();
}

}  // namespace parity::dumps
