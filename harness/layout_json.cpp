#include "harness/layout_json.h"

#include "pipelined/routing.h"
#include "pipelined/split.h"

namespace parity::harness {

nlohmann::json layout_json(int layers, int block, int pp, int vp, const std::string& split_spec) {
  const auto split = pipelined::split_or_default(split_spec, layers, pp * vp);
  const auto t = pipelined::make_routing_tables(layers, block, split, pp);
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& r : t.stages) {
    nlohmann::json collects = nlohmann::json::array();
    for (const auto& d : r.collects) collects.push_back({{"block", d.block}, {"from", d.from_stage}});
    stages.push_back({{"stage", r.stage},
                      {"rank", r.rank},
                      {"units", pipelined::Split::units_text(split.units(r.stage), layers)},
                      {"commits", r.commits},
                      {"held_at_entry", r.held_at_entry},
                      {"sends_cached", r.send_cached},
                      {"sends_naive", r.send_naive},
                      {"deposits", r.deposits},
                      {"collects", collects}});
  }
  return {{"layers", layers},
          {"block", block},
          {"pp", pp},
          {"vp", vp},
          {"split", split.spec()},
          {"stages", stages},
          {"volume",
           {{"option1", t.volume.option1},
            {"naive", t.volume.naive},
            {"cached", t.volume.cached},
            {"naive_peak", t.volume.naive_peak},
            {"cached_peak", t.volume.cached_peak}}}};
}

}  // namespace parity::harness
