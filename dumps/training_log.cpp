#include "dumps/training_log.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>


namespace parity::dumps {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw LogError("log '" + path + "': " + what);
}

std::string strip_colour(const std::string& line) {
  static const std::regex ansi("\x1b\\[[0-9;]*m");
  return line.find('\x1b') == std::string::npos ? line : std::regex_replace(line, ansi, "");
}

// A whole token as a number: decimal, exponent, or nan / inf (a log prints those too).
bool parse_number(const std::string& s, double& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno != ERANGE;
}

bool parse_step(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 12 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  out = std::stoll(s);
  return true;
}

const char* kNumber = "([-+]?(?:[0-9]+\\.?[0-9]*(?:[eE][-+]?[0-9]+)?|nan|inf|NaN|Inf))";

// torchtitan's metrics line.
bool torchtitan_line(const std::string& line, LoggedStep& s, bool& has_norm) {
  if (line.find("step:") == std::string::npos || line.find("loss:") == std::string::npos)
    return false;
  static const std::regex re(std::string("(^|[^a-z_])step:\\s*([0-9]+)\\s+loss:\\s*") + kNumber);
  static const std::regex norm(std::string("grad_norm:\\s*") + kNumber);
  std::smatch m;
  if (!std::regex_search(line, m, re)) return false;
  const std::string before = line.substr(0, static_cast<size_t>(m.position(0)) + m[1].length());
  if (before.size() >= 9 && before.compare(before.size() - 9, 9, "validate ") == 0) return false;
  if (!parse_step(m[2], s.step) || !parse_number(m[3], s.loss)) return false;
  std::smatch n;
  const std::string rest = m.suffix();
  has_norm = std::regex_search(rest, n, norm) && parse_number(n[1], s.grad_norm);
  if (!has_norm) s.grad_norm = kNaN;
  return true;
}

// Megatron-LM's console line.
bool megatron_line(const std::string& line, LoggedStep& s, bool& has_norm) {
  if (line.find("iteration") == std::string::npos || line.find("lm loss:") == std::string::npos)
    return false;
  static const std::regex it("iteration\\s+([0-9]+)\\s*/\\s*[0-9]+");
  static const std::regex loss(std::string("lm loss:\\s*") + kNumber);
  static const std::regex norm(std::string("grad norm:\\s*") + kNumber);
  std::smatch a, b, c;
  if (!std::regex_search(line, a, it) || !std::regex_search(line, b, loss)) return false;
  if (!parse_step(a[1], s.step) || !parse_number(b[1], s.loss)) return false;
  has_norm = std::regex_search(line, c, norm) && parse_number(c[1], s.grad_norm);
  if (!has_norm) s.grad_norm = kNaN;
  return true;
}

// "STEP LOSS [GRAD_NORM]".
bool loss_file_line(const std::string& line, LoggedStep& s, bool& has_norm) {
  std::istringstream in(line);
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
  throw std::runtime_error("not a number: " + v.dump());
}

// parity's metrics line; the hex fields are the exact values.
bool parity_line(const std::string& line, LoggedStep& s) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
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
      const int64_t start = m.at("start_step").get<int64_t>();
      const int64_t every = m.at("step_interval").get<int64_t>();
      if (every <= 0) throw std::runtime_error("step_interval must be positive");
      for (size_t i = 0; i < values.size(); ++i)
        out[start + static_cast<int64_t>(i) * every + 1] = json_number(values[i]);
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
  if (!std::filesystem::is_regular_file(path, ec)) fail(path, "is not a file");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) fail(path, "cannot be read; check its permissions");
  const std::string text = ss.str();
  if (text.find('\0') != std::string::npos)
    fail(path, "holds binary data, not text: give the run's console log or loss file");

  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) fail(path, "is empty: no training steps");
  if (text[first] == '{') {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_discarded() && j.is_object()) return read_golden(path, j);
  }

  // Line by line: every line that is a step in some format, by format.
  struct Seen {
    int64_t count = 0, first_line = 0;
  };
  std::map<std::string, Seen> formats;
  std::vector<std::pair<std::string, LoggedStep>> found;
  std::map<std::string, bool> norms;
  int64_t other = 0, first_other = 0, n = 0;
  std::istringstream lines(text);
  for (std::string raw; std::getline(lines, raw);) {
    ++n;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string line = strip_colour(raw);
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    LoggedStep s;
    s.line = n;
    bool has_norm = false;
    std::string kind;
    const auto lead = line.find_first_not_of(" \t");
    if (line[lead] == '{') {
      if (parity_line(line, s)) {
        kind = "parity";
        has_norm = !std::isnan(s.grad_norm) || line.find("\"grad_norm\"") != std::string::npos;
      }
    } else if (torchtitan_line(line, s, has_norm)) {
      kind = "torchtitan";
    } else if (megatron_line(line, s, has_norm)) {
      kind = "megatron";
    } else if (line[lead] != '#' && loss_file_line(line, s, has_norm)) {
      kind = "loss-file";
    }
    if (kind.empty()) {
      if (line[lead] != '#' && ++other == 1) first_other = n;
      continue;
    }
    auto& f = formats[kind];
    if (f.count++ == 0) f.first_line = n;
    norms[kind] = norms[kind] || has_norm;
    found.push_back({kind, s});
  }
  if (formats.empty())
    fail(path, "no training steps: no torchtitan \"step: N  loss: L\" line, no Megatron "
               "\"iteration N/ M | lm loss: L\" line, no \"STEP LOSS [GRAD_NORM]\" line and no "
               "parity metrics line; give the run's console log or loss file");
  if (formats.size() > 1) {
    std::string what;
    for (const auto& [kind, f] : formats)
      what += (what.empty() ? "" : ", ") + kind + " from line " + std::to_string(f.first_line);
    fail(path, "mixes formats (" + what + "); give one run's log in one format per file");
  }
  const std::string kind = formats.begin()->first;
  // The strict formats hold nothing else (the consoles hold other lines, which are skipped).
  if ((kind == "loss-file" || kind == "parity") && other > 0)
    fail(path, "line " + std::to_string(first_other) + " is not a " +
                   (kind == "parity" ? std::string("parity metrics line")
                                     : std::string("\"STEP LOSS [GRAD_NORM]\" line")) +
                   " though the file is one; remove it");

  TrainingLog log;
  log.path = path;
  log.format = kind;
  log.has_grad_norm = norms[kind];
  std::map<int64_t, LoggedStep> by_step;
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  for (const auto& [k, s] : found) {
    auto [it, fresh] = by_step.insert({s.step, s});
    if (fresh) continue;
    const LoggedStep& was = it->second;
    if (!same(was.loss, s.loss) || !same(was.grad_norm, s.grad_norm))
      fail(path, "step " + std::to_string(s.step) + " is logged twice with different values "
                 "(lines " + std::to_string(was.line) + " and " + std::to_string(s.line) +
                 "): two runs in one file; give each run its own log");
  }
  for (auto& [step, s] : by_step) log.steps.push_back(s);
  return log;
}

}  // namespace parity::dumps
