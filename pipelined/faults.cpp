#include "pipelined/faults.h"

#include <map>
#include <sstream>
#include <stdexcept>

namespace parity::pipelined {

namespace {
const std::map<std::string, FaultKind>& kinds() {
  static const std::map<std::string, FaultKind> k = {
      {"drop-deposit", FaultKind::DropDeposit},   {"duplicate-deposit", FaultKind::DuplicateDeposit},
      {"misroute", FaultKind::Misroute},          {"skip-collect", FaultKind::SkipCollect},
      {"stale-block", FaultKind::StaleBlock}};
  return k;
}
}  // namespace

std::string Fault::str() const {
  std::string name;
  for (const auto& [n, k] : kinds())
    if (k == kind) name = n;
  return name + ":block=" + std::to_string(block) + ",stage=" + std::to_string(stage) +
         (mb >= 0 ? ",mb=" + std::to_string(mb) : "");
}

Fault parse_fault(const std::string& spec) {
  const std::string usage =
      "; write KIND:block=B,stage=S[,mb=M] with KIND one of drop-deposit, duplicate-deposit, "
      "misroute, skip-collect, stale-block";
  const auto colon = spec.find(':');
  if (colon == std::string::npos)
    throw std::invalid_argument("--inject '" + spec + "': no ':'" + usage);
  auto it = kinds().find(spec.substr(0, colon));
  if (it == kinds().end())
    throw std::invalid_argument("--inject '" + spec + "': unknown kind '" + spec.substr(0, colon) +
                                "'" + usage);
  Fault f;
  f.kind = it->second;
  bool have_block = false, have_stage = false;
  std::stringstream ss(spec.substr(colon + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    int value = 0;
    try {
      if (eq == std::string::npos) throw std::invalid_argument("no value");
      size_t used = 0;
      value = std::stoi(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1 || value < 0) throw std::invalid_argument("bad value");
    } catch (const std::exception&) {
      throw std::invalid_argument("--inject '" + spec + "': cannot read '" + item + "'" + usage);
    }
    if (key == "block") {
      f.block = value;
      have_block = true;
    } else if (key == "stage") {
      f.stage = value;
      have_stage = true;
    } else if (key == "mb") {
      f.mb = value;
    } else {
      throw std::invalid_argument("--inject '" + spec + "': unknown key '" + key + "'" + usage);
    }
  }
  if (!have_block || !have_stage)
    throw std::invalid_argument("--inject '" + spec + "': block and stage are required" + usage);
  return f;
}

}  // namespace parity::pipelined
