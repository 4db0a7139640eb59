// The pickle machine of the torch.save reader (unpickler.h).
#include "dumps/unpickler.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "dumps/torch_save_detail.h"

namespace parity::dumps {
namespace {

struct StorageClass {
  const char* name;
  std::optional<h5::DType> dtype;
  const char* dtype_name;
};

const StorageClass kStorageClasses[] = {
    {"torch.FloatStorage", h5::DType::F32, "float32"},
    {"torch.DoubleStorage", h5::DType::F64, "float64"},
    {"torch.HalfStorage", h5::DType::F16, "float16"},
    {"torch.BFloat16Storage", h5::DType::BF16, "bfloat16"},
    {"torch.LongStorage", h5::DType::I64, "int64"},
    {"torch.IntStorage", h5::DType::I32, "int32"},
    {"torch.ByteStorage", h5::DType::U8, "uint8"},
    // Storages torch.save writes that this reader refuses, by the tensor's key.
    {"torch.ShortStorage", std::nullopt, "int16"},
    {"torch.CharStorage", std::nullopt, "int8"},
    {"torch.BoolStorage", std::nullopt, "bool"},
    {"torch.ComplexHalfStorage", std::nullopt, "complex32"},
    {"torch.ComplexFloatStorage", std::nullopt, "complex64"},
    {"torch.ComplexDoubleStorage", std::nullopt, "complex128"},
    {"torch.QInt8Storage", std::nullopt, "qint8"},
    {"torch.QUInt8Storage", std::nullopt, "quint8"},
    {"torch.QInt32Storage", std::nullopt, "qint32"},
    {"torch.QUInt4x2Storage", std::nullopt, "quint4x2"},
    {"torch.QUInt2x4Storage", std::nullopt, "quint2x4"},
    {"torch.UntypedStorage", std::nullopt, "untyped bytes"},
};

// Limits: far above what a torch.save of a state dict needs (about 15 objects and memo entries
// and a handful of stack slots per tensor, names of a few dozen bytes, storage keys of a few
// digits), far below what would exhaust memory.
constexpr size_t kMaxStack = 100000, kMaxMarks = 1000, kMaxMemo = size_t{1} << 22;
constexpr size_t kMaxObjects = size_t{1} << 23, kMaxDims = 64, kMaxName = 512;
constexpr uint64_t kHeldPerByte = 64, kHeldBase = uint64_t{64} << 20;

// Opcodes (CPython's pickle format, protocols 0-5): the subset torch.save's data.pkl and a DCP
// .metadata use.
enum Op : unsigned char {
  MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', BINFLOAT = 'G', BININT = 'J',
  BININT1 = 'K', BININT2 = 'M', NONE = 'N', BINPERSID = 'Q', REDUCE = 'R', BINSTRING = 'T',
  SHORT_BINSTRING = 'U', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd',
  EMPTY_DICT = '}', APPENDS = 'e', BINGET = 'h', LONG_BINGET = 'j', LIST = 'l', EMPTY_LIST = ']',
  BINPUT = 'q', LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u',
  BINBYTES = 'B', SHORT_BINBYTES = 'C', PROTO = kPickleProto, NEWOBJ = 0x81, TUPLE1 = 0x85,
  TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b,
  SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e, STACK_GLOBAL = 0x93,
  MEMOIZE = 0x94, FRAME = 0x95,
};

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: case Kind::BigInt: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Global: return "global";
    case Kind::Storage: return "storage";
    case Kind::Tensor: return "tensor";
    case Kind::Opaque: return "object";
  }
  return "?";
}

Unpickler::Unpickler(const std::string& source, std::string_view pkl, PickleRules rules)
    : source_(source), rules_(std::move(rules)),
      p_(reinterpret_cast<const unsigned char*>(pkl.data())), n_(pkl.size()),
      held_left_(kHeldPerByte * pkl.size() + kHeldBase) {
  if (rules_.damaged.empty())
    rules_.damaged =
        std::string("the file is damaged or was not written by torch.save; ") + kSaveRemedy;
}

Ref Unpickler::run() {
  for (;;) {
    if (pos_ >= n_) fail("it ends without a STOP opcode");
    op_at_ = pos_;
    const unsigned char op = p_[pos_++];
    switch (op) {
      case PROTO: {
        const unsigned version = take(1)[0];
        if (version > 5) fail("unknown pickle protocol " + std::to_string(version));
        break;
      }
      case FRAME:
        if (le(take(8), 8) > n_ - pos_) fail("a frame runs past the end");
        break;
      case STOP: return pop();
      case MARK:
        if (marks_.size() >= kMaxMarks) fail("marks nest deeper than the reader's limit");
        marks_.push_back(stack_.size());
        break;
      case POP:
        if (stack_.size() > base()) stack_.pop_back();
        else pop_mark();
        break;
      case POP_MARK: pop_mark(); break;
      case DUP: push(top()); break;
      case NONE: push(make(Kind::None)); break;
      case NEWTRUE: case NEWFALSE: push(make_int(Kind::Bool, op == NEWTRUE)); break;
      case BININT: push(make_int(Kind::Int, static_cast<int32_t>(le(take(4), 4)))); break;
      case BININT1: push(make_int(Kind::Int, take(1)[0])); break;
      case BININT2: push(make_int(Kind::Int, static_cast<int64_t>(le(take(2), 2)))); break;
      case LONG1: push_long(take(1)[0]); break;
      case LONG4: push_long(signed_length(4)); break;
      case BINFLOAT:  // 8 bytes, big-endian: a float, never part of a tensor
        take(8);
        push(make(Kind::Float));
        break;
      case BINUNICODE: push_text(Kind::Str, le(take(4), 4)); break;
      case SHORT_BINUNICODE: push_text(Kind::Str, take(1)[0]); break;
      case BINUNICODE8: push_text(Kind::Str, le(take(8), 8)); break;
      case BINSTRING: push_text(Kind::Str, signed_length(4)); break;  // decoded as UTF-8
      case SHORT_BINSTRING: push_text(Kind::Str, take(1)[0]); break;
      case BINBYTES: push_text(Kind::Bytes, le(take(4), 4)); break;
      case SHORT_BINBYTES: push_text(Kind::Bytes, take(1)[0]); break;
      case BINBYTES8: push_text(Kind::Bytes, le(take(8), 8)); break;
      case EMPTY_DICT: push(make(Kind::Dict)); break;
      case EMPTY_LIST: push(make(Kind::List)); break;
      case EMPTY_TUPLE: push(make(Kind::Tuple)); break;
      case DICT: case LIST: case TUPLE: {
        auto items = pop_mark();
        if (op == DICT && items.size() % 2) fail("DICT with an odd number of items");
        push(make_container(op == DICT ? Kind::Dict : op == LIST ? Kind::List : Kind::Tuple,
                            std::move(items)));
        break;
      }
      case TUPLE1: case TUPLE2: case TUPLE3: {
        std::vector<Ref> items(op - TUPLE1 + 1);
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        push(make_container(Kind::Tuple, std::move(items)));
        break;
      }
      case SETITEM: {
        const Ref value = pop(), key = pop();
        extend(target(Kind::Dict, "SETITEM"), {key, value});
        break;
      }
      case SETITEMS: {
        auto items = pop_mark();
        if (items.size() % 2) fail("SETITEMS with an odd number of items");
        extend(target(Kind::Dict, "SETITEMS"), items);
        break;
      }
      case APPEND: {
        const Ref value = pop();
        extend(target(Kind::List, "APPEND"), {value});
        break;
      }
      case APPENDS: {
        auto items = pop_mark();
        extend(target(Kind::List, "APPENDS"), items);
        break;
      }
      case BINPUT: memo_put(take(1)[0]); break;
      case LONG_BINPUT: memo_put(le(take(4), 4)); break;
      case MEMOIZE: memo_put(memo_.size()); break;
      case BINGET: memo_get(take(1)[0]); break;
      case LONG_BINGET: memo_get(le(take(4), 4)); break;
      case GLOBAL: {
        std::string module = line();
        push_global(module, line());
        break;
      }
      case STACK_GLOBAL: {
        const Ref name = pop(), module = pop();
        const Object &m = objects_[module], &n = objects_[name];
        if (m.kind != Kind::Str || n.kind != Kind::Str) fail("STACK_GLOBAL on a non-string");
        if (m.text.empty() || n.text.empty() || m.text.size() > kMaxName ||
            n.text.size() > kMaxName)
          fail("STACK_GLOBAL with an empty name or one longer than " +
               std::to_string(kMaxName) + " bytes");
        push_global(m.text, n.text);
        break;
      }
      case REDUCE: {
        const Ref args = pop(), fn = pop();
        push(call(fn, args));
        break;
      }
      case NEWOBJ: {
        const Ref args = pop(), cls = pop();
        push(construct(cls, args));
        break;
      }
      case BUILD: {
        // The state: an OrderedDict's attributes (_metadata), dropped; an object's, kept.
        const Ref state = pop();
        Object& o = objects_[top()];
        if (!(o.kind == Kind::Opaque || (o.kind == Kind::Dict && o.ordered)))
          fail(std::string("BUILD on a ") + kind_name(o.kind));
        if (o.kind == Kind::Opaque) {
          if (o.items.empty()) hold(sizeof(Ref));
          o.items.assign(1, state);
        }
        break;
      }
      case BINPERSID: push(load_storage(pop())); break;
      default: {
        char buf[8];
        std::snprintf(buf, sizeof buf, "0x%02x", op);
        fail(std::string("pickle opcode ") + buf + " is not one this reader knows");
      }
    }
  }
}

[[noreturn]] void Unpickler::fail(const std::string& what) const {
  refuse(source_, rules_.part + " cannot be read at byte " + std::to_string(op_at_) + ": " +
                      what + "; " + rules_.damaged);
}

const unsigned char* Unpickler::take(uint64_t k) {
  if (k > n_ - pos_)
    fail("it needs " + std::to_string(k) + " more bytes, " + std::to_string(n_ - pos_) +
         " are left");
  const auto* q = p_ + pos_;
  pos_ += k;
  return q;
}

uint64_t Unpickler::signed_length(int width) {
  const auto v = static_cast<int32_t>(le(take(width), width));
  if (v < 0) fail("negative length " + std::to_string(v));
  return static_cast<uint64_t>(v);
}

// A line of GLOBAL: UTF-8 up to '\n', neither empty nor longer than kMaxName.
std::string Unpickler::line() {
  const auto* start = p_ + pos_;
  const size_t window = static_cast<size_t>(std::min<uint64_t>(n_ - pos_, kMaxName + 1));
  const auto* nl = static_cast<const unsigned char*>(std::memchr(start, '\n', window));
  if (!nl || nl == start)
    fail("GLOBAL without a module or name line of 1 to " + std::to_string(kMaxName) +
         " bytes");
  std::string s(reinterpret_cast<const char*>(start), static_cast<size_t>(nl - start));
  pos_ += s.size() + 1;
  if (!is_utf8(s)) fail("GLOBAL names are not UTF-8");
  return s;
}

// Everything the machine keeps is charged here first.
void Unpickler::hold(uint64_t bytes) {
  if (bytes > held_left_) fail("it holds more than the reader's memory limit for its size");
  held_left_ -= bytes;
}

size_t Unpickler::base() const { return marks_.empty() ? 0 : marks_.back(); }

void Unpickler::push(Ref r) {
  if (stack_.size() >= kMaxStack) fail("the stack grows past the reader's limit");
  stack_.push_back(r);
}

Ref Unpickler::pop() {
  if (stack_.size() <= base()) fail("the stack is empty");
  const Ref r = stack_.back();
  stack_.pop_back();
  return r;
}

Ref Unpickler::top() const {
  if (stack_.size() <= base()) fail("the stack is empty");
  return stack_.back();
}

std::vector<Ref> Unpickler::pop_mark() {
  if (marks_.empty()) fail("no MARK to pop to");
  const size_t b = marks_.back();
  marks_.pop_back();
  std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(b), stack_.end());
  stack_.resize(b);
  return items;
}

Ref Unpickler::target(Kind kind, const char* op) {
  const Ref r = top();
  if (objects_[r].kind != kind) fail(std::string(op) + " on a " + kind_name(objects_[r].kind));
  return r;
}

void Unpickler::extend(Ref container, const std::vector<Ref>& items) {
  hold(sizeof(Ref) * items.size());
  auto& v = objects_[container].items;
  v.insert(v.end(), items.begin(), items.end());
}

Ref Unpickler::make(Kind kind) {
  if (objects_.size() >= kMaxObjects) fail("it makes more objects than the reader's limit");
  hold(sizeof(Object));
  objects_.emplace_back();
  objects_.back().kind = kind;
  return static_cast<Ref>(objects_.size() - 1);
}

Ref Unpickler::make_int(Kind kind, int64_t v) {
  const Ref r = make(kind);
  objects_[r].number = v;
  return r;
}

Ref Unpickler::make_container(Kind kind, std::vector<Ref> items) {
  hold(sizeof(Ref) * items.size());
  const Ref r = make(kind);
  objects_[r].items = std::move(items);
  return r;
}

void Unpickler::push_text(Kind kind, uint64_t len) {
  const auto* q = take(len);
  hold(len);
  std::string s(reinterpret_cast<const char*>(q), static_cast<size_t>(len));
  if (kind == Kind::Str && !is_utf8(s)) fail("a string is not UTF-8");
  const Ref r = make(kind);
  objects_[r].text = std::move(s);
  push(r);
}

// Two's complement, little-endian, `len` bytes: an Int when it fits 64 bits.
void Unpickler::push_long(uint64_t len) {
  const auto* q = take(len);
  if (len > 8) return push(make(Kind::BigInt));
  uint64_t v = len ? le(q, static_cast<int>(len)) : 0;
  if (len && len < 8 && (q[len - 1] & 0x80)) v |= ~uint64_t{0} << (8 * len);
  push(make_int(Kind::Int, static_cast<int64_t>(v)));
}

bool torch_save_global(const std::string& g) {
  static const char* const kNamed[] = {
      "collections.OrderedDict", "collections.Counter", "torch._utils._rebuild_tensor_v2",
      "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state",
      "torch.Size", "torch.serialization._get_layout", "torch.device", "_codecs.encode",
      "builtins.set", "builtins.frozenset", "builtins.complex", "builtins.bytearray"};
  for (const char* k : kNamed)
    if (g == k) return true;
  // A storage class (load_storage names those it does not read) or a dtype value: torch.<word>.
  static const char* const kDTypeNames[] = {
      "float32", "float", "float64", "double", "float16", "half", "bfloat16", "int64", "long",
      "int32", "int", "int16", "short", "int8", "uint8", "bool", "complex32", "complex64",
      "complex128", "cfloat", "cdouble", "chalf", "qint8", "quint8", "qint32", "quint4x2",
      "float8_e4m3fn", "float8_e5m2"};
  if (g.rfind("torch.", 0) != 0 || g.find('.', 6) != std::string::npos) return false;
  const std::string word = g.substr(6);
  if (word.size() > 7 && word.compare(word.size() - 7, 7, "Storage") == 0) return true;
  for (const char* d : kDTypeNames)
    if (word == d) return true;
  return false;
}

// The name is built before make(), which may move the strings it comes from.
void Unpickler::push_global(const std::string& module, const std::string& name) {
  std::string full = module + "." + name;
  if (rules_.allowed && !rules_.allowed(full))
    fail("it names the global " + shown(full) + ", which this reader never builds");
  if (!rules_.allowed && !torch_save_global(full))
    refuse(source_, rules_.part + " names the global " + shown(full) + " at byte " +
                        std::to_string(op_at_) +
                        ", which this reader never builds (torch.load(weights_only=True) refuses "
                        "it too); save only tensors and containers of them: a module's "
                        "state_dict(), a numpy array as torch.from_numpy(array)");
  hold(full.size());
  const Ref r = make(Kind::Global);
  objects_[r].text = std::move(full);
  push(r);
}

void Unpickler::memo_put(uint64_t index) {
  const Ref value = top();
  auto it = memo_.find(index);
  if (it != memo_.end()) {
    it->second = value;
    return;
  }
  if (memo_.size() >= kMaxMemo) fail("the memo grows past the reader's limit");
  hold(64);  // a hash map node
  memo_.emplace(index, value);
}

void Unpickler::memo_get(uint64_t index) {
  auto it = memo_.find(index);
  if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
  push(it->second);
}

// The global a REDUCE or NEWOBJ applies, and its argument tuple's size.
const std::string& Unpickler::callee(Ref fn, Ref args, const char* op) const {
  if (objects_[fn].kind != Kind::Global)
    fail(std::string(op) + " applies a " + kind_name(objects_[fn].kind));
  if (objects_[args].kind != Kind::Tuple)
    fail(std::string(op) + " of " + shown(objects_[fn].text) + " without an argument tuple");
  return objects_[fn].text;
}

Ref Unpickler::call(Ref fn, Ref args) {
  const std::string& name = callee(fn, args, "REDUCE");
  const auto& items = objects_[args].items;
  if (name == "collections.OrderedDict") return ordered_dict(items.size());
  if (name == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args);
  if (name == "torch._utils._rebuild_parameter" ||
      name == "torch._utils._rebuild_parameter_with_state") {
    const size_t arity = name == "torch._utils._rebuild_parameter" ? 3 : 4;
    if (items.size() != arity || objects_[items[0]].kind != Kind::Tensor)
      fail(name + " called with other arguments than (tensor, requires_grad, hooks)");
    return items[0];
  }
  // torch.Size((ints...)) is its tuple; a layout, pickled as _get_layout('torch.strided'), its
  // name.
  if (name == "torch.Size" || name == "torch.serialization._get_layout") {
    const Kind want = name == "torch.Size" ? Kind::Tuple : Kind::Str;
    if (items.size() != 1 || objects_[items[0]].kind != want)
      fail(name + " called with other arguments than one " + kind_name(want));
    return items[0];
  }
  return opaque(fn);
}

Ref Unpickler::construct(Ref cls, Ref args) {
  const std::string& name = callee(cls, args, "NEWOBJ");
  if (name == "collections.OrderedDict") return ordered_dict(objects_[args].items.size());
  if (name.rfind("torch._utils.", 0) == 0) fail("NEWOBJ on the function " + shown(name));
  return opaque(cls);
}

// Never called: an object of a global outside the whitelist, refused if the tree walk meets
// it where a tensor or container of tensors should be.
Ref Unpickler::opaque(Ref global) { return make_int(Kind::Opaque, global); }

Ref Unpickler::ordered_dict(size_t args) {
  if (args != 0) fail("collections.OrderedDict called with arguments");
  const Ref r = make(Kind::Dict);
  objects_[r].ordered = true;
  return r;
}

// ('storage', torch.<Type>Storage, key, location, numel)
Ref Unpickler::load_storage(Ref pid) {
  const auto& id = objects_[pid];
  const auto is = [&](size_t i, Kind k) { return objects_[id.items[i]].kind == k; };
  if (id.kind != Kind::Tuple || id.items.size() != 5 || !is(0, Kind::Str) ||
      objects_[id.items[0]].text != "storage" || !is(1, Kind::Global) || !is(2, Kind::Str) ||
      !is(3, Kind::Str) || !is(4, Kind::Int) || objects_[id.items[4]].number < 0)
    fail("a persistent id is not ('storage', class, key, location, numel)");
  const std::string& cls = objects_[id.items[1]].text;
  const std::string& key = objects_[id.items[2]].text;
  if (key.empty() || key.size() > kMaxName)
    fail("a storage key is empty or longer than " + std::to_string(kMaxName) + " bytes");
  const StorageClass* known = nullptr;
  for (const auto& c : kStorageClasses)
    if (cls == c.name) known = &c;
  if (!known)
    fail("persistent id of storage '" + shown(key) + "' names " + shown(cls) +
         ", not a torch storage class");
  hold(sizeof(StorageRecord) + cls.size() + key.size());
  StorageRecord s;
  s.cls = cls;
  s.key = key;
  s.numel = objects_[id.items[4]].number;
  s.dtype = known->dtype;
  s.dtype_name = known->dtype_name;
  storages_.push_back(std::move(s));
  return make_int(Kind::Storage, static_cast<int64_t>(storages_.size() - 1));
}

// (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
Ref Unpickler::rebuild_tensor(Ref args) {
  const auto bad = [&](const std::string& what) {
    fail("torch._utils._rebuild_tensor_v2 called with " + what);
  };
  const auto& a = objects_[args].items;
  if (a.size() != 6 && a.size() != 7) bad(std::to_string(a.size()) + " arguments");
  if (objects_[a[0]].kind != Kind::Storage) bad("no storage");
  if (objects_[a[1]].kind != Kind::Int || objects_[a[1]].number < 0)
    bad("a storage offset that is not a non-negative int");
  if (objects_[a[4]].kind != Kind::Bool) bad("a requires_grad that is not a bool");
  const auto ints = [&](Ref r, const char* what) {
    const auto& o = objects_[r];
    if (o.kind != Kind::Tuple || o.items.size() > kMaxDims)
      bad(std::string("a ") + what + " that is not a tuple of at most 64 ints");
    std::vector<int64_t> v;
    for (Ref i : o.items) {
      if (objects_[i].kind != Kind::Int || objects_[i].number < 0)
        bad(std::string("a ") + what + " that is not a tuple of non-negative ints");
      v.push_back(objects_[i].number);
    }
    return v;
  };
  TensorRecord t;
  t.storage = objects_[a[0]].number;
  t.offset = objects_[a[1]].number;
  t.shape = ints(a[2], "size");
  t.stride = ints(a[3], "stride");
  if (t.shape.size() != t.stride.size()) bad("a size and a stride of different lengths");
  hold(sizeof(TensorRecord) + 2 * sizeof(int64_t) * t.shape.size());
  tensors_.push_back(std::move(t));
  return make_int(Kind::Tensor, static_cast<int64_t>(tensors_.size() - 1));
}

}  // namespace parity::dumps
