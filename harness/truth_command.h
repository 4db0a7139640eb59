// `parity truth`: judges the step-1 gradients of runs parity did not compute against the
// float64 truth of the same step (docs/design.md section 6.7). From the checkpoint, the batch and
// the shape it computes, in-process:
//   * the truth: the reference step in fp64, and the same step one micro-batch at a time (the
//     per-micro-batch terms, summing to the truth);
//   * the floor, per dtype the runs hold: the correct variants of that dtype (the reference,
//     reversed micro-batches, the other accumulation mode, the other AttnRes and KDA forms, and
//     for each layout given the cached and naive transports), each one's distance from the truth;
//   * for a run beyond the floor with a cached layout, the deposits' contributions in fp64,
//     as many as the search needs (the difference a dropped deposit makes to one micro-batch).
// Then compare/oracle.h judges every tensor of every run and names the defects.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/run_options.h"
#include "spec/bad_input.h"

namespace parity::harness {

struct TruthOptions {
  // The step: flavor, checkpoint (--init), batch (--tokens/--positions or the corpus), shape
  // (micro-batches, rows, sequence length), documents, loss chunks, threads. The dtype, trainer
  // and pipeline fields are ignored: each run's own dtype and layout are used.
  RunOptions run;
  std::vector<std::string> runs;     // step-1 gradients: any file or directory `compare` reads
  std::vector<std::string> layouts;  // none, one for every run, or one per run ("" = none)
  std::vector<std::string> logs;     // none, or one per run ("" = none): step 1's loss
  std::optional<spec::Precision> dtype;  // the runs' precision (default: what each file says)
  std::string map;                   // a name map (`compare --map`)
  double margin = 64;                // the floor's margin (compare::kFloorMargin)
  int max_terms = 64;                // deposit contributions computed at most, per run
  bool json = false;
  std::string junit, markdown;
  bool quiet = false;                // no progress lines on stderr
};

// Prints the verdicts (text or JSON) and writes the JUnit and Markdown files. Returns 0 when
// every tensor (and every loss given) of every run is CONSISTENT, 1 otherwise. Throws a
// spec::BadInput (exit 2) for a checkpoint that does not fit the flavor, a batch of the wrong
// shape, gradients of another model and a layout that does not fit the flavor or the run.
int truth_command(const TruthOptions& o);

// A layout as `parity truth --layout` takes it: pp=P,vp=V[,cache=on|off][,schedule=K]
// [,split=SPEC] (split last: it holds commas). Applies it to `o` (trainer pipelined). Throws
// UsageError naming the part it cannot read.
void apply_layout(const std::string& layout, RunOptions& o);

}  // namespace parity::harness
