// parity::h5 datasets and groups: write and read whole arrays, create, look up and list groups.
#include <limits>
#include <string>

#include "dumps/h5_detail.h"
#include "spec/checked.h"
#include "spec/limits.h"

namespace parity::h5 {

using namespace detail;

namespace {

herr_t collect_link_name(hid_t /*group*/, const char* name, const H5L_info_t* /*info*/,
                         void* data) {
  try {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  } catch (...) {
    return -1;
  }
  return 0;
}

}  // namespace

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
    if (d < 0) op.fail("negative dimension in shape " + shape_text(shape));
  const int64_t n = product(shape);
  if (n > 0 && data == nullptr) op.fail("data is null for shape " + shape_text(shape));

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
  // The declared shape may promise far more than the file holds (a fill value, compression):
  // count with overflow checks and budget the bytes before allocating any.
  const auto n = spec::checked_numel(a.shape);
  const auto bytes = n ? spec::checked_mul(*n, static_cast<int64_t>(dtype_size(a.dtype))) : n;
  if (!bytes)
    op.fail("dataset of shape " + shape_text(a.shape) + " has more elements than 64 bits count");
  if (*bytes > spec::max_tensor_bytes())
    op.fail("dataset of shape " + shape_text(a.shape) + " would take " + std::to_string(*bytes) +
            " bytes in memory, past the limit of " + std::to_string(spec::max_tensor_bytes()) +
            " per tensor; raise PARITY_MAX_TENSOR_BYTES if the file is trusted");
  if (static_cast<uint64_t>(*bytes) > file.read_budget_left())
    op.fail("dataset of shape " + shape_text(a.shape) + " would take " + std::to_string(*bytes) +
            " bytes in memory, past the " + std::to_string(file.read_budget_left()) +
            " bytes left of this file's budget (16 x its size + 1 GiB for all its datasets): "
            "its fill values or compression declare far more data than the file holds");
  file.draw_on_read_budget(static_cast<uint64_t>(*bytes));
  a.bytes.resize(static_cast<size_t>(*bytes));
  const int64_t count = *n;
  if (count > 0) {
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

bool is_group(const File& file, const std::string& path) {
  enter();
  const Path p = parse_path(file, path, "look up");
  const Op op{file.path(), p.abs, "look up " + quote(p.abs) + " in " + quote(file.path())};
  require_open(file, op);
  if (!exists_impl(file, p, op)) return false;
  Handle o = open_object(file, p.abs, op);
  return H5Iget_type(o) == H5I_GROUP;
}

uint64_t object_address(const File& file, const std::string& path) {
  enter();
  const Path p = parse_path(file, path, "look up");
  const Op op{file.path(), p.abs, "look up " + quote(p.abs) + " in " + quote(file.path())};
  require_open(file, op);
  if (!exists_impl(file, p, op)) op.fail("no such object");
  Handle o = open_object(file, p.abs, op);
  H5O_info_t info;
  op(H5Oget_info2(o, &info, H5O_INFO_BASIC));
  return static_cast<uint64_t>(info.addr);
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

}  // namespace parity::h5
