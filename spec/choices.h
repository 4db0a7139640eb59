// A closed set of option values with their names: the only place an option's spellings live.
// Parsing, printing, the accepted values in `--help` and the message for an unknown value all
// come from one table. Torch-free.
//
// The message for an unknown value always has one form:
//   unknown --dtype 'fp16'; accepted: fp32, bf16, bf16-master, fp64
// where `--dtype` is the table's option, or the caller's `where` (a matrix file's key).
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "spec/bad_input.h"

namespace parity::spec {

template <class E>
struct Named {
  E value;
  const char* name;
};

enum class Case { Exact, Fold };  // Fold: "1F1B" reads as "1f1b"

template <class E>
class Choices {
 public:
  Choices(const char* option, std::initializer_list<Named<E>> entries, Case match = Case::Exact)
      : option_(option), entries_(entries), match_(match) {}

  // The option as a user spells it on the command line, e.g. "--dtype".
  const char* option() const { return option_; }

  // The value named `text`; throws BadInput with unknown_message(where, text) otherwise.
  E parse(const std::string& text) const { return parse(text, option_); }
  E parse(const std::string& text, const std::string& where) const {
    const std::string key = match_ == Case::Fold ? folded(text) : text;
    for (const auto& e : entries_)
      if (key == e.name) return e.value;
    throw BadInput(unknown_message(where, text));
  }

  // The value's name; every value of E that a table lists has one.
  const char* name(E value) const {
    for (const auto& e : entries_)
      if (e.value == value) return e.name;
    return "?";
  }

  std::vector<E> values() const {
    std::vector<E> out;
    for (const auto& e : entries_) out.push_back(e.value);
    return out;
  }

  // "fp32, bf16, bf16-master, fp64": the accepted names in table order.
  std::string names() const {
    std::string out;
    for (const auto& e : entries_) out += (out.empty() ? "" : ", ") + std::string(e.name);
    return out;
  }

  std::string unknown_message(const std::string& where, const std::string& text) const {
    return "unknown " + where + " '" + text + "'; accepted: " + names();
  }

 private:
  static std::string folded(std::string s) {
    for (char& c : s)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
  }

  const char* option_;
  std::vector<Named<E>> entries_;
  Case match_;
};

}  // namespace parity::spec
