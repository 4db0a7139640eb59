// Bad input, one row per case (in the style of ggml's case registry): the arguments, the
// environment, the exit code, a pattern for the one line on stderr, and the promise every row
// shares: no file changed or added in the run's directory, nothing left in TMPDIR, no
// temporary file and no process left behind, no crash, under 30 s (tests/sandbox.h).
//
// Every finding of the hardening review has a row (tagged "found:" below), and so does each
// class it stands for, across every subcommand. The stop tests (a run signalled mid-way) are at
// the end: they exit 128 + the signal and leave nothing behind either.
#include <gtest/gtest.h>

#include <unistd.h>

#include <csignal>
#include <fstream>
#include <regex>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "tests/cli_harness.h"
#include "tests/sandbox.h"

namespace {

namespace fs = std::filesystem;
using parity::testing::read_file;
using parity::testing::RunResult;
using parity::testing::Sandbox;
using parity::testing::words;

struct Case {
  const char* id;       // the test's name
  std::string args;     // after `parity`, split by words() ('' is an empty argument)
  const char* pattern;  // a regex the one stderr line must contain
  int exit = 2;
  std::map<std::string, std::string> env = {};
  // MASTER_PORT: as env says, a free port (nobody there), or a plain TCP listener that
  // accepts and never answers (not a TCPStore).
  enum Port { kAsGiven, kFree, kListener } port = kAsGiven;
  double max_s = 30;
};

// The shapes the rows share: a tiny, quick run of each trainer.
const std::string T = "train --flavor tiny --steps 1 --seq-len 16 --microbatches 2 ";
const std::string P = "train --trainer pipelined --flavor tiny --steps 1 --seq-len 16 "
                      "--microbatches 2 --pp 2 ";
const std::string PV = P + "--vp 2 ";

const std::map<std::string, std::string> kRank1 = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};
std::map<std::string, std::string> rank_env(std::map<std::string, std::string> extra) {
  auto e = kRank1;
  for (auto& [k, v] : extra) e[k] = v;
  return e;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      // ---- the command line itself
      {"UnknownCommand", "frobnicate", "unknown command 'frobnicate'; the commands are model, init"},  // found
      {"NoCommand", "", "subcommand is required"},
      {"UnknownOption", T + "--stepz 3", "--stepz"},
      {"MatrixWithoutItsSubcommand", "matrix", "subcommand is required"},
      {"MissingRequiredOption", "init --flavor tiny", "--out is required"},
      // ---- numbers: strict, in range, with the range in the message
      {"StepsZero", T + "--steps 0", "--steps: 0 is out of range; give an integer from 1 to 1000000"},  // found
      {"StepsNotANumber", T + "--steps abc", "--steps: 'abc' is not an integer; give an integer from 1"},  // found
      {"StepsBeyondInt64", T + "--steps 99999999999999999999", "--steps: 99999999999999999999 is out of range"},  // found
      {"StepsNegative", T + "--steps -3", "--steps: -3 is out of range"},
      {"StepsFraction", T + "--steps 1.5", "--steps: '1.5' is not an integer"},
      {"StepsHex", T + "--steps 0x10", "--steps: '0x10' is not an integer"},
      {"StepsEmpty", T + "--steps ''", "--steps: an empty value is not an integer"},
      {"MicrobatchesZero", T + "--microbatches 0", "--microbatches: 0 is out of range; give an integer from 1 to 1024"},  // found
      {"BatchZero", T + "--batch 0", "--batch: 0 is out of range"},  // found
      {"BatchHugeNamesTheBatch", T + "--batch 1000000", "--batch: 1000000 is out of range; give an integer from 1 to 4096"},  // found
      {"BatchTooLargeForTheCorpusNamesEveryFactor", "train --flavor tiny --steps 1 --seq-len 16 --batch 4096 --microbatches 1024", "one step needs 4194304 rows .*lower --batch, --microbatches, --dp or --seq-len"},  // found
      {"ThreadsZero", T + "--threads 0", "--threads: 0 is out of range; give an integer from 1 to"},  // found
      {"ThreadsHuge", T + "--threads 100000", "--threads: 100000 is out of range"},  // found
      {"ThreadsNotANumber", T + "--threads abc", "--threads: 'abc' is not an integer"},  // found
      {"SeqLenZero", T + "--seq-len 0", "--seq-len: 0 is out of range"},
      {"SeqLenHuge", T + "--seq-len 100000000", "--seq-len: 100000000 is out of range; give an integer from 1 to 65536"},
      {"DpZero", T + "--dp 0", "--dp: 0 is out of range"},
      {"DpHuge", T + "--dp 1000", "--dp: 1000 is out of range; give an integer from 1 to 64"},
      {"PpZero", T + "--trainer pipelined --pp 0", "--pp: 0 is out of range"},
      {"VpHuge", P + "--vp 100", "--vp: 100 is out of range; give an integer from 1 to 16"},
      {"LrNan", T + "--lr nan", "--lr: nan is not finite; give a finite number above 0"},  // found
      {"LrNegative", T + "--lr -1", "--lr: -1 is out of range; give a finite number above 0"},  // found
      {"LrZero", T + "--lr 0", "--lr: 0 is out of range"},
      {"LrInf", T + "--lr inf", "--lr: inf is not finite"},
      {"LrOverflows", T + "--lr 1e400", "--lr: 1e400 is not finite"},
      {"LrNotANumber", T + "--lr fast", "--lr: 'fast' is not a number"},
      {"MaxNormNan", T + "--max-norm nan", "--max-norm: nan is not finite"},  // found
      {"MaxNormZero", T + "--max-norm 0", "--max-norm: 0 is out of range"},
      {"WarmupNegative", T + "--warmup -5", "--warmup: -5 is out of range; give an integer from 0"},  // found
      // ---- users' own runs and files
      // ---- drift, JUnit and matrices on any scheduler
      {"DriftMissingLog", "drift ref.log nosuch.log", "log 'nosuch.log': does not exist"},
      {"DriftUnreadableLog", "drift ref.log adir", "log 'adir': is not a file"},
      {"DriftLogWithNoSteps", "drift ref.log afile", "log 'afile': no training steps"},
      {"DriftMixedFormats", "drift ref.log mixed.log",
       "log 'mixed.log': mixes formats \\(loss-file from line 1, parity from line 2\\)"},
      {"DriftStepLoggedTwice", "drift ref.log twice.log", "step 1 is logged twice with different values"},
      {"DriftBinaryLog", "drift ref.log ckpt.h5", "log 'ckpt.h5': holds binary data"},
      {"DriftLabelsMiscounted", "drift ref.log ref.log --labels a", "--labels: 1 label\\(s\\) for 2 logs"},
      {"DriftStepNotLogged", "drift ref.log ref.log --steps 1,7", "--steps: the reference 'ref.log' logs no step 7"},
      {"DriftBadFormat", "drift ref.log ref.log --format pdf", "unknown --format 'pdf'; accepted: txt, md, json, csv, html"},
      {"DriftJunitUnwritable", "drift ref.log ref.log --junit nodir/x.xml", "--junit"},
      {"JudgeWithoutAPlan", "matrix judge adir", "'adir' holds no plan.json"},
      {"JudgeAPlanOfAnotherMatrix", "matrix judge plan_quick --matrix seed",
       "'plan_quick' is a plan of matrix 'quick' \\(.*\\), not of 'seed'"},
      {"PlanIntoAnotherMatrixsPlan", "matrix plan seed --only ref --out plan_quick",
       "--out 'plan_quick' holds the plan of another matrix \\('quick'"},
      {"PlanIntoAFullDirectory", "matrix plan quick --out A", "is not empty and holds no plan"},
      {"GateJunitUnwritable", "gate --junit nodir/x.xml", "--junit"},
      {"CompareJunitUnwritable", "compare A B --junit nodir/x.xml", "--junit"},
      {"CompareTolUnknown", "compare A B --tol close", "unknown --tol 'close'; accepted: bitwise, ulp:K, torch"},
      {"CompareMaxUlpAndTol", "compare A B --max-ulp 3 --tol torch",
       "--max-ulp 3 and --tol torch both set the tolerance; give one"},
      {"CompareUlpDtypeUnknown", "compare A B --ulp-dtype fp8", "unknown --ulp-dtype 'fp8'; accepted: bf16, fp16, fp32, fp64"},
      {"CompareLayoutUnknownKey", "compare A B --layout layers=17,block=4,pp=2,vp=2,x=1",
       "--layout: unknown key 'x'"},
      {"CompareLayoutMissingKey", "compare A B --layout layers=17", "lacks block=; give layers=L"},
      {"CompareLayoutBadNumber", "compare A B --layout layers=17,block=4,pp=0,vp=2",
       "--layout pp=0: give an integer from 1"},
      {"CompareMapMissing", "compare A B --map nosuch.txt", "--map 'nosuch.txt' cannot be opened"},
      {"CompareMapMalformed", "compare A B --map map_bad.txt", "line 1: want two names"},
      {"CompareDamagedTorchSave", "compare torn.pt A", "'torn.pt'"},
      {"CompareDamagedSafetensors", "compare torn.safetensors A", "'torn.safetensors'"},
      {"CompareUnknownKind", "compare afile A", "'afile' is not a parity dump, a torch.save"},
      {"CompareStepNotDumped", "compare sd_bad.safetensors A --step 9", "holds no dump of step 9"},
      {"InitFromMissing", "init --flavor tiny --from nosuch.pt --out c.h5", "nosuch.pt"},
      {"InitFromWrongKeys", "init --flavor tiny --from sd_bad.safetensors --out c.h5",
       "is not a tiny state dict in torchtitan's names .*missing: tok_embeddings.weight.*extra: foo"},
      {"InitFromADump", "init --flavor tiny --from A/rank0.h5 --out c.h5", "is a parity dump, not a state dict"},
      {"InitFromWithPseudoQueryInit",
       "init --flavor tiny --from sd_bad.safetensors --pseudo-query-init zero --out c.h5", "excludes"},
      {"TokensNpyIdOutsideTheVocabulary", T + "--tokens ids_big.npy",
       "token id 65000 at index 2 is outside the model's vocabulary"},
      {"TokensNpyOfFloats", T + "--tokens ids_f32.npy", "element type '<f4' is not uint16, int32 or int64"},
      {"TokensRawOddSize", T + "--tokens odd.bin --tokens-dtype uint16",
       "3 bytes is not a whole number of uint16 ids"},
      {"TokensDtypeOnANpyArray", T + "--tokens ids_f32.npy --tokens-dtype uint16",
       "is a .npy array, which names its own element type; drop --tokens-dtype"},
      {"TokensDtypeWithoutTokens", T + "--tokens-dtype uint16",
       "--tokens-dtype describes a raw --tokens file; give --tokens FILE too"},
      {"TokensDtypeUnknown", T + "--tokens odd.bin --tokens-dtype float32",
       "unknown --tokens-dtype 'float32'; accepted: uint16, int32, int64$"},
      {"TokensNeitherKind", T + "--tokens afile", "is not a token file: neither parity's .* nor a .npy array"},
      // The file named, not "the corpus" and --data (found by the reader fuzz suite).
      {"TokensTooFewForOneStep", "train --flavor tiny --steps 1 --seq-len 16 --microbatches 4 --tokens ids34.npy",
       "--tokens 'ids34.npy' holds 34 tokens, which make only 2; lower .*, or give more tokens$"},
      {"PositionsWithoutDocuments", T + "--tokens ids34.npy --positions pos34.npy",
       "--positions 'pos34.npy' gives document starts, which only --documents on uses"},
      {"PositionsWithoutTokens", T + "--documents on --positions pos34.npy",
       "gives the positions of a --tokens file; give the token ids with --tokens FILE too"},
      {"PositionsNotNpy", T + "--documents on --tokens ids34.npy --positions afile",
       "--positions 'afile' is not a .npy array"},
      {"PositionsCountNotTheTokens", T + "--documents on --tokens ids34.npy --positions pos33.npy",
       "--positions 'pos33.npy' holds 33 positions for a stream of 34 tokens"},
      {"PositionsJump", T + "--documents on --tokens ids34.npy --positions pos_jump.npy",
       "position 5 at index 4 follows 3; inside a document positions count up by one"},
      {"PositionsOfFloats", T + "--documents on --tokens ids34.npy --positions ids_f32.npy",
       "--positions 'ids_f32.npy' \\(.npy\\): element type '<f4' is not uint16"},
      {"BosIdWithoutDocuments", T + "--bos-id 5", "--bos-id and --eos-id delimit documents, which only --documents on uses"},
      {"EosIdPastTheVocabulary", T + "--documents on --eos-id 5000",
       "--eos-id 5000 is past flavor tiny's vocabulary of 2048"},
      {"BosIdBelowMinusOne", T + "--documents on --bos-id -2", "--bos-id: -2 is out of range"},
      {"LrScheduleUnknown", T + "--lr-schedule cosine", "unknown --lr-schedule 'cosine'; accepted: wsd, constant$"},
      {"LossChunksZero", T + "--loss-chunks 0", "--loss-chunks: 0 is out of range"},
      {"LossChunksNotDividingTheSequence", T + "--loss-chunks 5",
       "--loss-chunks 5 does not divide --seq-len 16 .*--loss-chunks 1"},
      {"PseudoQueryInitUnknown", T + "--pseudo-query-init ones",
       "unknown --pseudo-query-init 'ones'; accepted: trunc-normal, zero$"},
      {"PseudoQueryInitUnknownPipelined", P + "--pseudo-query-init ones",
       "unknown --pseudo-query-init 'ones'"},
      {"InitPseudoQueryInitUnknown", "init --flavor tiny --pseudo-query-init ones --out c.h5",
       "unknown --pseudo-query-init 'ones'"},
      {"SeedNegative", T + "--seed -1", "--seed: '-1' is not an unsigned integer; give one from 0 to 18446744073709551615"},  // found
      {"SeedBeyondUint64", T + "--seed 99999999999999999999999", "--seed: 99999999999999999999999 is out of range"},
      {"SeedNotANumber", T + "--seed x", "--seed: 'x' is not an unsigned integer"},
      {"TimeoutNan", P + "--timeout-s nan", "--timeout-s: nan is not finite"},  // found
      {"TimeoutZero", P + "--timeout-s 0", "--timeout-s: 0 is out of range"},
      {"TimeoutNegative", P + "--timeout-s -1", "--timeout-s: -1 is out of range"},
      {"NprocNegative", P + "--nproc -1", "--nproc: -1 is out of range"},
      // ---- paths: never empty, of the right kind, usable
      {"DumpEmpty", T + "--dump ''", "--dump: the path is empty \\(an unset shell variable\\?\\)"},  // found
      {"InitEmpty", T + "--init ''", "--init: the path is empty"},  // found
      {"MetricsEmpty", T + "--metrics ''", "--metrics: the path is empty"},
      {"SummaryEmpty", T + "--summary ''", "--summary: the path is empty"},
      {"DataEmpty", T + "--data ''", "--data: the path is empty"},
      {"TokensEmpty", T + "--tokens ''", "--tokens: the path is empty"},
      {"SplitEmpty", P + "--split ''", "--split: the path is empty"},
      {"OutputsUntouchedWhenTheCheckpointIsMissing", T + "--metrics old.jsonl --summary old.json --init missing.h5", "checkpoint 'missing.h5' does not exist; write one with `parity init --flavor tiny"},  // found
      {"InitIsADirectory", T + "--init adir", "--init 'adir' is a directory"},
      {"InitIsNotHdf5", T + "--init afile", "cannot read checkpoint.*afile"},
      {"InitHoldsNan", T + "--init nan.h5", "nan.h5': parameter .* holds nan .*must be finite"},  // found
      {"InitOfAnotherFlavor", "train --flavor debugmodel --steps 1 --init ckpt.h5", "holds flavor 'tiny' but the run uses 'debugmodel'"},
      {"DumpIsAFile", T + "--dump afile", "--dump 'afile' is a file; give a directory"},
      {"DumpHoldsAnotherRunsFiles", T + "--dump D4", "--dump 'D4' holds rank0.h5 and 3 more of another run; give a new directory, or --overwrite"},  // found
      {"OverwriteWithoutDump", T + "--overwrite", "--overwrite replaces the files of a --dump directory"},
      {"LedgerWithoutDump", T + "--ledger", "--ledger is stored in the dump"},
      {"MetricsIsADirectory", T + "--metrics adir", "--metrics 'adir' is a directory"},
      {"MetricsInAMissingDirectory", T + "--metrics nodir/m.jsonl", "the directory 'nodir' does not exist"},
      {"SummaryIsADirectory", T + "--summary adir --metrics old.jsonl", "--summary 'adir' is a directory"},
      {"DumpStepZero", T + "--dump out --dump-steps 0", "--dump-steps: 0 is out of range"},  // found
      {"DumpStepPastTheLast", T + "--dump out --dump-steps 5", "--dump-steps 5 is past the last step \\(--steps 1\\)"},  // found
      {"DumpStepNotANumber", T + "--dump out --dump-steps 1,x", "--dump-steps: 'x' is not an integer"},
      {"TokensGarbageGetsTheTokenFilesRemedy", T + "--tokens garbage.bin", "--tokens 'garbage.bin' is not a token file: .*parity-tokenize"},  // found
      {"TokensADirectory", T + "--tokens adir", "--tokens 'adir' is not a file"},
      {"TokensAndData", T + "--tokens tokens.bin --data afile", "--tokens and --data both name the text"},
      {"DataMissing", T + "--data missing.jsonl", "missing.jsonl"},
      {"DataNotJsonl", T + "--data afile", "afile"},
      // ---- names and kinds
      {"FlavorUnknown", "train --flavor nope --steps 1", "unknown --flavor 'nope'; accepted: debugmodel, tiny, k3shape, exact, exact-wide$"},
      {"FlavorShapeOnly", "train --flavor k3shape --steps 1", "shape-only"},
      {"OptionTwice", T + "--flavor tiny", "--flavor: At Most 1 required but received 2"},
      {"DtypeUnknown", T + "--dtype fp16", "unknown --dtype 'fp16'; accepted: fp32, bf16, bf16-master, fp64$"},
      {"DeviceUnknown", T + "--device tpu", "unknown --device 'tpu'; accepted: cpu, cuda$"},
      {"DeviceCudaWithoutCuda", T + "--device cuda", "--device cuda: this build or machine has no CUDA device"},
      {"ClipOrderUnknown", T + "--clip-order weird", "unknown --clip-order 'weird'; accepted: single, per-rank$"},
      {"GradAccumUnknown", T + "--grad-accum weird", "unknown --grad-accum 'weird'; accepted: auto, bf16, fp32$"},
      {"AttnResUnknown", T + "--attn-res weird", "unknown --attn-res 'weird'; accepted: fused, recompute, plain$"},
      {"KdaUnknown", T + "--kda weird", "unknown --kda 'weird'; accepted: fused, chunked, recurrent$"},
      {"TrainerUnknown", "train --trainer nope --flavor tiny", "unknown --trainer 'nope'; accepted: reference, pipelined$"},
      {"CacheUnknown", P + "--cache maybe", "unknown --cache 'maybe'; accepted: on, off$"},
      {"ScheduleUnknown", P + "--schedule weird", "unknown --schedule 'weird'; accepted: 1f1b, interleaved1f1b$"},
      // ---- combinations
      {"SplitForTheReference", T + "--split 'emb,0-8|9-16,head'", "--pp, --vp and --split shape a pipeline: give --trainer pipelined"},  // found
      {"PpForTheReference", T + "--pp 2", "--pp, --vp and --split shape a pipeline"},
      {"ScheduleForTheReference", T + "--schedule 1f1b", "--schedule needs --trainer pipelined"},
      {"SplitBad", P + "--split 'emb,0|2-16,head'", "split"},
      {"MoreStagesThanUnits", "train --trainer pipelined --flavor tiny --steps 1 --pp 64 --vp 16", "stage"},
      {"InjectForTheReference", T + "--inject drop-deposit:block=1,stage=3", "breaks the block-stack transport: it needs --trainer pipelined"},
      {"InjectGradFaultForThePipeline", P + "--inject zero-grad:param=norm.weight", "is a gradient fault of the reference trainer; give --trainer reference"},
      {"InjectZeroGradOfNoSuchParameter", T + "--inject zero-grad:param=nope", "flavor tiny has no parameter 'nope'"},
      {"InjectSwapOfTwoShapes", T + "--inject swap-grads:a=tok_embeddings.weight,b=norm.weight", "differ in shape; give two parameters of one shape"},
      {"InjectDropOfNoSuchMicrobatch", T + "--inject drop-microbatch:mb=5", "a step has 2 micro-batches \\(dp x --microbatches\\), 0 to 1"},
      {"InjectScaleByZero", T + "--inject scale-grads:factor=0", "factor 0 zeroes every gradient"},
      {"InjectGradFaultTwiceOneKey", T + "--inject drop-microbatch:mb=1,mb=0", "cannot read 'mb=0'"},
      {"InjectWithTheCacheOff", PV + "--cache off --inject drop-deposit:block=1,stage=3", "--inject needs --cache on"},
      {"InjectAtNoSuchStage", PV + "--inject drop-deposit:block=99,stage=99", "there is no stage 99 \\(the pipeline has 4, 0 to 3\\); see `parity layout"},  // found
      {"InjectAtNoSuchBlock", PV + "--inject drop-deposit:block=99,stage=3", "there is no block 99"},
      {"InjectWithNothingToBreak", PV + "--inject drop-deposit:block=1,stage=2", "stage 2 deposits no gradient of block 1"},
      {"InjectSkipCollectWithNothingToCollect", PV + "--inject skip-collect:block=3,stage=0", "stage 0 collects no deposit of block 3"},
      {"InjectAtNoSuchMicrobatch", PV + "--inject drop-deposit:block=1,stage=3,mb=9", "there is no micro-batch 9"},
      {"InjectUnreadable", PV + "--inject garbage", "--inject 'garbage': no ':'"},
      {"NprocNotTheWorld", P + "--nproc 3", "--nproc 3 is not dp x pp = 1 x 2; give --nproc 2"},
      {"NprocWithTheLedger", P + "--nproc 2 --ledger --dump out", "--ledger runs in-process only"},  // found
      {"NprocWithAMissingCheckpoint", P + "--nproc 2 --init missing.h5", "checkpoint 'missing.h5' does not exist"},  // found
      {"NprocForTheReference", T + "--nproc 2", "--nproc and --backend need --trainer pipelined"},
      {"BackendAlone", P + "--backend gloo", "--backend gloo needs --nproc N, or RANK and WORLD_SIZE"},
      {"BackendUnknown", P + "--nproc 2 --backend mpi", "unknown --backend 'mpi'; accepted: gloo, nccl$"},
      // ---- the multi-process environment
      {"RankWithoutWorldSize", P + "--backend gloo --dump out", "--backend gloo with RANK but no WORLD_SIZE in the environment; set both", 2, {{"RANK", "1"}}},  // found
      {"WorldSizeWithoutRank", P + "--backend gloo", "with WORLD_SIZE but no RANK", 2, {{"WORLD_SIZE", "2"}}},
      {"MasterPortTooLarge", P + "--backend gloo", "MASTER_PORT='99999' is not an integer from 1 to 65535", 2, rank_env({{"MASTER_PORT", "99999"}})},  // found
      {"MasterPortNotANumber", P + "--backend gloo", "MASTER_PORT='abc' is not an integer", 2, rank_env({{"MASTER_PORT", "abc"}})},
      {"RankOutsideTheWorld", P + "--backend gloo", "RANK='5' is not an integer from 0 to 1", 2, {{"RANK", "5"}, {"WORLD_SIZE", "2"}}},
      {"WorldSizeNotDpTimesPp", P + "--backend gloo", "WORLD_SIZE 3 is not dp x pp = 1 x 2", 2, {{"RANK", "1"}, {"WORLD_SIZE", "3"}}},
      {"LocalRankNegative", P + "--backend gloo", "LOCAL_RANK='-1'", 2, rank_env({{"LOCAL_RANK", "-1"}})},
      {"MasterAddrDoesNotResolve", P + "--backend gloo --timeout-s 3", "MASTER_ADDR 'nonsense' does not resolve \\(.*\\); give the host rank 0 runs on", 2, rank_env({{"MASTER_ADDR", "nonsense"}})},  // found
      {"ARankAloneFailsWithinItsTimeout", P + "--backend gloo --timeout-s 3", "rank 1: the rendezvous at 127.0.0.1:[0-9]+ (failed|did not complete).*start all 2 ranks", 2, kRank1, Case::kFree, 8},  // found
      {"RankZeroAloneFailsWithinItsTimeout", P + "--backend gloo --timeout-s 3", "rank 0: the rendezvous at 127.0.0.1:[0-9]+ (failed|did not complete)", 2, {{"RANK", "0"}, {"WORLD_SIZE", "2"}}, Case::kFree, 8},  // found
      {"APlainTcpListenerIsNoRendezvous", P + "--backend gloo --timeout-s 3", "rank 1: the rendezvous at 127.0.0.1:[0-9]+ (failed|did not complete within 3 s)", 2, kRank1, Case::kListener, 8},  // found
      // ---- bench
      {"BenchWarmupNegative", "bench --warmup-steps -1", "--warmup-steps: -1 is out of range"},  // found
      {"BenchMeasuredZero", "bench --measured-steps 0", "--measured-steps: 0 is out of range"},
      {"BenchWhatUnknown", "bench --what nope --flavor tiny",
       "unknown --what 'nope'; accepted: reference, step, pipelined, ratio, ac-ratio, "
       "threads-ratio, kda, compare, gemm"},
      {"BenchCompareWithoutDumps", "bench --what compare", "needs --a DUMP and --b DUMP"},
      {"BenchBreakdownWithKda", "bench --what kda --breakdown", "--breakdown goes with --what step"},
      {"BenchBreakdownMultiProcess", "bench --what pipelined --pp 2 --nproc 2 --breakdown --flavor tiny",
       "--breakdown times one process"},
      {"BenchRatioMultiProcess", "bench --what ratio --pp 2 --nproc 2 --flavor tiny",
       "--what ratio times the in-process pipeline"},
      {"BenchRatioMeasuredStepsZero", "bench --what ratio --measured-steps 0",
       "--measured-steps: 0 is out of range"},
      {"BenchThreadsRatioOneThread", "bench --what threads-ratio --flavor tiny",
       "--what threads-ratio times --threads N against one thread: give --threads 2 or more"},
      {"BenchAcRatioMultiProcess", "bench --what ac-ratio --nproc 2 --flavor tiny",
       "--what ac-ratio times the reference trainer in this process"},
      {"BenchThreadsHuge", "bench --threads 100000", "--threads: 100000 is out of range"},
      // ---- init and model
      {"InitOutEmpty", "init --flavor tiny --out ''", "--out: the path is empty"},
      {"InitSeedNegative", "init --flavor tiny --seed -1 --out x.h5", "--seed: '-1' is not an unsigned integer"},
      {"InitFlavorUnknown", "init --flavor nope --out x.h5", "unknown --flavor 'nope'; accepted: debugmodel, tiny, k3shape, exact, exact-wide$"},
      {"InitIntoAMissingDirectory", "init --flavor tiny --out nodir/x.h5", "nodir/x.h5"},
      {"ModelFlavorUnknown", "model --flavor nope", "unknown --flavor 'nope'; accepted: debugmodel, tiny, k3shape, exact, exact-wide$"},
      // ---- layout and schedule
      {"LayoutLayersHuge", "layout --layers 2000000000", "--layers: 2000000000 is out of range; give an integer from 1 to 1024"},  // found
      {"LayoutLayersZero", "layout --layers 0", "--layers: 0 is out of range"},
      {"LayoutBlockZero", "layout --block 0", "--block: 0 is out of range"},
      {"LayoutPpHuge", "layout --pp 100000", "--pp: 100000 is out of range"},
      {"LayoutMoreStagesThanUnits", "layout --layers 17 --pp 64 --vp 16", "stage"},
      {"LayoutSplitBad", "layout --split 'emb,0|5-16,head'", "split"},
      {"ScheduleHuge", "schedule --pp 100000 --microbatches 100000", "--pp: 100000 is out of range"},  // found
      {"ScheduleMicrobatchesHuge", "schedule --microbatches 100000", "--microbatches: 100000 is out of range"},  // found
      {"ScheduleMicrobatchesZero", "schedule --microbatches 0", "--microbatches: 0 is out of range"},
      {"ScheduleKindUnknown", "schedule --schedule weird", "unknown --schedule 'weird'; accepted: 1f1b, interleaved1f1b$"},
      // ---- compare and localise
      {"CompareMaxUlpNegative", "compare A B --max-ulp -1", "--max-ulp: '-1' is not an unsigned integer"},  // found
      {"CompareThreadsHuge", "compare A B --threads 100000", "--threads: 100000 is out of range"},  // found
      {"CompareThreadsZero", "compare A B --threads 0", "--threads: 0 is out of range"},
      {"CompareMissing", "compare missing A", "'missing' does not exist; give a dump, a torch.save"},
      {"CompareEmptyPath", "compare '' A", "the path is empty"},
      {"CompareEmptyDirectory", "compare adir A", "directory 'adir' holds no file; give a run's files"},
      {"CompareNotHdf5", "compare afile A", "afile"},
      {"CompareACheckpoint", "compare A ckpt.h5", "'ckpt.h5' is a parity seed checkpoint \\(parity init\\), not a run"},
      {"CompareTruthMissing", "compare A B --truth missing", "'missing' does not exist; give a dump"},
      {"CompareMixedRunsNamesTheRemedy", "compare mixed A", "mixes runs: rerun into an empty directory"},  // found
      {"CompareFewerFilesThanItsRunWrote", "compare D4 C", "holds 4 rank files, but its run wrote 2"},  // found
      {"LocaliseThreadsNegative", "localise A B --threads -1", "--threads: -1 is out of range"},  // found
      {"LocaliseThreadsHuge", "localise A B --threads 100000", "--threads: 100000 is out of range"},  // found
      {"LocaliseWithoutALedger", "localise C A", "ledger"},
      {"LocaliseMissing", "localise missing B", "dump 'missing' does not exist"},
      // ---- truth: the checkpoint, the batch, the gradients and the layout must fit
      {"TruthCheckpointOfAnotherFlavor", "truth A --flavor debugmodel --init ckpt.h5 --seq-len 16 --microbatches 2", "'ckpt.h5' holds flavor 'tiny' but the run uses 'debugmodel'"},
      {"TruthBatchTooShort", "truth A --flavor tiny --init ckpt.h5 --tokens ids34.npy --seq-len 16 --microbatches 4", "--tokens 'ids34.npy' holds 34 tokens, which make only 2"},
      {"TruthGradientsOfAnotherModel", "truth A --flavor debugmodel --seq-len 16 --microbatches 2", "run 'A': gradient 'tok_embeddings.weight' has shape \\[2048, 32\\], the flavor's parameter \\[2048, 256\\]: gradients of another model"},
      {"TruthLayoutNotTheRuns", "truth B --flavor tiny --init ckpt.h5 --seq-len 16 --microbatches 2 --layout pp=2", "--layout pp=2 splits flavor tiny as '.*', but run 'B' ran split '.*': give the layout the run used"},
      {"TruthLayoutTooManyStages", "truth A --flavor tiny --init ckpt.h5 --seq-len 16 --microbatches 2 --layout pp=64,vp=16", "--layout 'pp=64,vp=16': 1024 stages for 17 layers"},
      {"TruthLayoutScheduleNeedsMoreMicrobatches", "truth A --flavor tiny --init ckpt.h5 --seq-len 16 --microbatches 2 --layout pp=4", "--layout 'pp=4': schedule 1f1b needs microbatches >= pp"},
      {"TruthLayoutUnknownKey", "truth A --flavor tiny --seq-len 16 --microbatches 2 --layout pp=2,zz=1", "--layout 'pp=2,zz=1': unknown key 'zz'"},
      {"TruthLayoutPerRunMiscounted", "truth A A --flavor tiny --seq-len 16 --microbatches 2 --layout pp=2 --layout pp=2 --layout pp=2", "--layout given 3 times for 2 runs"},
      {"TruthNoSuchRun", "truth nope.pt --flavor tiny --seq-len 16 --microbatches 2", "'nope.pt' does not exist"},
      {"TruthNoSuchLog", "truth A --flavor tiny --init ckpt.h5 --seq-len 16 --microbatches 2 --log nope.log", "log 'nope.log': does not exist"},
      {"TruthMarginBelowOne", "truth A --flavor tiny --margin 0.5", "--margin: 0.5 is out of range"},
      // ---- memory, and activation checkpointing
      {"MemoryMultiProcess", "memory --flavor tiny --seq-len 16 --microbatches 2 --trainer pipelined --pp 2 --nproc 2", "memory counts the allocations of one process: drop --nproc"},
      {"MemoryLayersWithInit", "memory --flavor tiny --seq-len 16 --microbatches 2 --layers 8 --init ckpt.h5", "--layers 8 changes the flavor's depth, which --init 'ckpt.h5' fixes"},
      {"MemoryLayersZero", "memory --flavor tiny --layers 0", "--layers: 0 is out of range"},
      {"MemorySnapshotInNoDirectory", "memory --flavor tiny --seq-len 16 --microbatches 2 --snapshot nodir/s.pickle", "--snapshot"},
      {"AcUnknown", T + "--ac some", "unknown --ac 'some'; accepted: none, layer$"},
      {"AcWithTheLedger", T + "--ac layer --ledger --dump out", "--ledger taps each stack read once, and --ac layer runs every read again"},
      // ---- closed-form
      {"ClosedFormStepsHuge", "closed-form --steps 1000000000", "--steps: 1000000000 is out of range; give an integer from 1 to 100"},  // found
      {"ClosedFormThreadsZero", "closed-form --threads 0", "--threads: 0 is out of range"},  // found
      {"ClosedFormDtypeUnknown", "closed-form --dtype weird", "unknown --dtype 'weird'; accepted: fp32, bf16, bf16-master, fp64$"},
      {"ClosedFormWideInBf16", "closed-form --wide --dtype bf16", "wide"},
      {"ClosedFormTrainerUnknown", "closed-form --trainer weird", "unknown --trainer 'weird'"},
      {"ClosedFormShapeForTheReference", "closed-form --trainer reference --pp 2", "need --trainer pipelined"},
      {"ClosedFormInjectAtNoSuchStage", "closed-form --pp 4 --vp 4 --inject drop-deposit:block=99,stage=99", "there is no stage 99"},
      {"ClosedFormCacheUnknown", "closed-form --pp 2 --cache maybe", "unknown --cache 'maybe'; accepted: on, off$"},
      // ---- matrix run
      {"MatrixFileIsADirectory", "matrix run adir --out o", "'adir' is a directory; give a matrix file"},  // found
      {"MatrixFileMissing", "matrix run missing.toml --out o", "cannot read matrix file 'missing.toml'"},
      {"MatrixFileNotToml", "matrix run bad.toml --out o", "bad.toml:2: not valid TOML"},
      {"MatrixStepsZero", "matrix run m.toml --out o --steps 0", "--steps: 0 is out of range"},  // found
      {"MatrixJobsNegative", "matrix run m.toml --out o --jobs -1", "--jobs: -1 is out of range"},  // found
      {"MatrixJobsZero", "matrix run m.toml --out o --jobs 0", "--jobs: 0 is out of range"},
      {"MatrixOutIsAFile", "matrix run m.toml --out afile", "--out 'afile' is a file"},
      {"MatrixOutHoldsSomethingElse", "matrix run m.toml --out full", "--out 'full' is not empty and holds no earlier matrix run"},
      {"MatrixUnknownFlavorUpFront", "matrix run flavor.toml --out o", "cell 'ref'.*nosuchflavor"},  // found
      {"MatrixHistoryIsADirectoryUpFront", "matrix run m.toml --out o --history adir", "--history 'adir' is a directory"},  // found
      {"MatrixOnlyUnknown", "matrix run m.toml --out o --only nope", "--only: no cell named 'nope'"},
      {"MatrixInjectUnknownCell", "matrix run m.toml --out o --inject nope=drop-deposit:block=1,stage=3", "--inject: no cell named 'nope'"},
      {"MatrixInjectWithNothingToBreak", "matrix run m.toml --out o --inject cached=drop-deposit:block=1,stage=2", "cell 'cached'.*stage 2 deposits no gradient of block 1"},
      {"MatrixCellTimeoutNegative", "matrix run m.toml --out o --cell-timeout-s -1", "--cell-timeout-s: -1 is out of range"},
      {"MatrixLastZero", "matrix run m.toml --out o --last 0", "--last: 0 is out of range"},
      // ---- report
      {"ReportOutUnwritable", "report R --out /proc/x", "cannot write '/proc/x': .*; give a path you can write"},  // found
      {"ReportOutIsADirectory", "report R --out adir", "--out 'adir' is a directory"},
      {"ReportOfADirectoryWithoutResults", "report adir", "results.json"},
      {"ReportFormatUnknown", "report R --format weird", "unknown --format 'weird'; accepted: txt, md, json, csv, html"},
      {"ReportHistoryMissing", "report R --history missing.jsonl", "--history 'missing.jsonl' does not exist"},
      {"ReportLastZero", "report R --last 0", "--last: 0 is out of range"},
      // ---- gate: what cannot run is 125 (git bisect's "skip"), a bad command line is 2
      {"GateMatrixMissing", "gate --matrix missing.toml", "cannot run: cannot read matrix file", 125},
      {"GateOutIsAFile", "gate --matrix m.toml --out afile --no-closed-forms", "cannot run: --out 'afile' is a file", 125},
      {"GateJobsNegative", "gate --jobs -1", "--jobs: -1 is out of range"},
      {"GateNoGatedCell", "gate --matrix ungated.toml", "has no gated cell", 125},
      {"GateUnknownFlavor", "gate --matrix flavor.toml",
       "cannot run: flavor.toml:4 \\(cell 'ref'\\), key 'flavor': unknown flavor 'nosuchflavor'; "
       "accepted: debugmodel, tiny, k3shape, exact, exact-wide$", 125},
  };
  return c;
}

class BadInput : public ::testing::TestWithParam<Case> {};

TEST_P(BadInput, IsOneLineAndLeavesEverythingAsItWas) {
  const Case& c = GetParam();
  Sandbox box(c.id);
  auto env = c.env;
  int sock = -1, port = 0;
  if (c.port != Case::kAsGiven) {
    sock = parity::testing::loopback_socket(port, c.port == Case::kListener);
    if (c.port == Case::kFree) ::close(sock);
    env["MASTER_PORT"] = std::to_string(port);
  }
  const RunResult r = box.run(words(c.args), env, c.max_s);
  if (c.port == Case::kListener) ::close(sock);
  SCOPED_TRACE("parity " + c.args);
  ASSERT_FALSE(r.timed_out) << r.how() << "\n" << r.err;
  ASSERT_FALSE(r.signalled()) << r.how() << "\n" << r.err;
  EXPECT_EQ(r.code(), c.exit) << r.err << r.out;
  // One line, and it says what is wrong.
  std::string line = r.err;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.find('\n'), std::string::npos) << "more than one line:\n" << r.err;
  EXPECT_TRUE(std::regex_search(line, std::regex(c.pattern))) << "pattern: " << c.pattern << "\n" << line;
  EXPECT_EQ(line.find("Exception raised from"), std::string::npos) << line;
  EXPECT_EQ(line.rfind("parity", 0), 0u) << line;  // "parity: ..." or "parity gate: ..."
  // Nothing changed, nothing left.
  EXPECT_EQ(box.changes(), "") << "the run changed its directory";
  EXPECT_EQ(box.left_in_tmp(), "") << "the run left files in TMPDIR";
}

INSTANTIATE_TEST_SUITE_P(Cases, BadInput, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.id); });

TEST(BadInputTable, HasAtLeast120CasesWithDistinctNames) {
  std::set<std::string> names;
  for (const auto& c : cases()) EXPECT_TRUE(names.insert(c.id).second) << c.id;
  EXPECT_GE(cases().size(), 120u);
}

// ---- stops: a run signalled mid-way exits 128 + the signal and leaves nothing behind

// Waits (up to 20 s) until the run has started writing: a temporary file under its directory
// (whose path contains `part`, when given).
bool wait_for_temporary(const Sandbox& box, const std::string& part = "") {
  for (int i = 0; i < 2000; ++i) {
    if (box.temporaries_left().find(part) != std::string::npos &&
        !box.temporaries_left().empty())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Waits (up to 20 s) until a metrics file in `dir`, still a temporary (`prefix`.tmp.*), holds
// its first step's line: the run is in the middle of training.
bool wait_for_step_line(const fs::path& dir, const std::string& prefix) {
  for (int i = 0; i < 2000; ++i) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix + ".tmp.", 0) == 0 &&
          read_file(e.path()).find("\"step\"") != std::string::npos)
        return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

struct Stop {
  const char* id;
  std::string args;
  int sig;
  bool group;  // the signal goes to the whole process group (a Ctrl-C in a terminal)
};

class StopTest : public ::testing::TestWithParam<Stop> {};

TEST_P(StopTest, ExitsWith128PlusTheSignalAndLeavesNothing) {
  const Stop& s = GetParam();
  Sandbox box(s.id);
  bool started = false;
  const RunResult r = box.run(words(s.args), {}, 60, [&](pid_t pid) {
    started = wait_for_step_line(box.cwd(), "old.jsonl");
    ::kill(s.group ? -pid : pid, s.sig);
  });
  SCOPED_TRACE("parity " + s.args);
  ASSERT_TRUE(started) << "the run wrote nothing to stop in the middle of\n" << r.err;
  ASSERT_TRUE(r.exited()) << r.how() << "\n" << r.err;
  EXPECT_EQ(r.code(), 128 + s.sig) << r.err;
  EXPECT_EQ(box.temporaries_left(), "");
  EXPECT_EQ(box.left_in_tmp(), "");
  // The old outputs are as they were, and nothing new is left (a dump directory the run made is
  // gone again).
  EXPECT_EQ(box.changes(), "");
}

const std::string kLong = "train --flavor tiny --steps 500 --seq-len 64 --microbatches 2 --quiet "
                          "--metrics old.jsonl --summary old.json --dump out ";
const std::string kLongProc = "train --trainer pipelined --flavor tiny --pp 2 --steps 500 "
                              "--seq-len 64 --microbatches 2 --quiet --nproc 2 --backend gloo "
                              "--metrics old.jsonl --dump out ";

INSTANTIATE_TEST_SUITE_P(
    Signals, StopTest,
    ::testing::Values(Stop{"TrainTerm", kLong, SIGTERM, false},  // found
                      Stop{"TrainInt", kLong, SIGINT, false},    // found
                      Stop{"TrainHup", kLong, SIGHUP, false},
                      Stop{"LauncherAloneTerm", kLongProc, SIGTERM, false},  // found
                      Stop{"LauncherAloneInt", kLongProc, SIGINT, false},    // found
                      Stop{"CtrlCToTheWholeRun", kLongProc, SIGINT, true}),  // found
    [](const auto& info) { return std::string(info.param.id); });

// A launcher killed outright (SIGKILL cannot be caught): its workers stop on their own
// (PR_SET_PDEATHSIG), remove their temporary files and leave no process.
TEST(StopKill, AKilledLauncherTakesItsWorkersWithIt) {
  Sandbox box("kill");
  // The kill comes once the workers write their rank files: before they exist, a SIGKILL of
  // the launcher could leave the metrics file it had just opened, and nothing can catch it.
  const RunResult r = box.run(words(kLongProc), {}, 60, [&](pid_t pid) {
    wait_for_temporary(box, "out/rank");
    ::kill(pid, SIGKILL);
  });
  EXPECT_TRUE(r.signalled() || r.status == -1) << r.how();
  EXPECT_EQ(r.err.find("outlived it"), std::string::npos) << r.err;
  // The workers clean up after the launcher is gone: give them a moment.
  for (int i = 0; i < 500 && !box.temporaries_left().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(box.temporaries_left(), "");
}

// A matrix run stopped mid-cell keeps results.json (what finished) and leaves no temporary
// file and no process; a cell stopped by --cell-timeout-s likewise.
TEST(StopMatrix, ATermStopsTheCellsAndLeavesNoTemporary) {
  Sandbox box("matrix");
  bool started = false;
  std::ofstream(box.cwd() / "long.toml")
      << "name = \"long\"\n[defaults]\nflavor = \"tiny\"\nseq_len = 64\n[[cell]]\nname = "
         "\"ref\"\nsteps = 500\n[[cell]]\nname = \"two\"\nreference = \"ref\"\nsteps = 1\n";
  const RunResult r = box.run(words("matrix run long.toml --out run --jobs 1 --quiet"), {}, 60,
                              [&](pid_t pid) {
                                // The first cell's metrics file holds its first step.
                                started = wait_for_step_line(box.cwd() / "run/cells/ref",
                                                             "metrics.jsonl");
                                ::kill(pid, SIGTERM);
                              });
  ASSERT_TRUE(started) << "the cell never logged a step\n" << r.err;
  ASSERT_TRUE(r.exited()) << r.how() << r.err;
  EXPECT_EQ(r.code(), 128 + SIGTERM) << r.err;
  EXPECT_TRUE(fs::exists(box.cwd() / "run/results.json"));
  EXPECT_EQ(box.temporaries_left(), "");
  EXPECT_EQ(box.left_in_tmp(), "");
}

TEST(StopMatrix, ACellTimeoutLeavesNoTemporary) {
  Sandbox box("timeout");
  // 100000 steps: no machine finishes them in 6 s, so the timeout is the only way the cell ends.
  std::ofstream(box.cwd() / "long.toml")
      << "name = \"long\"\n[defaults]\nflavor = \"tiny\"\nseq_len = 64\n[[cell]]\nname = "
         "\"ref\"\nsteps = 100000\n";
  const RunResult r =
      box.run(words("matrix run long.toml --out run --jobs 1 --quiet --cell-timeout-s 6"), {}, 60);
  ASSERT_TRUE(r.exited()) << r.how() << r.err;
  EXPECT_EQ(r.code(), 1) << r.err;  // the cell failed: stopped after its time
  EXPECT_NE(read_file(box.cwd() / "run/results.json").find("stopped after"), std::string::npos);
  EXPECT_EQ(box.temporaries_left(), "");
  EXPECT_EQ(box.left_in_tmp(), "");
}

}  // namespace
