// Reading torch.save archives (tensor_file.h): a zip container, one pickle, raw storages. No
// torch here: the file is parsed byte by byte, and nothing in it is ever executed.
//
// [Note: the torch.save zip layout] (torch >= 1.6; the prefix <archive> is the file's stem,
// or "archive"):
//   <archive>/data.pkl          the saved object, pickled (protocol 2 unless pickle_protocol=)
//   <archive>/data/<key>        one entry per storage: its elements, raw and little-endian
//   <archive>/version           the format version ("3\n"); not needed to read
//   <archive>/byteorder         torch 2.x: "little" or "big" (a "big" archive is refused)
//   <archive>/.data/..., .format_version, .storage_alignment: newer torch's bookkeeping, ignored
// Every entry is stored (zip method 0) with its data aligned to 64 bytes by padding in the
// local header's extra field; the sizes and CRC-32s are in the central directory (the local
// headers carry zeros and a data descriptor follows the data), and torch always ends the
// archive with a zip64 end-of-central-directory record and locator, so this reader takes every
// size from the central directory and reads zip64 fields wherever a 32-bit field is all ones.
//
// A tensor in data.pkl is a call
//   torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
//                                   backward_hooks[, metadata])
// (an nn.Parameter wraps it in torch._utils._rebuild_parameter(tensor, requires_grad, hooks)),
// whose storage is a persistent id ('storage', torch.<Type>Storage, key, location, numel)
// naming the entry <archive>/data/<key> of at least numel elements. A state_dict() is a
// collections.OrderedDict() call followed by SETITEMS and a BUILD that sets its _metadata.
//
// The pickle machine (unpickler.h) runs a whitelist: the rebuild functions and OrderedDict are
// understood; any other global is never called, only recorded, and the reader refuses the file
// if such an object ends up where a tensor or a container is expected (naming its key and the
// global). The machine reads each byte of data.pkl once, bounds its stack, marks, memo, object
// count and the memory it holds, and the tree walk bounds depth, visits and the bytes it
// copies out, so a hostile file can neither loop, take quadratic time nor exhaust memory.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dumps/h5.h"
#include "dumps/tensor_file.h"
#include "dumps/torch_save_detail.h"
#include "dumps/unpickler.h"
#include "dumps/zip_archive.h"

namespace parity::dumps {
namespace {

// ---------------------------------------------------------------------------------------------
// The tree of tensors: walked depth first in insertion order; each tensor copied out of its
// storage as a contiguous row-major array. A name is the path of keys and item numbers joined
// with '.', built only for a tensor or an error, so skipped values cost nothing; names longer
// than kMaxTensorName are refused, and names and copies together draw on one output budget.

constexpr int kMaxDepth = 100;
constexpr size_t kMaxTensorName = 4096;

class TreeReader {
 public:
  TreeReader(const std::string& source, const Unpickler& pickle, ZipArchive& zip,
             std::string data_prefix, uint64_t file_size)
      : source_(source), pickle_(pickle), zip_(zip), data_prefix_(std::move(data_prefix)),
        // A shared or expanded view may legitimately copy more than the file holds, but a few
        // hundred bytes of pickle must not ask for terabytes.
        budget_(16 * file_size + (uint64_t{1} << 30)),
        visits_left_(4 * static_cast<uint64_t>(pickle.object_count()) + 1024) {}

  std::vector<NamedArray> read(Ref root) {
    const auto& top = pickle_.at(root);
    if (top.kind != Kind::Dict)
      refuse(source_, std::string("the saved object is a ") + describe(top) +
                          ", not a dict of tensors; save one, e.g. torch.save({'w': t}, path)");
    walk(root, 0);
    if (out_.empty())
      refuse(source_, "the saved dict holds no tensors of the dtypes this reader reads; " +
                          std::string(kSaveRemedy));
    return std::move(out_);
  }

  // The saved object as one tensor (torch.save(t, f)), `what` naming it in errors.
  h5::Array read_one(Ref root, const std::string& what) {
    const auto& top = pickle_.at(root);
    if (top.kind != Kind::Tensor)
      refuse(source_, "the saved object is a " + describe(top) + ", not the one tensor " + what +
                          " should be");
    return materialise(what, pickle_.tensor(top.number));
  }

 private:
  // One step of the path to the object being walked: a dict key, or a list or tuple index.
  struct Step {
    const Object* key = nullptr;
    size_t index = 0;
  };

  std::string describe(const Object& o) const {
    if (o.kind == Kind::Opaque) return shown(pickle_.at(static_cast<Ref>(o.number)).text) +
                                       " object";
    if (o.kind == Kind::Global) return "global " + shown(o.text);
    return kind_name(o.kind);
  }
  std::string name() const {
    std::string s;
    for (const auto& step : path_) {
      if (&step != &path_.front()) s += '.';
      if (!step.key) s += std::to_string(step.index);
      else if (step.key->kind == Kind::Str) s += step.key->text;
      else if (step.key->kind == Kind::Int) s += std::to_string(step.key->number);
      else s += step.key->number ? "True" : "False";
      if (s.size() > kMaxTensorName) break;
    }
    return s;
  }

  void walk(Ref r, int depth) {
    if (visits_left_ == 0)
      refuse(source_, "its containers refer to each other too often to be a tree of tensors "
                      "(at '" + shown(name()) + "'); " + kSaveRemedy);
    --visits_left_;
    if (depth > kMaxDepth)
      refuse(source_, "containers nest deeper than " + std::to_string(kMaxDepth) + " at '" +
                          shown(name()) + "'; " + kSaveRemedy);
    const Object& o = pickle_.at(r);
    switch (o.kind) {
      case Kind::None: case Kind::Bool: case Kind::Int: case Kind::BigInt: case Kind::Float:
      case Kind::Str: case Kind::Bytes:
        return;  // a state dict's scalars and notes: not tensors, skipped
      case Kind::Dict:
        for (size_t i = 0; i + 1 < o.items.size(); i += 2) {
          const Object& key = pickle_.at(o.items[i]);
          if (key.kind != Kind::Str && key.kind != Kind::Int && key.kind != Kind::Bool)
            refuse(source_, "a dict" + (path_.empty() ? "" : " under '" + shown(name()) + "'") +
                                " has a key of type " + kind_name(key.kind) +
                                "; keys must be strings or ints");
          path_.push_back({&key, 0});
          walk(o.items[i + 1], depth + 1);
          path_.pop_back();
        }
        return;
      case Kind::List: case Kind::Tuple:
        for (size_t i = 0; i < o.items.size(); ++i) {
          path_.push_back({nullptr, i});
          walk(o.items[i], depth + 1);
          path_.pop_back();
        }
        return;
      case Kind::Tensor:
        return add(pickle_.tensor(o.number));
      case Kind::Global: case Kind::Storage: case Kind::Opaque:
        refuse(source_, "'" + shown(name()) + "' is a " + describe(o) +
                            ", not a tensor: this reader loads tensors in dicts, lists and "
                            "tuples and nothing else; save a dict of tensors (e.g. "
                            "model.state_dict(), or torch.from_numpy(a) for an array)");
    }
  }

  void add(const TensorRecord& t) {
    std::string n = name();
    if (n.empty()) refuse(source_, "a tensor is saved under an empty key");
    if (n.size() > kMaxTensorName)
      refuse(source_, "a tensor name is longer than " + std::to_string(kMaxTensorName) +
                          " bytes ('" + shown(n) + "'); save it under a shorter key");
    if (!names_.insert(n).second)
      refuse(source_, "two tensors are named '" + shown(n) +
                          "' (nested keys join with '.'); rename one before saving");
    spend(n, 2 * n.size() + sizeof(NamedArray));
    h5::Array a = materialise(n, t);
    out_.push_back({std::move(n), std::move(a)});
  }

  void spend(const std::string& name, uint64_t bytes) {
    if (bytes > budget_)
      refuse(source_, "tensor '" + shown(name) + "' would take " + std::to_string(bytes) +
                          " bytes as a contiguous copy, past the reader's limit for a file of "
                          "this size; save t.contiguous() or t.clone() instead of the view");
    budget_ -= bytes;
  }

  h5::Array materialise(const std::string& name, const TensorRecord& t) {
    const StorageRecord& s = pickle_.storage(t.storage);
    if (!s.dtype)
      refuse(source_, "tensor '" + shown(name) + "' has dtype " + s.dtype_name + " (" + s.cls +
                          "), which this reader does not read (it reads bfloat16, float16, "
                          "float32, float64, int64, int32 and uint8); convert it before saving, "
                          "e.g. t.float() or t.to(torch.uint8)");
    const std::string entry_name = data_prefix_ + s.key;
    const ZipEntry* entry = zip_.find(entry_name);
    if (!entry)
      refuse(source_, "the storage of tensor '" + shown(name) + "' (entry '" + shown(entry_name) +
                          "') is missing from the archive; save the file again");
    const std::string_view data = zip_.read(*entry);
    const uint64_t esize = h5::dtype_size(*s.dtype);
    uint64_t storage_bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(s.numel), esize, &storage_bytes) ||
        storage_bytes > data.size())
      refuse(source_, "the storage of tensor '" + shown(name) + "' (entry '" +
                          shown(entry_name) + "') holds " + std::to_string(data.size()) +
                          " bytes, fewer than its " + std::to_string(s.numel) + " elements of " +
                          std::to_string(esize) + " bytes: the file is damaged");
    // The view's extent: numel elements, the last at offset + sum((size_i - 1) * stride_i).
    uint64_t numel = 1, last = static_cast<uint64_t>(t.offset);
    bool overflow = false;
    for (size_t d = 0; d < t.shape.size(); ++d)
      overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(t.shape[d]), &numel);
    for (size_t d = 0; d < t.shape.size() && numel > 0; ++d) {
      uint64_t reach = 0;
      overflow |= __builtin_mul_overflow(static_cast<uint64_t>(t.shape[d] - 1),
                                         static_cast<uint64_t>(t.stride[d]), &reach);
      overflow |= __builtin_add_overflow(last, reach, &last);
    }
    uint64_t out_bytes = 0;
    overflow |= __builtin_mul_overflow(numel, esize, &out_bytes);
    if (overflow || (numel > 0 && last >= static_cast<uint64_t>(s.numel)))
      refuse(source_, "tensor '" + shown(name) + "' views elements outside its storage of " +
                          std::to_string(s.numel) + " elements; the file is damaged");
    spend(name, out_bytes);

    h5::Array a;
    a.dtype = *s.dtype;
    a.shape = t.shape;
    a.bytes.resize(static_cast<size_t>(out_bytes));
    if (numel == 0) return a;
    const auto* src = reinterpret_cast<const unsigned char*>(data.data());
    auto* dst = a.bytes.data();
    const size_t nd = t.shape.size();
    if (nd == 0) {
      std::memcpy(dst, src + t.offset * esize, esize);
      return a;
    }
    // Rows of the last dimension, the outer dimensions counted by an odometer.
    const uint64_t row = static_cast<uint64_t>(t.shape[nd - 1]);
    const uint64_t step = static_cast<uint64_t>(t.stride[nd - 1]);
    std::vector<int64_t> index(nd - 1, 0);
    uint64_t start = static_cast<uint64_t>(t.offset);
    for (uint64_t done = 0; done < numel; done += row) {
      if (step == 1) {
        std::memcpy(dst, src + start * esize, row * esize);
        dst += row * esize;
      } else {
        for (uint64_t j = 0; j < row; ++j, dst += esize)
          std::memcpy(dst, src + (start + j * step) * esize, esize);
      }
      for (size_t d = nd - 1; d-- > 0;) {
        start += static_cast<uint64_t>(t.stride[d]);
        if (++index[d] < t.shape[d]) break;
        start -= static_cast<uint64_t>(t.stride[d]) * static_cast<uint64_t>(t.shape[d]);
        index[d] = 0;
      }
    }
    return a;
  }

  const std::string& source_;
  const Unpickler& pickle_;
  ZipArchive& zip_;
  std::string data_prefix_;
  uint64_t budget_, visits_left_;
  std::vector<Step> path_;
  std::unordered_set<std::string> names_;
  std::vector<NamedArray> out_;
};

// Files torch.save wrote in its older formats, and plain pickles. The legacy format (torch < 1.6,
// or _use_new_zipfile_serialization=False) is pickles in a row, the first being torch's magic
// number 0x1950a86a20f9469cfc6c as a LONG1 (bytes 6c fc 9c 46 f9 20 6a a8 50 19); torch < 0.4
// wrote a tar archive ("ustar" at offset 257).
void refuse_other_formats(const std::string& source, const std::string& bytes) {
  static const std::string kMagic("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10);
  const std::string resave =
      "load it with torch.load and save it again with torch >= 1.6 (default "
      "_use_new_zipfile_serialization=True)";
  if (bytes.size() >= 262 && bytes.compare(257, 5, "ustar") == 0)
    refuse(source, "the tar format of torch < 0.4, which this reader does not read; " + resave);
  if (bytes.empty() || static_cast<unsigned char>(bytes[0]) != kPickleProto) return;
  if (bytes.substr(0, 32).find(kMagic) != std::string::npos)
    refuse(source, "legacy torch.save format (torch < 1.6, or _use_new_zipfile_serialization="
                   "False), which this reader does not read; " + resave);
  refuse(source, std::string("a plain pickle, not a torch.save zip archive; ") + kSaveRemedy);
}

}  // namespace

namespace {

// Runs `read(pickle, zip, data prefix)` on the torch.save archive `bytes`, once its container,
// its byte order and its pickle are checked.
template <class Read>
auto with_archive(const std::string& source, const std::string& bytes, Read read) {
  refuse_other_formats(source, bytes);
  ZipArchive zip(source, bytes);

  // The archive prefix: the directory of the one "<archive>/data.pkl".
  std::string prefix;
  for (const auto& e : zip.entries()) {
    const std::string tail = "/data.pkl";
    if (e.name.size() <= tail.size() ||
        e.name.compare(e.name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string dir = e.name.substr(0, e.name.size() - tail.size());
    if (dir.find('/') != std::string::npos) continue;
    if (!prefix.empty())
      refuse(source, "the zip holds two torch.save archives ('" + shown(prefix) + "' and '" +
                         shown(dir) + "'); save one object per file");
    prefix = dir;
  }
  if (prefix.empty())
    refuse(source, std::string("not a torch.save zip archive (no data.pkl entry); ") +
                       kSaveRemedy);
  if (zip.find(prefix + "/constants.pkl"))
    refuse(source, "a TorchScript archive (torch.jit.save), not a torch.save file; save the "
                   "model's weights with torch.save(model.state_dict(), path)");
  if (const ZipEntry* order = zip.find(prefix + "/byteorder")) {
    const std::string_view v = zip.read(*order);
    if (v == "big")
      refuse(source, "saved on a big-endian machine (byteorder 'big'), and this reader reads "
                     "little-endian storages only; load it with torch.load on a little-endian "
                     "machine and save it again there");
    if (v != "little")
      refuse(source, "unknown byteorder entry '" + shown(std::string(v.substr(0, 200))) +
                         "' (torch writes 'little' or 'big'); " + kSaveRemedy);
  }

  Unpickler pickle(source, zip.read(*zip.find(prefix + "/data.pkl")));
  const Ref root = pickle.run();
  TreeReader tree(source, pickle, zip, prefix + "/data/", bytes.size());
  return read(tree, root);
}

}  // namespace

std::vector<NamedArray> read_torch_save(const std::string& source, const std::string& bytes) {
  return with_archive(source, bytes, [](TreeReader& tree, Ref root) { return tree.read(root); });
}

h5::Array read_torch_save_tensor(const std::string& source, const std::string& bytes,
                                 const std::string& what) {
  return with_archive(source, bytes,
                      [&](TreeReader& tree, Ref root) { return tree.read_one(root, what); });
}

}  // namespace parity::dumps
