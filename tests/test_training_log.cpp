// Training logs read into per-step loss and grad norm (dumps/training_log.h): each format from
// a file written here by hand in its writer's layout, and every refusal naming the file, the
// line and the remedy. Exact checks only: each value is a decimal the log prints, read back as
// strtod reads it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "dumps/training_log.h"

namespace parity::dumps {
namespace {

namespace fs = std::filesystem;

class TrainingLogs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("parity-logs-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  // The refusal of `text` as a log, which must name the file and hold `needle`.
  void expect_refused(const std::string& text, const std::string& needle) {
    const auto p = write("bad.log", text);
    try {
      read_training_log(p);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const LogError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + p + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }

  fs::path dir_;
};

// torchtitan's console: the torchrun prefix, the logger's prefix, the colour codes (reset is
// ESC[39m), the loss with 5 decimals and the grad norm with 4; other lines skipped, a
// validation line not a step.
TEST_F(TrainingLogs, TorchtitanConsoleExact) {
  const std::string esc = "\x1b";
  const std::string text =
      "[rank0]:[titan] 2026-01-02 10:00:00,001 - root - INFO - Starting job: debug\n"
      "[rank0]:[titan] 2026-01-02 10:00:01,482 - root - INFO - " + esc + "[31mstep:  1  " + esc +
      "[32mloss:  8.00352  " + esc + "[38;2;180;60;0mgrad_norm:  2.2337  " + esc +
      "[38;2;54;234;195mmemory:  1.85GiB(1.95%)  " + esc + "[34mtps: 4,512  " + esc +
      "[36mtflops: 0.32  " + esc + "[35mmfu: 0.03%" + esc + "[39m\n"
      "[rank0]:[titan] 2026-01-02 10:00:02,000 - root - INFO - validate step: 10  loss:  9.00000\n"
      "[rank0]:[titan] 2026-01-02 10:00:03,117 - root - INFO - step: 10  loss:  3.48888  "
      "grad_norm:  1.3804  memory: 38.91GiB(40.95%)  tps: 12,345  tflops: 712.34  mfu: 72.03%\n";
  const auto log = read_training_log(write("titan.log", text));
  EXPECT_EQ(log.format, "torchtitan");
  EXPECT_TRUE(log.has_grad_norm);
  ASSERT_EQ(log.steps.size(), 2u);
  EXPECT_EQ(log.steps[0].step, 1);
  EXPECT_EQ(log.steps[0].loss, 8.00352);
  EXPECT_EQ(log.steps[0].grad_norm, 2.2337);
  EXPECT_EQ(log.steps[0].line, 2);
  EXPECT_EQ(log.steps[1].step, 10);
  EXPECT_EQ(log.steps[1].loss, 3.48888);
  EXPECT_EQ(log.steps[1].grad_norm, 1.3804);
}

// The older torchtitan line, before the grad norm was logged.
TEST_F(TrainingLogs, TorchtitanWithoutGradNormExact) {
  const auto log = read_training_log(write(
      "old.log", "step:  1  loss:  8.1234  memory:  1.00GiB(1.00%)  wps: 100  mfu: 1.00%\n"
                 "step:  2  loss:  7.5000  memory:  1.00GiB(1.00%)  wps: 100  mfu: 1.00%\n"));
  EXPECT_FALSE(log.has_grad_norm);
  ASSERT_EQ(log.steps.size(), 2u);
  EXPECT_EQ(log.steps[1].loss, 7.5);
  EXPECT_TRUE(std::isnan(log.steps[1].grad_norm));
}

// Megatron-LM's console line.
TEST_F(TrainingLogs, MegatronConsoleExact) {
  const auto log = read_training_log(write(
      "megatron.log",
      "building GPT model ...\n"
      " [2026-01-02 10:00:00] iteration        1/     100 | consumed samples:           32 | "
      "elapsed time per iteration (ms): 912.3 | learning rate: 1.500000E-05 | global batch size:"
      "    32 | lm loss: 1.083373E+01 | loss scale: 1.0 | grad norm: 5.123 | number of skipped "
      "iterations:   0 | number of nan iterations:   0 |\n"));
  EXPECT_EQ(log.format, "megatron");
  ASSERT_EQ(log.steps.size(), 1u);
  EXPECT_EQ(log.steps[0].loss, 10.83373);
  EXPECT_EQ(log.steps[0].grad_norm, 5.123);
}

// loss_compare's files: "STEP LOSS", optionally a grad norm, steps in any order.
TEST_F(TrainingLogs, LossFileExact) {
  const auto log = read_training_log(write("losses.txt", "2 7.9\n1 8.048324584960938\n\n"));
  EXPECT_EQ(log.format, "loss-file");
  EXPECT_FALSE(log.has_grad_norm);
  ASSERT_EQ(log.steps.size(), 2u);
  EXPECT_EQ(log.steps[0].step, 1);
  EXPECT_EQ(log.steps[0].loss, 8.048324584960938);
  const auto with = read_training_log(write("gn.txt", "1 8.003520 2.2337\n"));
  EXPECT_TRUE(with.has_grad_norm);
  EXPECT_EQ(with.steps[0].grad_norm, 2.2337);
}

// Megatron-Core's golden values, keyed by step, with a "nan" for a step not logged; and the
// older list form, values[i] at iteration start_step + i * step_interval + 1.
TEST_F(TrainingLogs, MegatronGoldenValuesBothLayoutsExact) {
  const auto log = read_training_log(write(
      "golden_values_dev.json",
      R"({"lm loss": {"start_step": 1, "end_step": 10, "step_interval": 5,
          "values": {"1": 10.83373, "5": 10.85679, "10": "nan"}},
          "num-zeros": {"start_step": 1, "end_step": 10, "step_interval": 5,
          "values": {"1": 1488.0, "5": 1773.0, "10": 1404.0}}})"));
  EXPECT_EQ(log.format, "golden");
  EXPECT_FALSE(log.has_grad_norm);
  ASSERT_EQ(log.steps.size(), 3u);
  EXPECT_EQ(log.steps[1].step, 5);
  EXPECT_EQ(log.steps[1].loss, 10.85679);
  EXPECT_TRUE(std::isnan(log.steps[2].loss));
  const auto old = read_training_log(write(
      "golden_values.json",
      R"({"lm loss": {"start_step": 0, "end_step": 15, "step_interval": 5,
          "values": [10.83377, 10.86686, 10.89018]}, "iteration_timing_avg": 0.119})"));
  ASSERT_EQ(old.steps.size(), 3u);
  EXPECT_EQ(old.steps[0].step, 1);
  EXPECT_EQ(old.steps[1].step, 6);
  EXPECT_EQ(old.steps[2].step, 11);
  EXPECT_EQ(old.steps[2].loss, 10.89018);
}

// parity's metrics: the hex fields are the exact values, a null is NaN.
TEST_F(TrainingLogs, ParityMetricsBitwise) {
  const auto log = read_training_log(write(
      "m.jsonl",
      R"({"step": 1, "loss": 8.1, "grad_norm": null, "loss_hex": "0x1.0333333333333p+3", "grad_norm_hex": "nan"})"
      "\n"
      R"({"step": 2, "loss": 7.25, "grad_norm": 0.5, "loss_hex": "0x1.dp+2", "grad_norm_hex": "0x1p-1"})"
      "\n"));
  EXPECT_EQ(log.format, "parity");
  ASSERT_EQ(log.steps.size(), 2u);
  EXPECT_EQ(log.steps[0].loss, 0x1.0333333333333p+3);
  EXPECT_TRUE(std::isnan(log.steps[0].grad_norm));
  EXPECT_EQ(log.steps[1].grad_norm, 0.5);
}

// A metrics file of one step (parity train --steps 1) is one JSON object: it was taken for a
// golden-values document and refused for lacking "lm loss" (found by the reader fuzz suite).
TEST_F(TrainingLogs, ParityMetricsOfOneStepBitwise) {
  for (const char* end : {"\n", ""}) {
    const auto log = read_training_log(write(
        "one.jsonl",
        std::string(R"({"step": 1, "loss": 8.1, "grad_norm": 0.5, "loss_hex": "0x1.0333333333333p+3", "grad_norm_hex": "0x1p-1"})") +
            end));
    EXPECT_EQ(log.format, "parity");
    ASSERT_EQ(log.steps.size(), 1u);
    EXPECT_EQ(log.steps[0].step, 1);
    EXPECT_EQ(log.steps[0].loss, 0x1.0333333333333p+3);
    EXPECT_EQ(log.steps[0].grad_norm, 0.5);
  }
}

// A step printed by two ranks with the same values is one step.
TEST_F(TrainingLogs, TheSameStepTwiceWithTheSameValuesIsOneExact) {
  const auto log = read_training_log(
      write("two.log", "[rank0]: step:  1  loss:  8.00000  grad_norm:  1.0000\n"
                       "[rank1]: step:  1  loss:  8.00000  grad_norm:  1.0000\n"));
  EXPECT_EQ(log.steps.size(), 1u);
}

TEST_F(TrainingLogs, RefusalsNameTheFileTheLineAndTheRemedy) {
  expect_refused("", "is empty");
  expect_refused("hello\nworld\n", "no training steps");
  expect_refused("1 8.0\n{\"step\": 2, \"loss\": 7.0}\n", "mixes formats (loss-file from line 1, parity from line 2)");
  expect_refused("step: 1  loss: 8.0\n2 7.0\n", "mixes formats");
  expect_refused("1 8.0\nstep loss\n", "line 2 is not a \"STEP LOSS [GRAD_NORM]\" line");
  expect_refused("1 8.0\n1 8.5\n", "step 1 is logged twice with different values (lines 1 and 2)");
  expect_refused(std::string("1 8.0\n\0\n", 8), "binary data");
  expect_refused(R"({"num-zeros": {}})", "without \"lm loss\"");
  expect_refused(R"({"lm loss": {"values": 3}})", "neither an object nor a list");
  expect_refused(R"({"lm loss": {"values": {}}})", "holds no values: no training steps");
  expect_refused(R"({"lm loss": {"values": {"x": 1.0}}})", "step 'x' is not a number");
  try {
    read_training_log((dir_ / "nosuch.log").string());
    ADD_FAILURE();
  } catch (const LogError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
}

// Lines of 100,000 spaces, digits or colour codes: each overflowed the stack inside std::regex
// (its matcher recursed once per character a quantifier consumed). The scanners read them in
// one pass, with the values the short forms of the same lines give.
TEST_F(TrainingLogs, LongLinesAreScannedInOnePassExact) {
  const std::string spaces(100000, ' '), digits(100000, '7'), esc = "\x1b";
  std::string colour = esc + "[";
  for (int i = 0; i < 50000; ++i) colour += "0;";
  colour += "m";

  const auto titan = read_training_log(write(
      "titan.log", "[rank0]: step:" + spaces + "1  loss:" + spaces + "8.25000  grad_norm:" + spaces +
                       "1.5000\n" + colour + "step:  2  loss:  7.75000" + esc + "[39m\n" +
                       "step: " + digits + "  loss: 1.0\n" + "not a step " + digits + "\n"));
  ASSERT_EQ(titan.format, "torchtitan");
  ASSERT_EQ(titan.steps.size(), 2u);
  EXPECT_EQ(titan.steps[0].step, 1);
  EXPECT_EQ(titan.steps[0].loss, 8.25);
  EXPECT_EQ(titan.steps[0].grad_norm, 1.5);
  EXPECT_EQ(titan.steps[1].step, 2);
  EXPECT_EQ(titan.steps[1].loss, 7.75);

  const auto mega = read_training_log(write(
      "mega.log", " [2026-01-02 10:00:00] iteration" + spaces + "3/" + spaces +
                      "10 | lm loss:" + spaces + "6.500000E+00 | grad norm:" + spaces + "2.250 |\n" +
                      colour + " iteration        4/      10 | lm loss: 6.250000E+00 |\n"));
  ASSERT_EQ(mega.format, "megatron");
  ASSERT_EQ(mega.steps.size(), 2u);
  EXPECT_EQ(mega.steps[0].step, 3);
  EXPECT_EQ(mega.steps[0].loss, 6.5);
  EXPECT_EQ(mega.steps[0].grad_norm, 2.25);
  EXPECT_EQ(mega.steps[1].step, 4);
  EXPECT_EQ(mega.steps[1].loss, 6.25);
}

// JSON nested 100,000 deep, in golden values and in a metrics line: parsing it succeeded and
// printing it for the error message then recursed once per level (SIGSEGV). Refused before
// parsing.
TEST_F(TrainingLogs, DeeplyNestedJsonIsRefusedBeforeParsing) {
  const std::string open(100000, '['), close(100000, ']');
  expect_refused("{\"lm loss\": {\"values\": {\"1\": " + open + close + "}}}", "nested more than 64 deep");
  expect_refused("{\"step\": 1, \"loss\": 8.0}\n{\"step\": 2, \"loss\": " + open + close + "}\n",
                 "nested more than 64 deep");
  // 64 deep is within the limit: the metrics line is refused for its value, not its depth.
  expect_refused("{\"step\": 1, \"loss\": 8.0}\n{\"step\": 2, \"loss\": " + std::string(63, '[') +
                     std::string(63, ']') + "}\n",
                 "line 2 is not a parity metrics line");
}

// Golden values whose start_step + i * step_interval passes 2^63 were undefined behaviour
// (a signed overflow); now a refusal naming the value.
TEST_F(TrainingLogs, GoldenStepsPastTwoToThe63AreRefused) {
  expect_refused(R"({"lm loss": {"start_step": 9223372036854775000, "end_step": 0, "step_interval": 1000,
                     "values": [8.0, 7.0]}})",
                 "value 1 falls at a step past 2^63");
  expect_refused(R"({"lm loss": {"start_step": 0, "step_interval": 9223372036854775807, "values": [8.0, 7.0]}})",
                 "value 1 falls at a step past 2^63");
  expect_refused(R"({"lm loss": {"start_step": -5, "step_interval": 1, "values": [8.0]}})",
                 "start_step must be an integer >= 0");
}

}  // namespace
}  // namespace parity::dumps
