// A fuzz pass over the command line, with a fixed seed: 20 valid commands, each mutated 26
// times (520 runs) by replacing a value with a hostile one, dropping, doubling or swapping
// words, inserting an option, misspelling one, or cutting the line short. Whatever comes out,
// parity must exit 0, 1 or 2, never die of a signal, never take more than 30 s, and leave no
// temporary file and no process behind (tests/sandbox.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tests/sandbox.h"

namespace {

using parity::testing::joined;
using parity::testing::RunResult;
using parity::testing::Sandbox;
using parity::testing::words;

constexpr int kMutationsPerCommand = 26;

// Cheap valid commands: what any mutation of them runs stays within seconds (the flavor and
// the step count come first, so that cutting the line short keeps them).
const std::vector<std::string>& commands() {
  static const std::vector<std::string> c = {
      "model --flavor tiny",
      "layout --layers 17 --block 4 --pp 2 --vp 2",
      "layout --layers 17 --block 4 --pp 4 --vp 2 --json",
      "schedule --pp 2 --vp 2 --microbatches 4",
      "schedule --pp 4 --microbatches 8 --json",
      "init --flavor tiny --seed 3 --out out.h5",
      "train --flavor tiny --steps 1 --seq-len 8 --microbatches 1 --metrics m.jsonl",
      "train --flavor tiny --steps 1 --seq-len 8 --microbatches 2 --init ckpt.h5 --summary s.json",
      "train --flavor tiny --steps 1 --trainer pipelined --pp 2 --vp 2 --seq-len 8 "
      "--microbatches 2 --dump D --dump-steps 1",
      "train --flavor tiny --steps 1 --trainer pipelined --pp 2 --seq-len 8 --microbatches 2 "
      "--nproc 2 --backend gloo --timeout-s 10",
      "compare A B",
      "compare A A --json",
      "compare A B --max-ulp 10 --threads 2",
      "localise A B",
      "localise B B --json",
      "closed-form --steps 1",
      "closed-form --steps 1 --pp 2 --vp 2 --cache on --dtype fp32",
      "report R",
      "report R --format md --out r.md",
      "bench --what kda --flavor tiny --seq-len 8 --warmup-steps 0 --measured-steps 1",
  };
  return c;
}

const std::vector<std::string> kValues = {
    "0",      "-1",  "1",    "2",      "abc", "",        "nan",  "inf",
    "-inf",   "1e400", "99999999999999999999", "2147483648", "-2147483649", "0x10",
    "1.5",    " 3",  "1e3",  "%s%n",   "adir", "afile",  "missing", "/proc/x",
    "nodir/x", "garbage.bin"};
const std::vector<std::string> kOptions = {
    "--steps", "--pp",      "--vp",       "--threads", "--dump",  "--init",    "--json",
    "--ledger", "--nproc",  "--inject",   "--split",   "--tokens", "--cache",  "--dtype",
    "--seed",  "--lr",      "--timeout-s", "--out",    "--format", "--dump-steps",
    "--microbatches", "--batch", "--backend", "--trainer", "--flavor", "--max-ulp"};

// The words a cut keeps: through the flavor's and the step count's values, so that a cut line
// still runs the tiny flavor for one step rather than the defaults (debugmodel, 20 steps).
size_t kept_by_a_cut(const std::vector<std::string>& args) {
  size_t keep = 1;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--flavor" || args[i] == "--steps") keep = std::max(keep, i + 2);
  return keep;
}

// One mutation of `args`, from `rng`.
std::vector<std::string> mutate(std::vector<std::string> args, std::mt19937& rng) {
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const size_t n = args.size();
  switch (pick(7)) {
    case 0: {  // a value (not the command) replaced by a hostile one
      const size_t i = 1 + pick(n - 1);
      if (args[i].rfind("--", 0) != 0) args[i] = kValues[pick(kValues.size())];
      else args.insert(args.begin() + static_cast<long>(i) + 1, kValues[pick(kValues.size())]);
      break;
    }
    case 1:  // a word dropped
      args.erase(args.begin() + static_cast<long>(1 + pick(n - 1)));
      break;
    case 2: {  // a word doubled
      const size_t i = pick(n);
      args.insert(args.begin() + static_cast<long>(i), args[i]);
      break;
    }
    case 3: {  // two neighbours swapped
      if (n < 3) break;
      const size_t i = 1 + pick(n - 2);
      std::swap(args[i], args[i + 1]);
      break;
    }
    case 4:  // an option inserted, with a hostile value
      args.push_back(kOptions[pick(kOptions.size())]);
      args.push_back(kValues[pick(kValues.size())]);
      break;
    case 5: {  // an option misspelt
      const size_t i = 1 + pick(n - 1);
      if (args[i].rfind("--", 0) == 0) args[i] += "x";
      else args[i] = "--" + args[i];
      break;
    }
    default: {  // the line cut short
      const size_t keep = kept_by_a_cut(args);
      args.resize(keep + pick(n - keep + 1));
      break;
    }
  }
  return args;
}

class Fuzz : public ::testing::TestWithParam<size_t> {};

TEST_P(Fuzz, AnyMutationExitsZeroOneOrTwoAndLeavesNothing) {
  const size_t k = GetParam();
  const auto base = words(commands()[k]);
  std::mt19937 rng(20261201u + static_cast<unsigned>(k));  // fixed: the same runs every time
  int runs = 0;
  for (int m = 0; m < kMutationsPerCommand; ++m) {
    const auto args = mutate(base, rng);
    Sandbox box("m" + std::to_string(m));
    const RunResult r = box.run(args, {}, 30);
    ++runs;
    SCOPED_TRACE("parity " + joined(args));
    EXPECT_FALSE(r.timed_out) << r.how() << "\n" << r.err;
    EXPECT_FALSE(r.signalled()) << r.how() << "\n" << r.err;
    EXPECT_TRUE(r.exited() && r.code() >= 0 && r.code() <= 2) << r.how() << "\n" << r.err;
    EXPECT_EQ(r.err.find("outlived it"), std::string::npos) << r.err;
    EXPECT_EQ(box.temporaries_left(), "");
    EXPECT_EQ(box.left_in_tmp(), "");
  }
  EXPECT_EQ(runs, kMutationsPerCommand);
}

INSTANTIATE_TEST_SUITE_P(Commands, Fuzz, ::testing::Range<size_t>(0, 20),
                         [](const auto& info) { return "command" + std::to_string(info.param); });

TEST(FuzzPlan, AtLeast500RunsOver20Commands) {
  EXPECT_EQ(commands().size(), 20u);
  EXPECT_GE(commands().size() * kMutationsPerCommand, 500u);
}

}  // namespace
