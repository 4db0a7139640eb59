// The bounds every command puts on its numbers, so that a typo is refused in one line before
// anything runs, rather than allocating without bound or running for a week. Each is far above
// what a verification run needs.
#pragma once

#include <cstdint>
#include <string_view>

namespace parity::spec {

constexpr int64_t kMaxSteps = 1'000'000;
constexpr int64_t kMaxMicrobatches = 1024;
constexpr int64_t kMaxRows = 4096;         // rows per micro-batch
constexpr int64_t kMaxSeqLen = 65536;
constexpr int64_t kMaxRanks = 64;          // pp, dp, nproc
constexpr int64_t kMaxVirtualStages = 16;  // vp
constexpr int64_t kMaxLayers = 1024;       // parity layout
constexpr int64_t kMaxClosedFormSteps = 100;
constexpr int64_t kMaxBenchSteps = 1000;
constexpr double kMaxLr = 1e12;  // a divergence on purpose takes 1e9
constexpr double kMaxTimeoutS = 86400;
constexpr double kMaxMaxNorm = 1e6;  // the clipping threshold
constexpr int64_t kMaxTokenId = 2147483647;  // token ids are int32 (--bos-id, --eos-id)

// Threads (intra-op or comparison): at most 4 x the cores this machine has.
int max_threads();

// The most bytes one tensor read from a file may take in memory: 2 GiB, or the environment's
// PARITY_MAX_TENSOR_BYTES (a positive integer). A file whose tensor would take more is refused
// before anything is allocated: an HDF5 dataset's declared shape can promise far more than the
// file holds (fill values, compression).
int64_t max_tensor_bytes();

// The largest file parity reads whole into memory (a torch.save archive, a safetensors file):
// 8 GiB, or the environment's PARITY_MAX_FILE_BYTES (a positive integer). Refused before it is
// read.
int64_t max_file_bytes();

// The deepest a JSON document read from a file may nest (objects and arrays): every format
// parity reads nests 4 deep at most. A deeper one is refused before it is parsed, since
// building, copying or printing a JSON value recurses once per level.
constexpr int64_t kMaxJsonDepth = 64;

// The nesting depth of the JSON text `text` (0 for a scalar), counted by one scan without
// recursion: brackets inside strings are skipped. The scan stops once the depth passes
// `stop_after`, so a hostile file costs no more than its length.
int64_t json_depth(std::string_view text, int64_t stop_after = kMaxJsonDepth);

// The largest text file parity reads whole (a training log, a metrics file, golden values, a
// results or history file): 1 GiB, some 15 million logged steps.
constexpr int64_t kMaxTextBytes = int64_t{1} << 30;

}  // namespace parity::spec
