#include "matrix/runner.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "dumps/temp_files.h"
#include "harness/errors.h"
#include "harness/layout_json.h"
#include "matrix/cells.h"
#include "matrix/judge.h"
#include "harness/run_options.h"
#include "harness/process.h"
#include "harness/validate.h"
#include "harness/version.h"
#include "kernels/config.h"

namespace parity::matrix {

namespace fs = std::filesystem;
using reports::Cell;
using reports::CellResult;
using reports::MatrixResult;
using Clock = std::chrono::steady_clock;

namespace {

// A stopped or timed-out cell was told to stop (SIGTERM) and given time to remove its own
// temporary files; whatever a SIGKILL left of them under its directory goes here.
void remove_leftover_temps(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> temps;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec))
    if (it->is_regular_file(ec) && it->path().filename().string().find(".tmp.") != std::string::npos)
      temps.push_back(it->path());
  for (const auto& t : temps) fs::remove(t, ec);
}

}  // namespace

namespace detail {

std::string self_binary() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find the parity binary (/proc/self/exe)");
  return p.string();
}

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace detail

namespace {

using namespace detail;

// Starts `args` with stdout and stderr into `log`, in its own process group (so that the
// cell and any workers it starts can be stopped together).
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  harness::ChildOptions o;
  o.own_group = true;
  o.log = log.string();
  return harness::start_program(args, o);
}

}  // namespace

namespace detail {

int run_seed_init(const std::vector<std::string>& args, const fs::path& log,
                  const harness::StopFlag* stop) {
  const pid_t pid = spawn(args, log);
  std::optional<harness::ExitStatus> ended;
  while (!(ended = harness::poll_child(pid))) {
    if (stop && stop->signal()) {
      ended = harness::stop_and_reap(pid, /*group=*/true, 5.0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  remove_leftover_temps(log.parent_path());
  return ended->shell_code();
}

void settle(CellResult& c, const CellEnding& e) {
  c.wall_seconds = e.seconds;
  const bool exited_0 = !e.timed_out && e.exit.ok();
  // A run that exits 0 has logged every step; anything less is not a clean result.
  const bool all_steps = static_cast<int64_t>(c.steps.size()) == c.cell.steps;
  const bool ok = exited_0 && all_steps;
  c.status = ok ? "ok" : "failed";
  c.error.clear();
  char took[32];
  std::snprintf(took, sizeof took, "%.1f", e.seconds);
  if (ok) return;
  if (e.timed_out)
    c.error = "stopped after " + std::string(took) + " s (--cell-timeout-s)";
  else if (e.stopped)
    c.error = "interrupted";
  else if (exited_0)
    c.error = "logged " + std::to_string(c.steps.size()) + " of " + std::to_string(c.cell.steps) +
              " steps (see " + c.log + ")";
  else
    c.error = e.exit.describe() + (e.last_error.empty() ? "" : ": " + e.last_error);
}

// The line that says why a cell failed: its last "parity:" line, else its last line.
std::string last_error(const fs::path& log) {
  std::istringstream in(slurp(log));
  std::string line, last, last_parity;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.rfind("parity:", 0) == 0) last_parity = line;
  }
  std::string s = last_parity.empty() ? last : last_parity;
  if (s.size() > 300) s = s.substr(0, 297) + "...";
  return s;
}

// The cell's "parity: warning:" lines (an injected fault that never fired, and the like).
std::vector<std::string> warnings(const fs::path& log) {
  std::istringstream in(slurp(log));
  std::vector<std::string> out;
  const std::string mark = "parity: warning: ";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(mark, 0) == 0) out.push_back(line.substr(mark.size()));
  return out;
}

}  // namespace detail

namespace {

int64_t count_lines(const fs::path& p) {
  std::ifstream in(p);
  return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
}

}  // namespace

namespace detail {

// The cell's logged steps and run figures, whatever state it ended in.
void collect(CellResult& c, const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      reports::StepPoint s;
      // A NaN or infinite value is written as null (JSON has neither); the hex fields still
      // say which ("nan", "inf").
      auto number = [](const nlohmann::json& v) {
        return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
      };
      s.step = j.at("step");
      s.loss = number(j.at("loss"));
      s.grad_norm = number(j.at("grad_norm"));
      s.loss_hex = j.at("loss_hex");
      s.grad_norm_hex = j.at("grad_norm_hex");
      c.steps.push_back(s);
    } catch (const nlohmann::json::exception&) {
      break;  // a line cut short by a crash: keep the steps before it
    }
  }
  reports::sort_steps(c.steps);
  std::ifstream sin(dir / "summary.json");
  if (!sin) return;
  try {
    auto j = nlohmann::json::parse(sin);
    const auto seconds = j.at("seconds").get<std::vector<double>>();
    for (size_t i = 0; i < c.steps.size() && i < seconds.size(); ++i) c.steps[i].seconds = seconds[i];
    c.seconds_per_step = j.at("seconds_per_step");
    c.tokens_per_step = j.at("tokens_per_step");
    c.bytes_forward_per_mb = j.at("bytes_forward_per_mb");
    c.bytes_backward_per_mb = j.at("bytes_backward_per_mb");
  } catch (const nlohmann::json::exception&) {
  }
}

// What `parity train` would refuse in the cell, said before anything runs: its flavor, and
// for a pipelined cell its split (whose routing tables become its layout) and its faults.
void check_cell(const Cell& c, nlohmann::json& layout) {
  const auto mc = kernels::flavor(c.flavor);
  if (!c.pipelined()) return;
  layout = harness::layout_json(mc.n_layers, mc.layers_per_block, c.pp, c.vp, c.split);
  if (c.inject.empty()) return;
  harness::RunOptions ro;
  static_cast<spec::RunSpec&>(ro) = c;
  harness::check_faults(mc, harness::pipeline_config(ro), c.microbatches);
}

MatrixResult prepare_cells(const reports::Matrix& m, const MatrixRunOptions& o) {
  // The cells to run: all, or --only with their references, their twins and the twins'
  // references.
  std::set<std::string> wanted(o.only.begin(), o.only.end());
  for (const auto& n : o.only) {
    const Cell* c = m.find(n);
    if (!c) throw harness::UsageError("--only: no cell named '" + n + "' in " + m.source);
    if (!c->reference.empty()) wanted.insert(c->reference);
    if (const Cell* twin = c->twin.empty() ? nullptr : m.find(c->twin)) {
      wanted.insert(twin->name);
      if (!twin->reference.empty()) wanted.insert(twin->reference);
    }
  }
  for (const auto& [name, spec] : o.inject) {
    const Cell* c = m.find(name);
    if (!c) throw harness::UsageError("--inject: no cell named '" + name + "' in " + m.source);
    if (!c->pipelined()) throw harness::UsageError("--inject: cell '" + name + "' is not pipelined");
    if (!wanted.empty() && !wanted.count(name))
      throw harness::UsageError("--inject: cell '" + name + "' is not among the --only cells; add it there");
  }

  MatrixResult r;
  r.matrix = m.name;
  r.source = m.source;
  r.git_sha = harness::git_sha();
  r.started = now_iso();
  r.report_steps = m.report_steps;
  for (const auto& c : m.cells) {
    if (!wanted.empty() && !wanted.count(c.name)) continue;
    CellResult cr;
    cr.cell = c;
    if (o.steps > 0) cr.cell.steps = o.steps;
    if (o.device) cr.cell.device = *o.device;
    for (const auto& [name, spec] : o.inject)
      if (name == c.name) cr.cell.inject.push_back(spec);
    try {
      check_cell(cr.cell, cr.layout);
    } catch (const std::exception& e) {
      throw harness::UsageError(m.source + " (cell '" + c.name + "'): " + e.what());
    }
    cr.log = "cells/" + c.name + "/log.txt";
    r.cells.push_back(std::move(cr));
  }
  // Report steps past every cell's last step would be columns of n/a: they go, and the last
  // step takes their place.
  int64_t last = 0;
  for (const auto& c : r.cells) last = std::max(last, c.cell.steps);
  const size_t before = r.report_steps.size();
  r.report_steps.erase(std::remove_if(r.report_steps.begin(), r.report_steps.end(),
                                      [&](int64_t s) { return s > last; }),
                       r.report_steps.end());
  if (r.report_steps.size() < before &&
      (r.report_steps.empty() || r.report_steps.back() != last))
    r.report_steps.push_back(last);
  return r;
}

std::vector<size_t> launch_order(const std::vector<CellResult>& cells) {
  auto work = [](const Cell& c) {
    const double tokens = static_cast<double>(c.steps) * c.dp * c.microbatches * c.rows *
                          static_cast<double>(c.seq_len);
    // Per step on debugmodel, fp32 takes about 4/3 of bf16's time; fp64 is taken as twice fp32.
    const double width = c.dtype == spec::Precision::FP64   ? 8.0 / 3.0
                         : c.dtype == spec::Precision::FP32 ? 4.0 / 3.0
                                                            : 1.0;
    return tokens * width / c.cores();
  };
  std::vector<size_t> order(cells.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return work(cells[a].cell) > work(cells[b].cell);
  });
  return order;
}

std::vector<std::string> cell_command(const Cell& cell, const std::string& self,
                                      const std::string& seed, const fs::path& dir,
                                      const std::string& tokens) {
  // The cell's run, on the matrix's seed checkpoint (and token file), then its outputs.
  Cell run = cell;
  run.init_path = seed;
  if (!tokens.empty()) run.tokens_path = tokens;
  std::vector<std::string> args = {self, "train"};
  for (auto& a : run.train_args()) args.push_back(a);
  for (const std::string& a :
       {std::string("--metrics"), (dir / "metrics.jsonl").string(), std::string("--summary"),
        (dir / "summary.json").string(), std::string("--dump"), (dir / "dump").string(),
        std::string("--dump-steps"), std::string("1")})
    args.push_back(a);
  // The ledger costs only the dumped step; it is read for pipelined cells and their
  // references, and multi-process runs cannot record one yet.
  if (!cell.multi_process() && (cell.pipelined() || cell.reference.empty()))
    args.push_back("--ledger");
  return args;
}

}  // namespace detail

namespace {

// A running cell's metrics file, written under a temporary name until its run ends
// (dumps/temp_files.h).
fs::path metrics_in_progress(const fs::path& dir, pid_t pid) {
  return dir / ("metrics.jsonl.tmp." + std::to_string(static_cast<long>(pid)));
}

// The steps a running cell has logged.
int64_t steps_logged(const fs::path& dir, pid_t pid) {
  const fs::path temp = metrics_in_progress(dir, pid);
  std::error_code ec;
  return count_lines(fs::exists(temp, ec) ? temp : dir / "metrics.jsonl");
}

// Before a cell is stopped (which removes its temporary files): the steps it has logged become
// its metrics.jsonl, so that the report shows how far it got.
void keep_logged_steps(const fs::path& dir, pid_t pid) {
  const std::string text = slurp(metrics_in_progress(dir, pid));
  const auto last = text.rfind('\n');
  if (last == std::string::npos) return;
  try {
    dumps::write_file_atomically((dir / "metrics.jsonl").string(), text.substr(0, last + 1));
  } catch (const std::exception&) {  // the cell is reported without its steps
  }
}

struct Running {
  size_t index;
  pid_t pid;
  Clock::time_point started;
  int cores;  // what it counts against --jobs
};

// A cell being judged against its reference (matrix/judge.h) in a process of its own, forked
// from this one while it has one thread: the reads' crash guard forks in turn, which a second
// thread holding HDF5's lock would deadlock. The child writes the judged cell to `file`.
struct Judging {
  size_t index;
  pid_t pid;
  fs::path file;
};

// Starts the judgement of `c` in a process of its own; -1 when it cannot. It ends with the
// runner, and a stop stops it (the runner judges what is left itself).
pid_t fork_judge(const CellResult& c, const MatrixResult& r, const fs::path& cells_dir,
                 const fs::path& file) {
  harness::ChildOptions o;
  o.parent_death_signal = SIGKILL;
  o.default_stop_signals = true;
  try {
    return harness::start_child(
        [&] {
          MatrixResult one;
          one.cells.push_back(c);
          judge_cell(one.cells[0], r, cells_dir);
          dumps::write_file_atomically(file.string(), reports::to_json(one).dump());
          return 0;
        },
        o, "the judgement of " + c.cell.name);
  } catch (const std::runtime_error&) {
    return -1;
  }
}

// The judged cell a judging process left in `file`, if it left one.
std::optional<CellResult> judged_cell(const fs::path& file) {
  try {
    MatrixResult one = reports::from_json(nlohmann::json::parse(slurp(file)));
    if (one.cells.size() == 1) return one.cells[0];
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string progress_line(const std::vector<Running>& running, const std::vector<Judging>& judging,
                          const MatrixResult& r, const fs::path& cells_dir, size_t done,
                          size_t total) {
  std::string s = "[" + std::to_string(done) + "/" + std::to_string(total) + " done]";
  for (const auto& run : running) {
    const auto& c = r.cells[run.index].cell;
    s += "  " + c.name + " " + std::to_string(steps_logged(cells_dir / c.name, run.pid)) +
         "/" + std::to_string(c.steps);
  }
  for (const auto& j : judging) s += "  judging " + r.cells[j.index].cell.name;
  return s;
}

// What a judged cell's line says: its gate, or that it has none.
std::string judgement_line(const CellResult& c) {
  if (c.gate.gate == reports::Gate::None) return "judged (no gate)";
  return std::string("gate ") + (c.gate.passed ? "passed" : "FAILED: " + c.gate.why);
}

// Before anything is written: --out must name a new or empty directory, or an earlier run's.
void check_out_dir(const std::string& dir) {
  const fs::path out(dir);
  if (dir.empty()) throw harness::UsageError("matrix run needs --out DIR");
  if (fs::exists(out) && !fs::is_directory(out))
    throw harness::UsageError("--out '" + dir + "' is a file; give a directory");
  if (fs::exists(out) && !fs::is_empty(out) && !fs::exists(out / "results.json"))
    throw harness::UsageError("--out '" + dir + "' is not empty and holds no earlier matrix run; "
                              "give a new or empty directory");
}

// One matrix run under way: the seed checkpoints, then the cells, longest first, as many at
// once as --jobs allows, and on the cores they leave free each cell's judgement as soon as
// it, its reference and its twin have ended. A stop (Ctrl-C, SIGTERM) stops the children and
// keeps what finished.
class MatrixRun {
 public:
  MatrixRun(const reports::Matrix& m, const MatrixRunOptions& o, MatrixResult& r,
            Clock::time_point t0)
      : m_(m), o_(o), r_(r), t0_(t0), out_(o.out_dir), cells_(out_ / "cells"),
        judge_started_(r.cells.size(), 0) {
    stop_.emplace();
  }

  void make_seeds();
  // Until every cell has ended and been judged, or a stop has ended what ran.
  void run_cells();
  // Judges what the loop did not (a stop came first); throws Interrupted after a stop.
  void finish();

 private:
  int stopped() const { return stop_ ? stop_->signal() : stop_signal_; }
  void say(const std::string& line) const {
    if (!o_.quiet) std::cerr << line << "\n" << std::flush;
  }
  void clear_line() const {
    if (tty_) std::cerr << "\r\033[K";
  }
  bool ended(const CellResult& c) const { return c.status != "not run"; }
  size_t judgeable() const;
  void pass_stop_on();
  void start_cells();
  void start_judgements();
  bool reap_cells();
  bool reap_judgements();
  void show_progress();

  const reports::Matrix& m_;
  const MatrixRunOptions& o_;
  MatrixResult& r_;
  const Clock::time_point t0_;  // when run_matrix was called
  const fs::path out_, cells_;
  const std::string self_ = self_binary();
  const bool tty_ = ::isatty(2) && !o_.quiet;
  std::optional<harness::StopFlag> stop_;
  int stop_signal_ = 0;  // once the flag is gone
  std::map<std::string, std::string> seeds_;  // batch shape -> file, or "" when it failed
  std::map<std::string, std::string> seed_errors_;
  std::vector<size_t> order_;
  std::vector<Running> running_;
  std::vector<Judging> judging_;
  std::vector<char> judge_started_;
  size_t next_ = 0, done_ = 0;
  int busy_ = 0;  // cores taken by cells and judgements
  Clock::time_point last_note_ = Clock::now();
  Clock::time_point stop_sent_ = Clock::time_point::max();
};

// One seed checkpoint per batch shape.
void MatrixRun::make_seeds() {
  for (const auto& c : r_.cells) {
    const std::string shape = c.cell.batch_shape();
    if (seeds_.count(shape)) continue;
    const fs::path file = out_ / "seeds" / (shape + ".h5");
    const fs::path log = out_ / "seeds" / (shape + ".log");
    const int code = run_seed_init({self_, "init", "--flavor", spec::to_string(c.cell.flavor),
                                    "--seed", std::to_string(c.cell.seed), "--out", file.string()},
                                   log, &*stop_);
    seeds_[shape] = code == 0 ? file.string() : "";
    if (code != 0) seed_errors_[shape] = last_error(log);
    say("matrix " + m_.name + ": seed checkpoint " + shape +
        (code == 0 ? "" : " FAILED: " + seed_errors_[shape]));
    if (stopped()) break;
  }
}

// The next cell that can be judged now, or r_.cells.size().
size_t MatrixRun::judgeable() const {
  for (size_t i = 0; i < r_.cells.size(); ++i) {
    const auto& c = r_.cells[i];
    if (judge_started_[i] || (c.cell.reference.empty() && c.cell.twin.empty()) || !ended(c))
      continue;
    bool others_ended = true;  // its reference and its twin (one missing has nothing to wait for)
    for (const std::string* name : {&c.cell.reference, &c.cell.twin})
      if (const CellResult* other = name->empty() ? nullptr : r_.find(*name))
        others_ended = others_ended && ended(*other);
    if (others_ended) return i;
  }
  return r_.cells.size();
}

// A stop tells the running cells (and their workers) to stop, and kills what is left 10 s on.
void MatrixRun::pass_stop_on() {
  if (!stopped()) return;
  if (stop_sent_ == Clock::time_point::max()) {
    for (const auto& run : running_) {
      keep_logged_steps(cells_ / r_.cells[run.index].cell.name, run.pid);
      harness::signal_child(run.pid, SIGTERM, /*group=*/true);
    }
    stop_sent_ = Clock::now();
  } else if (Clock::now() - stop_sent_ > std::chrono::seconds(10)) {
    for (const auto& run : running_) harness::signal_child(run.pid, SIGKILL, /*group=*/true);
  }
}

// Starts the cells that fit on the free cores, in launch order.
void MatrixRun::start_cells() {
  while (!stopped() && next_ < order_.size()) {
    auto& cr = r_.cells[order_[next_]];
    const int need = std::min(cr.cell.cores(), std::max(1, o_.jobs));
    if (!running_.empty() && busy_ + need > o_.jobs) break;
    const fs::path dir = cells_ / cr.cell.name;
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    const std::string seed = seeds_[cr.cell.batch_shape()];
    if (seed.empty()) {
      cr.status = "failed";
      cr.error = std::string(kNoSeed) + ": " + seed_errors_[cr.cell.batch_shape()];
      ++next_;
      ++done_;
      continue;
    }
    const auto args = cell_command(cr.cell, self_, seed, dir, o_.tokens);
    running_.push_back({order_[next_], spawn(args, dir / "log.txt"), Clock::now(), need});
    busy_ += need;
    if (!tty_)
      say("[start " + std::to_string(next_ + 1) + "/" + std::to_string(r_.cells.size()) + "] " +
          cr.cell.name);
    ++next_;
  }
}

// Judgements on the cores the cells leave, once every cell has started: no cell waits behind
// a judgement.
void MatrixRun::start_judgements() {
  while (!stopped() && next_ == order_.size() && busy_ < std::max(1, o_.jobs)) {
    const size_t i = judgeable();
    if (i == r_.cells.size()) break;
    judge_started_[i] = 1;
    auto& cr = r_.cells[i];
    const fs::path file = cells_ / cr.cell.name / "judgement.json";
    const pid_t pid = fork_judge(cr, r_, cells_, file);
    if (pid < 0) {  // judged here instead
      judge_cell(cr, r_, cells_);
      say("[judged] " + cr.cell.name + ": " + judgement_line(cr));
      continue;
    }
    judging_.push_back({i, pid, file});
    ++busy_;
  }
}

// Collects the cells that ended or ran past their time; whether any did.
bool MatrixRun::reap_cells() {
  bool reaped = false;
  for (size_t i = 0; i < running_.size();) {
    CellEnding e;
    e.seconds = std::chrono::duration<double>(Clock::now() - running_[i].started).count();
    const auto exit = harness::poll_child(running_[i].pid);
    // Only a cell still running can be over its time; one that has ended says how itself.
    e.timed_out = !exit && o_.cell_timeout_s > 0 && e.seconds > o_.cell_timeout_s;
    if (!exit && !e.timed_out) {
      ++i;
      continue;
    }
    auto& cr = r_.cells[running_[i].index];
    const fs::path dir = cells_ / cr.cell.name;
    if (e.timed_out) {  // stop the cell and its workers
      keep_logged_steps(dir, running_[i].pid);
      e.exit = harness::stop_and_reap(running_[i].pid, /*group=*/true, 5.0);
    } else {
      e.exit = *exit;
    }
    remove_leftover_temps(dir);
    collect(cr, dir);
    cr.warnings = warnings(dir / "log.txt");
    e.stopped = stopped() != 0;
    e.last_error = last_error(dir / "log.txt");
    settle(cr, e);
    const bool ok = cr.ok();
    busy_ -= running_[i].cores;
    ++done_;
    char line[160];
    std::snprintf(line, sizeof line, "%s, %zu steps, %.3f s/step, %.1f s", ok ? "ok" : "FAILED",
                  cr.steps.size(), cr.seconds_per_step, e.seconds);
    clear_line();
    say("[done " + std::to_string(done_) + "/" + std::to_string(r_.cells.size()) + "] " +
        cr.cell.name + ": " + line + (ok ? "" : " -- " + cr.error));
    for (const auto& w : cr.warnings) say("  warning: " + w);
    running_.erase(running_.begin() + static_cast<long>(i));
    reaped = true;
    reports::write_results(o_.out_dir, r_);
  }
  return reaped;
}

// Takes back what the judging processes judged; whether any ended.
bool MatrixRun::reap_judgements() {
  bool reaped = false;
  for (size_t i = 0; i < judging_.size();) {
    const auto exit = harness::poll_child(judging_[i].pid);
    if (!exit) {
      ++i;
      continue;
    }
    const size_t index = judging_[i].index;
    auto& cr = r_.cells[index];
    const auto judged = judged_cell(judging_[i].file);
    std::error_code ec;
    fs::remove(judging_[i].file, ec);
    --busy_;
    judging_.erase(judging_.begin() + static_cast<long>(i));
    reaped = true;
    if (judged) {
      cr.step1 = judged->step1;
      cr.verdicts = judged->verdicts;
      cr.gate = judged->gate;
    } else if (stopped()) {
      judge_started_[index] = 0;  // stopped with the run: judged in finish()
      continue;
    } else {
      judging_failed(cr, r_, "its process: " + exit->describe());
    }
    clear_line();
    say("[judged] " + cr.cell.name + ": " + judgement_line(cr));
    reports::write_results(o_.out_dir, r_);
  }
  return reaped;
}

// The progress line: rewritten in place on a terminal, once a minute otherwise.
void MatrixRun::show_progress() {
  if (running_.empty() && judging_.empty()) return;
  if (tty_) {
    std::cerr << "\r\033[K"
              << progress_line(running_, judging_, r_, cells_, done_, r_.cells.size())
              << std::flush;
  } else if (!o_.quiet && Clock::now() - last_note_ > std::chrono::seconds(60)) {
    say(progress_line(running_, judging_, r_, cells_, done_, r_.cells.size()));
    last_note_ = Clock::now();
  }
}

void MatrixRun::run_cells() {
  order_ = launch_order(r_.cells);
  while ((!stopped() && (next_ < order_.size() || judgeable() < r_.cells.size())) ||
         !running_.empty() || !judging_.empty()) {
    pass_stop_on();
    start_cells();
    start_judgements();
    const bool cells_reaped = reap_cells();
    const bool judgements_reaped = reap_judgements();
    show_progress();
    if (!cells_reaped && !judgements_reaped)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  clear_line();
  if (tty_) std::cerr << std::flush;
}

void MatrixRun::finish() {
  stop_signal_ = stop_->signal();
  stop_.reset();  // the handlers before it are back
  for (auto& cr : r_.cells)
    if (cr.status == "not run" && stopped()) cr.error = "interrupted before it started";
  for (size_t i = 0; i < r_.cells.size(); ++i)
    if (!judge_started_[i]) judge_cell(r_.cells[i], r_, cells_);
  r_.wall_seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
  reports::write_results(o_.out_dir, r_);
  if (const int sig = stopped())
    throw Interrupted("stopped by signal " + std::to_string(sig) + "; the cells that finished "
                      "are in " + o_.out_dir + "/results.json", sig);
}

}  // namespace

MatrixResult run_matrix(const reports::Matrix& m, const MatrixRunOptions& o) {
  const auto t0 = Clock::now();
  check_out_dir(o.out_dir);
  MatrixResult r = detail::prepare_cells(m, o);
  if (o.on_start) o.on_start(r);
  // Everything checked: only now is anything written.
  const fs::path out(o.out_dir);
  std::error_code ec;
  fs::create_directories(out / "cells", ec);
  fs::create_directories(out / "seeds", ec);
  if (ec) throw harness::UsageError("cannot create '" + o.out_dir + "': " + ec.message());
  reports::write_results(o.out_dir, r);

  MatrixRun run(m, o, r, t0);
  run.make_seeds();
  run.run_cells();
  run.finish();
  return r;
}

}  // namespace parity::matrix
