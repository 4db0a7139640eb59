// parity layout: the routing tables of a pipeline shape (per stage, forward and backward,
// cache off and on) and the volume summary. parity schedule: a schedule's step x rank grid.
#include <iostream>

#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"
#include "harness/layout_json.h"
#include "pipelined/routing.h"
#include "pipelined/schedule.h"
#include "pipelined/split.h"

namespace parity::cli {

namespace {

struct LayoutOptions {
  int layers = 17, block = 4, pp = 1, vp = 1;
  std::string split;
  bool json = false;
};

int run_layout(const LayoutOptions& o) {
  if (o.json) {
    std::cout << harness::layout_json(o.layers, o.block, o.pp, o.vp, o.split).dump(2) << "\n";
    return 0;
  }
  const auto split = pipelined::split_or_default(o.split, o.layers, o.pp * o.vp);
  std::cout << pipelined::format_tables(pipelined::make_routing_tables(o.layers, o.block, split, o.pp));
  return 0;
}

struct ScheduleOptions {
  int pp = 2, vp = 1, microbatches = 4;
  std::string kind;
  bool json = false;
};

int run_schedule(const ScheduleOptions& o) {
  const auto kind = o.kind.empty() ? spec::default_schedule(o.vp) : spec::schedules().parse(o.kind);
  const auto s = pipelined::make_schedule(kind, o.pp, o.vp, o.microbatches);
  const int rounds = pipelined::dry_run(s);
  if (o.json) {
    std::cout << pipelined::to_json(s) << "\n";
    return 0;
  }
  std::cout << pipelined::to_string(kind) << ", pp " << o.pp << " x vp " << o.vp << ", "
            << o.microbatches << " micro-batches (stage s on rank s % pp); dry run: no "
            << "deadlock, " << rounds << " rounds\n"
            << pipelined::format_grid(s);
  return 0;
}

}  // namespace

Command add_layout_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("layout", "print the routing tables and volume of a pipeline");
  auto o = std::make_shared<LayoutOptions>();
  cmd->add_option("--layers", o->layers, "transformer layers")->capture_default_str()
      ->check(integer_in(1, spec::kMaxLayers));
  cmd->add_option("--block", o->block, "layers per block")->capture_default_str()
      ->check(integer_in(1, spec::kMaxLayers));
  cmd->add_option("--pp", o->pp, "pipeline ranks")->capture_default_str()
      ->check(integer_in(1, spec::kMaxRanks));
  cmd->add_option("--vp", o->vp, "stages per rank")->capture_default_str()
      ->check(integer_in(1, spec::kMaxVirtualStages));
  cmd->add_option("--split", o->split, "explicit split, e.g. 'emb,0|1-2|...|head'")
      ->check(non_empty_path());
  cmd->add_flag("--json", o->json, "machine-readable output");
  return {cmd, [o] { return run_layout(*o); }};
}

Command add_schedule_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("schedule", "print a pipeline schedule's step x rank grid");
  auto o = std::make_shared<ScheduleOptions>();
  cmd->add_option("--pp", o->pp, "pipeline ranks")->capture_default_str()
      ->check(integer_in(1, spec::kMaxRanks));
  cmd->add_option("--vp", o->vp, "stages per rank")->capture_default_str()
      ->check(integer_in(1, spec::kMaxVirtualStages));
  cmd->add_option("--microbatches", o->microbatches, "micro-batches per step")
      ->capture_default_str()->check(integer_in(1, spec::kMaxMicrobatches));
  cmd->add_option("--schedule", o->kind, "1f1b or interleaved1f1b");
  cmd->add_flag("--json", o->json, "machine-readable output");
  return {cmd, [o] { return run_schedule(*o); }};
}

}  // namespace parity::cli
