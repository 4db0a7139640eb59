// Reading DCP checkpoints (dcp.h). No torch here: the metadata pickle runs on the project's own
// machine (unpickler.h) under an allow-list, and each chunk is read as a torch.save archive
// (torch_save.cpp).
//
// [Note: the DCP layout] (torch.distributed.checkpoint's FileSystemWriter, torch 2.x; facts from
// torch/distributed/checkpoint/metadata.py and filesystem.py):
//   .metadata           pickle.dump of a Metadata (protocol 4 or 5, no header): its attributes
//                       state_dict_metadata {key: TensorStorageMetadata | BytesStorageMetadata},
//                       planner_data, storage_data {MetadataIndex: _StorageInfo},
//                       storage_meta and version (the last two absent in older torch)
//   __R_N.distcp        rank R's data file N: each item a complete torch.save archive
//                       (tensors) or raw bytes (other objects), back to back
// TensorStorageMetadata holds properties (TensorProperties, whose state is the tuple (dtype,
// layout, requires_grad, memory-format enum, pin_memory)), size (the whole tensor's torch.Size)
// and chunks, a list of ChunkStorageMetadata (offsets, sizes), each a box of the tensor in its
// global coordinates. A tensor saved whole has one chunk at offset 0; a sharded one has one per
// shard, each saved as the shard alone. MetadataIndex (fqn, index, offset) names a chunk by its
// key and its offsets (index is only a hint); _StorageInfo (relative_path, offset, length,
// [transform_descriptors]) places its archive in a data file. A dataclass pickles as its class,
// NEWOBJ and a BUILD of its attribute dict; torch.Size as a REDUCE of its tuple; a dtype as the
// global torch.<name>; a layout as torch.serialization._get_layout('torch.strided'); the
// checkpoint id in StorageMeta as a pathlib path. TensorProperties lived in
// torch.distributed._shard.sharded_tensor.metadata before torch 2.3; both places are read.
//
// Everything the metadata gives is checked before it is used: each chunk's box lies inside its
// tensor, the chunks of a tensor cover it exactly once, each archive lies inside its data file
// (a plain file name in the directory), the bytes read in all never exceed what the data files
// hold, and a chunk's archive holds one tensor of the chunk's dtype and shape.
#include "dumps/dcp.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dumps/torch_save_detail.h"
#include "dumps/unpickler.h"
#include "spec/whole_file.h"

namespace parity::dumps {
namespace {

namespace fs = std::filesystem;

constexpr const char* kResave =
    "save it again with torch.distributed.checkpoint.save, or load it in Python and "
    "torch.save the model's state_dict()";
// A .metadata larger than this is not one of a model's checkpoint (a few hundred bytes a tensor).
constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 30;
constexpr size_t kMaxDims = 64;

const char* const kMetadataModules[] = {
    "torch.distributed.checkpoint.metadata.",
    "torch.distributed._shard.sharded_tensor.metadata.",
};
const char* const kMetadataClasses[] = {
    "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
    "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING",
    "MEM_FORMAT_ENCODING",
};

struct TorchDType {
  const char* name;
  std::optional<h5::DType> dtype;  // none: a dtype this reader refuses
};
const TorchDType kDTypes[] = {
    {"float32", h5::DType::F32}, {"float64", h5::DType::F64}, {"float16", h5::DType::F16},
    {"bfloat16", h5::DType::BF16}, {"int64", h5::DType::I64}, {"int32", h5::DType::I32},
    {"uint8", h5::DType::U8}, {"int16", std::nullopt}, {"int8", std::nullopt},
    {"bool", std::nullopt}, {"complex64", std::nullopt}, {"complex128", std::nullopt},
    {"complex32", std::nullopt}, {"float8_e4m3fn", std::nullopt},
    {"float8_e5m2", std::nullopt},
};

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The allow-list of the metadata pickle: the DCP classes, torch.Size, the dtypes, the layout
// helper and the checkpoint id's path class. Nothing else is ever named in a .metadata.
bool metadata_global(const std::string& g) {
  for (const char* m : kMetadataModules)
    if (starts_with(g, m))
      for (const char* c : kMetadataClasses)
        if (g.size() == std::strlen(m) + std::strlen(c) && g.compare(std::strlen(m), g.npos, c) == 0)
          return true;
  // builtins.getattr: Python >= 3.11 pickles an enum member (the memory format) as
  // getattr(enum class, member name). The machine never calls anything.
  if (g == "torch.distributed.checkpoint.filesystem._StorageInfo" || g == "torch.Size" ||
      g == "torch.serialization._get_layout" || g == "builtins.getattr")
    return true;
  for (const auto& d : kDTypes)
    if (g == std::string("torch.") + d.name) return true;
  for (const char* p : {"pathlib.", "pathlib._local."})
    for (const char* c : {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"})
      if (g == std::string(p) + c) return true;
  return false;
}

// The unqualified class name of a global ("a.b.C" -> "C").
std::string class_of(const std::string& global) {
  const auto dot = global.rfind('.');
  return dot == std::string::npos ? global : global.substr(dot + 1);
}

// Reads the metadata's object graph: every access checks the kind it expects, and a wrong one
// is refused naming where in the metadata it was.
class MetadataWalk {
 public:
  MetadataWalk(const std::string& source, const Unpickler& p) : source_(source), p_(p) {}

  [[noreturn]] void bad(const std::string& what) const {
    refuse(source_, "the metadata " + what + "; the checkpoint is damaged or not a DCP "
                    "checkpoint; " + kResave);
  }

  // The class name of an object built by NEWOBJ (or REDUCE) from an allowed global.
  std::string cls(Ref r) const {
    const Object& o = p_.at(r);
    if (o.kind != Kind::Opaque) return "";
    return class_of(p_.at(static_cast<Ref>(o.number)).text);
  }

  const Object& of_class(Ref r, const char* want, const std::string& where) const {
    if (cls(r) != want)
      bad("has " + describe(r) + " where " + where + " should be a " + want);
    return p_.at(r);
  }

  // Attribute `name` of a dataclass object (its BUILD dict); null when absent.
  const Ref* attr(Ref obj, const char* name, const std::string& where) const {
    const Object& o = p_.at(obj);
    if (o.items.size() != 1 || p_.at(o.items[0]).kind != Kind::Dict)
      bad("has a " + cls(obj) + " without its attributes at " + where);
    const auto& d = p_.at(o.items[0]).items;
    for (size_t i = 0; i + 1 < d.size(); i += 2)
      if (p_.at(d[i]).kind == Kind::Str && p_.at(d[i]).text == name) return &d[i + 1];
    return nullptr;
  }
  Ref need(Ref obj, const char* name, const std::string& where) const {
    const Ref* r = attr(obj, name, where);
    if (!r) bad("has a " + cls(obj) + " without '" + name + "' at " + where);
    return *r;
  }

  const Object& kind(Ref r, Kind k, const std::string& where) const {
    if (p_.at(r).kind != k) bad("has " + describe(r) + " where " + where + " should be a " +
                                kind_name(k));
    return p_.at(r);
  }

  int64_t count(Ref r, const std::string& where) const {
    const Object& o = kind(r, Kind::Int, where);
    if (o.number < 0) bad("gives " + where + " as " + std::to_string(o.number));
    return o.number;
  }

  // A torch.Size (or tuple) of non-negative ints.
  std::vector<int64_t> dims(Ref r, const std::string& where) const {
    const Object& o = kind(r, Kind::Tuple, where);
    if (o.items.size() > kMaxDims)
      bad("gives " + where + " with " + std::to_string(o.items.size()) + " dimensions");
    std::vector<int64_t> v;
    for (Ref i : o.items) v.push_back(count(i, where));
    return v;
  }

  const std::string& text(Ref r, const std::string& where) const {
    return kind(r, Kind::Str, where).text;
  }

  std::string describe(Ref r) const {
    const Object& o = p_.at(r);
    if (o.kind == Kind::Opaque) return "a " + cls(r);
    return std::string("a ") + kind_name(o.kind);
  }

  const Unpickler& pickle() const { return p_; }

 private:
  const std::string& source_;
  const Unpickler& p_;
};

struct Chunk {
  std::vector<int64_t> offsets, sizes;
};

struct Entry {
  std::string key;
  std::string dtype_name;
  std::optional<h5::DType> dtype;
  std::vector<int64_t> size;
  std::vector<Chunk> chunks;
};

struct Place {
  std::string file;
  uint64_t offset = 0, length = 0;
};

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + (d.size() == 1 ? ",)" : ")");
}

// A data file's name as _StorageInfo gives it: a plain file name of the directory.
bool plain_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos &&
         n.find('\\') == std::string::npos && n.find('\0') == std::string::npos;
}


class DcpReader {
 public:
  explicit DcpReader(fs::path dir) : dir_(std::move(dir)), meta_path_((dir_ / ".metadata").string()) {}

  std::vector<NamedArray> read() {
    std::error_code ec;
    if (!fs::is_regular_file(dir_ / ".metadata", ec))
      refuse(dir_.string(), "holds no .metadata file: a DCP checkpoint whose save did not finish, "
                            "or not one; give the step directory that holds .metadata and its "
                            "__*.distcp files");
    index_data_files();
    const std::string bytes = spec::read_whole_file(
        meta_path_, kMaxMetadataBytes, std::string("more than the metadata of any model's checkpoint; ") + kResave,
        [&](const std::string& why) { refuse(meta_path_, why); });
    PickleRules rules;
    rules.part = ".metadata";
    rules.damaged = std::string("the file is damaged or was not written by "
                                "torch.distributed.checkpoint; ") + kResave;
    rules.allowed = metadata_global;
    Unpickler pickle(meta_path_, bytes, rules);
    const Ref root = pickle.run();
    MetadataWalk walk(meta_path_, pickle);
    parse(walk, root);
    std::vector<NamedArray> out;
    for (const auto& e : entries_) out.push_back({e.key, assemble(e)});
    if (out.empty())
      refuse(meta_path_, "lists no tensor; give the checkpoint of a model's state dict");
    return out;
  }

 private:
  // The data files and their sizes: what the chunks may read, in all.
  void index_data_files() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      if (!e.is_regular_file(ec)) continue;
      const uint64_t size = e.file_size(ec);
      if (ec) continue;
      sizes_[e.path().filename().string()] = size;
      if (__builtin_add_overflow(data_budget_, size, &data_budget_)) data_budget_ = UINT64_MAX;
    }
  }

  void parse(const MetadataWalk& w, Ref root) {
    w.of_class(root, "Metadata", "the top");
    const Object& sdm = w.kind(w.need(root, "state_dict_metadata", "the top"), Kind::Dict,
                               "state_dict_metadata");
    std::set<std::string> keys;
    for (size_t i = 0; i + 1 < sdm.items.size(); i += 2) {
      const std::string& key = w.text(sdm.items[i], "a state_dict_metadata key");
      const Ref m = sdm.items[i + 1];
      const std::string where = "'" + shown(key) + "'";
      if (!keys.insert(key).second) w.bad("lists " + where + " twice");
      if (w.cls(m) == "BytesStorageMetadata") continue;  // a non-tensor object's bytes
      w.of_class(m, "TensorStorageMetadata", where);
      Entry e;
      e.key = key;
      const Ref props = w.need(m, "properties", where);
      w.of_class(props, "TensorProperties", where + "'s properties");
      const Object& po = w.pickle().at(props);
      if (po.items.size() != 1) w.bad("has " + where + "'s properties without their state");
      // The state: a tuple whose first item is the dtype (torch >= 2.3), or an attribute dict.
      Ref dtype_ref;
      const Object& state = w.pickle().at(po.items[0]);
      if (state.kind == Kind::Tuple && !state.items.empty()) dtype_ref = state.items[0];
      else dtype_ref = w.need(props, "dtype", where + "'s properties");
      const Object& dt = w.kind(dtype_ref, Kind::Global, where + "'s dtype");
      e.dtype_name = class_of(dt.text);
      for (const auto& d : kDTypes)
        if (e.dtype_name == d.name) e.dtype = d.dtype;
      e.size = w.dims(w.need(m, "size", where), where + "'s size");
      const Object& chunks = w.kind(w.need(m, "chunks", where), Kind::List, where + "'s chunks");
      for (Ref c : chunks.items) {
        w.of_class(c, "ChunkStorageMetadata", where + "'s chunks");
        Chunk ch{w.dims(w.need(c, "offsets", where), where + "'s chunk offsets"),
                 w.dims(w.need(c, "sizes", where), where + "'s chunk sizes")};
        if (ch.offsets.size() != e.size.size() || ch.sizes.size() != e.size.size())
          w.bad("gives " + where + " (size " + dims_text(e.size) + ") a chunk at " +
                dims_text(ch.offsets) + " of " + dims_text(ch.sizes));
        for (size_t d = 0; d < e.size.size(); ++d)
          if (ch.offsets[d] > e.size[d] || ch.sizes[d] > e.size[d] - ch.offsets[d])
            w.bad("places a chunk of " + where + " at " + dims_text(ch.offsets) + " of " +
                  dims_text(ch.sizes) + ", outside its size " + dims_text(e.size));
        e.chunks.push_back(std::move(ch));
      }
      entries_.push_back(std::move(e));
    }

    const Ref* sd = w.attr(root, "storage_data", "the top");
    if (!sd) w.bad("has no storage_data");
    const Object& places = w.kind(*sd, Kind::Dict, "storage_data");
    for (size_t i = 0; i + 1 < places.items.size(); i += 2) {
      const Ref idx = places.items[i], info = places.items[i + 1];
      w.of_class(idx, "MetadataIndex", "a storage_data key");
      const std::string& fqn = w.text(w.need(idx, "fqn", "a storage_data key"), "its fqn");
      const std::string where = "the storage of '" + shown(fqn) + "'";
      const Ref* off = w.attr(idx, "offset", where);
      if (!off || w.pickle().at(*off).kind == Kind::None) continue;  // a bytes item
      const auto offsets = w.dims(*off, where + "'s offset");
      w.of_class(info, "_StorageInfo", where);
      if (const Ref* t = w.attr(info, "transform_descriptors", where)) {
        const Object& td = w.pickle().at(*t);
        if (td.kind != Kind::None && !td.items.empty())
          refuse(meta_path_, where + " is stored transformed (compressed or encoded: its "
                             "transform_descriptors), which this reader does not undo; save the "
                             "checkpoint without storage extensions");
      }
      Place p;
      p.file = w.text(w.need(info, "relative_path", where), where + "'s relative_path");
      p.offset = static_cast<uint64_t>(w.count(w.need(info, "offset", where), where + "'s offset"));
      p.length = static_cast<uint64_t>(w.count(w.need(info, "length", where), where + "'s length"));
      if (!plain_name(p.file))
        w.bad("places " + where + " in '" + shown(p.file) + "', not a file of the checkpoint's "
              "directory");
      if (!places_.emplace(std::make_pair(fqn, offsets), p).second)
        w.bad("places the chunk of '" + shown(fqn) + "' at " + dims_text(offsets) + " twice");
    }
  }

  h5::Array assemble(const Entry& e) {
    const std::string name = "'" + shown(e.key) + "'";
    if (!e.dtype)
      refuse(meta_path_, "tensor " + name + " has dtype " + e.dtype_name + ", which this reader "
                         "does not read (it reads bfloat16, float16, float32, float64, int64, "
                         "int32 and uint8); convert it before saving");
    const uint64_t esize = h5::dtype_size(*e.dtype);
    uint64_t numel = 1, bytes = 0;
    bool overflow = false;
    for (int64_t s : e.size) overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(s), &numel);
    overflow |= __builtin_mul_overflow(numel, esize, &bytes);
    if (overflow || bytes > data_budget_)
      refuse(meta_path_, "tensor " + name + " of size " + dims_text(e.size) + " needs more bytes "
                         "than the checkpoint's data files hold; the checkpoint is damaged");
    h5::Array a;
    a.dtype = *e.dtype;
    a.shape = e.size;
    a.bytes.assign(static_cast<size_t>(bytes), 0);
    std::vector<bool> covered(static_cast<size_t>(numel), false);
    uint64_t filled = 0;
    for (const auto& c : e.chunks) {
      uint64_t volume = 1;
      for (int64_t s : c.sizes) volume *= static_cast<uint64_t>(s);  // inside the tensor: no overflow
      if (volume == 0) continue;
      auto it = places_.find({e.key, c.offsets});
      if (it == places_.end())
        refuse(meta_path_, "the chunk of " + name + " at " + dims_text(c.offsets) + " has no "
                           "place in storage_data; the checkpoint is damaged");
      const h5::Array part = read_chunk(it->second, name + " at " + dims_text(c.offsets));
      if (part.dtype != a.dtype || part.shape != c.sizes)
        refuse(data_path(it->second), "the chunk of " + name + " at " + dims_text(c.offsets) +
                                          " holds a " + h5::dtype_name(part.dtype) + " tensor of " +
                                          dims_text(part.shape) + ", not the " + e.dtype_name +
                                          " " + dims_text(c.sizes) + " the metadata lists");
      place(a, e, c, part, covered, name);
      filled += volume;
    }
    if (filled != numel)
      refuse(meta_path_, "the chunks of " + name + " cover " + std::to_string(filled) + " of its " +
                         std::to_string(numel) + " elements; the checkpoint is damaged or "
                         "incomplete");
    return a;
  }

  std::string data_path(const Place& p) const { return (dir_ / p.file).string(); }

  h5::Array read_chunk(const Place& p, const std::string& what) {
    const std::string path = data_path(p);
    auto size = sizes_.find(p.file);
    if (size == sizes_.end())
      refuse(meta_path_, "the chunk of " + what + " is in '" + shown(p.file) + "', which the "
                         "directory does not hold; copy the checkpoint's every __*.distcp file");
    uint64_t end = 0;
    if (__builtin_add_overflow(p.offset, p.length, &end) || end > size->second)
      refuse(path, "holds " + std::to_string(size->second) + " bytes, and the chunk of " + what +
                       " is bytes " + std::to_string(p.offset) + " to " +
                       std::to_string(p.offset) + " + " + std::to_string(p.length) +
                       ": the file is truncated or the metadata damaged");
    if (p.length > data_budget_ - read_)
      refuse(meta_path_, "has its chunks read more bytes than the data files hold (chunks share "
                         "their bytes); the checkpoint is damaged");
    read_ += p.length;
    std::ifstream in(path, std::ios::binary);
    std::string bytes(static_cast<size_t>(p.length), '\0');
    in.seekg(static_cast<std::streamoff>(p.offset));
    if (!in || !in.read(bytes.data(), static_cast<std::streamsize>(p.length)))
      refuse(path, "cannot be read at bytes " + std::to_string(p.offset) + " to " +
                       std::to_string(end));
    const std::string source = path + " at byte " + std::to_string(p.offset);
    return read_torch_save_tensor(source, bytes, what);
  }

  // Copies `part` into its box of `a`, the chunk's rows of the last dimension one by one.
  void place(h5::Array& a, const Entry& e, const Chunk& c, const h5::Array& part,
             std::vector<bool>& covered, const std::string& name) {
    const size_t nd = e.size.size();
    const uint64_t esize = h5::dtype_size(a.dtype);
    // Strides of the whole tensor, in elements.
    std::vector<uint64_t> stride(nd, 1);
    for (size_t d = nd; d-- > 1;) stride[d - 1] = stride[d] * static_cast<uint64_t>(e.size[d]);
    const uint64_t row = nd ? static_cast<uint64_t>(c.sizes[nd - 1]) : 1;
    std::vector<int64_t> index(nd ? nd - 1 : 0, 0);
    const unsigned char* src = part.bytes.data();
    const uint64_t rows = (nd ? part.bytes.size() / esize / row : 1);
    for (uint64_t r = 0; r < rows; ++r) {
      uint64_t at = 0;
      for (size_t d = 0; d + 1 < nd; ++d)
        at += static_cast<uint64_t>(c.offsets[d] + index[d]) * stride[d];
      if (nd) at += static_cast<uint64_t>(c.offsets[nd - 1]);
      for (uint64_t j = 0; j < row; ++j) {
        if (covered[at + j])
          refuse(meta_path_, "the chunks of " + name + " overlap (at " + dims_text(c.offsets) +
                             "); the checkpoint is damaged");
        covered[at + j] = true;
      }
      std::memcpy(a.bytes.data() + at * esize, src, row * esize);
      src += row * esize;
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < c.sizes[d]) break;
        index[d] = 0;
      }
    }
  }

  fs::path dir_;
  std::string meta_path_;
  std::map<std::string, uint64_t> sizes_;
  uint64_t data_budget_ = 0, read_ = 0;
  std::vector<Entry> entries_;
  std::map<std::pair<std::string, std::vector<int64_t>>, Place> places_;
};

}  // namespace

bool is_dcp_dir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  if (fs::exists(fs::path(path) / ".metadata", ec)) return true;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string n = e.path().filename().string();
    if (starts_with(n, "__") && n.size() > 7 && n.compare(n.size() - 7, 7, ".distcp") == 0)
      return true;
  }
  return false;
}

std::vector<NamedArray> read_dcp(const std::string& dir) { return DcpReader(dir).read(); }

}  // namespace parity::dumps
