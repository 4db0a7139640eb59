// Reading safetensors files (tensor_file.h): pure byte parsing, no torch.
//
// The layout (the safetensors specification):
//   [0, 8)        n, the header size: a little-endian uint64
//   [8, 8 + n)    UTF-8 JSON: {name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
//                 optionally "__metadata__": {str: str}}, possibly padded with spaces (0x20)
//   [8 + n, end)  the buffer; begin and end are byte offsets into it, end exclusive
//
// Every length, offset and count is checked against the bytes there before anything is read
// or allocated from it, so the largest allocation is bounded by the file's own size and a
// damaged or hostile file gives a DumpError naming the file and the tensor, never a crash.
//
// [Note: safetensors duplicate names] JSON allows a key twice; nlohmann keeps only one of them,
// which would silently drop a tensor. A first pass over the header's parse events sees every
// key as the lexer reads it and refuses the second one, at any depth (a tensor named twice, an
// entry with two "dtype"s, a metadata key twice).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "dumps/dump.h"
#include "dumps/tensor_file.h"
#include "spec/checked.h"
#include "spec/limits.h"
#include "spec/printable.h"

namespace parity::dumps {

namespace {

using json = nlohmann::json;

// The largest header this reader accepts, as the reference implementation does: a real header
// is a few hundred bytes per tensor.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

constexpr const char* kMetadataKey = "__metadata__";

std::string remedy() {
  return "write the file again with safetensors.torch.save_file";
}

// `s` fit for a one-line message (spec/printable.h).
std::string one_line(const std::string& s, size_t limit = 120, bool ascii_only = false) {
  return spec::printable(s, limit, ascii_only);
}

std::string in_quotes(const std::string& name) { return "'" + one_line(name) + "'"; }

// A JSON value as a short one-line text, for "got ..." in messages.
std::string shown(const json& v) {
  return one_line(v.dump(-1, ' ', false, json::error_handler_t::replace), 60);
}

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw DumpError("'" + source + "': " + what);
}

// A non-negative JSON integer, or false (negative, fractional, or not a number).
bool as_count(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

bool dtype_of(const std::string& s, h5::DType& out) {
  static const std::pair<const char*, h5::DType> kRead[] = {
      {"BF16", h5::DType::BF16}, {"F16", h5::DType::F16}, {"F32", h5::DType::F32},
      {"F64", h5::DType::F64},   {"I64", h5::DType::I64}, {"I32", h5::DType::I32},
      {"U8", h5::DType::U8}};
  for (const auto& [name, dtype] : kRead)
    if (s == name) {
      out = dtype;
      return true;
    }
  return false;
}

// One header entry, checked against itself (the buffer checks come after).
struct Entry {
  std::string name;
  size_t header_index = 0;  // its place among the header's keys, to order empty tensors
  h5::DType dtype = h5::DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// Refuses any key given twice ([Note: safetensors duplicate names]) and any nesting deeper
// than spec::kMaxJsonDepth, reading the header once through nlohmann's event interface (which
// keeps its own stack, no recursion). `order` receives each top-level key's place. Returns
// false, leaving the message to the DOM parse, where the text is not JSON.
class HeaderKeys {
 public:
  HeaderKeys(const std::string& source, std::unordered_map<std::string, size_t>& order)
      : source_(source), order_(order) {}

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const std::string&) { return value(); }
  bool string(std::string&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) {
    if (!open(true)) return false;
    keys_.emplace_back();
    return true;
  }
  bool end_object() {
    keys_.pop_back();
    return close();
  }
  bool start_array(std::size_t) { return open(false); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const json::exception&) { return false; }

  bool key(std::string& k) {
    if (root_is_object_ && objects_.size() == 1) {
      if (!order_.emplace(k, order_.size()).second)
        fail(source_, (k == kMetadataKey ? std::string(kMetadataKey) : "tensor " + in_quotes(k)) +
                          " appears twice in the header; " + remedy());
      top_ = k;
    } else if (!keys_.back().insert(k).second) {
      fail(source_, "key " + in_quotes(k) + " appears twice in " +
                        (!root_is_object_       ? std::string("an object of the header")
                         : top_ == kMetadataKey ? std::string(kMetadataKey)
                                                : "the header entry of tensor " + in_quotes(top_)) +
                        "; " + remedy());
    }
    return true;
  }

 private:
  bool value() {
    started_ = true;
    return true;
  }
  bool open(bool object) {
    if (!started_) root_is_object_ = object;
    started_ = true;
    objects_.push_back(object);
    if (static_cast<int64_t>(objects_.size()) > spec::kMaxJsonDepth)
      fail(source_, "the header nests more than " + std::to_string(spec::kMaxJsonDepth) +
                        " deep (a safetensors header nests 3 deep); the file is damaged or not a "
                        "safetensors file");
    return true;
  }
  bool close() {
    objects_.pop_back();
    return true;
  }

  const std::string& source_;
  std::unordered_map<std::string, size_t>& order_;
  std::vector<bool> objects_;                // the open arrays (false) and objects (true)
  std::vector<std::set<std::string>> keys_;  // the keys seen in each open object
  std::string top_;                          // the top-level key being read
  bool started_ = false, root_is_object_ = false;
};

// The header text as JSON. Refuses bad JSON, a header that is not an object, nesting past
// the limit and any key given twice. Both passes are linear in the header's length: parsing
// with nlohmann's callback instead rescans the parent object after every entry (200,000
// tensors took minutes).
json parse_header(const std::string& source, const char* first, const char* last,
                  std::unordered_map<std::string, size_t>& order) {
  HeaderKeys keys(source, order);
  const bool well_formed = json::sax_parse(first, last, &keys);
  json header;
  try {
    // Where the events stopped, the DOM parse throws the parse error with its place.
    header = json::parse(first, last);
    if (!well_formed) throw std::logic_error("the header's parse events stopped early");
  } catch (const json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 9: ...".
    std::string why = e.what();
    if (const auto close = why.find("] "); why.rfind("[json.exception", 0) == 0 &&
                                           close != std::string::npos)
      why = why.substr(close + 2);
    fail(source, "the header is not valid JSON (" + one_line(why, 200, true) +
                     "); the file is damaged or not a safetensors file");
  }
  if (!header.is_object())
    fail(source, std::string("the header is JSON but not an object (it is ") + header.type_name() +
                     "); the file is damaged or not a safetensors file");
  return header;
}

void check_metadata(const std::string& source, const json& meta) {
  if (!meta.is_object())
    fail(source, std::string(kMetadataKey) + " must be an object of strings but is " +
                     (meta.is_array() ? "an " : "a ") + meta.type_name() + "; " + remedy());
  for (const auto& [key, value] : meta.items())
    if (!value.is_string())
      fail(source, std::string(kMetadataKey) + " entry " + in_quotes(key) + " must be a string but is " +
                       shown(value) + "; " + remedy());
}

// Checks one tensor's entry against itself: exactly the three keys, a dtype this reader
// reads, a shape of non-negative integers whose product fits in int64, and data_offsets two
// non-negative integers, begin <= end, spanning numel * element size bytes.
Entry check_entry(const std::string& source, const std::string& name, const json& e) {
  const std::string who = "tensor " + in_quotes(name);
  if (!e.is_object())
    fail(source, who + " has an entry that is not an object (got " + shown(e) +
                     "); an entry is {\"dtype\", \"shape\", \"data_offsets\"}");
  for (const auto& [key, value] : e.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(source, who + " has an unexpected key " + in_quotes(key) +
                       " in its entry; an entry holds exactly dtype, shape and data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) fail(source, who + " has no \"" + key + "\" in its entry; " + remedy());

  Entry out;
  out.name = name;

  const auto& dtype = e.at("dtype");
  if (!dtype.is_string()) fail(source, who + " has a dtype that is not a string: " + shown(dtype));
  if (!dtype_of(dtype.get_ref<const std::string&>(), out.dtype))
    fail(source, who + " has dtype " + one_line(dtype.get_ref<const std::string&>(), 40) +
                     ", which parity does not read: floating tensors (BF16, F16, F32, F64) are "
                     "compared and I64, I32, U8 read as they are; convert the tensor to one of "
                     "those or leave it out of the file");

  const auto& shape = e.at("shape");
  if (!shape.is_array()) fail(source, who + " has a shape that is not an array: " + shown(shape));
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t dim = 0;
    if (!as_count(shape[i], dim))
      fail(source, who + " has shape entry " + shown(shape[i]) + " at index " + std::to_string(i) +
                       ": dims are non-negative integers; " + remedy());
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(source, who + " has shape " + shown(shape) + " with a dim past 2^63; the header is damaged");
    out.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto count = spec::checked_numel(out.shape);
  if (!count)
    fail(source, who + " has shape " + shown(shape) +
                     " whose element count does not fit in 64 bits; the header is damaged");
  const int64_t numel = *count;

  const auto& offsets = e.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !as_count(offsets[0], out.begin) ||
      !as_count(offsets[1], out.end))
    fail(source, who + " has data_offsets " + shown(offsets) +
                     ", not two non-negative integers [begin, end]; " + remedy());
  if (out.begin > out.end)
    fail(source, who + " has data_offsets " + shown(offsets) + " whose begin is after its end; " +
                     remedy());
  const uint64_t span = out.end - out.begin;
  const uint64_t size = h5::dtype_size(out.dtype);
  if (span % size != 0 || span / size != static_cast<uint64_t>(numel))
    fail(source, who + " has shape " + shown(shape) + " of " + dtype.get<std::string>() + " (" +
                     std::to_string(numel) + " elements of " + std::to_string(size) +
                     " bytes) but its data_offsets " + shown(offsets) + " span " +
                     std::to_string(span) + " bytes; " + remedy());
  return out;
}

}  // namespace

std::vector<NamedArray> read_safetensors(const std::string& source, const std::string& bytes) {
  const uint64_t file_size = bytes.size();
  if (file_size < 8)
    fail(source, "the file is " + std::to_string(file_size) +
                     " bytes long, too short for a safetensors file (the header length alone "
                     "takes 8); the file is truncated or not a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > kMaxHeaderBytes)
    fail(source, "the header length is " + std::to_string(n) + " bytes, more than the " +
                     std::to_string(kMaxHeaderBytes) +
                     " a safetensors header may have; the file is damaged or not a safetensors file");
  if (n > file_size - 8)
    fail(source, "the header length is " + std::to_string(n) + " bytes but only " +
                     std::to_string(file_size - 8) +
                     " follow the header length; the file is truncated or not a safetensors file");

  const char* header_begin = bytes.data() + 8;
  // nlohmann's lexer takes a NUL byte for the end of its input and would ignore what follows;
  // JSON has no place for one (padding is spaces, control bytes in strings are escaped).
  if (const void* nul = std::memchr(header_begin, '\0', n))
    fail(source, "the header holds a NUL byte at byte " +
                     std::to_string(static_cast<const char*>(nul) - header_begin) +
                     " of its " + std::to_string(n) +
                     " (JSON has none; padding is spaces); the file is damaged or not a "
                     "safetensors file");
  std::unordered_map<std::string, size_t> order;
  const json header = parse_header(source, header_begin, header_begin + n, order);

  const uint64_t buffer_size = file_size - 8 - n;
  const auto* buffer = reinterpret_cast<const unsigned char*>(header_begin + n);

  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      check_metadata(source, value);
      continue;
    }
    entries.push_back(check_entry(source, name, value));
    auto& e = entries.back();
    e.header_index = order.at(name);
    if (e.end > buffer_size)
      fail(source, "tensor " + in_quotes(name) + " has data_offsets [" + std::to_string(e.begin) +
                       ", " + std::to_string(e.end) + "] that end past the buffer (" +
                       std::to_string(buffer_size) +
                       " bytes after the header); the file is truncated or its header is wrong");
  }

  // The writer's layout order; empty tensors at the same offset keep the header's order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.header_index < b.header_index;
  });
  // The tensors tile the buffer exactly, as the reference implementation requires: each
  // starts where the one before ends, the first at 0, and the last ends at the file's end.
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& cur = entries[i];
    if (cur.begin < covered)
      fail(source, "tensors " + in_quotes(entries[i - 1].name) + " (bytes [" +
                       std::to_string(entries[i - 1].begin) + ", " + std::to_string(entries[i - 1].end) +
                       ")) and " + in_quotes(cur.name) + " (bytes [" + std::to_string(cur.begin) +
                       ", " + std::to_string(cur.end) + ")) overlap in the buffer; " + remedy());
    if (cur.begin > covered)
      fail(source, "bytes [" + std::to_string(covered) + ", " + std::to_string(cur.begin) +
                       ") of the buffer belong to no tensor (before tensor " + in_quotes(cur.name) +
                       "); the header is wrong or the file was altered; " + remedy());
    covered = cur.end;
  }
  if (covered != buffer_size)
    fail(source, std::to_string(buffer_size - covered) + " bytes follow the last tensor's data (the buffer is " +
                     std::to_string(buffer_size) + " bytes, the tensors end at " + std::to_string(covered) +
                     "); the file was altered or is not one safetensors file; " + remedy());

  std::vector<NamedArray> out;
  out.reserve(entries.size());
  for (auto& e : entries) {
    NamedArray t;
    t.name = std::move(e.name);
    t.array.dtype = e.dtype;
    t.array.shape = std::move(e.shape);
    t.array.bytes.assign(buffer + e.begin, buffer + e.end);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace parity::dumps
