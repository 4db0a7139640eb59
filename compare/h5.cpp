// parity::h5 implementation: the only translation unit in the project that calls the HDF5 C API.
// See h5.h for the API contract and the on-disk schema.
#include "compare/h5.h"

#include <hdf5.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>
#include <utility>

static_assert(std::is_same_v<hid_t, int64_t>, "h5.h stores hid_t as int64_t (HDF5 >= 1.10)");
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "parity::h5 assumes a little-endian host (in-memory buffers are written unconverted)"
#endif

namespace parity::h5 {

// ---------------------------------------------------------------------------------------------
// Error

namespace {

std::string compose_message(const std::string& what, const std::string& reason,
                            const std::string& hdf5, const std::string& remedy) {
  std::string m = "cannot " + what + ": " + reason;
  if (!hdf5.empty()) m += " (HDF5: " + hdf5 + ")";
  if (!remedy.empty()) m += "; " + remedy;
  return m;
}

}  // namespace

Error::Error(std::string file, std::string object, std::string what, std::string reason,
             std::string hdf5, std::string remedy)
    : std::runtime_error(compose_message(what, reason, hdf5, remedy)),
      file_(std::move(file)),
      object_(std::move(object)),
      what_(std::move(what)),
      reason_(std::move(reason)),
      hdf5_(std::move(hdf5)),
      remedy_(std::move(remedy)) {}

Error Error::with_remedy(const std::string& remedy) const {
  std::string r = remedy_.empty() ? remedy : remedy_ + "; " + remedy;
  return Error(file_, object_, what_, reason_, hdf5_, std::move(r));
}

namespace {

// ---------------------------------------------------------------------------------------------
// HDF5 error stack and the call checker

// HDF5's automatic error printing is per thread in thread-safe builds, so every entry point
// switches it off for the calling thread (once per thread).
void enter() {
  thread_local bool quiet = false;
  if (!quiet) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    quiet = true;
  }
}

herr_t collect_desc(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  try {
    auto* out = static_cast<std::vector<std::string>*>(data);
    if (err && err->desc && err->desc[0] != '\0') out->emplace_back(err->desc);
  } catch (...) {
    return -1;
  }
  return 0;
}

// The descriptions on this thread's default error stack, outermost (the API call) first,
// innermost (where the failure was detected) last; clears the stack.
std::vector<std::string> take_error_stack() {
  std::vector<std::string> descs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_desc, &descs);
  H5Eclear2(H5E_DEFAULT);
  return descs;
}

// One public operation: which file, which object, and what is being done ("read dataset '/x'
// in 'f.h5'"). operator() checks an HDF5 return value (negative means failure) and throws.
struct Op {
  const std::string& file;
  std::string object;
  std::string what;

  template <class T>
  T operator()(T r) const {
    if (r < 0) fail();
    return r;
  }

  // With an explicit reason the HDF5 stack (if any) becomes the parenthesised detail; without
  // one the innermost HDF5 message is the reason and the outermost one the detail.
  [[noreturn]] void fail(std::string reason = {}) const {
    std::vector<std::string> stack = take_error_stack();
    std::string hdf5;
    if (reason.empty()) {
      if (stack.empty()) {
        reason = "HDF5 call failed";
      } else {
        reason = stack.back();
        if (stack.size() > 1) hdf5 = stack.front();
      }
    } else if (!stack.empty()) {
      hdf5 = stack.back();
    }
    throw Error(file, object, what, std::move(reason), std::move(hdf5));
  }
};

// A move-only owner of one HDF5 identifier, released with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: pass straight into H5* calls

  void reset() noexcept {
    if (id_ >= 0 && close_ && close_(id_) < 0) H5Eclear2(H5E_DEFAULT);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

Handle type_h(hid_t id) { return Handle(id, H5Tclose); }
Handle space_h(hid_t id) { return Handle(id, H5Sclose); }
Handle plist_h(hid_t id) { return Handle(id, H5Pclose); }
Handle object_h(hid_t id) { return Handle(id, H5Oclose); }
Handle attr_h(hid_t id) { return Handle(id, H5Aclose); }

// ---------------------------------------------------------------------------------------------
// Paths

std::string quote(const std::string& s) { return "'" + s + "'"; }

// Splits an object path into components. Accepts an optional leading '/'; rejects empty
// components, "." and "..". "/" gives no components.
std::vector<std::string> split_path(const std::string& file, const std::string& path,
                                    const char* purpose) {
  auto bad = [&](const std::string& why) {
    throw Error(file, path, std::string(purpose) + " " + quote(path) + " in " + quote(file),
                "invalid object path: " + why);
  };
  if (path.empty()) bad("empty path");
  std::vector<std::string> comps;
  size_t i = path[0] == '/' ? 1 : 0;
  if (i == path.size()) return comps;  // "/"
  while (true) {
    size_t j = path.find('/', i);
    std::string c = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (c.empty()) bad("empty component");
    if (c == "." || c == "..") bad("component " + quote(c) + " is not allowed");
    comps.push_back(std::move(c));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return comps;
}

std::string join_path(const std::vector<std::string>& comps, size_t n) {
  if (n == 0) return "/";
  std::string p;
  for (size_t i = 0; i < n; ++i) p += "/" + comps[i];
  return p;
}

struct Path {
  std::vector<std::string> comps;
  std::string abs;  // normalised absolute path
};

Path parse_path(const File& f, const std::string& path, const char* purpose) {
  Path p;
  p.comps = split_path(f.path(), path, purpose);
  p.abs = join_path(p.comps, p.comps.size());
  return p;
}

void require_open(const File& f, const Op& op) {
  if (!f.is_open()) op.fail("file is not open (committed, moved from or never opened)");
}

void require_writable(const File& f, const Op& op) {
  require_open(f, op);
  if (!f.writable()) op.fail("file is open read-only");
}

// ---------------------------------------------------------------------------------------------
// Property lists

Handle file_access_plist(const Op& op) {
  Handle fapl = plist_h(op(H5Pcreate(H5P_FILE_ACCESS)));
  // 1.8 object format or newer: new-style groups (creation order, dense link storage).
  op(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
  // Closing the file closes everything in it, so commit() really finalises the file.
  op(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG));
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || \
    H5_VERSION_GE(1, 12, 1)
  // Keep HDF5's file locking but do not fail on file systems without lock support.
  op(H5Pset_file_locking(fapl, true, true));
#endif
  return fapl;
}

Handle file_create_plist(const Op& op) {
  Handle fcpl = plist_h(op(H5Pcreate(H5P_FILE_CREATE)));
  // The root group is created with these group properties.
  op(H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  op(H5Pset_obj_track_times(fcpl, false));
  return fcpl;
}

Handle group_create_plist(const Op& op) {
  Handle gcpl = plist_h(op(H5Pcreate(H5P_GROUP_CREATE)));
  op(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  op(H5Pset_obj_track_times(gcpl, false));
  return gcpl;
}

Handle dataset_create_plist(const Op& op) {
  Handle dcpl = plist_h(op(H5Pcreate(H5P_DATASET_CREATE)));
  op(H5Pset_obj_track_times(dcpl, false));
  return dcpl;
}

Handle link_create_plist(const Op& op) {
  Handle lcpl = plist_h(op(H5Pcreate(H5P_LINK_CREATE)));
  op(H5Pset_char_encoding(lcpl, H5T_CSET_UTF8));
  return lcpl;
}

Handle attr_create_plist(const Op& op) {
  Handle acpl = plist_h(op(H5Pcreate(H5P_ATTRIBUTE_CREATE)));
  op(H5Pset_char_encoding(acpl, H5T_CSET_UTF8));
  return acpl;
}

// ---------------------------------------------------------------------------------------------
// Datatypes

// bf16 layout: sign bit 15, exponent bits 7..14 (bias 127), mantissa bits 0..6.
constexpr size_t kBf16Fields[5] = {15, 7, 8, 0, 7};
constexpr size_t kF32Fields[5] = {31, 23, 8, 0, 23};
constexpr size_t kF64Fields[5] = {63, 52, 11, 0, 52};

Handle make_bf16_type(const Op& op) {
  Handle t = type_h(op(H5Tcopy(H5T_IEEE_F32LE)));
  // Fields first (they must fit the current precision), then shrink precision and size.
  op(H5Tset_fields(t, kBf16Fields[0], kBf16Fields[1], kBf16Fields[2], kBf16Fields[3],
                   kBf16Fields[4]));
  op(H5Tset_offset(t, 0));
  op(H5Tset_precision(t, 16));
  op(H5Tset_size(t, 2));
  op(H5Tset_ebias(t, 127));
  return t;
}

// The on-disk type for a dtype (an owned copy).
Handle file_type(DType dt, const Op& op) {
  switch (dt) {
    case DType::F32: return type_h(op(H5Tcopy(H5T_IEEE_F32LE)));
    case DType::F64: return type_h(op(H5Tcopy(H5T_IEEE_F64LE)));
    case DType::BF16: return make_bf16_type(op);
    case DType::I64: return type_h(op(H5Tcopy(H5T_STD_I64LE)));
    case DType::I32: return type_h(op(H5Tcopy(H5T_STD_I32LE)));
    case DType::U8: return type_h(op(H5Tcopy(H5T_STD_U8LE)));
  }
  op.fail("unknown dtype");
}

// The in-memory type for a dtype. On a little-endian host it equals the file type, so HDF5
// copies bytes unconverted (NaN payloads and bf16 bit patterns survive).
Handle memory_type(DType dt, const Op& op) {
  switch (dt) {
    case DType::F32: return type_h(op(H5Tcopy(H5T_NATIVE_FLOAT)));
    case DType::F64: return type_h(op(H5Tcopy(H5T_NATIVE_DOUBLE)));
    case DType::BF16: return make_bf16_type(op);
    case DType::I64: return type_h(op(H5Tcopy(H5T_NATIVE_INT64)));
    case DType::I32: return type_h(op(H5Tcopy(H5T_NATIVE_INT32)));
    case DType::U8: return type_h(op(H5Tcopy(H5T_NATIVE_UINT8)));
  }
  op.fail("unknown dtype");
}

size_t checked_size(size_t v, const Op& op) {
  if (v == 0) op.fail();
  return v;
}

// Maps a dataset's on-disk type to a DType, or fails naming what was found.
DType classify(hid_t ftype, const Op& op) {
  const H5T_class_t cls = op(H5Tget_class(ftype));
  const size_t size = checked_size(H5Tget_size(ftype), op);
  if (cls == H5T_FLOAT) {
    size_t f[5];
    op(H5Tget_fields(ftype, &f[0], &f[1], &f[2], &f[3], &f[4]));
    const size_t ebias = H5Tget_ebias(ftype);
    const size_t prec = checked_size(H5Tget_precision(ftype), op);
    const int offset = op(H5Tget_offset(ftype));
    auto is = [&](const size_t (&want)[5], size_t want_size, size_t want_bias) {
      return size == want_size && prec == 8 * want_size && offset == 0 && ebias == want_bias &&
             std::equal(f, f + 5, want);
    };
    if (is(kF32Fields, 4, 127)) return DType::F32;
    if (is(kF64Fields, 8, 1023)) return DType::F64;
    if (is(kBf16Fields, 2, 127)) return DType::BF16;
    op.fail("unsupported floating-point type (" + std::to_string(size) + " bytes, sign bit " +
            std::to_string(f[0]) + ", " + std::to_string(f[2]) + "-bit exponent, " +
            std::to_string(f[4]) + "-bit mantissa, bias " + std::to_string(ebias) + ")");
  }
  if (cls == H5T_INTEGER) {
    const H5T_sign_t sign = op(H5Tget_sign(ftype));
    if (sign == H5T_SGN_2 && size == 8) return DType::I64;
    if (sign == H5T_SGN_2 && size == 4) return DType::I32;
    if (sign == H5T_SGN_NONE && size == 1) return DType::U8;
    op.fail("unsupported integer type (" + std::to_string(8 * size) + "-bit " +
            (sign == H5T_SGN_NONE ? "unsigned" : "signed") + ")");
  }
  op.fail("unsupported element type (HDF5 type class " + std::to_string(static_cast<int>(cls)) +
          ", " + std::to_string(size) + " bytes)");
}

// ---------------------------------------------------------------------------------------------
// Objects

// Opens an object that is known to exist (any kind), returning a handle closed by H5Oclose.
Handle open_object(const File& f, const std::string& abs, const Op& op) {
  return object_h(op(H5Oopen(f.id(), abs.c_str(), H5P_DEFAULT)));
}

bool exists_impl(const File& f, const Path& p, const Op& op) {
  for (size_t i = 1; i <= p.comps.size(); ++i) {
    const std::string prefix = join_path(p.comps, i);
    if (op(H5Lexists(f.id(), prefix.c_str(), H5P_DEFAULT)) == 0) return false;
    // A dangling soft link exists as a link but not as an object.
    if (op(H5Oexists_by_name(f.id(), prefix.c_str(), H5P_DEFAULT)) == 0) return false;
    if (i < p.comps.size()) {
      Handle o = open_object(f, prefix, op);
      if (H5Iget_type(o) != H5I_GROUP) return false;
    }
  }
  return true;
}

// Creates the missing groups above p (all but the last component).
void ensure_parents(File& f, const Path& p, const Op& op) {
  for (size_t i = 1; i < p.comps.size(); ++i) {
    const std::string prefix = join_path(p.comps, i);
    if (op(H5Lexists(f.id(), prefix.c_str(), H5P_DEFAULT)) == 0) {
      Handle lcpl = link_create_plist(op);
      Handle gcpl = group_create_plist(op);
      Handle g(op(H5Gcreate2(f.id(), prefix.c_str(), lcpl, gcpl, H5P_DEFAULT)), H5Gclose);
      continue;
    }
    if (op(H5Oexists_by_name(f.id(), prefix.c_str(), H5P_DEFAULT)) == 0)
      op.fail(quote(prefix) + " is a dangling link");
    Handle o = open_object(f, prefix, op);
    if (H5Iget_type(o) != H5I_GROUP) op.fail(quote(prefix) + " exists and is not a group");
  }
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

herr_t collect_link_name(hid_t /*group*/, const char* name, const H5L_info_t* /*info*/,
                         void* data) {
  try {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  } catch (...) {
    return -1;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Attributes

std::string attr_what(const char* verb, const std::string& name, const Path& p,
                      const File& f) {
  return std::string(verb) + " attribute " + quote(name) + " of " + quote(p.abs) + " in " +
         quote(f.path());
}

void write_attr(File& f, const std::string& obj, const std::string& name, hid_t ftype,
                hid_t mtype, const void* buf, const std::string* str_value) {
  enter();
  const Path p = parse_path(f, obj, "write an attribute of");
  const Op op{f.path(), p.abs, attr_what("write", name, p, f)};
  require_writable(f, op);
  if (name.empty()) op.fail("empty attribute name");
  if (str_value && str_value->find('\0') != std::string::npos)
    op.fail("string value contains a NUL byte");
  if (!exists_impl(f, p, op)) op.fail("no such object");
  Handle o = open_object(f, p.abs, op);
  if (op(H5Aexists(o, name.c_str())) > 0) op(H5Adelete(o, name.c_str()));
  Handle space = space_h(op(H5Screate(H5S_SCALAR)));
  Handle acpl = attr_create_plist(op);
  Handle a = attr_h(op(H5Acreate2(o, name.c_str(), ftype, space, acpl, H5P_DEFAULT)));
  op(H5Awrite(a, mtype, buf));
}

// Opens a single-valued attribute for reading, failing with a clear reason.
Handle open_attr(const File& f, const Path& p, const std::string& name, const Op& op) {
  require_open(f, op);
  if (!exists_impl(f, p, op)) op.fail("no such object");
  Handle o = open_object(f, p.abs, op);
  if (op(H5Aexists(o, name.c_str())) == 0) op.fail("no such attribute");
  Handle a = attr_h(op(H5Aopen(o, name.c_str(), H5P_DEFAULT)));
  Handle space = space_h(op(H5Aget_space(a)));
  if (op(H5Sget_simple_extent_npoints(space)) != 1) op.fail("attribute does not hold one value");
  return a;
}

Handle string_type(H5T_cset_t cset, const Op& op) {
  Handle t = type_h(op(H5Tcopy(H5T_C_S1)));
  op(H5Tset_size(t, H5T_VARIABLE));
  op(H5Tset_cset(t, cset));
  return t;
}

void reclaim_vlen(hid_t mtype, char** s) {
  hid_t space = H5Screate(H5S_SCALAR);
  if (space < 0) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
#if H5_VERSION_GE(1, 12, 0)
  if (H5Treclaim(mtype, space, H5P_DEFAULT, s) < 0) H5Eclear2(H5E_DEFAULT);
#else
  if (H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, s) < 0) H5Eclear2(H5E_DEFAULT);
#endif
  H5Sclose(space);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// DType

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::I32: return 4;
    case DType::U8: return 1;
  }
  throw std::invalid_argument("parity::h5::dtype_size: invalid DType");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::BF16: return "bfloat16";
    case DType::I64: return "int64";
    case DType::I32: return "int32";
    case DType::U8: return "uint8";
  }
  throw std::invalid_argument("parity::h5::dtype_name: invalid DType");
}

int64_t Array::numel() const { return product(shape); }

// ---------------------------------------------------------------------------------------------
// File

File::File(std::string path, std::string temp_path, int64_t id, bool writable)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), id_(id), writable_(writable) {}

File::File(File&& o) noexcept
    : path_(std::move(o.path_)),
      temp_path_(std::move(o.temp_path_)),
      id_(std::exchange(o.id_, -1)),
      writable_(o.writable_) {}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    close_noexcept();
    path_ = std::move(o.path_);
    temp_path_ = std::move(o.temp_path_);
    id_ = std::exchange(o.id_, -1);
    writable_ = o.writable_;
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
  if (writable_ && !temp_path_.empty()) std::remove(temp_path_.c_str());
}

File File::create(const std::string& path) {
  enter();
  const std::string tmp = path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
  const Op op{path, "", "create " + quote(path) + " (temporary file " + quote(tmp) + ")"};
  if (path.empty()) op.fail("empty file name");
  Handle fcpl = file_create_plist(op);
  Handle fapl = file_access_plist(op);
  const hid_t id = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
  if (id < 0) {
    std::remove(tmp.c_str());  // not an HDF5 call: the error stack stays for op.fail()
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
  const hid_t id = op(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
  return File(path, "", id, false);
}

void File::commit() {
  enter();
  const Op op{path_, "", "commit " + quote(path_) + " (temporary file " + quote(temp_path_) + ")"};
  require_writable(*this, op);
  const hid_t id = std::exchange(id_, -1);
  auto fail_removing_temp = [&](const std::string& reason) {
    std::remove(temp_path_.c_str());
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
  // Persist the directory entry too (best effort).
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// ---------------------------------------------------------------------------------------------
// Datasets

void create_group(File& file, const std::string& path) {
  enter();
  const Path p = parse_path(file, path, "create group");
  const Op op{file.path(), p.abs, "create group " + quote(p.abs) + " in " + quote(file.path())};
  require_writable(file, op);
  if (p.comps.empty()) return;  // the root exists
  Path below = p;
  below.comps.push_back("_");  // ensure_parents creates every component but the last
  ensure_parents(file, below, op);
}

void write(File& file, const std::string& path, DType dtype, const std::vector<int64_t>& shape,
           const void* data) {
  enter();
  const Path p = parse_path(file, path, "write dataset");
  const Op op{file.path(), p.abs, "write dataset " + quote(p.abs) + " to " + quote(file.path())};
  require_writable(file, op);
  if (p.comps.empty()) op.fail("the root group cannot be a dataset");
  for (int64_t d : shape)
    if (d < 0) op.fail("negative dimension in shape " + shape_str(shape));
  const int64_t n = product(shape);
  if (n > 0 && data == nullptr) op.fail("data is null for shape " + shape_str(shape));

  ensure_parents(file, p, op);
  if (op(H5Lexists(file.id(), p.abs.c_str(), H5P_DEFAULT)) > 0) op.fail("object already exists");

  Handle ftype = file_type(dtype, op);
  Handle mtype = memory_type(dtype, op);
  Handle space;
  if (shape.empty()) {
    space = space_h(op(H5Screate(H5S_SCALAR)));
  } else {
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    space = space_h(op(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
  }
  Handle lcpl = link_create_plist(op);
  Handle dcpl = dataset_create_plist(op);
  Handle d(op(H5Dcreate2(file.id(), p.abs.c_str(), ftype, space, lcpl, dcpl, H5P_DEFAULT)),
           H5Dclose);
  if (n > 0) op(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

Array read(const File& file, const std::string& path) {
  enter();
  const Path p = parse_path(file, path, "read dataset");
  const Op op{file.path(), p.abs, "read dataset " + quote(p.abs) + " in " + quote(file.path())};
  require_open(file, op);
  if (!exists_impl(file, p, op)) op.fail("no such object");
  Handle d = open_object(file, p.abs, op);
  if (H5Iget_type(d) != H5I_DATASET) op.fail("object is not a dataset");

  Array a;
  Handle ftype = type_h(op(H5Dget_type(d)));
  a.dtype = classify(ftype, op);
  Handle space = space_h(op(H5Dget_space(d)));
  const H5S_class_t sc = op(H5Sget_simple_extent_type(space));
  if (sc == H5S_NULL) op.fail("dataset has a null dataspace (no elements, not even a scalar)");
  if (sc == H5S_SIMPLE) {
    const int rank = op(H5Sget_simple_extent_ndims(space));
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    op(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
    for (hsize_t dim : dims) {
      if (dim > static_cast<hsize_t>(std::numeric_limits<int64_t>::max()))
        op.fail("dimension too large");
      a.shape.push_back(static_cast<int64_t>(dim));
    }
  }
  const int64_t n = a.numel();
  a.bytes.resize(static_cast<size_t>(n) * dtype_size(a.dtype));
  if (n > 0) {
    Handle mtype = memory_type(a.dtype, op);
    op(H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.bytes.data()));
  }
  return a;
}

// ---------------------------------------------------------------------------------------------
// Groups

bool exists(const File& file, const std::string& path) {
  enter();
  const Path p = parse_path(file, path, "look up");
  const Op op{file.path(), p.abs, "look up " + quote(p.abs) + " in " + quote(file.path())};
  require_open(file, op);
  return exists_impl(file, p, op);
}

std::vector<std::string> list(const File& file, const std::string& group) {
  enter();
  const Path p = parse_path(file, group, "list group");
  const Op op{file.path(), p.abs, "list group " + quote(p.abs) + " in " + quote(file.path())};
  require_open(file, op);
  if (!exists_impl(file, p, op)) op.fail("no such group");
  Handle g = open_object(file, p.abs, op);
  if (H5Iget_type(g) != H5I_GROUP) op.fail("object is not a group");
  Handle gcpl = plist_h(op(H5Gget_create_plist(g)));
  unsigned order_flags = 0;
  op(H5Pget_link_creation_order(gcpl, &order_flags));
  const H5_index_t index =
      (order_flags & H5P_CRT_ORDER_TRACKED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  std::vector<std::string> names;
  hsize_t pos = 0;
  op(H5Literate(g, index, H5_ITER_INC, &pos, collect_link_name, &names));
  return names;
}

// ---------------------------------------------------------------------------------------------
// Attributes

void set_attr(File& file, const std::string& obj, const std::string& name,
              const std::string& value) {
  enter();
  const Op op{file.path(), obj, "write attribute " + quote(name) + " of " + quote(obj) + " in " +
                                    quote(file.path())};
  Handle t = string_type(H5T_CSET_UTF8, op);
  const char* cstr = value.c_str();
  write_attr(file, obj, name, t, t, &cstr, &value);
}

void set_attr(File& file, const std::string& obj, const std::string& name, const char* value) {
  set_attr(file, obj, name, std::string(value ? value : ""));
}

void set_attr(File& file, const std::string& obj, const std::string& name, int64_t value) {
  enter();
  write_attr(file, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, nullptr);
}

void set_attr(File& file, const std::string& obj, const std::string& name, double value) {
  enter();
  write_attr(file, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, nullptr);
}

bool has_attr(const File& file, const std::string& obj, const std::string& name) {
  enter();
  const Path p = parse_path(file, obj, "look up an attribute of");
  const Op op{file.path(), p.abs, attr_what("look up", name, p, file)};
  require_open(file, op);
  if (!exists_impl(file, p, op)) op.fail("no such object");
  Handle o = open_object(file, p.abs, op);
  return op(H5Aexists(o, name.c_str())) > 0;
}

std::string attr_string(const File& file, const std::string& obj, const std::string& name) {
  enter();
  const Path p = parse_path(file, obj, "read an attribute of");
  const Op op{file.path(), p.abs, attr_what("read string", name, p, file)};
  Handle a = open_attr(file, p, name, op);
  Handle ftype = type_h(op(H5Aget_type(a)));
  if (op(H5Tget_class(ftype)) != H5T_STRING) op.fail("attribute is not a string");
  const H5T_cset_t cset = op(H5Tget_cset(ftype));
  if (op(H5Tis_variable_str(ftype)) > 0) {
    Handle mtype = string_type(cset, op);
    char* s = nullptr;
    op(H5Aread(a, mtype, &s));
    struct Reclaim {
      hid_t t;
      char** s;
      ~Reclaim() {
        if (*s) reclaim_vlen(t, s);
      }
    } reclaim{mtype, &s};
    return std::string(s ? s : "");
  }
  // Fixed-length: read with the file's own type (no conversion), cut at the first NUL and,
  // for space-padded strings, drop the padding.
  const size_t size = checked_size(H5Tget_size(ftype), op);
  Handle mtype = type_h(op(H5Tcopy(ftype)));
  std::string s(size, '\0');
  op(H5Aread(a, mtype, s.data()));
  const size_t nul = s.find('\0');
  if (nul != std::string::npos) s.resize(nul);
  if (op(H5Tget_strpad(ftype)) == H5T_STR_SPACEPAD) {
    const size_t last = s.find_last_not_of(' ');
    s.resize(last == std::string::npos ? 0 : last + 1);
  }
  return s;
}

int64_t attr_int(const File& file, const std::string& obj, const std::string& name) {
  enter();
  const Path p = parse_path(file, obj, "read an attribute of");
  const Op op{file.path(), p.abs, attr_what("read integer", name, p, file)};
  Handle a = open_attr(file, p, name, op);
  Handle ftype = type_h(op(H5Aget_type(a)));
  if (op(H5Tget_class(ftype)) != H5T_INTEGER) op.fail("attribute is not an integer");
  int64_t v = 0;
  op(H5Aread(a, H5T_NATIVE_INT64, &v));
  return v;
}

double attr_double(const File& file, const std::string& obj, const std::string& name) {
  enter();
  const Path p = parse_path(file, obj, "read an attribute of");
  const Op op{file.path(), p.abs, attr_what("read real", name, p, file)};
  Handle a = open_attr(file, p, name, op);
  Handle ftype = type_h(op(H5Aget_type(a)));
  const H5T_class_t cls = op(H5Tget_class(ftype));
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) op.fail("attribute is not a number");
  double v = 0;
  op(H5Aread(a, H5T_NATIVE_DOUBLE, &v));
  return v;
}

}  // namespace parity::h5
