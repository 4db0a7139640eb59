// parity::h5 element types: DType <-> HDF5 datatypes (bf16 and fp16 as 16-bit floats), and their sizes
// and names.
#include <algorithm>
#include <stdexcept>

#include "dumps/h5_detail.h"

namespace parity::h5 {
namespace detail {

namespace {

// bf16 layout: sign bit 15, exponent bits 7..14 (bias 127), mantissa bits 0..6.
constexpr size_t kBf16Fields[5] = {15, 7, 8, 0, 7};
// IEEE half (h5py's float16): sign bit 15, exponent bits 10..14 (bias 15), mantissa 0..9.
constexpr size_t kF16Fields[5] = {15, 10, 5, 0, 10};
constexpr size_t kF32Fields[5] = {31, 23, 8, 0, 23};
constexpr size_t kF64Fields[5] = {63, 52, 11, 0, 52};

// A 16-bit float type with the given fields and exponent bias.
Handle make_half_type(const size_t (&fields)[5], size_t bias, const Op& op) {
  Handle t = type_h(op(H5Tcopy(H5T_IEEE_F32LE)));
  // Fields first (they must fit the current precision), then shrink precision and size.
  op(H5Tset_fields(t, fields[0], fields[1], fields[2], fields[3], fields[4]));
  op(H5Tset_offset(t, 0));
  op(H5Tset_precision(t, 16));
  op(H5Tset_size(t, 2));
  op(H5Tset_ebias(t, bias));
  return t;
}

Handle make_bf16_type(const Op& op) { return make_half_type(kBf16Fields, 127, op); }
Handle make_f16_type(const Op& op) { return make_half_type(kF16Fields, 15, op); }

}  // namespace

// The on-disk type for a dtype (an owned copy).
Handle file_type(DType dt, const Op& op) {
  switch (dt) {
    case DType::F32: return type_h(op(H5Tcopy(H5T_IEEE_F32LE)));
    case DType::F64: return type_h(op(H5Tcopy(H5T_IEEE_F64LE)));
    case DType::BF16: return make_bf16_type(op);
    case DType::I64: return type_h(op(H5Tcopy(H5T_STD_I64LE)));
    case DType::I32: return type_h(op(H5Tcopy(H5T_STD_I32LE)));
    case DType::U8: return type_h(op(H5Tcopy(H5T_STD_U8LE)));
    case DType::F16: return make_f16_type(op);
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
    case DType::F16: return make_f16_type(op);
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
    if (is(kF16Fields, 2, 15)) return DType::F16;
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

}  // namespace detail

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::I32: return 4;
    case DType::U8: return 1;
    case DType::F16: return 2;
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
    case DType::F16: return "float16";
  }
  throw std::invalid_argument("parity::h5::dtype_name: invalid DType");
}

int64_t Array::numel() const { return detail::product(shape); }

}  // namespace parity::h5
