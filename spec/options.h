// Every closed set of values a run takes, each with its one table of names (spec/choices.h).
// The enums live here, at the bottom of the layers, so that the kernels, the trainers, the
// harness, the matrix files and the CLI all speak of the same values. Torch-free.
//
// To add a value: add it to the enum and to its table in options.cpp; parsing, printing,
// `--help` and the unknown-value message follow, and tests/test_spec.cpp walks every table.
#pragma once

#include <string>

#include "spec/choices.h"

namespace parity::spec {

// Named model configurations (kernels/config.h builds each).
enum class Flavor { Debugmodel, Tiny, K3shape, Exact, ExactWide };

// Precision modes (kernels/precision.h says what each keeps in which dtype).
enum class Precision { FP32, BF16, BF16Master, FP64 };

enum class Trainer { Reference, Pipelined };

// Pipeline schedules, with torch.distributed.pipelining's per-rank orders.
enum class ScheduleKind { OneFOneB, Interleaved1F1B };

// The block-stack transport: a per-rank store and deltas (On), or the whole stack (Off).
enum class Cache { On, Off };

// KDA core forms and AttnRes read forms: the same numbers, other speeds and memory.
enum class KdaImpl { Recurrent, Chunked, Fused };
enum class AttnResImpl { Plain, Recompute, Fused };

// Activation checkpointing: none, or one region per transformer layer (torchtitan's selective
// AC default), whose forward keeps only its inputs and whose backward recomputes it.
enum class Checkpointing { None, Layer };

// Micro-batch gradient accumulation (Auto: bf16 in the bf16 modes, where it differs).
enum class GradAccum { Auto, BF16, FP32 };

// The order of the total gradient norm: one norm in FQN order, or per rank then summed.
enum class ClipOrder { Single, PerRank };

// The dtype of the total gradient norm and the clip factor for bf16 gradients: fp32 (the
// seed's tables) or the gradients' own bf16 (torch's clip_grad_norm_, stock torchtitan).
// fp32 and fp64 gradients take it in their own dtype either way.
enum class GradNormDtype { FP32, BF16 };

// Documents inside a row: off (each row one sequence, causal over the whole row) or on (the
// mixers see each document alone, as torchtitan masks; docs/design.md section 10.7).
enum class Documents { Off, On };

enum class LrSchedule { WSD, Constant };

enum class Device { Cpu, Cuda };

// Multi-process collectives backend (torch c10d).
enum class Backend { Gloo, Nccl };

// How the AttnRes pseudo-queries start.
enum class PseudoQueryInit { TruncNormal, Zero };

// A raw token file's element type (little-endian).
enum class TokenDtype { U16, I32, I64 };

// The formats a report or a drift table is written in.
enum class ReportFormat { Txt, Md, Json, Csv, Html };

// What `parity bench` measures (harness/bench.h).
enum class BenchTarget {
  Reference, Step, Pipelined, Ratio, AcRatio, ThreadsRatio, Kda, Compare, Gemm, Readers
};

const Choices<Flavor>& flavors();
const Choices<Precision>& precisions();
const Choices<Trainer>& trainers();
const Choices<ScheduleKind>& schedules();
const Choices<Cache>& caches();
const Choices<KdaImpl>& kda_forms();
const Choices<AttnResImpl>& attn_res_forms();
const Choices<Checkpointing>& checkpointing_modes();
const Choices<GradAccum>& grad_accums();
const Choices<ClipOrder>& clip_orders();
const Choices<GradNormDtype>& grad_norm_dtypes();
const Choices<Documents>& document_modes();
const Choices<LrSchedule>& lr_schedules();
const Choices<Device>& devices();
const Choices<Backend>& backends();
const Choices<PseudoQueryInit>& pseudo_query_inits();
const Choices<TokenDtype>& token_dtypes();
const Choices<ReportFormat>& report_formats();
const Choices<BenchTarget>& bench_targets();

// Names through the tables, for printing and for argument-dependent lookup.
const char* to_string(Flavor v);
const char* to_string(Precision v);
const char* to_string(Trainer v);
const char* to_string(ScheduleKind v);
const char* to_string(Cache v);
const char* to_string(KdaImpl v);
const char* to_string(AttnResImpl v);
const char* to_string(Checkpointing v);
const char* to_string(GradAccum v);
const char* to_string(ClipOrder v);
const char* to_string(GradNormDtype v);
const char* to_string(Documents v);
const char* to_string(LrSchedule v);
const char* to_string(Device v);
const char* to_string(Backend v);
const char* to_string(PseudoQueryInit v);
const char* to_string(TokenDtype v);
const char* to_string(ReportFormat v);
const char* to_string(BenchTarget v);

// The schedule a pipeline of vp virtual stages per rank runs when none is named:
// 1f1b for vp 1, interleaved1f1b otherwise.
ScheduleKind default_schedule(int vp);

}  // namespace parity::spec
