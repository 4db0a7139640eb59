#include "reference/grad_faults.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include "spec/numbers.h"

namespace parity::reference {

namespace {

const char* const kUsage =
    "; write drop-microbatch:mb=M, scale-grads:factor=F, zero-grad:param=FQN or "
    "swap-grads:a=FQN,b=FQN";

// The key=value items after the kind, each key at most once.
std::map<std::string, std::string> items(const std::string& spec, const std::string& rest) {
  std::map<std::string, std::string> out;
  std::stringstream ss(rest);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size() ||
        !out.emplace(item.substr(0, eq), item.substr(eq + 1)).second)
      throw std::invalid_argument("--inject '" + spec + "': cannot read '" + item + "'" + kUsage);
  }
  return out;
}

const std::string& need(const std::map<std::string, std::string>& kv, const std::string& key,
                        const std::string& spec) {
  auto it = kv.find(key);
  if (it == kv.end())
    throw std::invalid_argument("--inject '" + spec + "': no " + key + "=" + kUsage);
  return it->second;
}

}  // namespace

bool GradFaults::drops(int microbatch) const {
  return std::find(drop_microbatches.begin(), drop_microbatches.end(), microbatch) !=
         drop_microbatches.end();
}

bool is_grad_fault(const std::string& spec) {
  const std::string kind = spec.substr(0, spec.find(':'));
  return kind == "drop-microbatch" || kind == "scale-grads" || kind == "zero-grad" ||
         kind == "swap-grads";
}

void parse_grad_fault(const std::string& spec, GradFaults& f) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos || !is_grad_fault(spec))
    throw std::invalid_argument("--inject '" + spec + "': not a gradient fault" + kUsage);
  const std::string kind = spec.substr(0, colon);
  const auto kv = items(spec, spec.substr(colon + 1));
  const size_t keys = kind == "swap-grads" ? 2 : 1;
  if (kv.size() != keys)
    throw std::invalid_argument("--inject '" + spec + "': " + kind + " takes " +
                                std::to_string(keys) + " item(s)" + kUsage);
  if (kind == "drop-microbatch") {
    const std::string& mb = need(kv, "mb", spec);
    const std::string problem = spec::integer_problem(mb, 0, 1'000'000);
    if (!problem.empty())
      throw std::invalid_argument("--inject '" + spec + "': mb " + problem);
    f.drop_microbatches.push_back(std::stoi(mb));
  } else if (kind == "scale-grads") {
    const std::string& x = need(kv, "factor", spec);
    const std::string problem = spec::real_problem(x, -1e6, 1e6, false);
    if (!problem.empty() || std::stod(x) == 0)
      throw std::invalid_argument("--inject '" + spec + "': factor " +
                                  (problem.empty() ? "0 zeroes every gradient; give a non-zero "
                                                     "number"
                                                   : problem));
    f.scale *= std::stod(x);
  } else if (kind == "zero-grad") {
    f.zero.push_back(need(kv, "param", spec));
  } else {
    const std::string& a = need(kv, "a", spec);
    const std::string& b = need(kv, "b", spec);
    if (a == b)
      throw std::invalid_argument("--inject '" + spec + "': a and b are the same parameter");
    f.swap.emplace_back(a, b);
  }
}

}  // namespace parity::reference
