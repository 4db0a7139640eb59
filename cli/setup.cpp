#include "cli/setup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/metrics.h"
#include "compare/checkpoint.h"
#include "datasets/corpus.h"
#include "datasets/token_file.h"

namespace parity::cli {

void add_run_options(CLI::App& cmd, RunOptions& o) {
  cmd.add_option("--flavor", o.flavor, "model flavor: debugmodel, tiny")->capture_default_str();
  cmd.add_option("--dtype", o.dtype, "precision mode: fp32, bf16, fp64")->capture_default_str();
  cmd.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--dp", o.dp,
                 "data-parallel replicas, run in-process one after the other on their own rows; "
                 "gradients summed in rank order after the last micro-batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--microbatches", o.microbatches, "micro-batches per step (M)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--batch", o.rows, "rows per micro-batch (B)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--seq-len", o.seq_len, "tokens per row (T)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--seed", o.seed, "initialisation seed (ignored with --init)")
      ->capture_default_str();
  cmd.add_option("--threads", o.threads, "intra-op threads (pinned; recorded)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  cmd.add_option("--init", o.init_path, "seed checkpoint written by `parity init`");
  cmd.add_option("--data", o.data_path, "JSONL corpus, one {\"text\": ...} per line "
                                        "(default: the Debian fortunes text)");
  cmd.add_option("--tokens", o.tokens_path,
                 "a token file written by parity-tokenize, read as it is (for a machine "
                 "without SentencePiece; scripts/gpu-pack makes one)");
  cmd.add_option("--clip-order", o.clip_order, "total-norm order: single or per-rank")
      ->capture_default_str();
  cmd.add_option("--pp", o.pp, "pipeline ranks")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--vp", o.vp, "virtual stages per rank")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--schedule", o.schedule,
                 "1f1b or interleaved1f1b (default: 1f1b for vp 1, else interleaved1f1b)");
  cmd.add_option("--cache", o.cache, "block-stack transport: on (rank store, deltas) or off "
                                     "(whole stack every hop)")
      ->capture_default_str();
  cmd.add_option("--split", o.split, "explicit split, e.g. 'emb,0|1-2|3-4|...|16|head'");
  cmd.add_option("--grad-accum", o.grad_accum,
                 "micro-batch gradient accumulation: auto (bf16 in bf16 mode), bf16, fp32")
      ->capture_default_str();
  cmd.add_option("--attn-res", o.attn_res, "AttnRes read: recompute or plain")
      ->capture_default_str();
  cmd.add_option("--kda", o.kda, "KDA form: chunked or recurrent")->capture_default_str();
  cmd.add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  cmd.add_option("--warmup", o.warmup, "linear warmup steps")->capture_default_str();
  cmd.add_option("--max-norm", o.max_norm, "clipping threshold on the total norm")
      ->capture_default_str();
  cmd.add_flag("--reverse-microbatches", o.reverse_microbatches,
               "feed each step's micro-batches in reverse order");
  cmd.add_flag("--freeze-embedding", o.freeze_embedding,
               "no gradient and no update for the embedding");
  cmd.add_flag("--ledger", o.ledger,
               "record each stack read's gradient contribution, block gradients, hop hashes, "
               "deposits and collections; stored in the dump's steps (for `parity localise`)");
  cmd.add_option("--nproc", o.nproc,
                 "pipelined: run as N local processes (one per rank, N = dp x pp) over c10d")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--backend", o.backend,
                 "multi-process backend (gloo); with RANK, WORLD_SIZE, MASTER_ADDR and "
                 "MASTER_PORT set, this process runs that one rank");
  cmd.add_option("--timeout-s", o.timeout_s, "multi-process: the longest any wait may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--inject", o.inject,
                 "inject a routing bug (pipelined, cache on): KIND:block=B,stage=S[,mb=M], "
                 "KIND drop-deposit|duplicate-deposit|misroute|skip-collect|stale-block; "
                 "the deposit count check is then off");
}

kernels::ModelOptions model_options(const RunOptions& o) {
  kernels::ModelOptions m;
  if (o.attn_res == "plain")
    m.attn_res = kernels::AttnResImpl::Plain;
  else if (o.attn_res == "recompute")
    m.attn_res = kernels::AttnResImpl::Recompute;
  else
    throw UsageError("unknown --attn-res '" + o.attn_res + "'; use recompute or plain");
  if (o.kda == "chunked")
    m.kda = kernels::KdaImpl::Chunked;
  else if (o.kda == "recurrent")
    m.kda = kernels::KdaImpl::Recurrent;
  else
    throw UsageError("unknown --kda '" + o.kda + "'; use chunked or recurrent");
  return m;
}

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// parity-tokenize lives beside this program (build/bin); PARITY_TOKENIZE overrides.
std::string tokenize_tool() {
  if (const char* env = std::getenv("PARITY_TOKENIZE")) return env;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  auto tool = self.parent_path() / "parity-tokenize";
  if (ec || !std::filesystem::exists(tool))
    throw std::runtime_error("cannot find parity-tokenize beside " + self.string() +
                             "; rebuild with scripts/setup or set PARITY_TOKENIZE");
  return tool.string();
}

// Runs parity-tokenize and returns the token file it wrote. Its progress lines pass through
// to stderr; a failure becomes one DataError line.
std::string tokenize(const std::string& data_path) {
  char err_template[] = "/tmp/parity-tokenize-XXXXXX";
  const int fd = mkstemp(err_template);
  if (fd < 0) throw std::runtime_error("cannot create a temporary file for parity-tokenize");
  close(fd);
  const std::string err_path = err_template;
  std::string cmd = shell_quote(tokenize_tool());
  if (!data_path.empty()) cmd += " --data " + shell_quote(data_path);
  cmd += " 2>" + shell_quote(err_path);
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + cmd);
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  const int status = pclose(pipe);
  std::ifstream err_in(err_path);
  std::stringstream err;
  err << err_in.rdbuf();
  std::remove(err_path.c_str());
  std::string err_text = err.str();
  while (!err_text.empty() && err_text.back() == '\n') err_text.pop_back();
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) {
    const auto last = err_text.rfind('\n');
    const std::string line = last == std::string::npos ? err_text : err_text.substr(last + 1);
    if (code == 2) throw datasets::DataError(line);
    throw std::runtime_error("parity-tokenize failed (exit " + std::to_string(code) + "): " + line);
  }
  if (!err_text.empty()) std::cerr << err_text << "\n";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

std::unique_ptr<datasets::TokenRows> load_rows(const RunOptions& o) {
  if (!o.tokens_path.empty() && !o.data_path.empty())
    throw UsageError("--tokens and --data both name the text; give one");
  if (!o.tokens_path.empty() && !std::filesystem::is_regular_file(o.tokens_path))
    throw UsageError("--tokens '" + o.tokens_path + "' is not a file; make one with "
                     "parity-tokenize (it prints the path of the file it writes)");
  if (!o.data_path.empty()) datasets::load_jsonl(o.data_path);  // validate here, in one line
  auto file = datasets::read_token_file(o.tokens_path.empty() ? tokenize(o.data_path)
                                                               : o.tokens_path);
  const auto cfg = kernels::flavor(o.flavor);
  if (file.vocab_size > cfg.vocab)
    throw UsageError("the tokenizer has " + std::to_string(file.vocab_size) +
                     " pieces but flavor " + cfg.name + " embeds only " +
                     std::to_string(cfg.vocab) + " tokens; use a flavor with a larger vocabulary");
  const datasets::BatchShape shape{o.dp, o.microbatches, o.rows};
  return std::make_unique<datasets::TokenRows>(std::move(file.ids), o.seq_len, shape);
}

kernels::NamedTensors initial_params(const RunOptions& o, const kernels::ModelConfig& cfg) {
  if (o.init_path.empty()) return kernels::init_params(cfg, o.seed);
  if (!std::filesystem::exists(o.init_path))
    throw UsageError("checkpoint '" + o.init_path + "' does not exist; write one with `parity "
                     "init --flavor " + cfg.name + " --out " + o.init_path + "`");
  return compare::read_checkpoint(o.init_path, cfg).params;
}

kernels::TrainConfig train_config(const RunOptions& o) {
  kernels::TrainConfig c;
  c.model = kernels::flavor(o.flavor);
  if (c.model.shape_only)
    throw UsageError("flavor '" + o.flavor + "' is shape-only (no weights); train debugmodel or "
                     "tiny");
  c.model_options = model_options(o);
  c.precision = kernels::parse_precision(o.dtype);
  c.grad_accum = kernels::parse_grad_accum(o.grad_accum);
  c.steps = o.steps;
  c.dp = o.dp;
  c.microbatches = o.microbatches;
  c.rows = o.rows;
  c.seed = o.seed;
  c.threads = o.threads;
  if (o.device != "cpu" && o.device != "cuda")
    throw UsageError("unknown --device '" + o.device + "'; use cpu or cuda");
  if (o.device == "cuda" && !torch::cuda::is_available())
    throw UsageError("--device cuda: this build or machine has no CUDA device; use --device cpu");
  c.device = o.device;
  c.clip_order = kernels::parse_clip_order(o.clip_order);
  c.max_norm = o.max_norm;
  if (c.clip_order == kernels::ClipOrder::PerRank)  // the map of the --pp/--vp/--split layout
    c.param_rank = pipelined::param_ranks(c.model, pipelined::make_split(c.model, pipeline_config(o)),
                                          o.pp);
  c.reverse_microbatches = o.reverse_microbatches;
  c.freeze_embedding = o.freeze_embedding;
  c.ledger = o.ledger;
  c.ledger_steps = o.ledger_steps;
  c.adamw.lr = o.lr;
  c.adamw.warmup_steps = o.warmup;
  return c;
}

pipelined::PipelineConfig pipeline_config(const RunOptions& o) {
  pipelined::PipelineConfig pc;
  pc.pp = o.pp;
  pc.vp = o.vp;
  pc.schedule = pipelined::parse_schedule_kind(
      o.schedule.empty() ? (o.vp == 1 ? "1f1b" : "interleaved1f1b") : o.schedule);
  if (o.cache != "on" && o.cache != "off")
    throw UsageError("unknown --cache '" + o.cache + "'; use on or off");
  pc.cache = o.cache == "on";
  pc.split = o.split;
  for (const auto& spec : o.inject) {
    try {
      pc.faults.push_back(pipelined::parse_fault(spec));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  if (!pc.faults.empty()) {
    if (!pc.cache) throw UsageError("--inject needs --cache on: the faults live in the rank store");
    pc.check_deposit_counts = false;
  }
  return pc;
}

namespace {

class NullObserver : public kernels::StepObserver {
 public:
  void on_step(const kernels::StepRecord&) override {}
};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name) {
  const char* v = env(name);
  try {
    size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used != std::strlen(v)) throw std::invalid_argument("trailing text");
    return x;
  } catch (const std::exception&) {
    throw UsageError(std::string("environment variable ") + name + "='" + v +
                     "' is not an integer");
  }
}

// A port the kernel says is free now (the rendezvous binds it a moment later).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("cannot find a free local port for the rendezvous");
  ::close(fd);
  return ntohs(a.sin_port);
}

// One rank of a multi-process pipelined run; rank 0 reports to the observer.
void run_rank(const RunOptions& o, const pipelined::CommOptions& co, kernels::StepObserver& obs,
              const RunReport& report) {
  if (co.world != o.dp * o.pp)
    throw UsageError("WORLD_SIZE " + std::to_string(co.world) + " is not dp x pp = " +
                     std::to_string(o.dp) + " x " + std::to_string(o.pp) + "; start " +
                     std::to_string(o.dp * o.pp) + " processes (or --nproc " +
                     std::to_string(o.dp * o.pp) + ")");
  auto cfg = train_config(o);
  if (cfg.device == "cuda") cfg.device = "cuda:" + std::to_string(co.local_rank);  // a GPU each
  auto pc = pipeline_config(o);
  auto rows = load_rows(o);
  auto init = initial_params(o, cfg.model);
  auto comm = pipelined::make_comm(co);
  pc.comm = comm.get();
  pipelined::PipelinedTrainer t(cfg, pc, init, *rows);
  // The ranks of dp replica 0 each keep their own parameters' file (after a step every rank
  // holds the same summed gradients, so one replica's ranks cover every FQN once).
  std::unique_ptr<kernels::StepObserver> own;
  if (o.rank_observer && co.rank < o.pp) {
    std::set<std::string> fqns;
    const auto ranks = t.param_ranks();
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == co.rank) fqns.insert(t.master().names()[i]);
    own = o.rank_observer(co.rank, std::move(fqns));
  }
  NullObserver quiet;
  ObserverList all;
  all.add(co.rank == 0 ? &obs : &quiet);
  if (own) all.add(own.get());
  t.run(all);
  comm->barrier();
  warn_unfired_faults(pc.faults, t.fault_hits());
  if (co.rank == 0 && report) report(t.last_stats());
}

// --nproc N: N workers on 127.0.0.1; the run succeeds or fails together.
void launch_local(const RunOptions& o, kernels::StepObserver& obs, const RunReport& report) {
  if (o.nproc != o.dp * o.pp)
    throw UsageError("--nproc " + std::to_string(o.nproc) + " is not dp x pp = " +
                     std::to_string(o.dp) + " x " + std::to_string(o.pp));
  pipelined::CommOptions co;
  co.backend = o.backend.empty() ? "gloo" : o.backend;
  co.world = o.nproc;
  co.master_port = free_port();
  co.timeout_s = o.timeout_s;
  pipelined::make_comm_check(co.backend);
  std::fflush(nullptr);
  std::vector<pid_t> kids;
  for (int r = 0; r < o.nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("cannot start worker " + std::to_string(r));
    if (pid == 0) {
      int code = 0;
      try {
        co.rank = r;
        co.local_rank = r;
        run_rank(o, co, obs, report);
      } catch (const std::exception& e) {
        if (r == 0) obs.on_abort();  // the dump keeps the steps it has, marked incomplete
        const std::string what = e.what();  // CommErrors already name the rank
        std::cerr << "parity: " << (what.rfind("rank ", 0) == 0 ? "" : "rank " + std::to_string(r) + ": ")
                  << what << "\n";
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    kids.push_back(pid);
  }
  // Wait for every worker. After the first failure the others have the timeout to notice
  // (each exits with its own one-line error) and a grace period more; then they are stopped.
  int failed_rank = -1, failed_status = 0;
  std::vector<bool> done(kids.size(), false);
  size_t left = kids.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0) break;
    if (pid == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (size_t r = 0; r < kids.size(); ++r)
          if (!done[r]) ::kill(kids[r], SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (size_t r = 0; r < kids.size(); ++r)
      if (kids[r] == pid && !done[r]) {
        done[r] = true;
        --left;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0) {
          failed_rank = static_cast<int>(r);
          failed_status = status;
          deadline = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000) + 10000);
        }
      }
  }
  if (failed_rank >= 0)
    throw std::runtime_error(
        "worker rank " + std::to_string(failed_rank) +
        (WIFSIGNALED(failed_status) ? " was killed by signal " + std::to_string(WTERMSIG(failed_status))
                                    : " failed with exit code " +
                                          std::to_string(WEXITSTATUS(failed_status))) +
        "; the run stopped on every rank");
}

}  // namespace

void run_trainer(const std::string& trainer, const RunOptions& o, kernels::StepObserver& obs,
                 const RunReport& report) {
  if (!o.inject.empty() && trainer != "pipelined")
    throw UsageError("--inject needs --trainer pipelined");
  const bool from_env = env("RANK") && env("WORLD_SIZE") && !o.backend.empty();
  if ((o.nproc > 0 || from_env) && trainer != "pipelined")
    throw UsageError("--nproc and --backend need --trainer pipelined (the reference is one "
                     "process; its --dp replicas run in it)");
  auto cfg = train_config(o);
  if (trainer == "reference") {
    auto rows = load_rows(o);
    auto init = initial_params(o, cfg.model);
    reference::ReferenceTrainer(cfg, init, *rows).run(obs);
    if (report) report({});
    return;
  }
  if (trainer != "pipelined")
    throw UsageError("unknown --trainer '" + trainer + "'; use reference or pipelined");

  if (o.nproc > 0) return launch_local(o, obs, report);
  if (from_env) {
    pipelined::CommOptions co;
    co.backend = o.backend;
    co.rank = env_int("RANK");
    co.local_rank = env("LOCAL_RANK") ? env_int("LOCAL_RANK") : 0;
    co.world = env_int("WORLD_SIZE");
    co.master_addr = env("MASTER_ADDR") ? env("MASTER_ADDR") : "127.0.0.1";
    co.master_port = env("MASTER_PORT") ? env_int("MASTER_PORT") : 29500;
    co.timeout_s = o.timeout_s;
    return run_rank(o, co, obs, report);
  }
  auto pc = pipeline_config(o);
  auto rows = load_rows(o);
  auto init = initial_params(o, cfg.model);
  pipelined::PipelinedTrainer t(cfg, pc, init, *rows);
  t.run(obs);
  warn_unfired_faults(pc.faults, t.fault_hits());
  if (report) report(t.last_stats());
}

void warn_unfired_faults(const std::vector<pipelined::Fault>& faults,
                         const std::vector<int64_t>& hits) {
  for (size_t i = 0; i < faults.size(); ++i)
    if (i >= hits.size() || hits[i] == 0)
      std::cerr << "parity: warning: --inject " << faults[i].str()
                << " never fired: nothing of that kind to break there (no such deposit or "
                   "collection, see `parity layout`; for stale-block, no other micro-batch's "
                   "copy in the store at that moment)\n";
}

}  // namespace parity::cli
