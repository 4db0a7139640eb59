// The layout diagram of a pipelined cell (html_sections.h), drawn from `parity layout --json`:
// stages[] {stage, rank, units, commits, deposits, collects[{block, from}], ...}. A stage that
// reads a block from its rank's store deposits that block's gradient; the block's owner (the
// stage listing {block, from} in its collects) adds it in. Owner and depositor share a rank,
// so the deposit arcs stay above their lane.
#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "reports/html_sections.h"
#include "reports/svg.h"

namespace parity::reports::html {
namespace {

using nlohmann::json;
using svg::escape;

struct StageBox {
  int stage = 0, rank = 0, column = 0;
  std::vector<std::string> lines;  // the first is the title
  double x = 0, y = 0;             // top left
};

// Blocks as compact ranges with a prefix: {0,1,2,5} -> "b0-2, b5".
std::string blocks(std::vector<int> b, const std::string& prefix) {
  if (b.empty()) return "-";
  std::sort(b.begin(), b.end());
  std::string out;
  for (size_t i = 0; i < b.size();) {
    size_t j = i;
    while (j + 1 < b.size() && b[j + 1] == b[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += prefix + std::to_string(b[i]);
    if (j > i) out += "-" + std::to_string(b[j]);
    i = j + 1;
  }
  return out;
}

std::string num(double v) { return svg::fixed(v, 1); }

constexpr int kMaxArcs = 8;  // deposit arcs per lane, beyond which none are drawn

}  // namespace

std::string layout_svg(const json& layout, bool cached) {
  const json& stages = layout.at("stages");
  std::vector<StageBox> boxes;
  std::map<int, size_t> by_stage;  // stage -> index into boxes
  // (depositing stage, owner) -> blocks, from the owners' collects.
  std::map<std::pair<int, int>, std::vector<int>> deposits;
  int ranks = 0;
  for (const json& st : stages) {
    StageBox b;
    b.stage = st.at("stage").get<int>();
    b.rank = st.at("rank").get<int>();
    if (b.stage < 0 || b.rank < 0 || b.rank >= static_cast<int>(stages.size()))
      throw std::invalid_argument("stage " + std::to_string(b.stage) + " has rank " +
                                  std::to_string(b.rank) + ", outside 0.." +
                                  std::to_string(stages.size() - 1));
    ranks = std::max(ranks, b.rank + 1);
    b.lines.push_back("S" + std::to_string(b.stage) + " " + st.at("units").get<std::string>());
    b.lines.push_back("commits " + blocks(st.value("commits", std::vector<int>{}), "b"));
    if (cached)  // the naive transport carries the whole stack back: nothing is deposited
      for (const json& c : st.value("collects", json::array()))
        deposits[{c.at("from").get<int>(), b.stage}].push_back(c.at("block").get<int>());
    by_stage[b.stage] = boxes.size();
    boxes.push_back(std::move(b));
  }
  // Each stage's deposits, by owner; blocks no owner collects are listed as such.
  for (auto& b : boxes) {
    std::vector<int> listed;
    for (const auto& [key, blks] : deposits)
      if (key.first == b.stage) {
        b.lines.push_back("deposits " + blocks(blks, "db") + " \u2192 S" +
                          std::to_string(key.second));
        listed.insert(listed.end(), blks.begin(), blks.end());
      }
    if (!cached) continue;
    const json& st = stages.at(by_stage[b.stage]);
    std::vector<int> orphan;
    for (int blk : st.value("deposits", std::vector<int>{}))
      if (std::find(listed.begin(), listed.end(), blk) == listed.end()) orphan.push_back(blk);
    if (!orphan.empty()) b.lines.push_back("deposits " + blocks(orphan, "db") + " \u2192 ?");
  }

  // Columns: a rank's stages in stage order.
  std::vector<int> per_rank(static_cast<size_t>(ranks), 0);
  std::vector<StageBox*> order;
  for (auto& b : boxes) order.push_back(&b);
  std::sort(order.begin(), order.end(),
            [](const StageBox* a, const StageBox* b) { return a->stage < b->stage; });
  size_t max_lines = 2, max_chars = 10;
  int columns = 1;
  for (StageBox* b : order) {
    b->column = per_rank[static_cast<size_t>(b->rank)]++;
    columns = std::max(columns, b->column + 1);
    max_lines = std::max(max_lines, b->lines.size());
    for (const auto& l : b->lines) max_chars = std::max(max_chars, l.size());
  }

  // Deposit arcs are drawn above their lane, unless the lane has more than kMaxArcs of them
  // (deep interleaving: pp2 x vp8 has 28), which would merge into one band: its boxes list
  // the deposits. Without any arc the lanes close up.
  std::vector<int> arcs_in_lane(static_cast<size_t>(ranks), 0);
  for (const auto& entry : deposits) {
    auto from = by_stage.find(entry.first.first);
    if (from != by_stage.end()) ++arcs_in_lane[static_cast<size_t>(boxes[from->second].rank)];
  }
  const bool arcs = std::any_of(arcs_in_lane.begin(), arcs_in_lane.end(),
                                [](int n) { return n > 0 && n <= kMaxArcs; });

  const double label_w = 62, arc_space = arcs ? 36 : 12, gap = 30, line_h = 14;
  const double box_w = std::max(120.0, 6.3 * static_cast<double>(max_chars) + 14);
  const double box_h = line_h * static_cast<double>(max_lines) + 10;
  const int width = static_cast<int>(label_w + columns * (box_w + gap) + 6);
  const int height = static_cast<int>(ranks * (arc_space + box_h) + 6);
  for (auto& b : boxes) {
    b.x = label_w + b.column * (box_w + gap);
    b.y = b.rank * (arc_space + box_h) + arc_space;
  }

  std::string s;
  char open[200];
  std::snprintf(open, sizeof open,
                "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
                "font-size=\"11\">\n",
                width, height, width, height);
  s += open;
  s += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  for (int r = 0; r < ranks; ++r) {
    double y = r * (arc_space + box_h);
    s += "<rect x=\"0\" y=\"" + num(y + 4) + "\" width=\"" + std::to_string(width) +
         "\" height=\"" + num(arc_space + box_h - 2) + "\" fill=\"" +
         (r % 2 ? "#f7f7f7" : "#eef3f8") + "\"/>\n";
    s += "<text x=\"6\" y=\"" + num(y + arc_space + box_h / 2 + 4) +
         "\" font-weight=\"bold\">rank " + std::to_string(r) + "</text>\n";
  }
  // Deposit arcs: from the depositor's top edge up into the lane's gap and down onto the
  // owner's top edge, with an arrowhead at the owner.
  for (const auto& [key, blks] : deposits) {
    auto from = by_stage.find(key.first), to = by_stage.find(key.second);
    if (from == by_stage.end() || to == by_stage.end()) continue;
    const StageBox& a = boxes[from->second];
    const StageBox& b = boxes[to->second];
    if (arcs_in_lane[static_cast<size_t>(a.rank)] > kMaxArcs) continue;
    int dist = std::abs(a.column - b.column);
    double h = std::min(14.0 + 10.0 * (dist - 1), arc_space + 4);
    double ax = a.x + box_w / 2 - 6, bx = b.x + box_w / 2 + 6 * std::min(dist, 4);
    double ay = a.y, by = b.y;
    s += "<path d=\"M" + num(ax) + "," + num(ay) + " C" + num(ax) + "," + num(ay - h) + " " +
         num(bx) + "," + num(by - h) + " " + num(bx) + "," + num(by) +
         "\" fill=\"none\" stroke=\"#b35900\" stroke-width=\"1.2\"/>\n";
    s += "<polygon points=\"" + num(bx - 4) + "," + num(by - 7) + " " + num(bx + 4) + "," +
         num(by - 7) + " " + num(bx) + "," + num(by) + "\" fill=\"#b35900\"/>\n";
  }
  for (const auto& b : boxes) {
    s += "<rect x=\"" + num(b.x) + "\" y=\"" + num(b.y) + "\" width=\"" + num(box_w) +
         "\" height=\"" + num(box_h) + "\" rx=\"4\" fill=\"#fff\" stroke=\"#0072b2\"/>\n";
    for (size_t i = 0; i < b.lines.size(); ++i) {
      // The title bold, deposits in the arcs' colour.
      const char* style = i == 0                                 ? " font-weight=\"bold\""
                          : b.lines[i].rfind("deposits", 0) == 0 ? " fill=\"#b35900\""
                                                                 : "";
      s += "<text x=\"" + num(b.x + 7) + "\" y=\"" + num(b.y + 15 + line_h * i) + "\"" + style +
           ">" + escape(b.lines[i]) + "</text>\n";
    }
  }
  return s + "</svg>\n";
}

std::string layout_section(const MatrixResult& r) {
  std::string s;
  for (const auto& c : r.cells) {
    if (c.layout.is_null()) continue;
    s += "<h3>" + escape(c.cell.name) + "</h3>\n";
    try {
      const bool cached = c.cell.cache == spec::Cache::On;
      std::string diagram = layout_svg(c.layout, cached);
      const json& l = c.layout;
      s += "<p>pp " + std::to_string(l.value("pp", 0)) + " x vp " +
           std::to_string(l.value("vp", 0)) + ", " + std::to_string(l.at("stages").size()) +
           " stages, split <code>" + escape(l.value("split", std::string("?"))) + "</code></p>\n";
      std::string caption =
          std::string(cached ? "" : "Naive transport (cache off): the whole stack travels on every "
                                    "hop, forward and back, and nothing is deposited. ") +
          "One lane per rank, its stages left to right in stage order. b<k>: a block of the "
          "residual stack, committed by the stage that lists it; db<k>: its gradient, which a "
          "stage that read the block from its rank's store deposits to the owner (the arc's "
          "arrow; lanes with more than " +
          std::to_string(kMaxArcs) + " deposit pairs list them in the boxes only).";
      if (l.contains("volume") && l["volume"].is_object()) {
        const json& v = l["volume"];
        caption += " Stack entries per micro-batch, forward (backward carries the same): naive " +
                   std::to_string(v.value("naive", 0)) + ", cached " +
                   std::to_string(v.value("cached", 0)) + "; peak per hop naive " +
                   std::to_string(v.value("naive_peak", 0)) + ", cached " +
                   std::to_string(v.value("cached_peak", 0)) + ".";
      }
      s += "<figure>\n" + diagram + "<figcaption>" + escape(caption) + "</figcaption>\n</figure>\n";
    } catch (const std::exception& e) {  // json::exception or a rank out of range
      s += "<p>The layout of " + escape(c.cell.name) + " cannot be drawn: " + escape(e.what()) +
           "</p>\n";
    }
  }
  return s.empty() ? s : "<h2>Pipeline layouts</h2>\n" + s;
}

}  // namespace parity::reports::html
