#include "harness/run_options.h"

#include <sys/wait.h>
#include <unistd.h>

#include <torch/cuda.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "datasets/corpus.h"
#include "datasets/token_file.h"
#include "dumps/checkpoint.h"
#include "dumps/temp_files.h"
#include "harness/errors.h"
#include "spec/options.h"

namespace parity::harness {

kernels::ModelOptions model_options(const RunOptions& o) {
  kernels::ModelOptions m;
  m.attn_res = o.attn_res;
  m.kda = o.kda;
  m.loss_chunks = o.loss_chunks;
  m.checkpoint_layers = o.ac == spec::Checkpointing::Layer;
  const bool on = o.documents == spec::Documents::On;
  const spec::RunSpec defaults;
  if (!on && (o.bos_id != defaults.bos_id || o.eos_id != defaults.eos_id))
    throw UsageError("--bos-id and --eos-id delimit documents, which only --documents on uses; "
                     "add --documents on or drop them");
  if (!on && !o.positions_path.empty())
    throw UsageError("--positions '" + o.positions_path + "' gives document starts, which only "
                     "--documents on uses; add --documents on or drop --positions");
  const int64_t vocab = kernels::flavor(o.flavor).vocab;
  for (const auto& [flag, id] : {std::pair<const char*, int64_t>{"--bos-id", o.bos_id},
                                 std::pair<const char*, int64_t>{"--eos-id", o.eos_id}})
    if (id >= vocab)
      throw UsageError(std::string(flag) + " " + std::to_string(id) + " is past flavor " +
                       spec::to_string(o.flavor) + "'s vocabulary of " + std::to_string(vocab) +
                       "; give the tokenizer's id, or -1 for none");
  // Defaults: the embedded tokenizer's ids (datasets/tokenizer.h: unk 0, bos 1, eos 2).
  m.documents = {on, o.bos_id, o.eos_id};
  return m;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

namespace {

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
  std::string err_path =
      (std::filesystem::temp_directory_path() / "parity-tokenize-XXXXXX").string();
  const int fd = mkstemp(err_path.data());
  if (fd < 0) throw std::runtime_error("cannot create a temporary file for parity-tokenize");
  close(fd);
  dumps::register_temp_file(err_path);  // a stop removes it
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
  dumps::unregister_temp_file(err_path);
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
  if (o.tokens_dtype && o.tokens_path.empty())
    throw UsageError("--tokens-dtype describes a raw --tokens file; give --tokens FILE too");
  if (!o.tokens_path.empty() && !std::filesystem::is_regular_file(o.tokens_path))
    throw UsageError("--tokens '" + o.tokens_path + "' is not a file; make one with "
                     "parity-tokenize (it prints the path of the file it writes)");
  if (!o.positions_path.empty() && o.tokens_path.empty())
    throw UsageError("--positions '" + o.positions_path + "' gives the positions of a --tokens "
                     "file; give the token ids with --tokens FILE too");
  if (!o.positions_path.empty() && !std::filesystem::is_regular_file(o.positions_path))
    throw UsageError("--positions '" + o.positions_path + "' is not a file; save the "
                     "dataloader's positions with numpy.save");
  if (!o.positions_path.empty() && !datasets::is_npy_file(o.positions_path))
    throw UsageError("--positions '" + o.positions_path + "' is not a .npy array; save the "
                     "positions with numpy.save");
  if (!o.data_path.empty()) datasets::load_jsonl(o.data_path);  // validate here, in one line
  const auto cfg = kernels::flavor(o.flavor);
  datasets::TokenFile file;
  if (o.tokens_path.empty()) {
    file = datasets::read_token_file(tokenize(o.data_path));
  } else if (o.tokens_dtype) {
    if (datasets::is_npy_file(o.tokens_path))
      throw UsageError("--tokens '" + o.tokens_path + "' is a .npy array, which names its own "
                       "element type; drop --tokens-dtype (it is for raw arrays)");
    file.ids = datasets::read_raw_tokens(o.tokens_path, spec::to_string(*o.tokens_dtype), cfg.vocab);
  } else if (datasets::is_npy_file(o.tokens_path)) {
    file.ids = datasets::read_npy_tokens(o.tokens_path, cfg.vocab);
  } else if (!datasets::try_read_token_file(o.tokens_path, file)) {
    throw UsageError("--tokens '" + o.tokens_path + "' is not a token file: neither parity's "
                     "(wrong header, size or checksum) nor a .npy array; make one with "
                     "`parity-tokenize [--data FILE.jsonl]`, or read a raw array of ids with "
                     "--tokens-dtype uint16|int32|int64");
  }
  if (file.vocab_size > cfg.vocab)
    throw UsageError("the tokenizer has " + std::to_string(file.vocab_size) +
                     " pieces but flavor " + cfg.name + " embeds only " +
                     std::to_string(cfg.vocab) + " tokens; use a flavor with a larger vocabulary");
  const datasets::BatchShape shape{o.dp, o.microbatches, o.rows};
  auto rows = std::make_unique<datasets::TokenRows>(
      std::move(file.ids), o.seq_len, shape,
      o.tokens_path.empty() ? std::string() : "--tokens '" + o.tokens_path + "'");
  if (!o.positions_path.empty())
    rows->set_positions(datasets::read_npy_positions(o.positions_path),
                        "--positions '" + o.positions_path + "'");
  return rows;
}

kernels::InitOptions init_options(spec::PseudoQueryInit pseudo_query_init) {
  kernels::InitOptions io;
  io.zero_pseudo_queries = pseudo_query_init == spec::PseudoQueryInit::Zero;
  return io;
}

InitialState initial_state(const RunOptions& o, const kernels::ModelConfig& cfg) {
  const auto io = init_options(o.pseudo_query_init);
  if (o.init_path.empty()) return {kernels::init_params(cfg, o.seed, io), {}};
  if (!std::filesystem::exists(o.init_path))
    throw UsageError("checkpoint '" + o.init_path + "' does not exist; write one with `parity "
                     "init --flavor " + cfg.name + " --out " + o.init_path + "`");
  if (std::filesystem::is_directory(o.init_path))
    throw UsageError("--init '" + o.init_path + "' is a directory; give the checkpoint file "
                     "`parity init` wrote");
  auto ck = dumps::read_checkpoint(o.init_path, cfg);
  return {std::move(ck.params), std::move(ck.buffers)};
}

kernels::TrainConfig train_config(const RunOptions& o) {
  kernels::TrainConfig c;
  c.model = kernels::flavor(o.flavor);
  if (c.model.shape_only)
    throw UsageError("flavor '" + c.model.name + "' is shape-only (no weights); train debugmodel or "
                     "tiny");
  if (o.layers > 0) {
    if (!o.init_path.empty())
      throw UsageError("--layers " + std::to_string(o.layers) + " changes the flavor's depth, "
                       "which --init '" + o.init_path + "' fixes; drop one of them");
    c.model.n_layers = o.layers;
  }
  c.model_options = model_options(o);
  c.precision = o.dtype;
  c.grad_accum = o.grad_accum;
  c.steps = o.steps;
  c.dp = o.dp;
  c.microbatches = o.microbatches;
  c.rows = o.rows;
  c.seed = o.seed;
  c.threads = o.threads;
  if (o.device == spec::Device::Cuda && !torch::cuda::is_available())
    throw UsageError("--device cuda: this build or machine has no CUDA device; use --device cpu");
  c.device = spec::to_string(o.device);
  c.clip_order = o.clip_order;
  c.grad_norm_dtype = o.grad_norm_dtype;
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
  c.adamw.schedule = o.lr_schedule;
  c.adamw.total_steps = o.steps;
  c.expert_balance = o.expert_balance;
  if (c.model.kind != kernels::ModelKind::Exact && o.seq_len % o.loss_chunks != 0)
    throw UsageError("--loss-chunks " + std::to_string(o.loss_chunks) +
                     " does not divide --seq-len " + std::to_string(o.seq_len) +
                     " (the loss is chunked along the sequence, as torchtitan's "
                     "ChunkedLossWrapper does); give a --seq-len it divides, or --loss-chunks 1");
  return c;
}

pipelined::PipelineConfig pipeline_config(const RunOptions& o) {
  pipelined::PipelineConfig pc;
  pc.pp = o.pp;
  pc.vp = o.vp;
  pc.schedule = o.schedule_or_default();
  pc.cache = o.cache == spec::Cache::On;
  pc.split = o.split;
  for (const auto& spec : o.inject) {
    if (reference::is_grad_fault(spec)) continue;  // the reference's (harness/validate.cpp)
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

}  // namespace parity::harness
