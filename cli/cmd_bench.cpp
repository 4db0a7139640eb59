// parity bench --what (spec::bench_targets()): throughput figures (harness/bench.h).
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"
#include "harness/bench.h"

namespace parity::cli {

Command add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "measure throughput (reference steps, KDA forms, GEMM peak)");
  auto o = std::make_shared<harness::BenchOptions>();
  add_choice(*cmd, o->what, spec::bench_targets(),
             "what to measure (step is reference; ratio: pipelined / reference; ac-ratio: --ac "
             "layer / none; threads-ratio: one thread / --threads N)");
  add_run_options(*cmd, o->run);
  cmd->add_option("--warmup-steps", o->warmup_steps, "unmeasured steps first")
      ->capture_default_str()->check(integer_in(0, spec::kMaxBenchSteps));
  cmd->add_option("--measured-steps", o->measured_steps, "steps whose median is reported")
      ->capture_default_str()->check(integer_in(1, spec::kMaxBenchSteps));
  cmd->add_flag("--breakdown", o->breakdown,
                 "reference/step/pipelined: time per op family, the step's FLOPs, the achieved "
                 "GFLOP/s and the GEMM peak measured in the same run");
  cmd->add_option("--log-steps", o->log_steps,
                  "--what readers: steps in each torchtitan log written and read")
      ->capture_default_str()->check(integer_in(1, 10'000'000));
  cmd->add_option("--entries", o->entries,
                  "--what readers: tensors in each safetensors file written and read")
      ->capture_default_str()->check(integer_in(1, 1'000'000));
  cmd->add_option("--a", o->a, "--what compare: the first dump")->check(non_empty_path());
  cmd->add_option("--b", o->b, "--what compare: the second dump")->check(non_empty_path());
  return {cmd, [o] {
            using T = spec::BenchTarget;
            if (o->what == T::Reference || o->what == T::Step || o->what == T::Pipelined)
              return harness::bench_trainer(*o);
            if (o->breakdown)
              throw UsageError("--breakdown goes with --what step, reference or pipelined");
            switch (o->what) {
              case T::Ratio: return harness::bench_ratio(*o);
              case T::AcRatio: return harness::bench_ac_ratio(*o);
              case T::ThreadsRatio: return harness::bench_threads_ratio(*o);
              case T::Kda: return harness::bench_kda(*o);
              case T::Compare: return harness::bench_compare(*o);
              case T::Gemm: return harness::bench_gemm(*o);
              case T::Readers: return harness::bench_readers(*o);
              case T::Reference: case T::Step: case T::Pipelined: break;
            }
            return harness::bench_trainer(*o);
          }};
}

}  // namespace parity::cli
