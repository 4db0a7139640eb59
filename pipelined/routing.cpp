#include "pipelined/routing.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <stdexcept>

namespace parity::pipelined {

namespace {

Blocks minus(const Blocks& a, const std::set<int>& b) {
  Blocks out;
  for (int x : a)
    if (!b.count(x)) out.push_back(x);
  return out;
}

Blocks intersect(const Blocks& a, const Blocks& b) {
  Blocks out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

int StageRoute::deposits_expected(int block) const {
  return static_cast<int>(std::count_if(collects.begin(), collects.end(),
                                        [block](const Deposit& d) { return d.block == block; }));
}

RoutingTables make_routing_tables(int n_layers, int lpb, const Split& split, int pp) {
  if (split.n_layers() != n_layers)
    throw std::invalid_argument("routing tables: the split is for " +
                                std::to_string(split.n_layers()) + " layers, not " +
                                std::to_string(n_layers));
  if (lpb < 1) throw std::invalid_argument("routing tables: the block size must be at least 1");
  if (pp < 1) throw std::invalid_argument("routing tables: pp must be at least 1");
  RoutingTables t;
  t.n_layers = n_layers;
  t.lpb = lpb;
  t.pp = pp;
  t.split = split;
  const int S = split.num_stages();
  if (S % pp != 0)
    throw std::invalid_argument("routing tables: " + std::to_string(S) +
                                " stages do not divide over pp " + std::to_string(pp));
  t.vp = S / pp;
  t.stages.resize(S);

  Blocks accumulated;
  std::vector<std::set<int>> held(pp);
  for (int s = 0; s < S; ++s) {
    auto& r = t.stages[s];
    r.stage = s;
    r.rank = t.rank_of(s);
    for (int l : split.layers(s))
      if (l % lpb == 0) r.commits.push_back(l / lpb);
    r.entry = accumulated;
    r.out = accumulated;
    r.out.insert(r.out.end(), r.commits.begin(), r.commits.end());
    accumulated = r.out;
    r.held_at_entry.assign(held[r.rank].begin(), held[r.rank].end());
    r.stores = minus(r.out, held[r.rank]);
    for (int b : r.out) held[r.rank].insert(b);
    if (split.has_layers(s) || split.has_head(s)) r.reads = r.entry;
    r.deposits = intersect(r.reads, r.held_at_entry);
    if (s + 1 < S) {
      r.send_naive = r.out;
      r.send_cached = minus(r.out, held[t.rank_of(s + 1)]);
    }
    if (s > 0) {
      r.recv_naive = t.stages[s - 1].send_naive;
      r.recv_cached = t.stages[s - 1].send_cached;
    }
  }
  // Each deposit goes to the stage on the reader's rank that stored the block.
  for (int s = 0; s < S; ++s) {
    for (int b : t.stages[s].deposits) {
      int owner = -1;
      for (int o = t.stages[s].rank; o < s; o += pp)
        if (std::binary_search(t.stages[o].stores.begin(), t.stages[o].stores.end(), b)) {
          owner = o;
          break;
        }
      if (owner < 0)
        throw std::logic_error("routing tables: block " + std::to_string(b) + " read by stage " +
                               std::to_string(s) + " from the store has no owner");
      t.stages[owner].collects.push_back({b, s});
    }
  }
  // Volume.
  const int B = t.n_blocks();
  for (int b = 0; b < B; ++b) {
    std::set<int> ranks;
    int producer_rank = -1;
    for (const auto& r : t.stages) {
      if (std::binary_search(r.commits.begin(), r.commits.end(), b)) producer_rank = r.rank;
      if (std::binary_search(r.entry.begin(), r.entry.end(), b)) ranks.insert(r.rank);
    }
    ranks.erase(producer_rank);
    t.volume.option1 += static_cast<int64_t>(ranks.size());
  }
  for (const auto& r : t.stages) {
    t.volume.naive += static_cast<int64_t>(r.send_naive.size());
    t.volume.cached += static_cast<int64_t>(r.send_cached.size());
    t.volume.naive_peak = std::max<int64_t>(t.volume.naive_peak, r.send_naive.size());
    t.volume.cached_peak = std::max<int64_t>(t.volume.cached_peak, r.send_cached.size());
  }
  return t;
}

int64_t entry_bytes(int64_t rows, int64_t tokens, int64_t dim, int64_t element_size) {
  return rows * tokens * dim * element_size;
}

std::string blocks_text(const Blocks& blocks, const char* prefix) {
  // Block 0 is the embedding output "e"; block b is "x<b*lpb>" in the seed's notation, but the
  // tables print plain block numbers so they hold for any block size.
  std::string out = "[";
  for (size_t i = 0; i < blocks.size(); ++i)
    out += (i ? ", " : "") + std::string(prefix) + std::to_string(blocks[i]);
  return out + "]";
}

std::string format_tables(const RoutingTables& t) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "%d layers, blocks of %d (%d stack entries), %d stages, pp %d x vp %d, split %s\n"
                "entries are block numbers: b0 is the embedding output, b<k> the sum of block "
                "k-1, committed at layer k*%d\n\n",
                t.n_layers, t.lpb, t.n_blocks(), static_cast<int>(t.stages.size()), t.pp, t.vp,
                t.split.spec().c_str(), t.lpb);
  out += line;
  out += "forward\n";
  std::snprintf(line, sizeof line, "%-14s %-12s %-12s %-20s %-20s %-20s\n", "stage (r, v)",
                "units", "commits", "recv (no cache)", "recv (cache)", "already held");
  out += line;
  for (const auto& r : t.stages) {
    const std::string id = "s" + std::to_string(r.stage) + " (r" + std::to_string(r.rank) +
                           ", v" + std::to_string(r.stage / t.pp) + ")";
    std::snprintf(line, sizeof line, "%-14s %-12s %-12s %-20s %-20s %-20s\n", id.c_str(),
                  Split::units_text(t.split.units(r.stage), t.n_layers).c_str(),
                  blocks_text(r.commits, "b").c_str(),
                  r.stage ? blocks_text(r.recv_naive, "b").c_str() : "-",
                  r.stage ? blocks_text(r.recv_cached, "b").c_str() : "-",
                  blocks_text(r.held_at_entry, "b").c_str());
    out += line;
  }
  out += "\nbackward (gradients arriving from the next stage; deposits and collections, cache on)\n";
  std::snprintf(line, sizeof line, "%-14s %-20s %-20s %-20s %s\n", "stage (r, v)",
                "recv (no cache)", "recv (cache)", "deposits", "collects");
  out += line;
  for (int s = static_cast<int>(t.stages.size()) - 1; s >= 0; --s) {
    const auto& r = t.stages[s];
    const std::string id = "s" + std::to_string(r.stage) + " (r" + std::to_string(r.rank) +
                           ", v" + std::to_string(r.stage / t.pp) + ")";
    std::string collects;
    std::vector<int> from;
    for (const auto& d : r.collects)
      if (std::find(from.begin(), from.end(), d.from_stage) == from.end())
        from.push_back(d.from_stage);
    std::sort(from.begin(), from.end());
    for (int f : from) {
      Blocks bs;
      for (const auto& d : r.collects)
        if (d.from_stage == f) bs.push_back(d.block);
      collects += (collects.empty() ? "" : ", ") + ("s" + std::to_string(f) + " " +
                                                    blocks_text(bs, "db"));
    }
    std::snprintf(line, sizeof line, "%-14s %-20s %-20s %-20s %s\n", id.c_str(),
                  r.send_naive.empty() && s + 1 == static_cast<int>(t.stages.size())
                      ? "-"
                      : blocks_text(r.send_naive, "db").c_str(),
                  s + 1 == static_cast<int>(t.stages.size()) ? "-"
                                                             : blocks_text(r.send_cached, "db").c_str(),
                  blocks_text(r.deposits, "db").c_str(), collects.empty() ? "-" : collects.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line,
                "\nstack entries per micro-batch, forward (backward carries the same): option 1 "
                "%lld, naive %lld, cached %lld; peak per hop: naive %lld, cached %lld\n",
                static_cast<long long>(t.volume.option1), static_cast<long long>(t.volume.naive),
                static_cast<long long>(t.volume.cached),
                static_cast<long long>(t.volume.naive_peak),
                static_cast<long long>(t.volume.cached_peak));
  out += line;
  return out;
}

void check_loop_map(const std::vector<int>& stage_to_rank, int pp, const std::string& schedule) {
  for (size_t s = 0; s < stage_to_rank.size(); ++s)
    if (stage_to_rank[s] != static_cast<int>(s) % pp)
      throw std::invalid_argument(
          "--cache on needs the loop stage->rank map (stage s on rank s % pp), but schedule " +
          schedule + " puts stage " + std::to_string(s) + " on rank " +
          std::to_string(stage_to_rank[s]) + " (loop: rank " + std::to_string(s % pp) +
          "); use --cache off or a loop-style schedule");
}

}  // namespace parity::pipelined
