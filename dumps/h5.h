// parity::h5 — the project's one thin layer over the HDF5 C API.
//
// Only dumps/h5_*.cpp call H5* functions or include <hdf5.h> (through the private
// dumps/h5_detail.h); this header does not include it, so users of the layer only see standard
// types. h5_core.cpp holds the errors, the call checker, paths and property lists; h5_types.cpp
// the element types; h5_file.cpp files; h5_dataset.cpp datasets and groups; h5_attr.cpp
// attributes.
//
// Error handling: every HDF5 call goes through a checker. On failure it collects the HDF5 error
// stack (HDF5's own printing to stderr is switched off) and throws parity::h5::Error, whose
// message names the file, the object path inside the file and the operation, e.g.
//   cannot open 'ckpt.h5' for reading: file signature not found (HDF5: unable to open file)
// A caller adds its own advice with Error::with_remedy():
//   try { f = File::open_read(p); }
//   catch (const h5::Error& e) { throw e.with_remedy("regenerate it with parity init"); }
//   -> "...: file signature not found (HDF5: unable to open file); regenerate it with parity init"
//
// Ownership: File owns its HDF5 file handle; it is move-only and closes the handle in its
// destructor. All other HDF5 handles (groups, datasets, dataspaces, datatypes, attributes,
// property lists) live in RAII move-only wrappers (h5_detail.h) for the duration of one call;
// no handle outlives the function that opened it.
//
// Threads: the HDF5 library serialises calls internally when it is built thread-safe (the
// Debian package is); otherwise callers must not use the layer from two threads at once. A File
// object itself must not be used from two threads at once.
//
// On-disk schema conventions (files written by this layer):
//   * Object paths are absolute, '/'-separated ("/step_000001/grads/layers.0.attention.wq_a.weight");
//     a leading '/' may be omitted by callers. Components may contain dots; a component may not be
//     empty, "." or "..". Missing intermediate groups are created on write.
//   * Every group tracks and indexes link creation order, so list() returns children in the order
//     they were written. Groups written by other tools (e.g. h5py defaults) are listed in name
//     order instead.
//   * Datasets: contiguous layout, no filters, row-major (C order), little-endian. Shape {} is a
//     scalar dataspace holding one element. dtype mapping:
//        F32 -> IEEE f32 LE     F64 -> IEEE f64 LE
//        BF16 -> a 16-bit HDF5 float: sign bit 15, exponent bits 7..14 (8 bits, bias 127),
//                mantissa bits 0..6 (7 bits), implied leading one. h5dump prints the values
//                (tested); other HDF5 readers see a float type and convert it themselves
//                (h5py was not available to check which numpy dtype it picks).
//        I64/I32 -> signed LE integers    U8 -> unsigned 8-bit integer
//   * Attributes: scalar. Strings are variable-length UTF-8 (h5py reads them as str; no size
//     limit in practice, 100 kB JSON is fine); integers are int64 LE; reals are IEEE f64 LE.
//   * Object timestamps are not recorded, so rewriting identical content does not produce files
//     that differ only by time.
//   * File format: HDF5 1.8 object format or newer (libver bounds V18..LATEST of the HDF5 in use),
//     readable by HDF5 >= 1.8 / any current h5py.
//
// The host is assumed little-endian (checked at compile time in h5_detail.h); in-memory buffers hold
// native values, which for BF16 means the raw 16-bit patterns (uint16_t), never converted.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "spec/bad_input.h"

namespace parity::h5 {

// ---------------------------------------------------------------------------------------------
// Errors

class Error : public spec::BadInput {
 public:
  // `what` is the operation with its subject, e.g. "open 'ckpt.h5' for reading" or
  // "read dataset '/x' in 'ckpt.h5'"; `reason` the innermost cause; `hdf5` the outermost HDF5
  // message (may be empty); `remedy` advice for the user (may be empty). The message is
  //   "cannot <what>: <reason>[ (HDF5: <hdf5>)][; <remedy>]".
  Error(std::string file, std::string object, std::string what, std::string reason,
        std::string hdf5 = {}, std::string remedy = {});

  const std::string& file() const { return file_; }      // file name as given by the caller
  const std::string& object() const { return object_; }  // object path in the file; "" if none
  const std::string& reason() const { return reason_; }
  const std::string& remedy() const { return remedy_; }

  // A copy of this error with `remedy` appended to the message (joined with "; " to any remedy
  // already present).
  Error with_remedy(const std::string& remedy) const;

 private:
  std::string file_, object_, what_, reason_, hdf5_, remedy_;
};

// ---------------------------------------------------------------------------------------------
// Element types

enum class DType { F32, F64, BF16, I64, I32, U8, F16 };

size_t dtype_size(DType t);        // bytes per element: 4, 8, 2, 8, 4, 1, 2
// "float32", "float64", "bfloat16", "int64", "int32", "uint8", "float16"
const char* dtype_name(DType t);

// A shape as messages write it: "[2048, 256]"; "[]" for a scalar.
std::string shape_text(const std::vector<int64_t>& shape);

// ---------------------------------------------------------------------------------------------
// Files

class File {
 public:
  // Creates a new file for writing. Data goes to the temporary file `path + ".tmp.<pid>"`;
  // commit() flushes and closes it and renames it onto `path` atomically (replacing any
  // existing file there). If the File is destroyed without commit(), the temporary file is
  // removed, so nothing half-written ever appears under `path`. The directory of `path` must
  // exist. Throws Error.
  static File create(const std::string& path);

  // Opens an existing file read-only. A missing file, a file that is not HDF5 and a truncated
  // file all throw Error naming `path`.
  static File open_read(const std::string& path);

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();  // closes the handle; removes the temporary file of an uncommitted create()

  // Flushes, closes, fsyncs and renames the temporary file onto path(). Only for files from
  // create(); afterwards the object is closed and any further use throws Error. On failure the
  // temporary file is removed and Error is thrown.
  void commit();

  const std::string& path() const { return path_; }            // final path
  const std::string& temp_path() const { return temp_path_; }  // "" for open_read()
  bool writable() const { return writable_; }
  bool is_open() const { return id_ >= 0; }

  // The HDF5 file handle (an hid_t); for use by the h5_*.cpp files only.
  int64_t id() const { return id_; }

  // What the datasets read from a file opened by open_read() may take in memory, all together:
  // 16 x the file's size + 1 GiB. A dataset's declared shape can promise far more than the
  // file holds (a fill value, compression), and many such datasets could add up past any
  // per-tensor limit; read() draws on this budget and refuses a dataset past what is left.
  uint64_t read_budget_left() const { return read_budget_; }
  void draw_on_read_budget(uint64_t bytes) const { read_budget_ -= std::min(bytes, read_budget_); }

 private:
  File(std::string path, std::string temp_path, int64_t id, bool writable);
  void close_noexcept() noexcept;

  std::string path_;
  std::string temp_path_;
  int64_t id_ = -1;
  bool writable_ = false;
  mutable uint64_t read_budget_ = UINT64_MAX;
};

// ---------------------------------------------------------------------------------------------
// Datasets

// A dense array read from a file: `bytes` holds numel() * dtype_size(dtype) bytes of row-major
// native-order elements (BF16: raw uint16 bit patterns). shape {} is a scalar (numel 1).
struct Array {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;

  int64_t numel() const;
};

// Writes a new dataset at `path` (intermediate groups are created). `data` points to
// product(shape) contiguous row-major elements of `dtype` (may be null when that product is 0);
// shape {} writes a scalar. Throws Error if the object already exists, a dimension is negative,
// an intermediate component is not a group, or the file is not writable.
// Creates the group and any missing parents; an existing group is left as it is.
void create_group(File& file, const std::string& path);

void write(File& file, const std::string& path, DType dtype, const std::vector<int64_t>& shape,
           const void* data);

// Reads a whole dataset. Throws Error (naming file and object path) if it is missing, is not a
// dataset, or has an element type other than the seven DTypes (a 16-bit float with the bf16 bit
// layout above is reported as BF16).
Array read(const File& file, const std::string& path);

// ---------------------------------------------------------------------------------------------
// Groups

// True if `path` names an existing object (group or dataset; "/" always exists). A missing
// intermediate group, or an intermediate component that is not a group, gives false.
bool exists(const File& file, const std::string& path);

// True if `path` names an existing group ("/" is one).
bool is_group(const File& file, const std::string& path);

// The object's address in its file: two paths name the same object (hard links) exactly when
// their addresses are equal. Throws Error if `path` is missing.
uint64_t object_address(const File& file, const std::string& path);

// Names (not paths) of the direct children of `group`: in creation order if the group tracks
// it (all groups written by this layer), otherwise in name order. Throws Error if `group` is
// missing or not a group.
std::vector<std::string> list(const File& file, const std::string& group);

// ---------------------------------------------------------------------------------------------
// Attributes, on any object `obj` (groups, datasets, the root "/").
// set_attr replaces an existing attribute of the same name. The string must not contain NUL
// bytes. The object must exist (Error otherwise); has_attr is false only for a missing attribute.

void set_attr(File& file, const std::string& obj, const std::string& name, const std::string& value);
void set_attr(File& file, const std::string& obj, const std::string& name, const char* value);
void set_attr(File& file, const std::string& obj, const std::string& name, int64_t value);
void set_attr(File& file, const std::string& obj, const std::string& name, double value);

// Any other integer type (int, size_t, ...) is stored as int64; an unsigned value above
// INT64_MAX throws Error. bool is deliberately not accepted (convert explicitly).
template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                        !std::is_same_v<T, int64_t>, int> = 0>
void set_attr(File& file, const std::string& obj, const std::string& name, T value) {
  if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
    if (value > static_cast<T>(INT64_MAX))
      throw Error(file.path(), obj, "write attribute '" + name + "' of '" + obj + "' in '" +
                  file.path() + "'", "value " + std::to_string(value) + " does not fit in int64");
  }
  set_attr(file, obj, name, static_cast<int64_t>(value));
}

bool has_attr(const File& file, const std::string& obj, const std::string& name);

// Getters throw Error if the attribute is missing, not scalar, or of another kind: attr_string
// reads variable- or fixed-length strings, attr_int any integer type, attr_double any float or
// integer type.
std::string attr_string(const File& file, const std::string& obj, const std::string& name);
int64_t attr_int(const File& file, const std::string& obj, const std::string& name);
double attr_double(const File& file, const std::string& obj, const std::string& name);

}  // namespace parity::h5
