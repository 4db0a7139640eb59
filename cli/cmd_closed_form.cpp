// parity closed-form: the exact flavor through a trainer, checked bitwise against its closed
// form (compare/closed_form.h). Exit 0 when every value is exact, 1 when any differs.
#include <iostream>

#include "cli/commands.h"
#include "cli/setup.h"
#include "compare/closed_form.h"
#include "kernels/precision.h"

namespace parity::cli {

namespace {

struct ClosedFormCliOptions {
  RunOptions run;  // pp, vp, schedule, cache, split, dtype, steps, inject, device, threads
  std::string trainer = "auto";
  bool wide = false;
};

int run_closed_form_command(const ClosedFormCliOptions& c) {
  compare::ClosedFormOptions o;
  const bool shaped = c.run.pp != 1 || c.run.vp != 1 || !c.run.split.empty();
  if (c.trainer == "auto")
    o.pipelined = shaped;
  else if (c.trainer == "pipelined" || c.trainer == "reference")
    o.pipelined = c.trainer == "pipelined";
  else
    throw UsageError("unknown --trainer '" + c.trainer + "'; use reference or pipelined");
  if (!o.pipelined && (shaped || !c.run.inject.empty()))
    throw UsageError("--pp, --vp, --split and --inject need --trainer pipelined");
  o.pipeline = pipeline_config(c.run);
  o.precision = kernels::parse_precision(c.run.dtype);
  o.wide = c.wide;
  o.steps = c.run.steps;
  o.device = c.run.device;
  o.threads = c.run.threads;

  auto r = compare::run_closed_form(o, [](const std::string& line) { std::cout << line << "\n"; });
  std::cout << "cell: " << r.cell << "\n";
  for (const auto& s : r.out_of_range) std::cout << "  out of the exact range: " << s << "\n";
  constexpr size_t kShown = 20;
  for (size_t i = 0; i < r.mismatches.size() && i < kShown; ++i) {
    const auto& m = r.mismatches[i];
    std::cout << "  DIFFERS " << m.what << ": " << m.n_wrong << " of " << m.numel
              << " values wrong, first at [" << m.first_index << "]: got " << m.got
              << ", closed form " << m.expected << "\n";
  }
  if (r.mismatches.size() > kShown)
    std::cout << "  ... and " << r.mismatches.size() - kShown << " more tensors\n";
  warn_unfired_faults(o.pipeline.faults, r.fault_hits);
  std::cout << "closed form: " << (r.pass() ? "PASS" : "FAIL") << " (" << r.values_checked
            << " values in " << r.tensors_checked << " tensors, " << r.mismatches.size()
            << " tensors differ; largest value needs " << r.max_significand_bits
            << " significand bits)\n";
  return r.pass() ? 0 : 1;
}

}  // namespace

Command add_closed_form_command(CLI::App& app) {
  auto opts = std::make_shared<ClosedFormCliOptions>();
  opts->run.steps = 3;
  auto* cmd = app.add_subcommand(
      "closed-form",
      "Run the integer-valued `exact` flavor through a trainer and check every loss, gradient "
      "and parameter bitwise against its closed form (exit 0 pass, 1 fail)");
  auto& o = *opts;
  cmd->add_option("--trainer", o.trainer, "reference | pipelined (default: pipelined when a "
                                          "pipeline shape is given)");
  cmd->add_option("--pp", o.run.pp, "pipeline ranks")->check(CLI::PositiveNumber);
  cmd->add_option("--vp", o.run.vp, "stages per rank")->check(CLI::PositiveNumber);
  cmd->add_option("--schedule", o.run.schedule, "1f1b | interleaved1f1b");
  cmd->add_option("--split", o.run.split, "explicit split, e.g. \"0-1|2-4|5|6-9|10|11-13|14|15,head\"");
  cmd->add_option("--cache", o.run.cache, "block-stack transport: on (cached) | off (naive)");
  cmd->add_option("--dtype", o.run.dtype, "bf16 | fp32 | fp64")->capture_default_str();
  cmd->add_option("--steps", o.run.steps, "SGD steps")->capture_default_str();
  cmd->add_flag("--wide", o.wide, "values beyond 2^24 (needs --dtype fp64)");
  cmd->add_option("--inject", o.run.inject, "inject a routing fault, KIND:block=B,stage=S[,mb=M]");
  cmd->add_option("--device", o.run.device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--threads", o.run.threads, "intra-op threads")->capture_default_str();
  return {cmd, [opts] { return run_closed_form_command(*opts); }};
}

}  // namespace parity::cli
