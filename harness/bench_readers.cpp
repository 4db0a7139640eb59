// `parity bench --what readers`: how long parity's readers take on the largest inputs a user
// may hand them. It writes, into a fresh directory under $TMPDIR (removed afterwards):
//   * two torchtitan console logs of --log-steps steps each (the second's losses differ in the
//     last digit every seventh step), and times reading one, then `drift` over the two (the
//     whole command: both reads, the table, the report file);
//   * two safetensors files of --entries one-element float32 tensors each, and times reading
//     one's header and tensors, then reading both as `compare` does and comparing them.
// Each figure is one measurement in this process, taken after the files were written (so they
// are in the page cache), in seconds of wall time.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>

#include "compare/dump_compare.h"
#include "dumps/external.h"
#include "dumps/training_log.h"
#include "harness/bench.h"
#include "harness/drift.h"
#include "harness/errors.h"

namespace parity::harness {

namespace {

namespace fs = std::filesystem;

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A directory of its own, removed with everything in it when the bench ends (or throws).
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/parity-bench-XXXXXX";
    if (!mkdtemp(pattern.data()))
      throw std::runtime_error("bench --what readers: cannot create a directory like " + pattern +
                               ": " + std::strerror(errno) + " (set TMPDIR to a writable one)");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_or_throw(std::ofstream& f, const std::string& path) {
  if (!f) throw std::runtime_error("bench --what readers: cannot write " + path);
}

// A torchtitan console log: one metrics line per step, as its logger prints them.
void write_titan_log(const std::string& path, int64_t steps, bool perturbed) {
  std::ofstream f(path, std::ios::binary);
  std::string line;
  char buf[512];
  for (int64_t s = 1; s <= steps; ++s) {
    const double loss = 10.0 / double(s % 1000 + 1) + ((perturbed && s % 7 == 0) ? 1e-6 : 0.0);
    const int n = std::snprintf(buf, sizeof buf,
                                "[rank0]:[titan] 2026-01-01 00:00:00,000 - root - INFO - step: %lld"
                                "  loss: %.6f  grad_norm: %.4f  memory: 1.00GiB(1.00%%)  "
                                "tps: 1,000  tflops: 1.00  mfu: 1.00%%\n",
                                static_cast<long long>(s), loss, 1.0 + double(s % 13) / 16.0);
    if (n < 0 || size_t(n) >= sizeof buf) throw std::logic_error("bench: a log line overflows");
    line.append(buf, size_t(n));
    if (line.size() > (1u << 20)) {
      f << line;
      line.clear();
    }
  }
  f << line;
  f.flush();
  write_or_throw(f, path);
}

// A safetensors file of `entries` float32 tensors of shape [1], named t<i>, laid end to end.
void write_safetensors(const std::string& path, int64_t entries, float bias) {
  std::string header = "{";
  for (int64_t i = 0; i < entries; ++i) {
    if (i) header += ',';
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  unsigned char len[8];
  for (int b = 0; b < 8; ++b) len[b] = static_cast<unsigned char>(n >> (8 * b));
  f.write(reinterpret_cast<const char*>(len), 8);
  f << header;
  std::string data(size_t(4 * entries), '\0');
  for (int64_t i = 0; i < entries; ++i) {
    const float v = float(i % 4096) / 64.0f + bias;
    std::memcpy(&data[size_t(4 * i)], &v, 4);  // little-endian, as this machine stores it
  }
  f << data;
  f.flush();
  write_or_throw(f, path);
}

}  // namespace

int bench_readers(const BenchOptions& o) {
  if (o.log_steps < 1 || o.entries < 1)
    throw UsageError("bench --what readers needs --log-steps and --entries of at least 1");
  ScratchDir dir;
  const auto ref = dir.file("ref.log"), cell = dir.file("cell.log");
  std::fprintf(stderr, "writing two torchtitan logs of %lld steps\n",
               static_cast<long long>(o.log_steps));
  write_titan_log(ref, o.log_steps, false);
  write_titan_log(cell, o.log_steps, true);
  size_t logged = 0;
  const double read_log = seconds_of([&] { logged = dumps::read_training_log(ref).steps.size(); });
  DriftJob job;
  job.reference = ref;
  job.cells = {cell};
  job.out = dir.file("drift.txt");
  int drift_rc = 0;
  const double drift = seconds_of([&] { drift_rc = drift_command(job); });
  if (drift_rc != 0)
    throw std::runtime_error("bench --what readers: drift over the written logs exited " +
                             std::to_string(drift_rc));

  const auto a = dir.file("a.safetensors"), b = dir.file("b.safetensors");
  std::fprintf(stderr, "writing two safetensors files of %lld entries\n",
               static_cast<long long>(o.entries));
  write_safetensors(a, o.entries, 0.0f);
  write_safetensors(b, o.entries, 1.0f / 1024.0f);
  size_t tensors = 0;
  const double read_st = seconds_of([&] { tensors = dumps::read_tensor_file(a).size(); });
  size_t rows = 0;
  const double cmp = seconds_of([&] {
    const auto A = dumps::read_run(a), B = dumps::read_run(b);
    rows = compare::compare_dumps(A, B, o.run.threads).size();
  });

  std::printf("%-44s %12s %10s\n", "reader", "entries", "seconds");
  std::printf("%-44s %12zu %10.3f\n", "torchtitan log: read one", logged, read_log);
  std::printf("%-44s %12zu %10.3f\n", "torchtitan logs: drift over two (command)", logged, drift);
  std::printf("%-44s %12zu %10.3f\n", "safetensors: read one (header + tensors)", tensors, read_st);
  std::printf("%-44s %12zu %10.3f\n", "safetensors: read two as compare, compare", rows, cmp);
  return 0;
}

}  // namespace parity::harness
