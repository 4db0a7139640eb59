#include "compare/predicted.h"

#include <cctype>
#include <map>
#include <vector>

#include "pipelined/routing.h"

namespace parity::compare {

namespace {

int parse_int(const std::string& key, const std::string& v, int lo, int hi) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || n < lo || n > hi)
    throw LayoutError("--layout " + key + "=" + v + ": give an integer from " +
                      std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<int>(n);
}

}  // namespace

Layout parse_layout(const std::string& spec) {
  Layout l;
  std::map<std::string, std::string> kv;
  size_t pos = 0;
  while (pos < spec.size()) {
    const size_t eq = spec.find('=', pos);
    if (eq == std::string::npos)
      throw LayoutError("--layout '" + spec + "': want key=value pairs, as "
                        "layers=17,block=4,pp=2,vp=2[,split=SPEC]");
    const std::string key = spec.substr(pos, eq - pos);
    size_t end = key == "split" ? spec.size() : spec.find(',', eq);
    if (end == std::string::npos) end = spec.size();
    const std::string value = spec.substr(eq + 1, end - eq - 1);
    if (key != "layers" && key != "block" && key != "pp" && key != "vp" && key != "split")
      throw LayoutError("--layout: unknown key '" + key + "'; the keys are layers, block, pp, vp "
                        "and split (last)");
    if (kv.count(key)) throw LayoutError("--layout: '" + key + "' is given twice");
    kv[key] = value;
    pos = end + 1;
  }
  for (const char* k : {"layers", "block", "pp", "vp"})
    if (!kv.count(k))
      throw LayoutError(std::string("--layout '") + spec + "' lacks " + k +
                        "=; give layers=L,block=B,pp=P,vp=V[,split=SPEC]");
  l.layers = parse_int("layers", kv["layers"], 1, 4096);
  l.block = parse_int("block", kv["block"], 1, l.layers);
  l.pp = parse_int("pp", kv["pp"], 1, 64);
  l.vp = parse_int("vp", kv["vp"], 1, 16);
  if (kv.count("split")) {
    l.split = kv["split"];
    if (l.split.empty()) throw LayoutError("--layout split= is empty; give a split or leave it out");
  }
  return l;
}

int unit_of_name(const std::string& fqn, int layers) {
  if (fqn.rfind("tok_embeddings.", 0) == 0) return -1;
  const std::string p = "layers.";
  if (fqn.rfind(p, 0) == 0) {
    size_t i = p.size();
    int l = 0;
    bool digits = false;
    while (i < fqn.size() && std::isdigit(static_cast<unsigned char>(fqn[i])) && l < 100000) {
      l = 10 * l + (fqn[i] - '0');
      ++i;
      digits = true;
    }
    if (digits && i < fqn.size() && fqn[i] == '.' && l < layers) return l;
  }
  return layers;
}

bool feeds(int unit, int block_index, int layers_per_block) {
  return block_index * layers_per_block > unit;
}

std::set<int> deposited_blocks(int layers, int block, const pipelined::Split& split, int pp) {
  std::set<int> out;
  const auto t = pipelined::make_routing_tables(layers, block, split, pp);
  for (const auto& s : t.stages) out.insert(s.deposits.begin(), s.deposits.end());
  return out;
}

bool Prediction::predicts(const std::string& fqn) const {
  const int unit = unit_of_name(fqn, layers);
  for (int b : deposited)
    if (feeds(unit, b, block)) return true;
  return false;
}

std::string Prediction::describe() const {
  if (deposited.empty()) return "no stage reads a block from its rank's store: nothing may differ";
  std::vector<int> v(deposited.begin(), deposited.end());
  const int last = v.back();
  return "blocks " + pipelined::blocks_text(pipelined::Blocks(deposited.begin(), deposited.end())) +
         " are read from a rank's store: the parameters upstream of block " +
         std::to_string(last) + " (the embedding and layers 0-" + std::to_string(last * block - 1) +
         ") may differ by reduction order";
}

Prediction predict(const Layout& l) {
  const int stages = l.pp * l.vp;
  const auto split = pipelined::split_or_default(l.split, l.layers, stages);
  Prediction p;
  p.layers = l.layers;
  p.block = l.block;
  p.deposited = deposited_blocks(l.layers, l.block, split, l.pp);
  return p;
}

}  // namespace parity::compare
