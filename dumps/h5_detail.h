// parity::h5 internals: what the h5_*.cpp files share. Private to dumps/: nothing outside the
// h5_*.cpp files includes this header, so <hdf5.h> stays out of the rest of the project.
//
// Every public entry point of the layer calls enter(), names its operation in an Op (file,
// object, what is being done) and passes each HDF5 return value through it; handles live in
// Handle for the duration of that one call.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>
#include <vector>

#include "dumps/h5.h"

static_assert(std::is_same_v<hid_t, int64_t>, "h5.h stores hid_t as int64_t (HDF5 >= 1.10)");
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "parity::h5 assumes a little-endian host (in-memory buffers are written unconverted)"
#endif

namespace parity::h5::detail {

// Switches HDF5's automatic error printing off for the calling thread (once per thread).
void enter();

// The descriptions on this thread's default error stack, outermost (the API call) first,
// innermost (where the failure was detected) last; clears the stack.
std::vector<std::string> take_error_stack();

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
  [[noreturn]] void fail(std::string reason = {}) const;
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


inline Handle type_h(hid_t id) { return Handle(id, H5Tclose); }
inline Handle space_h(hid_t id) { return Handle(id, H5Sclose); }
inline Handle plist_h(hid_t id) { return Handle(id, H5Pclose); }
inline Handle object_h(hid_t id) { return Handle(id, H5Oclose); }
inline Handle attr_h(hid_t id) { return Handle(id, H5Aclose); }

// Paths (h5_core.cpp)

inline std::string quote(const std::string& s) { return "'" + s + "'"; }

struct Path {
  std::vector<std::string> comps;
  std::string abs;  // normalised absolute path
};

// The absolute path of the first n components ("/" for none).
std::string join_path(const std::vector<std::string>& comps, size_t n);
// Splits `path` (optional leading '/'; no empty, "." or ".." components) or throws Error
// naming `purpose`.
Path parse_path(const File& f, const std::string& path, const char* purpose);
void require_open(const File& f, const Op& op);
void require_writable(const File& f, const Op& op);

// Property lists (h5_core.cpp)
Handle file_access_plist(const Op& op);
Handle file_create_plist(const Op& op);
Handle group_create_plist(const Op& op);
Handle dataset_create_plist(const Op& op);
Handle link_create_plist(const Op& op);
Handle attr_create_plist(const Op& op);

// Objects (h5_core.cpp)
// Opens an object that is known to exist (any kind), returning a handle closed by H5Oclose.
Handle open_object(const File& f, const std::string& abs, const Op& op);
bool exists_impl(const File& f, const Path& p, const Op& op);
// Creates the missing groups above p (all but the last component).
void ensure_parents(File& f, const Path& p, const Op& op);
int64_t product(const std::vector<int64_t>& shape);

// Datatypes (h5_types.cpp)
Handle file_type(DType dt, const Op& op);    // the on-disk type (an owned copy)
Handle memory_type(DType dt, const Op& op);  // the in-memory type
size_t checked_size(size_t v, const Op& op);  // fails on HDF5's 0 ("error")
// Maps a dataset's on-disk type to a DType, or fails naming what was found.
DType classify(hid_t ftype, const Op& op);

}  // namespace parity::h5::detail
