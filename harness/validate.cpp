#include "harness/validate.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "harness/errors.h"
#include "harness/launcher.h"
#include "pipelined/comm.h"
#include "pipelined/routing.h"
#include "pipelined/split.h"
#include "reference/grad_faults.h"

namespace parity::harness {

namespace fs = std::filesystem;

namespace {

bool contains(const pipelined::Blocks& b, int block) {
  return std::find(b.begin(), b.end(), block) != b.end();
}

std::string layout_hint(const kernels::ModelConfig& m, const pipelined::PipelineConfig& pc) {
  return "see `parity layout --layers " + std::to_string(m.n_layers) + " --block " +
         std::to_string(m.layers_per_block) + " --pp " + std::to_string(pc.pp) + " --vp " +
         std::to_string(pc.vp) + (pc.split.empty() ? "" : " --split '" + pc.split + "'") + "`";
}

// The combinations of options a trainer refuses.
void check_combinations(const RunOptions& o) {
  const bool pipe = o.pipelined();
  if (pipe)
    for (const auto& f : o.inject)
      if (reference::is_grad_fault(f))
        throw UsageError("--inject '" + f + "' is a gradient fault of the reference trainer; "
                         "give --trainer reference");
  if (!pipe) {
    for (const auto& f : o.inject)
      if (!reference::is_grad_fault(f))
        throw UsageError("--inject '" + f + "' breaks the block-stack transport: it needs "
                         "--trainer pipelined (the reference takes drop-microbatch, scale-grads, "
                         "zero-grad and swap-grads)");
    if (o.nproc > 0 || o.backend)
      throw UsageError("--nproc and --backend need --trainer pipelined (the reference is one "
                       "process; its --dp replicas run in it)");
    if (o.schedule)
      throw UsageError("--schedule needs --trainer pipelined (the reference runs no schedule)");
    // The reference reads the pipeline shape only for the per-rank norm's rank map.
    if ((o.pp != 1 || o.vp != 1 || !o.split.empty()) && o.clip_order != spec::ClipOrder::PerRank)
      throw UsageError("--pp, --vp and --split shape a pipeline: give --trainer pipelined, or "
                       "--clip-order per-rank for the reference's per-rank norm");
  }
  if (o.nproc > 0) check_world(o, "--nproc", o.nproc);
  const bool multi = o.nproc > 0 || o.backend;
  if (o.ledger && o.ac == spec::Checkpointing::Layer)
    throw UsageError("--ledger taps each stack read once, and --ac layer runs every read again "
                     "in the backward: drop --ac layer (it moves no bit) or --ledger");
  if (multi && o.ledger)
    throw UsageError("--ledger runs in-process only: drop --nproc/--backend, or drop --ledger");
  if (pipe && o.backend && o.nproc == 0 && !rank_from_environment(o))
    throw UsageError("--backend " + std::string(spec::to_string(*o.backend)) + " needs --nproc N, or RANK and WORLD_SIZE in the "
                     "environment (as torchrun sets them)");
}

}  // namespace

void check_faults(const kernels::ModelConfig& m, const pipelined::PipelineConfig& pc,
                  int microbatches) {
  if (pc.faults.empty()) return;
  const auto split = pipelined::make_split(m, pc);
  const auto tables = pipelined::make_routing_tables(m.n_layers, m.layers_per_block, split, pc.pp);
  const int stages = static_cast<int>(tables.stages.size());
  for (const auto& f : pc.faults) {
    const std::string what = "--inject " + f.str() + ": ";
    if (f.stage >= stages)
      throw UsageError(what + "there is no stage " + std::to_string(f.stage) + " (the pipeline has " +
                       std::to_string(stages) + ", 0 to " + std::to_string(stages - 1) + "); " +
                       layout_hint(m, pc));
    if (f.block > m.n_blocks())
      throw UsageError(what + "there is no block " + std::to_string(f.block) + " (flavor " +
                       m.name + " has blocks 0 to " + std::to_string(m.n_blocks()) + "); " +
                       layout_hint(m, pc));
    if (f.mb >= microbatches)
      throw UsageError(what + "there is no micro-batch " + std::to_string(f.mb) + " (a step has " +
                       std::to_string(microbatches) + ")");
    const auto& st = tables.stages[static_cast<size_t>(f.stage)];
    const std::string at = "stage " + std::to_string(f.stage);
    const std::string block = "block " + std::to_string(f.block);
    switch (f.kind) {
      case pipelined::FaultKind::DropDeposit:
      case pipelined::FaultKind::DuplicateDeposit:
      case pipelined::FaultKind::Misroute:
        if (!contains(st.deposits, f.block))
          throw UsageError(what + at + " deposits no gradient of " + block + " (it deposits " +
                           pipelined::blocks_text(st.deposits) + "); " + layout_hint(m, pc));
        if (f.kind == pipelined::FaultKind::Misroute && !contains(st.deposits, f.block - 1) &&
            !contains(st.deposits, f.block + 1))
          throw UsageError(what + at + " deposits no neighbour of " + block +
                           " to misroute it to (it deposits " +
                           pipelined::blocks_text(st.deposits) + "); " + layout_hint(m, pc));
        break;
      case pipelined::FaultKind::SkipCollect:
        if (st.deposits_expected(f.block) == 0)
          throw UsageError(what + at + " collects no deposit of " + block + "; " +
                           layout_hint(m, pc));
        break;
      case pipelined::FaultKind::StaleBlock:
        if (!contains(st.deposits, f.block))  // the blocks it reads from its rank's store
          throw UsageError(what + at + " reads " + block + " from no store (it reads " +
                           pipelined::blocks_text(st.deposits) + " there); " + layout_hint(m, pc));
        break;
    }
  }
}

void check_world(const RunOptions& o, const std::string& given, int world) {
  if (world == o.dp * o.pp) return;
  const std::string want = std::to_string(o.dp * o.pp);
  throw UsageError(given + " " + std::to_string(world) + " is not dp x pp = " +
                   std::to_string(o.dp) + " x " + std::to_string(o.pp) + "; " +
                   (given == "--nproc" ? "give --nproc " + want
                                       : "start " + want + " processes (or --nproc " + want + ")"));
}

namespace {

// The reference's gradient faults of --inject, checked against the flavor's parameters and the
// step's micro-batches.
reference::GradFaults grad_faults(const RunOptions& o, const kernels::NamedTensors& params) {
  reference::GradFaults f;
  for (const auto& s : o.inject) try {
      reference::parse_grad_fault(s, f);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  const int mbs = o.dp * o.microbatches;
  for (int mb : f.drop_microbatches)
    if (mb >= mbs)
      throw UsageError("--inject drop-microbatch:mb=" + std::to_string(mb) + ": a step has " +
                       std::to_string(mbs) + " micro-batches (dp x --microbatches), 0 to " +
                       std::to_string(mbs - 1));
  auto shape_of = [&](const std::string& fqn) {
    const auto& n = params.names();
    const auto it = std::find(n.begin(), n.end(), fqn);
    if (it == n.end())
      throw UsageError("--inject: flavor " + std::string(spec::to_string(o.flavor)) +
                       " has no parameter '" + fqn + "'; see `parity model --flavor " +
                       spec::to_string(o.flavor) + "` for its names");
    return params.tensors()[static_cast<size_t>(it - n.begin())].sizes().vec();
  };
  for (const auto& fqn : f.zero) shape_of(fqn);
  for (const auto& [a, b] : f.swap)
    if (shape_of(a) != shape_of(b))
      throw UsageError("--inject swap-grads: '" + a + "' and '" + b + "' differ in shape; give "
                       "two parameters of one shape");
  return f;
}

}  // namespace

PreparedRun validate_run(const RunOptions& o) {
  check_combinations(o);
  PreparedRun run;
  run.cfg = train_config(o);  // flavor, dtype, device, clip order, the per-rank map
  if (o.pipelined()) {
    run.pc = pipeline_config(o);
    pipelined::make_split(run.cfg.model, run.pc);  // refuses a bad split naming its first bad stage
    check_faults(run.cfg.model, run.pc, o.microbatches);
    if (o.nproc > 0) pipelined::make_comm_check(spec::to_string(o.backend_or_default()));
    if (o.nproc == 0 && rank_from_environment(o)) {
      const auto co = comm_from_environment(o);
      pipelined::make_comm_check(co.backend);
      check_world(o, "WORLD_SIZE", co.world);
    }
  }
  auto init = initial_state(o, run.cfg.model);  // there, of this flavor, finite
  run.init = std::move(init.params);
  run.cfg.initial_buffers = std::move(init.buffers);
  run.rows = load_rows(o);
  if (!o.pipelined()) run.grad_faults = grad_faults(o, run.init);
  return run;
}

void check_output_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw UsageError(flag + " '" + path + "' is a directory; give a file name");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw UsageError(flag + " '" + path + "': the directory '" + dir.string() +
                     "' does not exist; create it first");
  if (::access(dir.c_str(), W_OK) != 0)
    throw UsageError(flag + " '" + path + "': the directory '" + dir.string() +
                     "' is not writable; give a path you can write");
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    throw UsageError(flag + " '" + path + "' exists and is not writable; give a path you can "
                     "write");
}

void check_output_dir(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    throw UsageError(flag + " '" + path + "' is a file; give a directory");
  fs::path p = fs::absolute(path, ec);
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  if (p.empty() || !fs::is_directory(p, ec))
    throw UsageError(flag + " '" + path + "': '" + p.string() + "' is not a directory; give a "
                     "directory path");
  if (::access(p.c_str(), W_OK) != 0)
    throw UsageError(flag + " '" + path + "': '" + p.string() + "' is not writable; give a "
                     "directory you can write");
}

std::vector<std::string> check_dump_dir(const std::string& path, bool overwrite, int only_rank) {
  check_output_dir("--dump", path);
  std::vector<std::string> old;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return old;
  static const std::regex kRankFile(R"(rank([0-9]+)\.h5)");
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (std::regex_match(name, m, kRankFile) && (only_rank < 0 || m[1] == std::to_string(only_rank)))
      old.push_back(e.path().string());
  }
  std::sort(old.begin(), old.end());
  if (!old.empty() && !overwrite)
    throw UsageError("--dump '" + path + "' holds " + fs::path(old[0]).filename().string() +
                     (old.size() > 1 ? " and " + std::to_string(old.size() - 1) + " more" : "") +
                     " of another run; give a new directory, or --overwrite to replace them");
  return old;
}

}  // namespace parity::harness
