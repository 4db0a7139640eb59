// parity::h5 attributes: scalar strings, integers and reals on any object.
#include "dumps/h5_detail.h"

namespace parity::h5 {

using namespace detail;

namespace {

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
