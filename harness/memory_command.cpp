#include "harness/memory_command.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "dumps/pickle_writer.h"
#include "dumps/temp_files.h"
#include "harness/errors.h"
#include "harness/run.h"
#include "harness/validate.h"
#include "kernels/attn_res.h"
#include "kernels/config.h"
#include "kernels/precision.h"
#include "reports/svg.h"

namespace parity::harness {

namespace {

using kernels::MemCategory;
using kernels::MemoryEvent;
using kernels::MemoryMark;
constexpr int kCats = kernels::kMemCategories;

MemCategory cat(int i) { return static_cast<MemCategory>(i); }
const char* cat_name(int i) { return kernels::mem_category_name(cat(i)); }

class NoObserver final : public kernels::StepObserver {
 public:
  void on_step(const kernels::StepRecord&) override {}
};

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

int64_t sum_of(const std::array<int64_t, kCats>& live, bool activations) {
  int64_t s = 0;
  for (int i = 0; i < kCats; ++i)
    if (!activations || kernels::is_activation(cat(i))) s += live[static_cast<size_t>(i)];
  return s;
}

int64_t of(const std::array<int64_t, kCats>& live, MemCategory c) {
  return live[static_cast<size_t>(c)];
}

bool pipelined_run(const MemoryReport& r) { return r.run.trainer == spec::Trainer::Pipelined; }

// The live bytes a mark shows for its place: the whole process (reference), or its rank's.
const std::array<int64_t, kCats>& shown(const MemoryReport& r, const MemoryMark& m) {
  return pipelined_run(r) ? m.live_on_rank : m.live;
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// The marks after each layer's forward (or backward) of micro-batch 0.
std::vector<const MemoryMark*> layer_marks(const MemoryReport& r, bool forward) {
  std::vector<const MemoryMark*> out;
  for (const auto& m : r.marks)
    if (m.place.microbatch == 0 && m.forward == forward &&
        starts_with(m.label, forward ? "forward layer " : "backward layer "))
      out.push_back(&m);
  return out;
}

int64_t other_activations(const std::array<int64_t, kCats>& live) {
  return of(live, MemCategory::Head) + of(live, MemCategory::Embedding);
}

// For micro-batch 0's forward allocations of each activation category: the bytes its forward
// freed again (temporaries), the bytes freed before each later mark (the interval ending at
// the mark), and the bytes never freed in the step.
struct Releases {
  std::array<int64_t, kCats> temporaries{};
  std::vector<std::string> labels;                     // later marks that saw a release, in order
  std::vector<std::array<int64_t, kCats>> freed;       // by label
  std::array<int64_t, kCats> kept{};
};

Releases releases(const MemoryReport& r) {
  // The last forward mark of micro-batch 0 before its first backward mark (the end of its
  // forward, head and loss included): allocations and frees before it are its forward's.
  size_t forward_end = r.events.size();
  for (const auto& m : r.marks) {
    if (m.place.microbatch != 0) continue;
    if (!m.forward) break;
    forward_end = m.events;
  }
  std::vector<int64_t> freed_at(r.events.size(), -1);  // alloc index -> free event index
  for (size_t i = 0; i < r.events.size(); ++i)
    if (r.events[i].kind == MemoryEvent::Kind::Free)
      freed_at.at(r.events[i].alloc_event) = static_cast<int64_t>(i);
  // The category a block held last: a retag moves it.
  std::vector<MemCategory> final_cat(r.events.size(), MemCategory::Other);
  for (size_t i = 0; i < r.events.size(); ++i) {
    const auto& e = r.events[i];
    if (e.kind == MemoryEvent::Kind::Alloc) final_cat[i] = e.category;
    if (e.kind == MemoryEvent::Kind::Retag) final_cat.at(e.alloc_event) = e.category;
  }
  Releases out;
  std::map<size_t, std::array<int64_t, kCats>> by_mark;  // mark index (marks.size(): the end)
  for (size_t i = 0; i < forward_end; ++i) {
    const auto& e = r.events[i];
    if (e.kind != MemoryEvent::Kind::Alloc || e.place.microbatch != 0) continue;
    const MemCategory c = final_cat[i];
    if (!kernels::is_activation(c)) continue;
    if (freed_at[i] < 0) {
      out.kept[static_cast<size_t>(c)] += e.bytes;
      continue;
    }
    const auto f = static_cast<size_t>(freed_at[i]);
    if (f < forward_end) {
      out.temporaries[static_cast<size_t>(c)] += e.bytes;
      continue;
    }
    // The first mark recorded after the free.
    auto it = std::upper_bound(r.marks.begin(), r.marks.end(), f,
                               [](size_t ev, const MemoryMark& m) { return ev < m.events; });
    by_mark[it == r.marks.end() ? r.marks.size() : static_cast<size_t>(it - r.marks.begin())]
           [static_cast<size_t>(c)] += e.bytes;
  }
  for (const auto& [index, bytes] : by_mark) {
    std::string label = "the end";
    if (index < r.marks.size()) {
      label = r.marks[index].label;
      if (r.marks[index].place.microbatch >= 0)
        label += " (mb " + std::to_string(r.marks[index].place.microbatch) + ")";
    }
    out.labels.push_back(label);
    out.freed.push_back(bytes);
  }
  return out;
}

std::string header(const MemoryReport& r) {
  const auto& o = r.run;
  std::ostringstream s;
  s << "parity memory: " << (pipelined_run(r) ? "pipelined" : "reference") << " trainer";
  if (pipelined_run(r))
    s << " pp" << o.pp << "xvp" << o.vp << " (" << spec::to_string(o.schedule_or_default())
      << ", cache " << spec::to_string(o.cache) << ")";
  s << ", " << spec::to_string(o.flavor) << " (" << r.n_layers << " layers, blocks of "
    << r.layers_per_block << "), " << spec::to_string(o.dtype) << ", " << o.microbatches
    << " micro-batches x " << o.rows << " x " << o.seq_len << " tokens, --attn-res "
    << spec::to_string(o.attn_res) << ", --ac " << spec::to_string(o.ac) << "\n";
  s << "bytes in MiB, every figure counted by the allocator from the trainer's start; one "
       "[B, T, D] stack column = "
    << mib(r.column_bytes) << " MiB\n";
  return s.str();
}

void layer_rows(std::ostringstream& s, const MemoryReport& r, bool forward) {
  const auto marks = layer_marks(r, forward);
  s << (forward ? "\nForward of micro-batch 0: alive after each layer"
                : "\nBackward of micro-batch 0: alive after each layer's backward")
    << (pipelined_run(r) ? " (on the layer's rank)" : "") << "\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-6s %-16s %9s %9s %9s %9s %9s %11s %9s %9s %9s\n", "layer",
                "stack (cols)", "partial", "attn_res", "mixer", "ffn", "emb+head", "activations",
                "params", "grads", "all");
  s << buf;
  for (const auto* m : marks) {
    const auto& live = shown(r, *m);
    const int64_t stack = of(live, MemCategory::Stack);
    char cols[48];
    std::snprintf(cols, sizeof cols, "%s (%.1f)", mib(stack).c_str(),
                  r.column_bytes ? static_cast<double>(stack) / static_cast<double>(r.column_bytes)
                                 : 0.0);
    std::snprintf(buf, sizeof buf, "%-6d %-16s %9s %9s %9s %9s %9s %11s %9s %9s %9s\n",
                  m->place.layer, cols, mib(of(live, MemCategory::Partial)).c_str(),
                  mib(of(live, MemCategory::AttnRes)).c_str(), mib(of(live, MemCategory::Mixer)).c_str(),
                  mib(of(live, MemCategory::Ffn)).c_str(), mib(other_activations(live)).c_str(),
                  mib(sum_of(live, true)).c_str(), mib(of(live, MemCategory::Params)).c_str(),
                  mib(of(live, MemCategory::Grads)).c_str(), mib(sum_of(live, false)).c_str());
    s << buf;
  }
}

}  // namespace

std::string mark_before(const MemoryReport& r, size_t event) {
  std::string label = "start";
  for (const auto& m : r.marks) {
    if (m.events > event) break;
    label = m.label;
  }
  return label;
}

MemoryReport measure_memory(RunOptions o) {
  if (o.nproc > 0 || o.backend)
    throw UsageError("memory counts the allocations of one process: drop --nproc and "
                     "--backend (the in-process pipeline runs every rank here)");
  if (o.device != spec::Device::Cpu)
    throw UsageError("memory counts CPU allocations; give --device cpu");
  o.steps = 1;
  const PreparedRun prepared = validate_run(o);
  std::cerr << "parity memory: one training step under the counting allocator\n";
  MemoryReport r;
  r.run = o;
  const auto& m = prepared.cfg.model;
  r.n_layers = m.n_layers;
  r.layers_per_block = m.layers_per_block;
  r.column_bytes = static_cast<int64_t>(o.rows) * o.seq_len * m.dim *
                   static_cast<int64_t>(c10::elementSize(kernels::compute_dtype(o.dtype)));
  NoObserver observer;
  kernels::MemoryLedger ledger;
  run_prepared(o, prepared, observer, [&](const pipelined::PipelineStats& s) {
    r.store_high_water_bytes = s.store_high_water_bytes;
    r.store_high_water_microbatches = s.store_high_water;
  });
  r.events = ledger.events();
  r.marks = ledger.marks();
  r.peak = ledger.peak();
  r.peak_event = ledger.peak_event();
  r.rank_peaks = ledger.rank_peaks();
  return r;
}

std::string memory_table(const MemoryReport& r) {
  std::ostringstream s;
  s << header(r);
  layer_rows(s, r, true);
  layer_rows(s, r, false);

  const auto rel = releases(r);
  s << "\nWhen micro-batch 0's forward activations are released: freed inside the forward "
       "(temporaries), then freed before each mark\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-30s %9s %9s %9s %9s %9s %9s\n", "by", "stack", "partial",
                "attn_res", "mixer", "ffn", "emb+head");
  s << buf;
  auto release_row = [&](const std::string& label, const std::array<int64_t, kCats>& v) {
    std::snprintf(buf, sizeof buf, "%-30s %9s %9s %9s %9s %9s %9s\n", label.c_str(),
                  mib(of(v, MemCategory::Stack)).c_str(), mib(of(v, MemCategory::Partial)).c_str(),
                  mib(of(v, MemCategory::AttnRes)).c_str(), mib(of(v, MemCategory::Mixer)).c_str(),
                  mib(of(v, MemCategory::Ffn)).c_str(), mib(other_activations(v)).c_str());
    s << buf;
  };
  release_row("(the forward's temporaries)", rel.temporaries);
  for (size_t k = 0; k < rel.labels.size(); ++k) release_row(rel.labels[k], rel.freed[k]);
  release_row("(alive at the step's end)", rel.kept);

  if (pipelined_run(r)) {
    s << "\nPer action, on the action's rank: in flight, the (stage, micro-batch) forwards whose "
         "backward has not run yet; live bytes\n";
    std::snprintf(buf, sizeof buf, "%-22s %9s %9s %9s %9s %9s %9s %11s %9s %9s\n", "action",
                  "in flight", "stack", "partial", "attn_res", "mixer", "ffn", "activations",
                  "grads", "transport");
    s << buf;
    std::map<int, int> in_flight;
    for (const auto& m : r.marks) {
      if (!starts_with(m.label, "rank ")) continue;
      in_flight[m.place.rank] += m.forward ? 1 : -1;
      const auto& live = m.live_on_rank;
      std::snprintf(buf, sizeof buf, "%-22s %9d %9s %9s %9s %9s %9s %11s %9s %9s\n",
                    m.label.c_str(), in_flight[m.place.rank],
                    mib(of(live, MemCategory::Stack)).c_str(), mib(of(live, MemCategory::Partial)).c_str(),
                    mib(of(live, MemCategory::AttnRes)).c_str(), mib(of(live, MemCategory::Mixer)).c_str(),
                    mib(of(live, MemCategory::Ffn)).c_str(), mib(sum_of(live, true)).c_str(),
                    mib(of(live, MemCategory::Grads)).c_str(),
                    mib(of(live, MemCategory::Transport)).c_str());
      s << buf;
    }
    s << "\nPer rank: peak of the bytes its actions allocated, rank store high-water mark\n";
    for (size_t k = 1; k < r.rank_peaks.size(); ++k) {
      const size_t rank = k - 1;
      s << "rank " << rank << ": peak " << mib(r.rank_peaks[k]) << " MiB";
      if (rank < r.store_high_water_bytes.size())
        s << ", store " << mib(r.store_high_water_bytes[rank]) << " MiB at most ("
          << r.store_high_water_microbatches.at(rank) << " micro-batch(es))";
      s << "\n";
    }
  }
  const auto& pe = r.events.at(r.peak_event);
  s << "\nPeak: " << mib(r.peak) << " MiB alive at once, after '" << mark_before(r, r.peak_event)
    << "' (event " << r.peak_event << " of " << r.events.size() << ", a "
    << kernels::mem_category_name(pe.category) << " allocation of " << mib(pe.bytes) << " MiB)\n";
  return s.str();
}

std::string memory_json(const MemoryReport& r) {
  nlohmann::json j;
  j["trainer"] = pipelined_run(r) ? "pipelined" : "reference";
  j["args"] = spec::to_args(r.run);
  j["n_layers"] = r.n_layers;
  j["layers_per_block"] = r.layers_per_block;
  j["column_bytes"] = r.column_bytes;
  j["events"] = r.events.size();
  j["peak_bytes"] = r.peak;
  j["peak_after"] = mark_before(r, r.peak_event);
  j["rank_peaks_bytes"] = std::vector<int64_t>(r.rank_peaks.begin() + (r.rank_peaks.empty() ? 0 : 1),
                                               r.rank_peaks.end());
  j["store_high_water_bytes"] = r.store_high_water_bytes;
  auto cats = [](const std::array<int64_t, kCats>& live) {
    nlohmann::json c = nlohmann::json::object();
    for (int i = 0; i < kCats; ++i) c[cat_name(i)] = live[static_cast<size_t>(i)];
    return c;
  };
  nlohmann::json marks = nlohmann::json::array();
  for (const auto& m : r.marks) {
    nlohmann::json x;
    x["label"] = m.label;
    x["forward"] = m.forward;
    x["layer"] = m.place.layer;
    x["microbatch"] = m.place.microbatch;
    x["rank"] = m.place.rank;
    x["stage"] = m.place.stage;
    x["time_us"] = m.time_ns / 1000;
    x["live"] = cats(m.live);
    x["total"] = m.total;
    if (pipelined_run(r)) x["live_on_rank"] = cats(m.live_on_rank);
    marks.push_back(std::move(x));
  }
  j["marks"] = std::move(marks);
  const auto rel = releases(r);
  nlohmann::json released = nlohmann::json::array();
  for (size_t k = 0; k < rel.labels.size(); ++k)
    released.push_back({{"by", rel.labels[k]}, {"freed", cats(rel.freed[k])}});
  j["microbatch0_temporaries"] = cats(rel.temporaries);
  j["microbatch0_released"] = std::move(released);
  j["microbatch0_kept"] = cats(rel.kept);
  return j.dump(1) + "\n";
}

namespace {

// The frame a block is shown with: its category, layer, micro-batch and rank.
void frame(dumps::PickleWriter& w, const MemoryEvent& e) {
  std::string name = kernels::mem_category_name(e.category);
  if (e.place.layer >= 0) name += " layer " + std::to_string(e.place.layer);
  if (e.place.microbatch >= 0) name += " mb " + std::to_string(e.place.microbatch);
  if (e.place.rank >= 0) name += " rank " + std::to_string(e.place.rank);
  w.begin_list();
  w.begin_dict();
  w.key("filename");
  w.str(std::string("parity/") + kernels::mem_category_name(e.category));
  w.key("line");
  w.integer(e.place.layer < 0 ? 0 : e.place.layer);
  w.key("name");
  w.str(name);
  w.end_dict();
  w.end_list();
}

void trace_entry(dumps::PickleWriter& w, const char* action, const MemoryEvent& e,
                 const MemoryEvent& alloc) {
  w.begin_dict();
  w.key("action");
  w.str(action);
  w.key("addr");
  w.integer(static_cast<int64_t>(e.address));
  w.key("size");
  w.integer(e.bytes);
  w.key("stream");
  w.integer(0);
  w.key("time_us");
  w.integer(e.time_ns / 1000);
  w.key("category");
  w.str(kernels::mem_category_name(e.kind == MemoryEvent::Kind::Free ? e.category : alloc.category));
  w.key("frames");
  frame(w, alloc);
  w.end_dict();
}

}  // namespace

std::string memory_snapshot(const MemoryReport& r) {
  // The step ends at the last mark (the optimizer's update done): the trace runs up to it, and
  // the segments are the blocks alive then (memory_viz replays the trace back from them).
  const size_t cut = r.marks.empty() ? r.events.size() : r.marks.back().events;
  std::map<size_t, MemCategory> alive;  // alloc event -> category now
  for (size_t i = 0; i < cut; ++i) {
    const auto& e = r.events[i];
    if (e.kind == MemoryEvent::Kind::Alloc) alive[i] = e.category;
    if (e.kind == MemoryEvent::Kind::Free) alive.erase(e.alloc_event);
    if (e.kind == MemoryEvent::Kind::Retag) alive[e.alloc_event] = e.category;
  }
  dumps::PickleWriter w;
  w.begin_dict();
  w.key("segments");
  w.begin_list();
  for (const auto& [index, category] : alive) {
    MemoryEvent e = r.events.at(index);
    e.category = category;
    w.begin_dict();
    for (const char* k : {"device", "stream"}) {
      w.key(k);
      w.integer(0);
    }
    w.key("address");
    w.integer(static_cast<int64_t>(e.address));
    for (const char* k : {"total_size", "allocated_size", "active_size", "requested_size"}) {
      w.key(k);
      w.integer(e.bytes);
    }
    w.key("segment_type");
    w.str(e.bytes >= (int64_t{1} << 20) ? "large" : "small");
    w.key("segment_pool_id");
    w.begin_tuple();
    w.integer(0);
    w.integer(0);
    w.end_tuple();
    w.key("is_expandable");
    w.boolean(false);
    w.key("frames");
    w.begin_list();
    w.end_list();
    w.key("blocks");
    w.begin_list();
    w.begin_dict();
    w.key("address");
    w.integer(static_cast<int64_t>(e.address));
    w.key("size");
    w.integer(e.bytes);
    w.key("requested_size");
    w.integer(e.bytes);
    w.key("state");
    w.str("active_allocated");
    w.key("frames");
    frame(w, e);
    w.key("history");  // the form older readers (torch 1.13's _memory_viz) walk
    w.begin_list();
    w.begin_dict();
    w.key("addr");
    w.integer(static_cast<int64_t>(e.address));
    w.key("real_size");
    w.integer(e.bytes);
    w.key("frames");
    frame(w, e);
    w.end_dict();
    w.end_list();
    w.end_dict();
    w.end_list();
    w.end_dict();
  }
  w.end_list();
  w.key("device_traces");
  w.begin_list();
  w.begin_list();
  for (size_t i = 0; i < cut; ++i) {
    const auto& e = r.events[i];
    if (e.kind == MemoryEvent::Kind::Retag) continue;
    if (e.kind == MemoryEvent::Kind::Alloc) {
      trace_entry(w, "alloc", e, e);
    } else {
      const auto& a = r.events.at(e.alloc_event);
      trace_entry(w, "free_requested", e, a);
      trace_entry(w, "free_completed", e, a);
    }
  }
  w.end_list();
  w.end_list();
  w.key("allocator_settings");
  w.begin_dict();
  w.key("allocator");
  w.str("parity counting allocator (CPU)");
  w.end_dict();
  w.end_dict();
  return w.finish();
}

namespace {

// Live bytes by category, per rank slot, replayed from the events.
struct Replay {
  std::vector<std::array<int64_t, kCats>> live;
  std::vector<MemCategory> now;  // by alloc event: the block's category
  explicit Replay(size_t events) : now(events, MemCategory::Other) {}
  size_t apply(const MemoryEvent& e, size_t index) {
    const size_t slot = e.place.rank < 0 ? 0 : static_cast<size_t>(e.place.rank) + 1;
    if (live.size() <= slot) live.resize(slot + 1);
    auto& l = live[slot];
    switch (e.kind) {
      case MemoryEvent::Kind::Alloc:
        now[index] = e.category;
        l[static_cast<size_t>(e.category)] += e.bytes;
        break;
      case MemoryEvent::Kind::Free:
        l[static_cast<size_t>(now.at(e.alloc_event))] -= e.bytes;
        break;
      case MemoryEvent::Kind::Retag:
        l[static_cast<size_t>(e.from)] -= e.bytes;
        l[static_cast<size_t>(e.category)] += e.bytes;
        now.at(e.alloc_event) = e.category;
        break;
    }
    return slot;
  }
};

}  // namespace

std::string memory_chrome_trace(const MemoryReport& r) {
  nlohmann::json events = nlohmann::json::array();
  auto process = [&](size_t slot) {
    return slot == 0 ? std::string(pipelined_run(r) ? "outside the actions" : "reference")
                     : "rank " + std::to_string(slot - 1);
  };
  auto counter = [&](size_t slot, int64_t t_ns, const std::array<int64_t, kCats>& live) {
    nlohmann::json args = nlohmann::json::object();
    for (int i = 0; i < kCats; ++i) args[cat_name(i)] = live[static_cast<size_t>(i)];
    events.push_back({{"name", "live bytes"}, {"ph", "C"}, {"pid", slot}, {"tid", 0},
                      {"ts", static_cast<double>(t_ns) / 1000.0}, {"args", args}});
  };
  Replay replay(r.events.size());
  std::vector<int64_t> interval_peak;          // per slot, in the current mark interval
  std::vector<std::pair<size_t, int64_t>> at;  // per slot: event index and time of that peak
  size_t next_mark = 0;
  int64_t previous_mark_ns = 0;
  auto flush_marks = [&](size_t upto) {
    for (; next_mark < r.marks.size() && r.marks[next_mark].events <= upto; ++next_mark) {
      const auto& m = r.marks[next_mark];
      const size_t slot = m.place.rank < 0 ? 0 : static_cast<size_t>(m.place.rank) + 1;
      for (size_t s = 0; s < interval_peak.size(); ++s)
        if (interval_peak[s] > 0 && s < replay.live.size()) interval_peak[s] = 0;
      if (slot < replay.live.size()) counter(slot, m.time_ns, replay.live[slot]);
      events.push_back({{"name", m.label}, {"ph", "X"}, {"pid", slot}, {"tid", 1},
                        {"ts", static_cast<double>(previous_mark_ns) / 1000.0},
                        {"dur", static_cast<double>(m.time_ns - previous_mark_ns) / 1000.0},
                        {"args", {{"layer", m.place.layer}, {"microbatch", m.place.microbatch},
                                  {"stage", m.place.stage}, {"bytes_alive", m.total}}}});
      previous_mark_ns = m.time_ns;
    }
  };
  for (size_t i = 0; i < r.events.size(); ++i) {
    flush_marks(i);
    const size_t slot = replay.apply(r.events[i], i);
    if (interval_peak.size() <= slot) interval_peak.resize(slot + 1, 0);
    const int64_t total = sum_of(replay.live[slot], false);
    if (total > interval_peak[slot]) {  // a new high inside the interval: a counter point
      interval_peak[slot] = total;
      counter(slot, r.events[i].time_ns, replay.live[slot]);
    }
  }
  flush_marks(r.events.size());
  for (size_t s = 0; s < std::max<size_t>(replay.live.size(), 1); ++s)
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", s},
                      {"args", {{"name", process(s)}}}});
  nlohmann::json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  return j.dump() + "\n";
}

std::string memory_html(const MemoryReport& r) {
  reports::svg::LineChart chart;
  chart.title = "Live bytes by category over the step";
  chart.x_label = "time (ms)";
  chart.y_label = "MiB";
  std::vector<reports::svg::Series> series(kCats + 1);
  for (int i = 0; i < kCats; ++i) series[static_cast<size_t>(i)].name = cat_name(i);
  series[kCats].name = "all";
  for (const auto& m : r.marks) {
    const double t = static_cast<double>(m.time_ns) / 1e6;
    for (int i = 0; i < kCats; ++i)
      series[static_cast<size_t>(i)].points.push_back(
          {t, static_cast<double>(m.live[static_cast<size_t>(i)]) / (1 << 20)});
    series[kCats].points.push_back({t, static_cast<double>(m.total) / (1 << 20)});
  }
  for (auto& s : series) {
    bool any = false;
    for (const auto& p : s.points) any = any || p.y != 0;
    if (any) chart.series.push_back(std::move(s));
  }
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>parity memory</title>"
       "<style>body{font-family:sans-serif;margin:24px}pre{font-size:12px}</style></head><body>\n"
       "<h1>parity memory</h1>\n"
    << reports::svg::line_chart(chart) << "\n<pre>" << reports::svg::escape(memory_table(r))
    << "</pre>\n</body></html>\n";
  return h.str();
}

std::vector<ReadMemory> measure_reads(int64_t rows, int64_t seq_len, int64_t stack, int64_t dim,
                                      spec::Precision dtype) {
  const auto opts = at::TensorOptions().dtype(kernels::compute_dtype(dtype));
  std::vector<ReadMemory> out;
  for (auto form : {spec::AttnResImpl::Plain, spec::AttnResImpl::Recompute,
                    spec::AttnResImpl::Fused}) {
    // The inputs exist before the ledger starts: only the call's own allocations count.
    auto gen = at::detail::createCPUGenerator(7);
    auto s = at::randn({rows, seq_len, stack, dim}, gen, opts).requires_grad_(true);
    auto partial = at::randn({rows, seq_len, dim}, gen, opts).requires_grad_(true);
    auto proj = at::randn({dim}, gen, opts).mul_(0.1).requires_grad_(true);
    auto norm = at::ones({dim}, opts).requires_grad_(true);
    ReadMemory m;
    m.form = form;
    kernels::MemoryLedger ledger;
    {
      auto y = kernels::attn_res(s, partial, proj, norm, 1e-5, form);
      kernels::memory_mark("after the read", true);
      m.output = static_cast<int64_t>(y.nbytes());
      m.retained = ledger.marks().back().total - m.output;
      m.peak = ledger.peak();
    }
    out.push_back(m);
  }
  return out;
}

std::string reads_table(const std::vector<ReadMemory>& reads, int64_t rows, int64_t seq_len,
                        int64_t stack, int64_t dim, spec::Precision dtype) {
  std::ostringstream s;
  s << "AttnRes read, one call: a stack of " << stack << " columns [" << rows << ", " << seq_len
    << ", " << stack << ", " << dim << "] and the partial sum [" << rows << ", " << seq_len << ", "
    << dim << "], " << spec::to_string(dtype) << "\n"
    << "bytes the call allocated, in MiB: what it keeps for the backward (its output excluded), "
       "and its forward peak (output included)\n";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-10s %14s %14s %12s\n", "form", "retained", "forward peak",
                "output");
  s << buf;
  for (const auto& r : reads) {
    std::snprintf(buf, sizeof buf, "%-10s %14s %14s %12s\n", spec::to_string(r.form),
                  mib(r.retained).c_str(), mib(r.peak).c_str(), mib(r.output).c_str());
    s << buf;
  }
  return s.str();
}

int run_memory(const MemoryOptions& o) {
  if (o.read_stack > 0) {
    if (!o.snapshot.empty() || !o.trace.empty() || !o.html.empty() || o.json)
      throw UsageError("--read-stack measures single reads and prints a table: drop --snapshot, "
                       "--trace, --html and --json");
    const int64_t dim = o.read_dim > 0 ? o.read_dim : kernels::flavor(o.run.flavor).dim;
    const auto reads = measure_reads(o.run.rows, o.run.seq_len, o.read_stack, dim, o.run.dtype);
    std::cout << reads_table(reads, o.run.rows, o.run.seq_len, o.read_stack, dim, o.run.dtype);
    return 0;
  }
  if (o.read_dim > 0) throw UsageError("--read-dim goes with --read-stack N");
  for (const auto& [flag, path] : {std::pair<const char*, std::string>{"--snapshot", o.snapshot},
                                   {"--trace", o.trace}, {"--html", o.html}})
    if (!path.empty()) check_output_file(flag, path);
  const auto r = measure_memory(o.run);
  auto write = [](const std::string& path, const std::string& bytes) {
    dumps::AtomicTextFile f(path);
    f.write(bytes);
    f.commit();
  };
  if (!o.snapshot.empty()) write(o.snapshot, memory_snapshot(r));
  if (!o.trace.empty()) write(o.trace, memory_chrome_trace(r));
  if (!o.html.empty()) write(o.html, memory_html(r));
  std::cout << (o.json ? memory_json(r) : memory_table(r));
  return 0;
}

}  // namespace parity::harness
