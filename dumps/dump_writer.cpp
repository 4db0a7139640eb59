// Writing run dumps (dump.h): DumpWriter, a step observer, and the ledger groups it stores.
#include "dumps/dump.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "dumps/temp_files.h"
#include "kernels/ledger.h"
#include "kernels/vector_kernels.h"

namespace parity::dumps {

namespace fs = std::filesystem;

std::string step_group(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "/step_%06lld", static_cast<long long>(step));
  return buf;
}

namespace {

h5::DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return h5::DType::F32;
    case at::kDouble: return h5::DType::F64;
    case at::kBFloat16: return h5::DType::BF16;
    case at::kLong: return h5::DType::I64;
    case at::kInt: return h5::DType::I32;
    default:
      throw DumpError(std::string("dump: cannot store a tensor of dtype ") +
                      c10::toString(t.scalar_type()));
  }
}

void write_tensor(h5::File& f, const std::string& path, const at::Tensor& t) {
  auto c = t.detach().to(at::kCPU).contiguous();
  h5::write(f, path, dtype_of(c), c.sizes().vec(), c.data_ptr());
}

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The ledger layout of dumps/ledger_dump.h.
void write_ledger(h5::File& f, const std::string& g, const kernels::Ledger& l) {
  nlohmann::json reads = nlohmann::json::array(), commits = nlohmann::json::array();
  nlohmann::json hops = nlohmann::json::array(), events = nlohmann::json::array();
  std::map<std::pair<int, int>, std::vector<at::Tensor>> rows;
  for (const auto& r : l.reads) {
    int row = -1;
    if (r.grad.defined()) {
      auto& v = rows[{r.mb, r.block}];
      row = static_cast<int>(v.size());
      v.push_back(r.grad);
    }
    reads.push_back({{"mb", r.mb}, {"block", r.block}, {"reader", r.reader}, {"unit", r.unit},
                     {"hash", hex(r.hash)}, {"row", row}});
  }
  for (const auto& c : l.commits) {
    commits.push_back({{"mb", c.mb}, {"block", c.block}, {"unit", c.unit}, {"hash", hex(c.hash)},
                       {"grad", c.grad.defined()}});
    if (c.grad.defined())
      write_tensor(f, g + "/mb" + std::to_string(c.mb) + "/b" + std::to_string(c.block) + "/grad",
                   c.grad);
  }
  for (const auto& [key, v] : rows)
    write_tensor(f,
                 g + "/mb" + std::to_string(key.first) + "/b" + std::to_string(key.second) +
                     "/contributions",
                 at::stack(v));
  for (const auto& h : l.hops)
    hops.push_back({{"mb", h.mb}, {"from", h.from}, {"to", h.to}, {"dir", h.forward ? "F" : "B"},
                    {"tensor", h.tensor}, {"hash", hex(h.hash)}});
  for (const auto& e : l.events)
    events.push_back({{"kind", e.kind}, {"mb", e.mb}, {"block", e.block}, {"stage", e.stage},
                      {"count", e.count}});
  const std::string text =
      nlohmann::json{{"reads", reads}, {"commits", commits}, {"hops", hops}, {"events", events}}
          .dump();
  h5::write(f, g + "/index.json", h5::DType::U8, {static_cast<int64_t>(text.size())}, text.data());
}

}  // namespace

std::string new_run_id() {
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return std::string(host) + "-" + std::to_string(static_cast<long>(::getpid())) + "-" +
         std::to_string(static_cast<long long>(ns));
}

DumpWriter::DumpWriter(std::string dir, std::set<int64_t> steps, std::string git_sha, int rank,
                       std::set<std::string> only, std::string run_id, int files)
    : dir_(std::move(dir)),
      git_sha_(std::move(git_sha)),
      run_id_(run_id.empty() ? new_run_id() : std::move(run_id)),
      files_(files),
      steps_(std::move(steps)),
      rank_(rank),
      only_(std::move(only)) {
  std::error_code ec;
  // A directory made here goes again if the run is stopped before it wrote a file into it.
  created_dir_ = dumps::make_temp_dir(dir_, ec);
  if (ec) throw DumpError("cannot create dump directory '" + dir_ + "': " + ec.message());
  path_ = (fs::path(dir_) / ("rank" + std::to_string(rank_) + ".h5")).string();
}

DumpWriter::~DumpWriter() {
  if (!file_) return;
  try {
    finish(/*complete=*/false);
  } catch (...) {  // a destructor must not throw; the temp file is removed by h5::File
  }
}

void DumpWriter::on_start(const kernels::RunInfo& info) {
  file_ = std::make_unique<h5::File>(h5::File::create(path_));
  auto& f = *file_;
  nlohmann::json cfg = {{"trainer", info.trainer},
                        {"flavor", info.flavor},
                        {"dtype", info.precision},
                        {"grad_accum", info.grad_accum},
                        {"clip_order", info.clip_order},
                        {"attn_res", info.attn_res_impl},
                        {"kda", info.kda_impl},
                        {"device", info.device},
                        {"seed", info.seed},
                        {"threads", info.threads},
                        {"steps", info.steps},
                        {"microbatches", info.microbatches},
                        {"rows", info.rows},
                        {"seq_len", info.seq_len},
                        {"dp", info.dp},
                        {"reverse_microbatches", info.reverse_microbatches}};
  fqns_ = info.fqns;
  std::string split = "single device", grid;
  for (const auto& [k, v] : info.extra) {
    cfg[k] = v;
    if (k == "split") split = v;
    if (k == "schedule_grid") grid = v;
  }
  h5::create_group(f, "/meta");
  h5::set_attr(f, "/meta", "schema", "parity-dump");
  h5::set_attr(f, "/meta", "schema_version", kDumpSchemaVersion);
  h5::set_attr(f, "/meta", "git_sha", git_sha_);
  h5::set_attr(f, "/meta", "config", cfg.dump());
  h5::set_attr(f, "/meta", "trainer", info.trainer);
  h5::set_attr(f, "/meta", "flavor", info.flavor);
  h5::set_attr(f, "/meta", "dtype", info.precision);
  h5::set_attr(f, "/meta", "device", info.device);
  h5::set_attr(f, "/meta", "torch_version", std::string(TORCH_VERSION));
  // The determinism the run had (on CUDA: deterministic algorithms and the cuBLAS workspace
  // that make a repeat bitwise; kernels/threads.h).
  h5::set_attr(f, "/meta", "deterministic_algorithms",
               static_cast<int64_t>(at::globalContext().deterministicAlgorithms() ? 1 : 0));
  const char* cublas = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  h5::set_attr(f, "/meta", "cublas_workspace_config", std::string(cublas ? cublas : ""));
  h5::set_attr(f, "/meta", "threads", static_cast<int64_t>(info.threads));
  h5::set_attr(f, "/meta", "vector_kernels", kernels::vector_kernels_text());
  h5::set_attr(f, "/meta", "seed", static_cast<int64_t>(info.seed));
  h5::set_attr(f, "/meta", "split", split);
  h5::set_attr(f, "/meta", "schedule_grid", grid);
  h5::set_attr(f, "/meta", "rank", static_cast<int64_t>(rank_));
  h5::set_attr(f, "/meta", "run_id", run_id_);
  h5::set_attr(f, "/meta", "files", static_cast<int64_t>(files_));
  std::string fqns;
  for (const auto& n : info.fqns) fqns += (fqns.empty() ? "" : "\n") + n;
  h5::set_attr(f, "/meta", "fqns", fqns);
}

void DumpWriter::on_step(const kernels::StepRecord& r) {
  if (!file_) return;
  losses_.push_back(r.loss.item<double>());
  norms_.push_back(r.grad_norm.item<double>());
  if (!steps_.count(r.step)) return;
  auto& f = *file_;
  const auto g = step_group(r.step);
  write_tensor(f, g + "/loss", r.loss);
  write_tensor(f, g + "/grad_norm", r.grad_norm);
  write_tensor(f, g + "/mb_losses", at::stack(r.mb_losses));
  h5::create_group(f, g + "/grads");
  h5::create_group(f, g + "/params");
  if (!r.grads || !r.params) return;
  const auto& names = fqns_;
  for (size_t i = 0; i < r.grads->size(); ++i) {
    if (!only_.empty() && !only_.count(names.at(i))) continue;
    write_tensor(f, g + "/grads/" + names.at(i), (*r.grads)[i]);
    write_tensor(f, g + "/params/" + names.at(i), (*r.params)[i]);
  }
  if (r.buffers && !r.buffers->empty() && (only_.empty() || rank_ == 0)) {
    h5::create_group(f, g + "/buffers");
    for (size_t i = 0; i < r.buffers->size(); ++i)
      write_tensor(f, g + "/buffers/" + r.buffer_names->at(i), (*r.buffers)[i]);
  }
  if (r.ledger) write_ledger(f, g + "/ledger", *r.ledger);
}

void DumpWriter::on_end() { finish(/*complete=*/true); }

void DumpWriter::on_abort() {
  if (file_) finish(/*complete=*/false);
}

void DumpWriter::finish(bool complete) {
  auto& f = *file_;
  const int64_t n = static_cast<int64_t>(losses_.size());
  h5::write(f, "/metrics/loss", h5::DType::F64, {n}, losses_.data());
  h5::write(f, "/metrics/grad_norm", h5::DType::F64, {n}, norms_.data());
  h5::set_attr(f, "/meta", "complete", static_cast<int64_t>(complete ? 1 : 0));
  f.commit();
  file_.reset();
  if (!created_dir_.empty()) dumps::unregister_temp_dir(created_dir_);
}

}  // namespace parity::dumps
