#include "dumps/training_log.h"

#include "spec/checked.h"
#include "spec/limits.h"
#include "spec/whole_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>


namespace parity::dumps {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw LogError("log '" + path + "': " + what);
}

// The lines are scanned by hand, not with std::regex: libstdc++'s matcher recurses once per
// character a quantifier consumes, so a line of some 30 KB of spaces or digits overflowed the
// stack. Each scanner below reads a line once per candidate keyword and never backs up further,
// so the work is linear in the line's length for any content.

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

size_t skip_digits(std::string_view s, size_t i) {
  while (i < s.size() && is_digit(s[i])) ++i;
  return i;
}

// The line without ANSI colour codes (ESC [ digits-and-semicolons m).
std::string strip_colour(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size();) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      size_t j = i + 2;
      while (j < line.size() && (is_digit(line[j]) || line[j] == ';')) ++j;
      if (j < line.size() && line[j] == 'm') {
        i = j + 1;
        continue;
      }
    }
    out += line[i++];
  }
  return out;
}

// A whole token as a number: decimal, exponent, or nan / inf (a log prints those too).
bool parse_number(const std::string& s, double& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno != ERANGE;
}

bool parse_step(std::string_view s, int64_t& out) {
  if (s.empty() || s.size() > 12 || !std::all_of(s.begin(), s.end(), is_digit)) return false;
  out = std::stoll(std::string(s));
  return true;
}

// The longest number starting at s[i]: [-+]? then digits [. digits] [e [-+] digits], or one of
// nan, inf, NaN, Inf. Returns its end, or i where there is none.
size_t number_end(std::string_view s, size_t i) {
  size_t j = i;
  if (j < s.size() && (s[j] == '-' || s[j] == '+')) ++j;
  if (j < s.size() && is_digit(s[j])) {
    j = skip_digits(s, j);
    if (j < s.size() && s[j] == '.') j = skip_digits(s, j + 1);
    if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
      size_t k = j + 1;
      if (k < s.size() && (s[k] == '-' || s[k] == '+')) ++k;
      if (k < s.size() && is_digit(s[k])) j = skip_digits(s, k);
    }
    return j;
  }
  for (const char* word : {"nan", "inf", "NaN", "Inf"})
    if (s.compare(j, 3, word) == 0) return j + 3;
  return i;
}

// The number after the first `key` (then optional spaces) that is followed by one, parsed.
bool number_after(std::string_view s, std::string_view key, double& out) {
  for (size_t at = s.find(key); at != std::string_view::npos; at = s.find(key, at + 1)) {
    const size_t b = skip_spaces(s, at + key.size()), e = number_end(s, b);
    if (e > b) return parse_number(std::string(s.substr(b, e - b)), out);
  }
  return false;
}

// torchtitan's metrics line: "step: N  loss: L ... grad_norm: G", where "step:" is not the
// tail of a longer word and the line is not a validation line ("validate step: ...").
bool torchtitan_line(std::string_view line, LoggedStep& s, bool& has_norm) {
  if (line.find("step:") == std::string_view::npos || line.find("loss:") == std::string_view::npos)
    return false;
  for (size_t at = line.find("step:"); at != std::string_view::npos; at = line.find("step:", at + 1)) {
    if (at > 0 && ((line[at - 1] >= 'a' && line[at - 1] <= 'z') || line[at - 1] == '_')) continue;
    const size_t step_begin = skip_spaces(line, at + 5), step_end = skip_digits(line, step_begin);
    if (step_end == step_begin) continue;
    const size_t loss_at = skip_spaces(line, step_end);
    if (loss_at == step_end || line.compare(loss_at, 5, "loss:") != 0) continue;
    const size_t loss_begin = skip_spaces(line, loss_at + 5), loss_end = number_end(line, loss_begin);
    if (loss_end == loss_begin) continue;
    // The first such match decides, as a search would.
    if (at >= 9 && line.substr(at - 9, 9) == "validate ") return false;
    if (!parse_step(line.substr(step_begin, step_end - step_begin), s.step) ||
        !parse_number(std::string(line.substr(loss_begin, loss_end - loss_begin)), s.loss))
      return false;
    has_norm = number_after(line.substr(loss_end), "grad_norm:", s.grad_norm);
    if (!has_norm) s.grad_norm = kNaN;
    return true;
  }
  return false;
}

// Megatron-LM's console line: "iteration N/ M | ... lm loss: L | ... grad norm: G".
bool megatron_line(std::string_view line, LoggedStep& s, bool& has_norm) {
  if (line.find("iteration") == std::string_view::npos || line.find("lm loss:") == std::string_view::npos)
    return false;
  bool found = false;
  for (size_t at = line.find("iteration"); at != std::string_view::npos && !found;
       at = line.find("iteration", at + 1)) {
    const size_t b = skip_spaces(line, at + 9), e = skip_digits(line, b);
    if (b == at + 9 || e == b) continue;
    const size_t slash = skip_spaces(line, e);
    if (slash >= line.size() || line[slash] != '/') continue;
    const size_t total = skip_spaces(line, slash + 1);
    if (skip_digits(line, total) == total) continue;
    if (!parse_step(line.substr(b, e - b), s.step)) return false;
    found = true;
  }
  if (!found || !number_after(line, "lm loss:", s.loss)) return false;
  has_norm = number_after(line, "grad norm:", s.grad_norm);
  if (!has_norm) s.grad_norm = kNaN;
  return true;
}

// "STEP LOSS [GRAD_NORM]".
bool loss_file_line(std::string_view line, LoggedStep& s, bool& has_norm) {
  std::istringstream in{std::string(line)};
  std::string a, b, c, extra;
  if (!(in >> a >> b)) return false;
  in >> c >> extra;
  if (!extra.empty() || !parse_step(a, s.step) || !parse_number(b, s.loss)) return false;
  has_norm = !c.empty();
  if (has_norm && !parse_number(c, s.grad_norm)) return false;
  if (!has_norm) s.grad_norm = kNaN;
  return true;
}

double json_number(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return kNaN;
  if (v.is_string()) {
    double d = 0;
    if (parse_number(v.get<std::string>(), d)) return d;
  }
  // The type only: printing the value itself recurses once per level of its nesting.
  throw std::runtime_error(std::string("not a number (a ") + v.type_name() + ")");
}

// parity's metrics line; the hex fields are the exact values.
bool parity_line(std::string_view line, LoggedStep& s) {
  if (spec::json_depth(line) > spec::kMaxJsonDepth) return false;
  const auto j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (!j.is_object() || !j.contains("step") || !j.contains("loss") || !j["step"].is_number_integer())
    return false;
  s.step = j["step"].get<int64_t>();
  auto exact = [&](const char* hex, const char* plain) {
    if (j.contains(hex) && j[hex].is_string()) {
      double d = 0;
      if (parse_number(j[hex].get<std::string>(), d)) return d;
    }
    return j.contains(plain) ? json_number(j[plain]) : kNaN;
  };
  try {
    s.loss = exact("loss_hex", "loss");
    s.grad_norm = exact("grad_norm_hex", "grad_norm");
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Megatron-Core's golden values: metric name -> step -> value.
std::map<int64_t, double> golden_series(const std::string& path, const nlohmann::json& m,
                                        const std::string& key) {
  std::map<int64_t, double> out;
  try {
    const auto& values = m.at("values");
    if (values.is_object()) {
      for (const auto& [k, v] : values.items()) {
        int64_t step = 0;
        if (!parse_step(k, step)) throw std::runtime_error("step '" + k + "' is not a number");
        out[step] = json_number(v);
      }
    } else if (values.is_array()) {
      const auto& first = m.at("start_step");
      const auto& interval = m.at("step_interval");
      if (!first.is_number_integer() || !interval.is_number_integer() ||
          first.get<int64_t>() < 0 || interval.get<int64_t>() <= 0)
        throw std::runtime_error("start_step must be an integer >= 0 and step_interval one > 0");
      const int64_t start = first.get<int64_t>(), every = interval.get<int64_t>();
      for (size_t i = 0; i < values.size(); ++i) {
        // The logged step start + i * every + 1, refused where it does not fit in 64 bits.
        const auto offset = spec::checked_mul(static_cast<int64_t>(i), every);
        const auto step = offset ? spec::checked_add(start, *offset) : std::nullopt;
        if (!step || *step == INT64_MAX)
          throw std::runtime_error("value " + std::to_string(i) + " falls at a step past 2^63 (start_step " +
                                   std::to_string(start) + ", step_interval " + std::to_string(every) + ")");
        out[*step + 1] = json_number(values[i]);
      }
    } else {
      throw std::runtime_error("\"values\" is neither an object nor a list");
    }
  } catch (const std::exception& e) {
    fail(path, "\"" + key + "\" is not in Megatron-Core's golden-values layout ({\"start_step\", "
               "\"end_step\", \"step_interval\", \"values\"}): " + e.what());
  }
  return out;
}

TrainingLog read_golden(const std::string& path, const nlohmann::json& j) {
  TrainingLog log;
  log.path = path;
  log.format = "golden";
  if (!j.contains("lm loss"))
    fail(path, "a JSON document without \"lm loss\": not Megatron-Core golden values; give "
               "golden_values*.json, a console log or a loss file");
  const auto loss = golden_series(path, j["lm loss"], "lm loss");
  if (loss.empty()) fail(path, "\"lm loss\" holds no values: no training steps");
  std::map<int64_t, double> norm;
  for (const char* k : {"grad-norm", "grad norm"})
    if (j.contains(k)) norm = golden_series(path, j[k], k);
  log.has_grad_norm = !norm.empty();
  for (const auto& [step, value] : loss) {
    LoggedStep s;
    s.step = step;
    s.loss = value;
    auto it = norm.find(step);
    s.grad_norm = it == norm.end() ? kNaN : it->second;
    log.steps.push_back(s);
  }
  return log;
}

}  // namespace

TrainingLog read_training_log(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    fail(path, "does not exist; give a training log, loss file or golden-values file");
  const std::string text = spec::read_whole_file(
      path, static_cast<uint64_t>(spec::kMaxTextBytes),
      "cut it to the steps to compare (a step's line is some 100 bytes)",
      [&](const std::string& why) { fail(path, why); });
  if (text.find('\0') != std::string::npos)
    fail(path, "holds binary data, not text: give the run's console log or loss file");

  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) fail(path, "is empty: no training steps");
  if (text[first] == '{') {
    if (spec::json_depth(text) > spec::kMaxJsonDepth)
      fail(path, "holds JSON nested more than " + std::to_string(spec::kMaxJsonDepth) +
                     " deep (golden values nest 3 deep, a metrics line 1); the file is damaged or not a log");
    const auto j = nlohmann::json::parse(text, nullptr, false);
    // One object with a "step" is a metrics file of one step (parity train --steps 1), read
    // line by line below; any other object is golden values.
    if (!j.is_discarded() && j.is_object() && !j.contains("step")) return read_golden(path, j);
  }

  // Line by line: every line that is a step in some format, by format.
  // The formats in name order, as the mixed-format message lists them.
  static const char* const kFormats[] = {"loss-file", "megatron", "parity", "torchtitan"};
  struct Seen {
    int64_t count = 0, first_line = 0;
    bool norm = false;
  };
  Seen formats[4];
  std::vector<LoggedStep> found;
  found.reserve(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1);
  int64_t other = 0, first_other = 0, n = 0;
  std::string uncoloured;
  for (size_t at = 0; at < text.size();) {
    const size_t eol = std::min(text.find('\n', at), text.size());
    std::string_view line(text.data() + at, eol - at);
    at = eol + 1;
    ++n;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\x1b') != std::string_view::npos) {
      uncoloured = strip_colour(line);
      line = uncoloured;
    }
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    LoggedStep s;
    s.line = n;
    bool has_norm = false;
    int kind = -1;  // an index into kFormats
    const auto lead = line.find_first_not_of(" \t");
    if (line[lead] == '{') {
      if (parity_line(line, s)) {
        kind = 2;
        has_norm = !std::isnan(s.grad_norm) || line.find("\"grad_norm\"") != std::string::npos;
      }
    } else if (torchtitan_line(line, s, has_norm)) {
      kind = 3;
    } else if (megatron_line(line, s, has_norm)) {
      kind = 1;
    } else if (line[lead] != '#' && loss_file_line(line, s, has_norm)) {
      kind = 0;
    }
    if (kind < 0) {
      if (line[lead] != '#' && ++other == 1) first_other = n;
      continue;
    }
    auto& f = formats[kind];
    if (f.count++ == 0) f.first_line = n;
    f.norm = f.norm || has_norm;
    found.push_back(s);
  }
  int used = 0, only = 0;
  for (int k = 0; k < 4; ++k)
    if (formats[k].count > 0) ++used, only = k;
  if (used == 0)
    fail(path, "no training steps: no torchtitan \"step: N  loss: L\" line, no Megatron "
               "\"iteration N/ M | lm loss: L\" line, no \"STEP LOSS [GRAD_NORM]\" line and no "
               "parity metrics line; give the run's console log or loss file");
  if (used > 1) {
    std::string what;
    for (int k = 0; k < 4; ++k)
      if (formats[k].count > 0)
        what += (what.empty() ? "" : ", ") + std::string(kFormats[k]) + " from line " +
                std::to_string(formats[k].first_line);
    fail(path, "mixes formats (" + what + "); give one run's log in one format per file");
  }
  const std::string kind = kFormats[only];
  // The strict formats hold nothing else (the consoles hold other lines, which are skipped).
  if ((kind == "loss-file" || kind == "parity") && other > 0)
    fail(path, "line " + std::to_string(first_other) + " is not a " +
                   (kind == "parity" ? std::string("parity metrics line")
                                     : std::string("\"STEP LOSS [GRAD_NORM]\" line")) +
                   " though the file is one; remove it");

  TrainingLog log;
  log.path = path;
  log.format = kind;
  log.has_grad_norm = formats[only].norm;
  // By step, each step once: a stable sort keeps a step's lines in file order, and every
  // repeat must carry its first line's values.
  std::stable_sort(found.begin(), found.end(),
                   [](const LoggedStep& a, const LoggedStep& b) { return a.step < b.step; });
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  log.steps.reserve(found.size());
  for (const auto& s : found) {
    if (log.steps.empty() || log.steps.back().step != s.step) {
      log.steps.push_back(s);
      continue;
    }
    const LoggedStep& was = log.steps.back();
    if (!same(was.loss, s.loss) || !same(was.grad_norm, s.grad_norm))
      fail(path, "step " + std::to_string(s.step) + " is logged twice with different values "
                 "(lines " + std::to_string(was.line) + " and " + std::to_string(s.line) +
                 "): two runs in one file; give each run its own log");
  }
  return log;
}

}  // namespace parity::dumps
