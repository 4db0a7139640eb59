// RunSpec: the typed description of one training run, everything that changes its numbers,
// its shape or its placement. `parity train` fills one from its flags, a matrix cell is one
// with a name, a label, a reference and a gate, and the harness turns one into the trainers'
// configs. Torch-free.
//
// Its command line: to_args prints the flags of every field that differs from the defaults
// below, parse_args reads them back; the two are exact inverses (tests/test_spec.cpp walks
// every field). To add a field: add it here, to both functions in run_spec.cpp, to the CLI
// (cli/run_flags.cpp) and to the matrix keys (reports/matrix.cpp); the round-trip test does not
// compile until it names the new field too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/options.h"

namespace parity::spec {

struct RunSpec {
  Trainer trainer = Trainer::Reference;
  Flavor flavor = Flavor::Debugmodel;
  Precision dtype = Precision::FP32;
  int64_t steps = 20;
  int microbatches = 4;        // M
  int rows = 1;                // B, rows per micro-batch (--batch)
  int64_t seq_len = 256;       // T
  uint64_t seed = 42;          // the initialisation's, when no --init is given
  int threads = 1;             // intra-op threads, pinned
  int dp = 1;
  // Pipeline shape: the pipelined trainer's layout; for the reference, where the per-rank
  // clip order takes its parameter -> rank map from.
  int pp = 1;
  int vp = 1;
  std::optional<ScheduleKind> schedule;  // none: default_schedule(vp)
  Cache cache = Cache::On;
  std::string split;                     // "": torchtitan's even split
  Device device = Device::Cpu;
  std::string init_path;                 // a seed checkpoint; "": a fresh initialisation
  std::string data_path;                 // a JSONL corpus; "": the fortunes text
  std::string tokens_path;               // token ids read as they are; "": tokenize the corpus
  std::optional<TokenDtype> tokens_dtype;  // a raw --tokens file's element type
  std::string positions_path;  // per-token positions beside --tokens (.npy); "": from the ids
  ClipOrder clip_order = ClipOrder::Single;
  GradNormDtype grad_norm_dtype = GradNormDtype::FP32;
  GradAccum grad_accum = GradAccum::Auto;
  AttnResImpl attn_res = AttnResImpl::Fused;
  KdaImpl kda = KdaImpl::Fused;
  Checkpointing ac = Checkpointing::None;  // --ac layer: recompute each layer in the backward
  Documents documents = Documents::Off;
  // The ids that delimit documents under --documents on (the embedded tokenizer's: BOS 1,
  // EOS 2); -1: the tokenizer has no such token.
  int64_t bos_id = 1;
  int64_t eos_id = 2;
  double lr = 8e-4;
  int warmup = 2;
  LrSchedule lr_schedule = LrSchedule::WSD;
  bool expert_balance = true;            // false: the expert bias stays at zero
  PseudoQueryInit pseudo_query_init = PseudoQueryInit::TruncNormal;
  int loss_chunks = 8;                   // ChunkedLossWrapper's chunks; 1: the plain loss
  double max_norm = 1.0;
  bool reverse_microbatches = false;
  bool freeze_embedding = false;
  std::vector<std::string> inject;       // fault specs (pipelined, cache on)

  bool pipelined() const { return trainer == Trainer::Pipelined; }
  // The schedule the run uses: the one named, else the default for vp.
  ScheduleKind schedule_or_default() const { return schedule ? *schedule : default_schedule(vp); }
};

bool operator==(const RunSpec& a, const RunSpec& b);
inline bool operator!=(const RunSpec& a, const RunSpec& b) { return !(a == b); }

// The flags of every field that differs from RunSpec{}: "--dtype bf16 --pp 2 ...", in field
// order; a true switch is its flag alone (--reverse-microbatches), a false expert_balance is
// --no-expert-balance, and each inject entry is one --inject.
std::vector<std::string> to_args(const RunSpec& s);

// The inverse: RunSpec{} with the flags applied. Throws BadInput naming the flag for an unknown
// flag, a flag without its value, and a value out of its set or range.
RunSpec parse_args(const std::vector<std::string>& args);

}  // namespace parity::spec
