// A pickle writer (protocol 2) for plain values: None, bool, int, float, str, list, tuple and
// dict with str keys, which Python's pickle.load reads as they are, without importing anything.
// `parity memory --snapshot` writes its allocator snapshot with it.
//
// Streaming: open a container, write its items (a dict's as key, value, key, value, ...),
// close it. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parity::dumps {

class PickleWriter {
 public:
  PickleWriter();

  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void real(double v);
  void str(const std::string& v);

  void begin_dict();
  void end_dict();
  void begin_list();
  void end_list();
  void begin_tuple();
  void end_tuple();

  // key then value, in a dict.
  void key(const std::string& k) { str(k); }

  // The whole pickle (STOP appended). Throws std::logic_error while a container is open.
  std::string finish();

 private:
  std::string out_;
  std::vector<char> open_;  // 'd', 'l', 't'
  void close(char kind, char opcode);
};

}  // namespace parity::dumps
