// parity::h5 files: create to a temporary name and commit by rename, open read-only, close.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "dumps/h5_detail.h"
#include "dumps/temp_files.h"

namespace parity::h5 {

using namespace detail;

File::File(std::string path, std::string temp_path, int64_t id, bool writable)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), id_(id), writable_(writable) {}

File::File(File&& o) noexcept
    : path_(std::move(o.path_)),
      temp_path_(std::move(o.temp_path_)),
      id_(std::exchange(o.id_, -1)),
      writable_(o.writable_),
      read_budget_(o.read_budget_) {}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    close_noexcept();
    path_ = std::move(o.path_);
    temp_path_ = std::move(o.temp_path_);
    id_ = std::exchange(o.id_, -1);
    writable_ = o.writable_;
    read_budget_ = o.read_budget_;
  }
  return *this;
}

File::~File() { close_noexcept(); }

void File::close_noexcept() noexcept {
  if (id_ < 0) return;
  enter();
  if (H5Fclose(id_) < 0) H5Eclear2(H5E_DEFAULT);
  id_ = -1;
  // An uncommitted file from create(): throw the temporary away.
  if (writable_ && !temp_path_.empty()) {
    std::remove(temp_path_.c_str());
    dumps::unregister_temp_file(temp_path_);
  }
}

File File::create(const std::string& path) {
  enter();
  const std::string tmp = dumps::temp_path_for(path);
  const Op op{path, "", "create " + quote(path) + " (temporary file " + quote(tmp) + ")"};
  if (path.empty()) op.fail("empty file name");
  Handle fcpl = file_create_plist(op);
  Handle fapl = file_access_plist(op);
  // Registered before it exists: a stop between the create and a later registration would
  // leave the file behind (a stop removes what is registered, dumps/temp_files.h).
  dumps::register_temp_file(tmp);
  const hid_t id = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
  if (id < 0) {
    std::remove(tmp.c_str());  // not an HDF5 call: the error stack stays for op.fail()
    dumps::unregister_temp_file(tmp);
    op.fail();
  }
  return File(path, tmp, id, true);
}

File File::open_read(const std::string& path) {
  enter();
  const Op op{path, "", "open " + quote(path) + " for reading"};
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) op.fail("no such file");
  if (ec) op.fail(ec.message());
  if (std::filesystem::is_directory(st)) op.fail("is a directory");
  Handle fapl = file_access_plist(op);
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) op.fail(ec.message());
  const hid_t id = op(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
  File f(path, "", id, false);
  // 16 x the size + 1 GiB, saturating (a size near 2^64 is not a file on disk, but the sum
  // must not wrap).
  f.read_budget_ = size > (UINT64_MAX - (uint64_t{1} << 30)) / 16
                       ? UINT64_MAX
                       : 16 * size + (uint64_t{1} << 30);
  return f;
}

void File::commit() {
  enter();
  const Op op{path_, "", "commit " + quote(path_) + " (temporary file " + quote(temp_path_) + ")"};
  require_writable(*this, op);
  const hid_t id = std::exchange(id_, -1);
  auto fail_removing_temp = [&](const std::string& reason) {
    std::remove(temp_path_.c_str());
    dumps::unregister_temp_file(temp_path_);
    op.fail(reason);
  };
  // Closing flushes everything (close degree STRONG).
  if (H5Fclose(id) < 0) fail_removing_temp("");
  // Make the data durable before the rename makes it visible.
  const int fd = ::open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_removing_temp(std::string("cannot reopen for fsync: ") + std::strerror(errno));
  const int sync_rc = ::fsync(fd);
  const int sync_errno = errno;
  ::close(fd);
  if (sync_rc != 0) fail_removing_temp(std::string("fsync failed: ") + std::strerror(sync_errno));
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail_removing_temp(std::string("rename failed: ") + std::strerror(errno));
  dumps::unregister_temp_file(temp_path_);
  // Persist the directory entry too (best effort).
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace parity::h5
