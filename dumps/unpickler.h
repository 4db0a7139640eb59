// The pickle machine of the torch.save reader (torch_save.cpp) and the DCP reader (dcp.cpp): it
// runs an archive's data.pkl or a checkpoint's .metadata without executing anything and leaves
// the saved object as a graph of Objects, with the storages and tensor views it names, for the
// tree walk to read. Which globals it understands, and what it does with the rest, is in
// torch_save.cpp's note and [Note: the DCP layout].
//
// Objects live in one arena and refer to each other by index, so memo references, shared
// objects and even cycles cost nothing to hold; the tree walk (torch_save.cpp) bounds depth and
// visits. No operation copies more than a bounded amount (a call never copies its argument
// tuple, names are at most 512 bytes, a shape 64 dims), and everything the machine holds is
// charged to a budget proportional to data.pkl's size, so a pickle that refers to its own memo
// over and over can neither take quadratic time nor unbounded memory.
//
// Errors: a DumpError naming the source, the byte of data.pkl where reading stopped and what is
// wrong there (torch_save_detail.h's refuse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dumps/h5.h"

namespace parity::dumps {

// The PROTO opcode: the first byte of a pickle of protocol 2 or later.
inline constexpr unsigned char kPickleProto = 0x80;

enum class Kind : uint8_t {
  None, Bool, Int, BigInt, Float, Str, Bytes, Tuple, List, Dict, Global, Storage, Tensor, Opaque
};
using Ref = uint32_t;

// The type of an object of kind k as messages name it ("dict", "tensor", ...).
const char* kind_name(Kind k);

struct Object {
  Kind kind = Kind::None;
  bool ordered = false;  // Dict: made by collections.OrderedDict
  // Bool, Int: the value; Storage, Tensor: index into storages / tensors; Opaque: the Global
  // whose call or construction made it.
  int64_t number = 0;
  std::string text;  // Str, Bytes; Global: "module.name"
  // Tuple, List; Dict: key, value, key, value, ... in insertion order; Opaque: the state its
  // last BUILD gave (one item), if any.
  std::vector<Ref> items;
};

// One persistent id: a storage's class, its entry <archive>/data/<key>, and its element count.
struct StorageRecord {
  std::string cls, key, dtype_name;
  std::optional<h5::DType> dtype;  // none: a dtype this reader refuses (named by dtype_name)
  int64_t numel = 0;
};

// One _rebuild_tensor_v2 call: the view of `storage` it makes.
struct TensorRecord {
  int64_t storage = 0;
  int64_t offset = 0;
  std::vector<int64_t> shape, stride;
};

// The globals a torch.save'd state dict may name, as torch.load(weights_only=True) allows
// them: the tensor and parameter rebuilders, OrderedDict, torch.Size, storage classes, dtypes,
// devices and a few builtins. Anything else (a module class, numpy, os.system) is refused where
// the pickle names it, even if the object it would build is never used.
bool torch_save_global(const std::string& global);

// What one pickle is to its reader: the part of the file it is and the advice a damaged one
// ends with (both for messages), and which globals it may name (null: torch_save_global). A
// global outside them is refused where it is named; one inside that the machine does not
// understand (a device, a set) makes an opaque object, refused if a tensor is looked for there.
struct PickleRules {
  std::string part = "data.pkl";
  std::string damaged;  // empty: "the file is damaged or was not written by torch.save; ..."
  bool (*allowed)(const std::string& global) = nullptr;
};

class Unpickler {
 public:
  // `pkl` is the pickle's bytes, which must outlive the machine; `source` names the file in
  // errors.
  Unpickler(const std::string& source, std::string_view pkl, PickleRules rules = {});

  // Runs data.pkl to its STOP and returns the object it leaves.
  Ref run();

  const Object& at(Ref r) const { return objects_[r]; }
  size_t object_count() const { return objects_.size(); }
  const StorageRecord& storage(int64_t i) const { return storages_[static_cast<size_t>(i)]; }
  const TensorRecord& tensor(int64_t i) const { return tensors_[static_cast<size_t>(i)]; }

 private:
  [[noreturn]] void fail(const std::string& what) const;

  const unsigned char* take(uint64_t k);
  uint64_t signed_length(int width);
  std::string line();

  void hold(uint64_t bytes);

  size_t base() const;
  void push(Ref r);
  Ref pop();
  Ref top() const;
  std::vector<Ref> pop_mark();
  Ref target(Kind kind, const char* op);
  void extend(Ref container, const std::vector<Ref>& items);

  Ref make(Kind kind);
  Ref make_int(Kind kind, int64_t v);
  Ref make_container(Kind kind, std::vector<Ref> items);
  void push_text(Kind kind, uint64_t len);
  void push_long(uint64_t len);
  void push_global(const std::string& module, const std::string& name);
  void memo_put(uint64_t index);
  void memo_get(uint64_t index);

  const std::string& callee(Ref fn, Ref args, const char* op) const;
  Ref call(Ref fn, Ref args);
  Ref construct(Ref cls, Ref args);
  Ref opaque(Ref global);
  Ref ordered_dict(size_t args);

  Ref load_storage(Ref pid);
  Ref rebuild_tensor(Ref args);

  std::string source_;
  PickleRules rules_;
  const unsigned char* p_;
  uint64_t n_, pos_ = 0, op_at_ = 0;
  uint64_t held_left_;  // bytes the machine may still keep
  std::vector<Object> objects_;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  std::unordered_map<uint64_t, Ref> memo_;
  std::vector<StorageRecord> storages_;
  std::vector<TensorRecord> tensors_;
};

}  // namespace parity::dumps
