// parity::h5 core: errors, the call checker, object paths, property lists and object lookup.
// With h5_types.cpp, h5_file.cpp, h5_dataset.cpp and h5_attr.cpp, the only translation units
// in the project that call the HDF5 C API (see h5.h for the contract and the schema).
#include <filesystem>
#include <stdexcept>

#include "dumps/h5_detail.h"
#include "spec/checked.h"

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
    : spec::BadInput(compose_message(what, reason, hdf5, remedy)),
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

namespace detail {

// ---------------------------------------------------------------------------------------------
// HDF5 error stack and the call checker

// HDF5's automatic error printing is per thread in thread-safe builds, so every entry point
// switches it off for the calling thread.
void enter() {
  thread_local bool quiet = false;
  if (!quiet) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    quiet = true;
  }
}

namespace {

herr_t collect_desc(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  try {
    auto* out = static_cast<std::vector<std::string>*>(data);
    if (err && err->desc && err->desc[0] != '\0') out->emplace_back(err->desc);
  } catch (...) {
    return -1;
  }
  return 0;
}

}  // namespace

std::vector<std::string> take_error_stack() {
  std::vector<std::string> descs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_desc, &descs);
  H5Eclear2(H5E_DEFAULT);
  return descs;
}

void Op::fail(std::string reason) const {
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

// ---------------------------------------------------------------------------------------------
// Paths

namespace {

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

}  // namespace

std::string join_path(const std::vector<std::string>& comps, size_t n) {
  if (n == 0) return "/";
  std::string p;
  for (size_t i = 0; i < n; ++i) p += "/" + comps[i];
  return p;
}

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
// Objects

// Opens an object that is known to exist (any kind), returning a handle closed by H5Oclose.
Handle open_object(const File& f, const std::string& abs, const Op& op) {
  return object_h(op(H5Oopen(f.id(), abs.c_str(), H5P_DEFAULT)));
}

bool exists_impl(const File& f, const Path& p, const Op& op) {
  for (size_t i = 1; i <= p.comps.size(); ++i) {
    const std::string prefix = join_path(p.comps, i);
    if (op(H5Lexists(f.id(), prefix.c_str(), H5P_DEFAULT)) == 0) return false;
    // An external (or user-defined) link would open another file, one the user never named:
    // refused before anything follows it.
    H5L_info_t link{};
    op(H5Lget_info(f.id(), prefix.c_str(), &link, H5P_DEFAULT));
    if (link.type != H5L_TYPE_HARD && link.type != H5L_TYPE_SOFT)
      op.fail(quote(prefix) + " is a link into another file (an HDF5 external link); parity "
              "reads only the files it is given: copy the data into this file");
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
  const auto n = spec::checked_numel(shape);
  if (!n) throw std::overflow_error("shape " + shape_text(shape) + " holds more than 2^63 elements");
  return *n;
}


}  // namespace detail
}  // namespace parity::h5

namespace parity::h5 {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace parity::h5
