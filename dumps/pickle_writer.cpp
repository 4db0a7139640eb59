#include "dumps/pickle_writer.h"

#include <cstring>
#include <stdexcept>

namespace parity::dumps {

namespace {
// The opcodes (protocol 2), as Python's pickletools names them.
constexpr char kProto = '\x80', kStop = '.', kMark = '(', kNone = 'N', kTrue = '\x88',
               kFalse = '\x89', kBinInt = 'J', kLong1 = '\x8a', kBinFloat = 'G',
               kBinUnicode = 'X', kEmptyDict = '}', kSetItems = 'u', kEmptyList = ']',
               kAppends = 'e', kTuple = 't';

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(kProto);
  out_.push_back('\x02');
}

void PickleWriter::none() { out_.push_back(kNone); }
void PickleWriter::boolean(bool v) { out_.push_back(v ? kTrue : kFalse); }

void PickleWriter::integer(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back(kBinInt);
    put_le(out_, static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    return;
  }
  out_.push_back(kLong1);  // little-endian two's complement, 8 bytes
  out_.push_back('\x08');
  put_le(out_, static_cast<uint64_t>(v), 8);
}

void PickleWriter::real(double v) {
  out_.push_back(kBinFloat);  // big-endian IEEE double
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void PickleWriter::str(const std::string& v) {
  if (v.size() > UINT32_MAX) throw std::length_error("a pickled string over 4 GiB");
  out_.push_back(kBinUnicode);
  put_le(out_, v.size(), 4);
  out_ += v;
}

void PickleWriter::begin_dict() {
  out_.push_back(kEmptyDict);
  out_.push_back(kMark);
  open_.push_back('d');
}

void PickleWriter::begin_list() {
  out_.push_back(kEmptyList);
  out_.push_back(kMark);
  open_.push_back('l');
}

void PickleWriter::begin_tuple() {
  out_.push_back(kMark);
  open_.push_back('t');
}

void PickleWriter::close(char kind, char opcode) {
  if (open_.empty() || open_.back() != kind)
    throw std::logic_error("pickle writer: a container closed that is not the innermost open one");
  open_.pop_back();
  out_.push_back(opcode);
}

void PickleWriter::end_dict() { close('d', kSetItems); }
void PickleWriter::end_list() { close('l', kAppends); }
void PickleWriter::end_tuple() { close('t', kTuple); }

std::string PickleWriter::finish() {
  if (!open_.empty()) throw std::logic_error("pickle writer: finished with a container open");
  out_.push_back(kStop);
  return std::move(out_);
}

}  // namespace parity::dumps
