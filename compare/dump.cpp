#include "compare/dump.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "kernels/ledger.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace parity::compare {

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

// The ledger layout of compare/ledger_dump.h.
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

DumpWriter::DumpWriter(std::string dir, std::set<int64_t> steps, std::string git_sha, int rank,
                       std::set<std::string> only)
    : dir_(std::move(dir)),
      git_sha_(std::move(git_sha)),
      steps_(std::move(steps)),
      rank_(rank),
      only_(std::move(only)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw DumpError("cannot create dump directory '" + dir_ + "': " + ec.message());
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
  h5::set_attr(f, "/meta", "seed", static_cast<int64_t>(info.seed));
  h5::set_attr(f, "/meta", "split", split);
  h5::set_attr(f, "/meta", "schedule_grid", grid);
  h5::set_attr(f, "/meta", "rank", static_cast<int64_t>(rank_));
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
}

// ---- reading ----

namespace {

std::string remedy() {
  return "regenerate it with `parity train ... --dump DIR --dump-steps ...`";
}

void read_file_into(const std::string& path, Dump& d, bool first) {
  try {
    auto f = h5::File::open_read(path);
    if (!h5::exists(f, "/meta") || !h5::has_attr(f, "/meta", "schema") ||
        h5::attr_string(f, "/meta", "schema") != "parity-dump")
      throw DumpError("'" + path + "' is not a parity dump; " + remedy());
    const auto version = h5::attr_int(f, "/meta", "schema_version");
    if (version != kDumpSchemaVersion)
      throw DumpError("'" + path + "' has dump schema version " + std::to_string(version) +
                      ", this build reads version " + std::to_string(kDumpSchemaVersion) + "; " +
                      remedy());
    for (const char* key : {"git_sha", "config", "trainer", "flavor", "dtype", "device",
                            "torch_version", "split", "fqns"}) {
      const auto v = h5::attr_string(f, "/meta", key);
      if (first)
        d.meta[key] = v;
      else if (std::string(key) == "flavor" && d.meta[key] != v)
        throw DumpError("'" + path + "' is a dump of flavor " + v + " but its sibling ranks are " +
                        d.meta[key]);
    }
    auto read_f64 = [&](const std::string& obj) {
      auto a = h5::read(f, obj);
      if (a.dtype != h5::DType::F64 || a.shape.size() != 1)
        throw DumpError("'" + path + "': " + obj + " is not a float64 vector; " + remedy());
      std::vector<double> v(static_cast<size_t>(a.numel()));
      std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
      return v;
    };
    if (h5::exists(f, "/metrics/loss")) {
      auto l = read_f64("/metrics/loss");
      auto n = read_f64("/metrics/grad_norm");
      if (d.losses.empty()) {
        d.losses = l;
        d.grad_norms = n;
      }
    }
    for (const auto& child : h5::list(f, "/")) {
      if (child.rfind("step_", 0) != 0) continue;
      const int64_t step = std::stoll(child.substr(5));
      auto& sd = d.steps[step];
      sd.step = step;
      const std::string g = "/" + child;
      for (const char* k : {"loss", "grad_norm", "mb_losses"})
        if (h5::exists(f, g + "/" + k) && !sd.scalars.count(k)) sd.scalars[k] = h5::read(f, g + "/" + k);
      for (const char* kind : {"grads", "params"}) {
        if (!h5::exists(f, g + "/" + kind)) continue;
        auto& dst = std::string(kind) == "grads" ? sd.grads : sd.params;
        for (const auto& fqn : h5::list(f, g + "/" + kind)) {
          if (dst.count(fqn))
            throw DumpError("'" + path + "': " + kind + "/" + fqn + " of step " +
                            std::to_string(step) + " is also in another rank's file");
          dst[fqn] = h5::read(f, g + "/" + kind + "/" + fqn);
          if (std::string(kind) == "grads") sd.fqns.push_back(fqn);
        }
      }
    }
  } catch (const h5::Error& e) {
    throw DumpError(std::string("cannot read dump: ") + e.what() + "; " + remedy());
  } catch (const std::invalid_argument&) {
    throw DumpError("'" + path + "' has a malformed step group name; " + remedy());
  }
}

// HDF5 1.10 can crash on a damaged file rather than report an error, so every file is first
// parsed in a child process: if the child dies, the file is refused; if it finishes (or
// throws a clean error), the same parse is safe here.
}  // namespace

void parse_guarded(const std::string& path, const std::function<void()>& parse) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return;  // cannot fork: read directly
  if (pid == 0) {
    alarm(120);  // a parse that hangs on damaged bytes is killed like one that crashes
    try {
      parse();
    } catch (...) {
    }
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    throw DumpError("'" + path + "' is damaged (reading it " +
                    (WTERMSIG(status) == SIGALRM ? std::string("did not finish in 120 s")
                                                 : "crashed the HDF5 library with signal " +
                                                       std::to_string(WTERMSIG(status))) +
                    "); " + remedy());
}

namespace {

void check_parses_safely(const std::string& path) {
  parse_guarded(path, [&] {
    Dump scratch;
    read_file_into(path, scratch, true);
  });
}

}  // namespace

std::vector<std::string> dump_files(const std::string& path) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path)) {
      const auto name = e.path().filename().string();
      if (name.rfind("rank", 0) == 0 && e.path().extension() == ".h5") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty())
      throw DumpError("dump directory '" + path + "' holds no rank*.h5 file; " + remedy());
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    throw DumpError("dump '" + path + "' does not exist; " + remedy());
  }
  return files;
}

Dump read_dump(const std::string& path) {
  Dump d;
  d.source = path;
  const auto files = dump_files(path);
  for (size_t i = 0; i < files.size(); ++i) {
    check_parses_safely(files[i]);
    read_file_into(files[i], d, i == 0);
  }
  return d;
}

}  // namespace parity::compare
