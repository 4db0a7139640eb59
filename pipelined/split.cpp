#include "pipelined/split.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace parity::pipelined {

namespace {

std::string stage_label(int s, const std::string& text) {
  return "split stage " + std::to_string(s) + (text.empty() ? "" : " ('" + text + "')");
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool parse_int(const std::string& s, int& out) {
  if (s.empty() || s.size() > 6 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c); }))
    return false;  // more than 6 digits is no layer index of any model we build
  out = std::stoi(s);
  return true;
}

}  // namespace

Split::Split(int n_layers, std::vector<std::vector<int>> stages)
    : n_layers_(n_layers), stages_(std::move(stages)) {
  if (stages_.empty()) throw SplitError("a split needs at least one stage");
  int expect = kEmbUnit;  // units must come in order: emb, 0, 1, ..., L-1, head
  for (int s = 0; s < num_stages(); ++s) {
    const auto text = units_text(stages_[s], n_layers_);
    if (stages_[s].empty())
      throw SplitError(stage_label(s, "") + " holds no unit; every stage needs at least one");
    for (int u : stages_[s]) {
      if (u < kEmbUnit || u > n_layers_)
        throw SplitError(stage_label(s, text) + ": layer " + std::to_string(u) +
                         " does not exist (layers 0-" + std::to_string(n_layers_ - 1) + ")");
      if (u != expect) {
        const std::string want = expect == kEmbUnit    ? "emb"
                                 : expect == n_layers_ ? "head"
                                                       : "layer " + std::to_string(expect);
        throw SplitError(stage_label(s, text) + ": expected " + want +
                         " next (units must be contiguous, in order, each once)");
      }
      ++expect;
    }
  }
  if (expect != n_layers_ + 1)
    throw SplitError("split ends before the head: every unit must be placed once");
  if (stages_.front().front() != kEmbUnit)
    throw SplitError(stage_label(0, "") + " must hold the embedding");
  if (stages_.back().back() != n_layers_)
    throw SplitError(stage_label(num_stages() - 1, "") + " must hold the head");
}

int Split::stage_of_unit(int unit) const {
  for (int s = 0; s < num_stages(); ++s)
    for (int u : stages_[s])
      if (u == unit) return s;
  throw SplitError("unit " + std::to_string(unit) + " is on no stage");
}

bool Split::has_layers(int stage) const {
  for (int u : stages_.at(stage))
    if (u >= 0 && u < n_layers_) return true;
  return false;
}
bool Split::has_head(int stage) const { return stages_.at(stage).back() == n_layers_; }
bool Split::has_emb(int stage) const { return stages_.at(stage).front() == kEmbUnit; }

std::vector<int> Split::layers(int stage) const {
  std::vector<int> out;
  for (int u : stages_.at(stage))
    if (u >= 0 && u < n_layers_) out.push_back(u);
  return out;
}

std::string Split::units_text(const std::vector<int>& units, int n_layers) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < units.size()) {
    const int u = units[i];
    if (u == kEmbUnit) {
      parts.push_back("emb");
      ++i;
    } else if (u == n_layers) {
      parts.push_back("head");
      ++i;
    } else {
      size_t j = i;
      while (j + 1 < units.size() && units[j + 1] == units[j] + 1 && units[j + 1] < n_layers) ++j;
      parts.push_back(j == i ? std::to_string(u)
                             : std::to_string(u) + "-" + std::to_string(units[j]));
      i = j + 1;
    }
  }
  std::string out;
  for (size_t k = 0; k < parts.size(); ++k) out += (k ? "," : "") + parts[k];
  return out;
}

std::string Split::spec() const {
  std::string out;
  for (int s = 0; s < num_stages(); ++s) out += (s ? "|" : "") + units_text(stages_[s], n_layers_);
  return out;
}

Split default_split(int n_layers, int num_stages) {
  if (num_stages < 1) throw SplitError("the number of stages (pp x vp) must be at least 1");
  const int effective = n_layers + 2;
  if (num_stages > effective)
    throw SplitError(std::to_string(num_stages) + " stages for " + std::to_string(n_layers) +
                     " layers: at most " + std::to_string(effective) +
                     " stages (the layers plus the embedding and the head) can each hold a unit");
  const int per = effective / num_stages, extra = effective % num_stages;
  std::vector<std::vector<int>> stages(num_stages);
  int next_layer = 0;
  for (int s = 0; s < num_stages; ++s) {
    int budget = per + (s < extra ? 1 : 0);
    if (s == 0) {
      stages[s].push_back(kEmbUnit);
      --budget;
    }
    if (s == num_stages - 1) --budget;  // the head weighs one layer
    for (int k = 0; k < budget && next_layer < n_layers; ++k) stages[s].push_back(next_layer++);
    if (s == num_stages - 1) {
      while (next_layer < n_layers) stages[s].push_back(next_layer++);
      stages[s].push_back(n_layers);
    }
  }
  return Split(n_layers, std::move(stages));
}

Split parse_split(const std::string& spec, int n_layers, int num_stages) {
  std::vector<std::string> stage_texts;
  {
    std::stringstream ss(spec);
    std::string part;
    while (std::getline(ss, part, '|')) stage_texts.push_back(trim(part));
    if (!spec.empty() && spec.back() == '|') stage_texts.push_back("");
  }
  if (stage_texts.empty()) throw SplitError("empty --split; write stages like 'emb,0-1|2-4|head'");
  std::vector<std::vector<int>> stages(stage_texts.size());
  for (size_t s = 0; s < stage_texts.size(); ++s) {
    const auto& text = stage_texts[s];
    if (text.empty())
      throw SplitError(stage_label(static_cast<int>(s), "") + " is empty; every stage needs a unit");
    std::stringstream items(text);
    std::string item;
    while (std::getline(items, item, ',')) {
      item = trim(item);
      int a = 0, b = 0;
      const auto dash = item.find('-');
      if (item == "emb") {
        stages[s].push_back(kEmbUnit);
      } else if (item == "head") {
        stages[s].push_back(n_layers);
      } else if (dash == std::string::npos && parse_int(item, a)) {
        if (a >= n_layers)
          throw SplitError(stage_label(static_cast<int>(s), text) + ": layer " + item +
                           " does not exist (layers 0-" + std::to_string(n_layers - 1) +
                           "; write 'head' for the head)");
        stages[s].push_back(a);
      } else if (dash != std::string::npos && parse_int(item.substr(0, dash), a) &&
                 parse_int(item.substr(dash + 1), b)) {
        if (b < a)
          throw SplitError(stage_label(static_cast<int>(s), text) + ": range " + item +
                           " is descending; write A-B with A <= B");
        if (b >= n_layers)
          throw SplitError(stage_label(static_cast<int>(s), text) + ": range " + item +
                           " runs past the last layer " + std::to_string(n_layers - 1));
        for (int u = a; u <= b; ++u) stages[s].push_back(u);
      } else {
        throw SplitError(stage_label(static_cast<int>(s), text) + ": cannot read '" + item +
                         "'; use emb, head, a layer N or a range A-B");
      }
    }
  }
  if (stages.front().empty() || stages.front().front() != kEmbUnit)
    stages.front().insert(stages.front().begin(), kEmbUnit);
  if (stages.back().back() != n_layers) stages.back().push_back(n_layers);
  if (num_stages > 0 && static_cast<int>(stages.size()) != num_stages)
    throw SplitError("--split has " + std::to_string(stages.size()) + " stages but pp x vp is " +
                     std::to_string(num_stages) + "; give one '|'-separated entry per stage");
  return Split(n_layers, std::move(stages));
}

Split split_or_default(const std::string& spec, int n_layers, int num_stages) {
  return spec.empty() ? default_split(n_layers, num_stages)
                      : parse_split(spec, n_layers, num_stages);
}

}  // namespace parity::pipelined
