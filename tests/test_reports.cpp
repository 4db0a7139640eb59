// The torch-free report library (parity_reports): matrix files, drift tables, the text,
// Markdown, CSV and JSON renderers, and results.json.
//
// Every expected string below is worked out by hand from the numbers the test chooses (the
// arithmetic is in the comment beside it), never read off the library's output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "reports/drift.h"
#include "reports/matrix.h"
#include "reports/render.h"
#include "reports/results.h"

namespace rp = parity::reports;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The MatrixError message parse_matrix gives for `text` (named "m.toml"); "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    rp::parse_matrix(text, "m.toml");
  } catch (const rp::MatrixError& e) {
    return e.what();
  }
  return "";
}

// ==========================================================================================
// 1. Matrix files
// ==========================================================================================

// Line numbers matter below: the file's first line is line 1.
constexpr const char* kValid = R"(name = "valid"
report_steps = [1, 5, 7]
[defaults]
flavor = "tiny"
steps = 7
seq_len = 32
[[cell]]
name = "ref"
[[cell]]
name = "naive"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
cache = "off"
gate = "bitwise"
[[cell]]
name = "reversed"
reference = "ref"
reverse_microbatches = true
[[cell]]
name = "again"
reference = "ref"
gate = "bitwise"
[[cell]]
name = "ref64"
dtype = "fp64"
dp = 2
steps = 3
[[cell]]
name = "cached64"
reference = "ref64"
trainer = "pipelined"
dtype = "fp64"
dp = 2
pp = 2
vp = 2
nproc = 2
label = "my own label"
gate = "bitwise"
[[cell]]
name = "cached"
reference = "ref"
trainer = "pipelined"
pp = 4
vp = 2
gate = "order-only"
)";

TEST(ParseMatrix, DefaultsApplyAndACellsOwnValueWins) {
  const auto m = rp::parse_matrix(kValid, "m.toml");
  EXPECT_EQ(m.name, "valid");
  EXPECT_EQ(m.source, "m.toml");
  EXPECT_EQ(m.report_steps, (std::vector<int64_t>{1, 5, 7}));
  ASSERT_EQ(m.cells.size(), 7u);
  const rp::Cell* ref = m.find("ref");
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->flavor, "tiny");  // from [defaults]
  EXPECT_EQ(ref->steps, 7);
  EXPECT_EQ(ref->seq_len, 32);
  EXPECT_EQ(ref->dtype, "bf16");  // the built-in default (matrix.h)
  EXPECT_EQ(ref->microbatches, 4);
  EXPECT_EQ(ref->trainer, "reference");
  EXPECT_EQ(ref->gate, rp::Gate::None);
  const rp::Cell* ref64 = m.find("ref64");
  ASSERT_NE(ref64, nullptr);
  EXPECT_EQ(ref64->steps, 3);  // its own value over [defaults]' 7
  EXPECT_EQ(ref64->dtype, "fp64");
  EXPECT_EQ(ref64->seq_len, 32);
  const rp::Cell* c64 = m.find("cached64");
  ASSERT_NE(c64, nullptr);
  EXPECT_EQ(c64->dp, 2);
  EXPECT_EQ(c64->nproc, 2);
  EXPECT_EQ(c64->gate, rp::Gate::Bitwise);  // order-only would need a ledger, in-process
  EXPECT_EQ(c64->cache, "on");
  EXPECT_EQ(c64->label, "my own label");  // a given label is kept as it is
  EXPECT_EQ(m.find("naive")->gate, rp::Gate::Bitwise);
  EXPECT_EQ(m.find("naive")->cache, "off");
  EXPECT_TRUE(m.find("reversed")->reverse_microbatches);
  EXPECT_EQ(m.find("nosuch"), nullptr);
}

// The learning rate and the device reach the cell's `parity train` arguments as given.
TEST(ParseMatrix, LrAndDeviceReachTheTrainArguments) {
  const auto m = rp::parse_matrix(
      "[defaults]\nlr = 1e-2\n[[cell]]\nname = \"a\"\n[[cell]]\nname = \"b\"\n"
      "device = \"cuda\"\nlr = 3\n",
      "m.toml");
  auto arg_after = [](const std::vector<std::string>& args, const std::string& flag) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == flag) return args[i + 1];
    return std::string("<absent>");
  };
  const auto a = m.find("a")->train_args(), b = m.find("b")->train_args();
  EXPECT_EQ(arg_after(a, "--lr"), "0.01");  // the shortest text that reads back as 1e-2
  EXPECT_EQ(arg_after(a, "--device"), "cpu");
  EXPECT_EQ(arg_after(b, "--lr"), "3");  // an integer is a rate too
  EXPECT_EQ(arg_after(b, "--device"), "cuda");
  const std::string e = parse_error("[[cell]]\nname = \"a\"\ndevice = \"gpu\"\n");
  EXPECT_TRUE(contains(e, "key 'device'")) << e;
  EXPECT_TRUE(contains(e, "cpu, cuda")) << e;
  EXPECT_TRUE(contains(parse_error("[[cell]]\nname = \"a\"\nlr = 0\n"), "must be positive"));
}

TEST(ParseMatrix, ReportStepsDefaultToTheSeeds) {
  const auto m = rp::parse_matrix("[[cell]]\nname = \"a\"\n", "m.toml");
  EXPECT_EQ(m.report_steps, (std::vector<int64_t>{1, 10, 50, 100}));
  EXPECT_EQ(m.cells[0].steps, 20);  // matrix.h: steps [20]
  EXPECT_EQ(m.cells[0].seq_len, 256);
}

TEST(ParseMatrix, TablesGroupEachReferenceWithItsCellsInFileOrder) {
  const auto m = rp::parse_matrix(kValid, "m.toml");
  const auto t = m.tables();
  ASSERT_EQ(t.size(), 2u);
  std::vector<std::string> first, second;
  for (const auto* c : t[0]) first.push_back(c->name);
  for (const auto* c : t[1]) second.push_back(c->name);
  // "cached" comes last in the file but belongs to the first table.
  EXPECT_EQ(first, (std::vector<std::string>{"ref", "naive", "reversed", "again", "cached"}));
  EXPECT_EQ(second, (std::vector<std::string>{"ref64", "cached64"}));
}

TEST(ParseMatrix, DefaultLabelsInTheSeedsWords) {
  const auto m = rp::parse_matrix(kValid, "m.toml");
  EXPECT_EQ(m.find("ref")->label, "dp1");
  EXPECT_EQ(m.find("naive")->label, "pp2 x vp2, naive");
  EXPECT_EQ(m.find("reversed")->label, "dp1, micro-batches reversed");
  // The same training arguments as its reference: the determinism check.
  EXPECT_EQ(m.find("again")->label, "dp1, repeat");
  EXPECT_EQ(m.find("cached")->label, "pp4 x vp2, cached");
  EXPECT_EQ(m.find("ref64")->label, "dp2");

  const auto more = rp::parse_matrix(R"(
[[cell]]
name = "r"
dp = 2
[[cell]]
name = "p"
reference = "r"
trainer = "pipelined"
dp = 2
pp = 2
vp = 2
nproc = 2
[[cell]]
name = "s"
reference = "r"
dp = 2
grad_accum = "fp32"
[[cell]]
name = "pp4"
reference = "r"
trainer = "pipelined"
dp = 2
pp = 4
)", "more.toml");
  EXPECT_EQ(more.find("r")->label, "dp2");
  EXPECT_EQ(more.find("p")->label, "dp2 x pp2 x vp2, cached, 2 processes");
  EXPECT_EQ(more.find("s")->label, "dp2, stock accumulation");
  EXPECT_EQ(more.find("pp4")->label, "dp2 x pp4");
}

// -- errors: each names the file (and line where there is one), the cell, the key and a remedy

TEST(ParseMatrixErrors, UnknownKeyInACell) {
  const std::string e = parse_error("[[cell]]\nname = \"a\"\nstpes = 3\n");
  EXPECT_TRUE(contains(e, "m.toml:3")) << e;
  EXPECT_TRUE(contains(e, "cell 'a'")) << e;
  EXPECT_TRUE(contains(e, "key 'stpes'")) << e;
  EXPECT_TRUE(contains(e, "unknown key")) << e;
  EXPECT_TRUE(contains(e, "steps")) << e;  // the remedy lists the keys a cell takes
}

TEST(ParseMatrixErrors, UnknownKeyAtTopLevel) {
  const std::string e = parse_error("name = \"x\"\nreport_step = [1]\n[[cell]]\nname = \"a\"\n");
  EXPECT_TRUE(contains(e, "m.toml:2")) << e;
  EXPECT_TRUE(contains(e, "key 'report_step'")) << e;
  EXPECT_TRUE(contains(e, "unknown key")) << e;
  EXPECT_TRUE(contains(e, "report_steps")) << e;  // names what the top level takes
}

TEST(ParseMatrixErrors, UnknownKeyInDefaults) {
  const std::string e = parse_error("[defaults]\nflavour = \"tiny\"\n[[cell]]\nname = \"a\"\n");
  EXPECT_TRUE(contains(e, "m.toml:2")) << e;
  EXPECT_TRUE(contains(e, "[defaults]")) << e;
  EXPECT_TRUE(contains(e, "key 'flavour'")) << e;
  EXPECT_TRUE(contains(e, "flavor")) << e;
}

TEST(ParseMatrixErrors, CellOnlyKeysInDefaults) {
  const std::string e = parse_error("[defaults]\nreference = \"a\"\n[[cell]]\nname = \"a\"\n");
  EXPECT_TRUE(contains(e, "[defaults]")) << e;
  EXPECT_TRUE(contains(e, "key 'reference'")) << e;
}

TEST(ParseMatrixErrors, WrongTypes) {
  std::string e = parse_error("[[cell]]\nname = \"a\"\nsteps = \"ten\"\n");
  EXPECT_TRUE(contains(e, "m.toml:3")) << e;
  EXPECT_TRUE(contains(e, "cell 'a'")) << e;
  EXPECT_TRUE(contains(e, "key 'steps'")) << e;
  EXPECT_TRUE(contains(e, "integer")) << e;

  e = parse_error("[[cell]]\nname = \"a\"\nsteps = 2.0\n");  // a float, even a whole one
  EXPECT_TRUE(contains(e, "key 'steps'")) << e;
  EXPECT_TRUE(contains(e, "integer")) << e;

  e = parse_error("[[cell]]\nname = \"a\"\nreverse_microbatches = \"yes\"\n");
  EXPECT_TRUE(contains(e, "key 'reverse_microbatches'")) << e;
  EXPECT_TRUE(contains(e, "true or false")) << e;

  e = parse_error("[[cell]]\nname = \"a\"\npp = 0\n");
  EXPECT_TRUE(contains(e, "key 'pp'")) << e;
  EXPECT_TRUE(contains(e, "at least 1")) << e;

  e = parse_error("[[cell]]\nname = \"a\"\ntrainer = \"pipelined\"\ninject = \"drop\"\n");
  EXPECT_TRUE(contains(e, "key 'inject'")) << e;
  EXPECT_TRUE(contains(e, "array")) << e;
}

TEST(ParseMatrixErrors, BadEnumValueListsTheAllowedOnes) {
  const std::string e = parse_error("[[cell]]\nname = \"a\"\ndtype = \"fp16\"\n");
  EXPECT_TRUE(contains(e, "m.toml:3")) << e;
  EXPECT_TRUE(contains(e, "cell 'a'")) << e;
  EXPECT_TRUE(contains(e, "key 'dtype'")) << e;
  EXPECT_TRUE(contains(e, "'fp16'")) << e;
  for (const char* allowed : {"fp32", "bf16", "fp64"}) EXPECT_TRUE(contains(e, allowed)) << e;
}

TEST(ParseMatrixErrors, OutOfRangeIntegerIsRefusedNotWrapped) {
  // An int field must not wrap: pp = 4294967298 (2^32 + 2) once read as pp = 2. Expected: a
  // MatrixError naming the key and the largest value allowed.
  const std::string text = "[[cell]]\nname = \"a\"\ntrainer = \"pipelined\"\npp = 4294967298\n";
  const std::string e = parse_error(text);
  if (e.empty())
    ADD_FAILURE() << "pp = 4294967298 was accepted as pp = "
                  << rp::parse_matrix(text, "m.toml").cells[0].pp;
  else
    EXPECT_TRUE(contains(e, "key 'pp'")) << e;
}

TEST(ParseMatrixErrors, DuplicateNames) {
  const std::string e = parse_error("[[cell]]\nname = \"a\"\n[[cell]]\nname = \"a\"\n");
  EXPECT_TRUE(contains(e, "m.toml:3")) << e;
  EXPECT_TRUE(contains(e, "cell 'a'")) << e;
  EXPECT_TRUE(contains(e, "second cell named 'a'")) << e;
  EXPECT_TRUE(contains(e, "unique")) << e;
}

TEST(ParseMatrixErrors, BadOrMissingName) {
  std::string e = parse_error("[[cell]]\nsteps = 2\n");
  EXPECT_TRUE(contains(e, "m.toml:1")) << e;
  EXPECT_TRUE(contains(e, "cell '#1'")) << e;
  EXPECT_TRUE(contains(e, "needs a name")) << e;
  e = parse_error("[[cell]]\nname = \"a/b\"\n");
  EXPECT_TRUE(contains(e, "'a/b'")) << e;
}

TEST(ParseMatrixErrors, MissingReferenceCell) {
  const std::string e =
      parse_error("[[cell]]\nname = \"a\"\n[[cell]]\nname = \"b\"\nreference = \"nosuch\"\n");
  EXPECT_TRUE(contains(e, "m.toml")) << e;
  EXPECT_TRUE(contains(e, "cell 'b'")) << e;
  EXPECT_TRUE(contains(e, "key 'reference'")) << e;
  EXPECT_TRUE(contains(e, "no cell named 'nosuch'")) << e;
}

TEST(ParseMatrixErrors, AReferenceThatHasAReference) {
  const std::string e = parse_error(
      "[[cell]]\nname = \"a\"\n[[cell]]\nname = \"b\"\nreference = \"a\"\n"
      "[[cell]]\nname = \"c\"\nreference = \"b\"\n");
  EXPECT_TRUE(contains(e, "cell 'c'")) << e;
  EXPECT_TRUE(contains(e, "key 'reference'")) << e;
  EXPECT_TRUE(contains(e, "'b' is compared against 'a'")) << e;
  EXPECT_TRUE(contains(e, "name a reference cell")) << e;
}

TEST(ParseMatrixErrors, SelfReference) {
  const std::string e = parse_error("[[cell]]\nname = \"a\"\nreference = \"a\"\n");
  EXPECT_TRUE(contains(e, "cell 'a'")) << e;
  EXPECT_TRUE(contains(e, "its own reference")) << e;
}

TEST(ParseMatrixErrors, AGateOnAReferenceCell) {
  const std::string e = parse_error("[[cell]]\nname = \"a\"\ngate = \"bitwise\"\n");
  EXPECT_TRUE(contains(e, "cell 'a'")) << e;
  EXPECT_TRUE(contains(e, "key 'gate'")) << e;
  EXPECT_TRUE(contains(e, "nothing to be gated against")) << e;
}

TEST(ParseMatrixErrors, NprocOnAReferenceTrainerCell) {
  const std::string e = parse_error("[[cell]]\nname = \"a\"\n[[cell]]\nname = \"b\"\n"
                                    "reference = \"a\"\nnproc = 2\n");
  EXPECT_TRUE(contains(e, "m.toml:3")) << e;
  EXPECT_TRUE(contains(e, "cell 'b'")) << e;
  EXPECT_TRUE(contains(e, "nproc needs trainer = \"pipelined\"")) << e;
}

// order-only reads the ledger's routing verdicts: a cell that routes nothing, or records no
// ledger, cannot hold it.
TEST(ParseMatrixErrors, AnOrderOnlyGateNeedsAnInProcessPipeline) {
  const std::string ref = "[[cell]]\nname = \"r\"\n[[cell]]\nname = \"c\"\nreference = \"r\"\n"
                          "gate = \"order-only\"\n";
  std::string e = parse_error(ref);
  EXPECT_TRUE(contains(e, "cell 'c'")) << e;
  EXPECT_TRUE(contains(e, "routes nothing")) << e;
  e = parse_error(ref + "trainer = \"pipelined\"\npp = 2\nvp = 2\nnproc = 2\n");
  EXPECT_TRUE(contains(e, "multi-process")) << e;
  EXPECT_EQ(parse_error(ref + "trainer = \"pipelined\"\npp = 2\nvp = 2\n"), "");
}

TEST(ParseMatrixErrors, ReferenceOfAnotherFlavor) {
  const std::string e = parse_error("[[cell]]\nname = \"a\"\n[[cell]]\nname = \"b\"\n"
                                    "reference = \"a\"\nflavor = \"debugmodel\"\n");
  EXPECT_TRUE(contains(e, "cell 'b'")) << e;
  EXPECT_TRUE(contains(e, "flavor")) << e;
}

// A comparison needs the same tokens, checkpoint and dtype as the reference.
TEST(ParseMatrixErrors, ACellOfAnotherBatchOrDtypeThanItsReference) {
  const std::string base = "[[cell]]\nname = \"r\"\nseq_len = 32\n[[cell]]\nname = \"c\"\n"
                           "reference = \"r\"\n";
  std::string e = parse_error(base + "seq_len = 16\n");
  EXPECT_TRUE(contains(e, "cell 'c'")) << e;
  EXPECT_TRUE(contains(e, "tiny_s42_1x4x1x16")) << e;  // flavor_seed_dp x M x rows x T
  EXPECT_TRUE(contains(e, "tiny_s42_1x4x1x32")) << e;
  e = parse_error(base + "seq_len = 32\ndtype = \"fp32\"\n");
  EXPECT_TRUE(contains(e, "dtype 'fp32'")) << e;
  EXPECT_EQ(parse_error(base + "seq_len = 32\nlr = 1e-2\n"), "");  // another rate is fine
}

TEST(ParseMatrixErrors, InvalidTomlNamesTheLine) {
  const std::string e = parse_error("name = \"x\"\n\nsteps = = 3\n[[cell]]\nname = \"a\"\n");
  EXPECT_TRUE(contains(e, "m.toml:3")) << e;
  EXPECT_TRUE(contains(e, "not valid TOML")) << e;
}

TEST(ParseMatrixErrors, NoCells) {
  std::string e = parse_error("name = \"empty\"\n");
  EXPECT_TRUE(contains(e, "m.toml")) << e;
  EXPECT_TRUE(contains(e, "no cells")) << e;
  EXPECT_TRUE(contains(e, "[[cell]]")) << e;
  e = parse_error("");
  EXPECT_TRUE(contains(e, "no cells")) << e;
}

TEST(LoadMatrix, UnreadableFileNamesItAndShippedNamesLoad) {
  try {
    rp::load_matrix("/nonexistent/dir/m.toml");
    ADD_FAILURE() << "no error for a missing file";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), "/nonexistent/dir/m.toml")) << e.what();
    EXPECT_TRUE(contains(e.what(), "quick, seed")) << e.what();
  }
  const auto q = rp::load_matrix("quick");
  EXPECT_EQ(q.name, "quick");
  EXPECT_EQ(q.source, "<embedded quick>");
}

// -- the shipped matrices

TEST(ShippedMatrices, BothParse) {
  for (const char* name : {"quick", "seed"}) {
    const std::string text = rp::embedded_matrix(name);
    ASSERT_FALSE(text.empty()) << name;
    const auto m = rp::parse_matrix(text, name);
    EXPECT_EQ(m.name, name);
    EXPECT_FALSE(m.cells.empty());
  }
  EXPECT_EQ(rp::embedded_matrix("nosuch"), "");
}

// The structure both comments promise: every pipelined cell against a single-device
// reference; cache-off pipelined cells gated bitwise; single-process vp > 1 cache-on cells
// gated order-only.
void expect_seed_structure(const rp::Matrix& m) {
  int bitwise = 0, order_only = 0;
  for (const auto& c : m.cells) {
    SCOPED_TRACE(m.name + ": " + c.name);
    if (c.pipelined()) {
      const rp::Cell* ref = m.find(c.reference);
      ASSERT_NE(ref, nullptr);
      EXPECT_FALSE(ref->pipelined());
    }
    if (c.pipelined() && c.cache == "off") {
      EXPECT_EQ(c.gate, rp::Gate::Bitwise);
      ++bitwise;
    }
    if (c.pipelined() && c.vp > 1 && c.cache == "on" && !c.multi_process()) {
      EXPECT_EQ(c.gate, rp::Gate::OrderOnly);
      ++order_only;
    }
  }
  // Naive and cached in pairs: bf16 pp2vp2, pp2vp4, pp4vp2, pp4vp4; fp32 pp2vp2, pp4vp4;
  // dp2 pp2vp2: 7 each.
  EXPECT_EQ(bitwise, 7);
  EXPECT_EQ(order_only, 7);
}

TEST(ShippedMatrices, SeedIsDebugmodel100StepsReportedAt1_10_50_100) {
  const auto m = rp::parse_matrix(rp::embedded_matrix("seed"), "seed");
  EXPECT_EQ(m.report_steps, (std::vector<int64_t>{1, 10, 50, 100}));
  for (const auto& c : m.cells) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.flavor, "debugmodel");
    EXPECT_EQ(c.steps, 100);
    EXPECT_EQ(c.microbatches, 4);  // "four 256-token micro-batches per rank"
    EXPECT_EQ(c.seq_len, 256);
    EXPECT_EQ(c.rows, 1);
  }
  // Three tables: bf16, fp32, dp2.
  const auto t = m.tables();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0][0]->name, "ref");
  EXPECT_EQ(t[1][0]->dtype, "fp32");
  EXPECT_EQ(t[2][0]->dp, 2);
  expect_seed_structure(m);
}

TEST(ShippedMatrices, QuickHasTheSeedsStructureOnTiny) {
  const auto q = rp::parse_matrix(rp::embedded_matrix("quick"), "quick");
  const auto s = rp::parse_matrix(rp::embedded_matrix("seed"), "seed");
  EXPECT_EQ(q.report_steps, (std::vector<int64_t>{1, 5, 10, 20}));
  for (const auto& c : q.cells) {
    EXPECT_EQ(c.flavor, "tiny") << c.name;
    EXPECT_EQ(c.steps, 20) << c.name;
  }
  expect_seed_structure(q);
  // Every seed row has its quick counterpart of the same shape and gate.
  for (const auto& c : s.cells) {
    SCOPED_TRACE(c.name);
    const rp::Cell* k = q.find(c.name);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->reference, c.reference);
    EXPECT_EQ(k->trainer, c.trainer);
    EXPECT_EQ(k->dtype, c.dtype);
    EXPECT_EQ(k->dp, c.dp);
    EXPECT_EQ(k->pp, c.pp);
    EXPECT_EQ(k->vp, c.vp);
    EXPECT_EQ(k->cache, c.cache);
    EXPECT_EQ(k->gate, c.gate);
    EXPECT_EQ(k->grad_accum, c.grad_accum);
    EXPECT_EQ(k->reverse_microbatches, c.reverse_microbatches);
    EXPECT_EQ(k->label, c.label);
  }
}

// ==========================================================================================
// 2. Drift tables
// ==========================================================================================

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

rp::StepPoint point(int64_t step, double loss, double grad_norm) {
  rp::StepPoint p;
  p.step = step;
  p.loss = loss;
  p.grad_norm = grad_norm;
  p.loss_hex = hex(loss);
  p.grad_norm_hex = hex(grad_norm);
  p.seconds = 0.25;
  return p;
}

// A reference and one pipelined cell against it, each with the steps given.
constexpr const char* kPair = R"(name = "pair"
[[cell]]
name = "ref"
[[cell]]
name = "cell"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
gate = "order-only"
)";

rp::MatrixResult result_of(const std::string& matrix_text, std::vector<int64_t> report_steps) {
  const auto m = rp::parse_matrix(matrix_text, "r.toml");
  rp::MatrixResult r;
  r.matrix = m.name;
  r.source = m.source;
  r.git_sha = "0123456789abcdef";
  r.started = "2026-11-30T12:00:00Z";
  r.wall_seconds = 12.5;
  r.report_steps = std::move(report_steps);
  for (const auto& c : m.cells) {
    rp::CellResult cr;
    cr.cell = c;
    cr.status = "ok";
    cr.gate.gate = c.gate;
    r.cells.push_back(cr);
  }
  return r;
}

rp::CellResult& cell_of(rp::MatrixResult& r, const std::string& name) {
  for (auto& c : r.cells)
    if (c.cell.name == name) return c;
  throw std::runtime_error("no cell " + name);
}

// ref and cell over the same steps; `cell_loss`/`cell_norm` are the cell's values.
rp::MatrixResult pair(const std::vector<double>& ref_loss, const std::vector<double>& ref_norm,
                      const std::vector<double>& cell_loss, const std::vector<double>& cell_norm,
                      std::vector<int64_t> report_steps) {
  auto r = result_of(kPair, std::move(report_steps));
  for (size_t i = 0; i < ref_loss.size(); ++i)
    cell_of(r, "ref").steps.push_back(point(int64_t(i) + 1, ref_loss[i], ref_norm[i]));
  for (size_t i = 0; i < cell_loss.size(); ++i)
    cell_of(r, "cell").steps.push_back(point(int64_t(i) + 1, cell_loss[i], cell_norm[i]));
  return r;
}

const rp::DriftRow& row_of(const rp::DriftTable& t, const std::string& cell) {
  for (const auto& row : t.rows)
    if (row.cell == cell) return row;
  throw std::runtime_error("no row " + cell);
}

TEST(Drift, PrintedValuesAndTheirChange) {
  // Step 1: loss equal; grad norm 1.2 against 1.5: (1.2 - 1.5) / 1.5 = -20%.
  // Step 2: loss 3.485760 against 3.488880: -0.00312 / 3.48888 = -0.0894...% -> -0.09%;
  //         grad norm 2.5 against 2.0: +25%.
  const auto r = pair({8.003520, 3.488880}, {1.5, 2.0}, {8.003520, 3.485760}, {1.2, 2.5}, {1, 2});
  const auto t = rp::drift_tables(r);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].reference, "ref");
  EXPECT_EQ(t[0].steps, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(t[0].rows.size(), 2u);
  const auto& ref = t[0].rows[0];
  EXPECT_TRUE(ref.reference);
  EXPECT_EQ(ref.cell, "ref");
  EXPECT_EQ(ref.status, "ok");
  EXPECT_EQ(ref.loss[0].value, "8.003520");  // 6 decimals
  EXPECT_EQ(ref.loss[0].change, "");         // the reference row has no change
  EXPECT_EQ(ref.grad_norm[0].value, "1.5000");  // 4 decimals
  EXPECT_EQ(ref.grad_norm[1].value, "2.0000");

  const auto& c = t[0].rows[1];
  EXPECT_FALSE(c.reference);
  EXPECT_EQ(c.loss[0].value, "8.003520");
  EXPECT_EQ(c.loss[0].change, "identical");
  EXPECT_EQ(c.loss[1].value, "3.485760");
  EXPECT_EQ(c.loss[1].change, "-0.09%");
  EXPECT_EQ(c.grad_norm[0].value, "1.2000");
  EXPECT_EQ(c.grad_norm[0].change, "-20.00%");
  EXPECT_EQ(c.grad_norm[1].value, "2.5000");
  EXPECT_EQ(c.grad_norm[1].change, "+25.00%");
}

TEST(Drift, BitsThatDifferBelowThePrintedDigitsAreIdentical) {
  // 3 + 2^-40 prints as 3.000000; 1.25 + 2^-30 prints as 1.2500.
  const double loss = 3.0 + std::ldexp(1.0, -40), norm = 1.25 + std::ldexp(1.0, -30);
  const auto r = pair({3.0}, {1.25}, {loss}, {norm}, {1});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss[0].value, "3.000000");
  EXPECT_EQ(c.loss[0].change, "identical");
  EXPECT_EQ(c.grad_norm[0].change, "identical");
  // ... but the bitwise count sees them.
  EXPECT_EQ(c.loss_same.compared, 1);
  EXPECT_EQ(c.loss_same.identical, 0);
}

TEST(Drift, AChangeThatRoundsToZeroKeepsItsSign) {
  // 8.000010 against 8.000000: +0.000125% -> "+0.00%"; 7.999990: -0.000125% -> "-0.00%".
  // Grad norm 4.0001 against 4.0: +0.0025% -> "+0.00%"; 3.9999: "-0.00%".
  const auto r = pair({8.0, 8.0}, {4.0, 4.0}, {8.000010, 7.999990}, {4.0001, 3.9999}, {1, 2});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss[0].change, "+0.00%");
  EXPECT_EQ(c.loss[1].change, "-0.00%");
  EXPECT_EQ(c.grad_norm[0].change, "+0.00%");
  EXPECT_EQ(c.grad_norm[1].change, "-0.00%");
}

TEST(Drift, AMissingStepIsNotAvailable) {
  // The cell logged steps 1 and 2 only; the reference lacks step 2.
  auto r = result_of(kPair, {1, 2, 3});
  cell_of(r, "ref").steps = {point(1, 4.0, 1.0), point(3, 3.0, 1.0)};
  cell_of(r, "cell").steps = {point(1, 4.0, 1.0), point(2, 3.5, 1.0)};
  const auto t = rp::drift_tables(r)[0];
  const auto& ref = row_of(t, "ref");
  EXPECT_EQ(ref.loss[1].value, "");
  EXPECT_EQ(ref.loss[1].change, "n/a");
  const auto& c = row_of(t, "cell");
  EXPECT_EQ(c.loss[1].value, "3.500000");  // logged, but nothing to compare against
  EXPECT_EQ(c.loss[1].change, "n/a");
  EXPECT_EQ(c.loss[2].value, "");
  EXPECT_EQ(c.loss[2].change, "n/a");
  EXPECT_EQ(c.grad_norm[2].change, "n/a");
  // Only step 1 is logged by both.
  EXPECT_EQ(c.loss_same.compared, 1);
  EXPECT_EQ(c.loss_same.identical, 1);
  EXPECT_EQ(c.loss_same.text, "the one step identical");
}

// 100 steps of a reference curve: loss 9 - step/64 (exact in binary), grad norm 1.5 except
// 1.2085 at step 37.
std::vector<double> ref_loss_100() {
  std::vector<double> v;
  for (int s = 1; s <= 100; ++s) v.push_back(9.0 - s / 64.0);
  return v;
}
std::vector<double> ref_norm_100() {
  std::vector<double> v(100, 1.5);
  v[36] = 1.2085;
  return v;
}

TEST(IdenticalSteps, AllIdentical) {
  const auto r = pair(ref_loss_100(), ref_norm_100(), ref_loss_100(), ref_norm_100(), {1, 100});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss_same.compared, 100);
  EXPECT_EQ(c.loss_same.identical, 100);
  EXPECT_EQ(c.loss_same.text, "all 100 steps identical");
  EXPECT_EQ(c.grad_norm_same.text, "all 100 steps identical");
}

TEST(IdenticalSteps, OneStepOneUnitApartInTheLastPrintedDigit) {
  auto norm = ref_norm_100();
  norm[36] = 1.2084;
  const auto r = pair(ref_loss_100(), ref_norm_100(), ref_loss_100(), norm, {1, 100});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss_same.text, "all 100 steps identical");
  EXPECT_EQ(c.grad_norm_same.compared, 100);
  EXPECT_EQ(c.grad_norm_same.identical, 99);
  EXPECT_EQ(c.grad_norm_same.text,
            "99 of 100 steps identical; step 37 differs by one unit in the last printed digit "
            "(1.2084 vs 1.2085)");
}

TEST(IdenticalSteps, OneUnitApartAcrossACarry) {
  // 1.9999 and 2.0000 differ in every printed digit, yet by one unit of the last.
  auto ref = ref_norm_100(), norm = ref_norm_100();
  ref[4] = 2.0;
  norm[4] = 1.9999;
  const auto r = pair(ref_loss_100(), ref, ref_loss_100(), norm, {1});
  EXPECT_EQ(rp::drift_tables(r)[0].rows[1].grad_norm_same.text,
            "99 of 100 steps identical; step 5 differs by one unit in the last printed digit "
            "(1.9999 vs 2.0000)");
}

TEST(IdenticalSteps, OneStepDifferingBelowThePrintedDigits) {
  auto norm = ref_norm_100();
  norm[36] = std::nextafter(1.2085, 2.0);  // one ulp above: still prints 1.2085
  const auto r = pair(ref_loss_100(), ref_norm_100(), ref_loss_100(), norm, {1, 100});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.grad_norm_same.identical, 99);
  EXPECT_EQ(c.grad_norm_same.text,
            "99 of 100 steps identical; step 37 differs below the printed digits (1.2085)");
}

TEST(IdenticalSteps, ManyStepsDiffer) {
  // Step 1 equal, step 2 3.484850 against 3.488880, steps 3..100 half a unit of loss lower.
  auto ref = ref_loss_100(), loss = ref_loss_100();
  ref[1] = 3.488880;
  loss[1] = 3.484850;
  for (int i = 2; i < 100; ++i) loss[i] = ref[i] - 0.5;
  const auto r = pair(ref, ref_norm_100(), loss, ref_norm_100(), {1, 100});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss_same.compared, 100);
  EXPECT_EQ(c.loss_same.identical, 1);
  EXPECT_EQ(c.loss_same.text,
            "1 of 100 steps identical; first differs at step 2 (3.484850 vs 3.488880)");
}

TEST(IdenticalSteps, NothingToCompare) {
  auto r = pair({4.0, 3.0}, {1.0, 1.0}, {}, {}, {1});
  const auto tables = rp::drift_tables(r);
  const auto& c = tables[0].rows[1];
  EXPECT_EQ(c.loss_same.compared, 0);
  EXPECT_EQ(c.loss[0].change, "n/a");
}

// Two tables: bf16 {ref, reversed, cached}, fp32 {ref32, naive32 with a split}. The kinds
// that occur are reference, naive, split and reversed; in the report's kind order (drift.h:
// reference, naive, split, stock, reversed, ...) they are numbered 1, 2, 3, 4.
constexpr const char* kTwoTables = R"(name = "two"
[[cell]]
name = "ref"
[[cell]]
name = "reversed"
reference = "ref"
reverse_microbatches = true
[[cell]]
name = "cached"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
[[cell]]
name = "ref32"
dtype = "fp32"
[[cell]]
name = "naive32"
reference = "ref32"
dtype = "fp32"
trainer = "pipelined"
pp = 2
vp = 2
cache = "off"
split = "emb,0-3|4-8|9-13|14-16,head"
)";

TEST(Footnotes, NumberedInKindOrderOverTheReportListedPerTableAsUsed) {
  auto r = result_of(kTwoTables, {1});
  for (auto& c : r.cells) c.steps = {point(1, 4.0, 1.0)};
  const auto t = rp::drift_tables(r);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(row_of(t[0], "ref").label, "dp1 [1]");
  EXPECT_EQ(row_of(t[0], "reversed").label, "dp1, micro-batches reversed [4]");
  EXPECT_EQ(row_of(t[0], "cached").label, "pp2 x vp2, cached");  // no kind, no mark
  EXPECT_EQ(row_of(t[1], "ref32").label, "dp1 [1]");
  EXPECT_EQ(row_of(t[1], "naive32").label, "pp2 x vp2, naive [2][3]");

  auto numbers = [](const rp::DriftTable& table) {
    std::vector<int> n;
    for (const auto& f : table.footnotes) n.push_back(f.number);
    return n;
  };
  EXPECT_EQ(numbers(t[0]), (std::vector<int>{1, 4}));
  EXPECT_EQ(numbers(t[1]), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t[0].footnotes[1].text, rp::footnote_text("reversed"));
  EXPECT_EQ(t[1].footnotes[2].text, rp::footnote_text("split"));
  EXPECT_NE(rp::footnote_text("naive"), rp::footnote_text("split"));
}

TEST(Footnotes, RowKinds) {
  const auto m = rp::parse_matrix(kTwoTables, "r.toml");
  EXPECT_EQ(rp::row_kinds(*m.find("ref"), nullptr), (std::vector<std::string>{"reference"}));
  EXPECT_EQ(rp::row_kinds(*m.find("naive32"), m.find("ref32")),
            (std::vector<std::string>{"naive", "split"}));
  EXPECT_EQ(rp::row_kinds(*m.find("cached"), m.find("ref")), std::vector<std::string>{});
  // The same arguments as the reference: a repeat.
  EXPECT_EQ(rp::row_kinds(*m.find("ref"), m.find("ref")), (std::vector<std::string>{"repeat"}));
}

TEST(Drift, TableTitleNamesTheShape) {
  auto r = result_of(kTwoTables, {1});
  const auto t = rp::drift_tables(r);
  // 1 x 4 micro-batches x 1 row x 256 tokens = 1024 tokens per step, 20 steps (the defaults).
  EXPECT_TRUE(contains(t[0].title, "tiny, bf16")) << t[0].title;
  EXPECT_TRUE(contains(t[0].title, "1024 tokens per step")) << t[0].title;
  EXPECT_TRUE(contains(t[0].title, "20 steps")) << t[0].title;
  EXPECT_TRUE(contains(t[1].title, "fp32")) << t[1].title;
}

TEST(Step1Verdict, EveryCase) {
  rp::CellResult c;
  c.status = "failed";
  EXPECT_EQ(rp::step1_verdict(c), "FAILED");  // even a reference
  c.status = "ok";
  EXPECT_EQ(rp::step1_verdict(c), "REFERENCE");
  c.cell.reference = "ref";
  EXPECT_EQ(rp::step1_verdict(c), "n/a");  // neither a ledger nor a comparison

  // No ledger: the tensor comparison decides.
  c.step1.have = true;
  EXPECT_EQ(rp::step1_verdict(c), "BITWISE");
  c.step1.wrong_tensors = 3;
  EXPECT_EQ(rp::step1_verdict(c), "DIFFERS");
  c.step1.wrong_tensors = 0;
  c.step1.scalars_equal = false;
  EXPECT_EQ(rp::step1_verdict(c), "DIFFERS");

  // The ledger, when there is one, decides over the comparison.
  c.verdicts.have = true;
  c.verdicts.exact = 10;
  EXPECT_EQ(rp::step1_verdict(c), "EXACT");
  c.verdicts.order_only = 2;
  EXPECT_EQ(rp::step1_verdict(c), "ORDER-ONLY");
  c.verdicts.wrong = 1;
  EXPECT_EQ(rp::step1_verdict(c), "WRONG");

  c.status = "failed";
  EXPECT_EQ(rp::step1_verdict(c), "FAILED");
}

TEST(SummaryRows, CountsUlpsGatesAndAFailedCellsError) {
  auto r = result_of(kPair, {1});
  auto& ref = cell_of(r, "ref");
  ref.seconds_per_step = 0.5;
  auto& c = cell_of(r, "cell");
  c.step1.have = true;
  c.step1.tensors = 12;
  c.step1.wrong_tensors = 4;
  c.step1.max_ulp = rp::kUlpInfinite;
  c.verdicts.have = true;
  c.verdicts.exact = 8;
  c.verdicts.order_only = 3;
  c.verdicts.wrong = 1;
  c.verdicts.first_wrong = "grads/w: lacks a deposit";
  c.bytes_forward_per_mb = 7168;
  c.gate.passed = false;
  c.gate.why = "1 WRONG at step 1";

  auto rows = rp::summary_rows(r);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].cell, "ref");
  EXPECT_EQ(rows[0].verdict, "REFERENCE");
  EXPECT_EQ(rows[0].wrong, "-");
  EXPECT_EQ(rows[0].max_ulp, "-");
  EXPECT_EQ(rows[0].exact, -1);  // no ledger
  EXPECT_EQ(rows[0].gate, "-");
  EXPECT_EQ(rows[0].note, "");
  EXPECT_EQ(rows[0].seconds_per_step, 0.5);
  EXPECT_EQ(rows[1].verdict, "WRONG");
  EXPECT_EQ(rows[1].wrong, "4");
  EXPECT_EQ(rows[1].max_ulp, "inf");
  EXPECT_EQ(rows[1].exact, 8);
  EXPECT_EQ(rows[1].order_only, 3);
  EXPECT_EQ(rows[1].wrong_verdicts, 1);
  EXPECT_EQ(rows[1].bytes_forward_per_mb, 7168);
  EXPECT_EQ(rows[1].bytes_backward_per_mb, -1);
  EXPECT_EQ(rows[1].gate, "FAIL");
  EXPECT_EQ(rows[1].note, "1 WRONG at step 1");

  c.step1.max_ulp = 37;
  c.gate.passed = true;
  rows = rp::summary_rows(r);
  EXPECT_EQ(rows[1].max_ulp, "37");
  EXPECT_EQ(rows[1].gate, "pass");
  EXPECT_EQ(rows[1].note, "grads/w: lacks a deposit");  // a WRONG verdict with no failed gate

  c.status = "failed";
  c.error = "exit 1: parity: deposit count for block 2 at stage 3: expected 2, got 1";
  c.gate.passed = false;
  c.gate.why = "the cell did not run to the end";
  rows = rp::summary_rows(r);
  EXPECT_EQ(rows[1].verdict, "FAILED");
  EXPECT_EQ(rows[1].gate, "FAIL");
  EXPECT_EQ(rows[1].note,
            "failed: exit 1: parity: deposit count for block 2 at stage 3: expected 2, got 1");
}

TEST(PercentChange, SignedTwoDecimals) {
  EXPECT_EQ(rp::percent_change(3.485760, 3.488880), "-0.09%");  // -0.0894%
  EXPECT_EQ(rp::percent_change(3.0, 2.0), "+50.00%");
  EXPECT_EQ(rp::percent_change(1.0, 4.0), "-75.00%");
  EXPECT_EQ(rp::percent_change(2.0, 2.0), "+0.00%");
  EXPECT_EQ(rp::percent_change(1.00001, 1.0), "+0.00%");   // +0.001%
  EXPECT_EQ(rp::percent_change(0.99999, 1.0), "-0.00%");
  EXPECT_EQ(rp::percent_change(1.0, 0.0), "n/a");  // no relative change against zero
  EXPECT_EQ(rp::percent_change(-1.5, -2.0), "+25.00%");  // against |reference|
  EXPECT_EQ(rp::percent_change(std::nan(""), 2.0), "n/a");
  EXPECT_EQ(rp::percent_change(std::numeric_limits<double>::infinity(), 2.0), "n/a");
}

// ==========================================================================================
// 3. Renderers
// ==========================================================================================

// The seed's four report steps; ref, a naive cell identical to it on every step, a cached
// cell that drifts, and a cached cell that failed after two steps.
constexpr const char* kRender = R"(name = "render"
report_steps = [1, 10, 50, 100]
[defaults]
steps = 100
[[cell]]
name = "ref"
[[cell]]
name = "naive"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
cache = "off"
gate = "bitwise"
[[cell]]
name = "cached"
reference = "ref"
trainer = "pipelined"
pp = 2
vp = 2
gate = "order-only"
[[cell]]
name = "broken"
reference = "ref"
trainer = "pipelined"
pp = 4
vp = 2
gate = "order-only"
)";

constexpr const char* kBrokenError = "exit 1: parity: deposit count for block 2 at stage 7";

rp::MatrixResult rendered() {
  auto r = result_of(kRender, {1, 10, 50, 100});
  for (int s = 1; s <= 100; ++s) {
    const double loss = 9.0 - s / 64.0;  // step 1: 8.984375; 10: 8.84375; 50: 8.21875; 100: 7.4375
    cell_of(r, "ref").steps.push_back(point(s, loss, 1.5));
    cell_of(r, "naive").steps.push_back(point(s, loss, 1.5));
    // The cached cell: equal at step 1, then loss + 1/16 and grad norm 1.53 (+2%).
    cell_of(r, "cached").steps.push_back(
        point(s, s == 1 ? loss : loss + 0.0625, s == 1 ? 1.5 : 1.53));
  }
  auto& broken = cell_of(r, "broken");
  broken.steps = {point(1, 8.984375, 1.5), point(2, 8.96875, 1.5)};
  broken.status = "failed";
  broken.error = kBrokenError;
  broken.gate.passed = false;
  broken.gate.why = "the cell did not run to the end";
  cell_of(r, "naive").step1.have = true;
  cell_of(r, "naive").step1.tensors = 5;
  cell_of(r, "cached").verdicts.have = true;
  cell_of(r, "cached").verdicts.order_only = 5;
  return r;
}

// The cells of the Markdown table row whose label starts with `label_prefix`, trimmed.
std::vector<std::string> md_row(const std::string& md, const std::string& label_prefix) {
  std::istringstream in(md);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| " + label_prefix, 0) != 0) continue;
    std::vector<std::string> cells;
    size_t at = 1;
    while (at < line.size()) {
      const size_t bar = line.find('|', at);
      if (bar == std::string::npos) break;
      std::string c = line.substr(at, bar - at);
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
      at = bar + 1;
    }
    return cells;
  }
  return {};
}

TEST(RenderMarkdown, TheSeedsLayout) {
  const auto r = rendered();
  const std::string md = rp::render_markdown(r);
  EXPECT_TRUE(contains(md, "\n| cell | loss, step 1 | step 10 | step 50 | step 100 | "
                           "grad norm, step 1 | step 10 | step 50 | step 100 |\n"
                           "|---|---|---|---|---|---|---|---|---|\n"))
      << md;
  // The reference row: values only. 9 - 1/64 = 8.984375, 9 - 10/64 = 8.84375,
  // 9 - 50/64 = 8.21875, 9 - 100/64 = 7.4375.
  EXPECT_TRUE(contains(md, "| dp1 [1] | `8.984375` | `8.843750` | `8.218750` | `7.437500` | "
                           "`1.5000` | `1.5000` | `1.5000` | `1.5000` |\n"))
      << md;
  EXPECT_TRUE(contains(md, "| pp2 x vp2, naive [2] | `8.984375` identical | `8.843750` identical "
                           "| `8.218750` identical | `7.437500` identical | `1.5000` identical | "
                           "`1.5000` identical | `1.5000` identical | `1.5000` identical |\n"))
      << md;
  // Cached, loss + 1/16: step 10 8.90625, 0.0625 / 8.84375 = 2/283 = +0.7067%; step 50
  // 8.28125, 2/263 = +0.7605%; step 100 7.5, 1/119 = +0.8403%. Grad norm 0.03 / 1.5 = +2%.
  const auto cached = md_row(md, "pp2 x vp2, cached |");
  ASSERT_EQ(cached.size(), 9u) << md;
  EXPECT_EQ(cached[1], "`8.984375` identical");
  EXPECT_EQ(cached[2], "`8.906250` +0.71%");
  EXPECT_EQ(cached[3], "`8.281250` +0.76%");
  EXPECT_EQ(cached[4], "`7.500000` +0.84%");
  EXPECT_EQ(cached[5], "`1.5000` identical");
  EXPECT_EQ(cached[6], "`1.5300` +2.00%");
  // The failed cell's row carries its status; the others still render.
  const auto broken = md_row(md, "pp4 x vp2, cached |");
  ASSERT_EQ(broken.size(), 9u) << md;
  EXPECT_EQ(broken[1], std::string("failed: ") + kBrokenError);
  for (size_t i = 2; i < 9; ++i) EXPECT_EQ(broken[i], "");
  // The identical-step counts and the footnotes.
  EXPECT_TRUE(contains(md, "- pp2 x vp2, naive [2]: loss all 100 steps identical; grad norm all "
                           "100 steps identical\n"))
      << md;
  EXPECT_TRUE(contains(md, "[1] " + rp::footnote_text("reference"))) << md;
  EXPECT_TRUE(contains(md, "[2] " + rp::footnote_text("naive"))) << md;
}

TEST(RenderMarkdown, CarriesTheSameValuesAsTheJson) {
  const auto r = rendered();
  const std::string md = rp::render_markdown(r);
  // Through text, as a reader of report.json would see it.
  const json j = json::parse(rp::render_json(r).dump());
  ASSERT_EQ(j["drift_tables"].size(), 1u);
  const auto& table = j["drift_tables"][0];
  EXPECT_EQ(table["steps"], json({1, 10, 50, 100}));
  int compared = 0;
  for (const auto& row : table["rows"]) {
    const std::string label = row["label"];
    const auto cells = md_row(md, label + " |");
    ASSERT_EQ(cells.size(), 9u) << label;
    EXPECT_EQ(cells[0], label);
    if (row["status"] != "ok") {
      EXPECT_EQ(cells[1], row["status"].get<std::string>());
      continue;
    }
    size_t i = 1;
    for (const char* metric : {"loss", "grad_norm"})
      for (const auto& v : row[metric]) {
        const std::string value = v["value"], change = v["change"];
        EXPECT_EQ(cells[i++], "`" + value + "`" + (change.empty() ? "" : " " + change))
            << label << " " << metric << " step " << v["step"];
        ++compared;
      }
  }
  EXPECT_EQ(compared, 3 * 8);  // three rows that ran, eight values each
  EXPECT_EQ(j["footer"], rp::footer(r));
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["summary"].size(), 4u);
  EXPECT_EQ(j["summary"][3]["verdict"], "FAILED");
  EXPECT_EQ(j["result"]["cells"].size(), 4u);
}

TEST(RenderText, RowsAndFooter) {
  const auto r = rendered();
  const std::string txt = rp::render_text(r);
  EXPECT_TRUE(contains(txt, "loss, step 1")) << txt;
  EXPECT_TRUE(contains(txt, "8.984375 identical")) << txt;
  EXPECT_TRUE(contains(txt, std::string("failed: ") + kBrokenError)) << txt;
  EXPECT_TRUE(contains(txt, "\n" + rp::footer(r) + "\n")) << txt;
}

std::vector<std::vector<std::string>> csv_rows(const std::string& csv) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(csv);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream ls(line);
    std::string f;
    while (std::getline(ls, f, ',')) fields.push_back(f);
    if (!line.empty() && line.back() == ',') fields.push_back("");
    rows.push_back(fields);
  }
  return rows;
}

TEST(RenderCsv, OneRowPerLoggedStepPerCell) {
  const auto r = rendered();
  const auto rows = csv_rows(rp::render_csv(r));
  // 100 + 100 + 100 + 2 logged steps and the header.
  ASSERT_EQ(rows.size(), 303u);
  EXPECT_EQ(rows[0][0], "cell");
  EXPECT_EQ(rows[0][3], "loss");
  for (const auto& row : rows) EXPECT_EQ(row.size(), rows[0].size());
  // ref, step 1: no reference, no change.
  EXPECT_EQ(rows[1][0], "ref");
  EXPECT_EQ(rows[1][1], "");
  EXPECT_EQ(rows[1][2], "1");
  EXPECT_EQ(std::strtod(rows[1][3].c_str(), nullptr), 8.984375);  // exact: printed in full
  EXPECT_EQ(rows[1][5], hex(8.984375));
  EXPECT_EQ(rows[1][7], "");
  // cached, step 100 (row 1 + 100 + 100 + 99): loss 7.5 against 7.4375, 100/119 %.
  const auto& c = rows[300];
  EXPECT_EQ(c[0], "cached");
  EXPECT_EQ(c[1], "ref");
  EXPECT_EQ(c[2], "100");
  EXPECT_EQ(std::strtod(c[3].c_str(), nullptr), 7.5);
  EXPECT_NEAR(std::strtod(c[7].c_str(), nullptr), 100.0 / 119.0, 1e-9);
  EXPECT_NEAR(std::strtod(c[8].c_str(), nullptr), 2.0, 1e-9);
  // The failed cell's two logged steps are there too.
  EXPECT_EQ(rows[301][0], "broken");
  EXPECT_EQ(rows[302][0], "broken");
  EXPECT_EQ(rows[302][2], "2");
}

TEST(Footer, OkAndFailedNamingCellsAndGates) {
  auto r = rendered();
  const std::string failed = rp::footer(r);
  // "broken" failed to run, and its gate with it: 1 of 4 cells, 1 of 3 gates.
  EXPECT_EQ(failed.rfind("FAILED:", 0), 0u) << failed;
  EXPECT_TRUE(contains(failed, "1 of 4 cells failed to run (broken)")) << failed;
  EXPECT_TRUE(contains(failed, "1 of 3 gates failed (broken)")) << failed;

  cell_of(r, "cached").gate.passed = false;
  const std::string two = rp::footer(r);
  EXPECT_TRUE(contains(two, "2 of 3 gates failed (cached, broken)")) << two;

  r.cells.pop_back();  // without the broken cell and the cached gate failure: OK
  cell_of(r, "cached").gate.passed = true;
  const std::string ok = rp::footer(r);
  EXPECT_EQ(ok.rfind("OK:", 0), 0u) << ok;
  EXPECT_TRUE(contains(ok, "3 cells")) << ok;
  EXPECT_TRUE(contains(ok, "2 gates passed")) << ok;
  EXPECT_TRUE(contains(rp::render_markdown(r), "**" + ok + "**")) << ok;
}

// ==========================================================================================
// 4. results.json
// ==========================================================================================

class Results : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("parity_test_reports_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(static_cast<long long>(::getpid())));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(Results, RoundTripKeepsEveryFieldAndWritesInfiniteUlpsAsInf) {
  auto r = rendered();
  auto& c = cell_of(r, "cached");
  c.step1.have = true;
  c.step1.tensors = 3;
  c.step1.wrong_tensors = 2;
  c.step1.max_ulp = rp::kUlpInfinite;
  c.step1.grad_ulps = {0, 37, rp::kUlpInfinite};
  c.step1.scalars_equal = false;
  c.verdicts.why_not = "";
  c.verdicts.first_wrong = "grads/w: why";
  c.verdicts.divergence = "step 1, micro-batch 0";
  c.cell.inject = {"drop-deposit:block=1,stage=3"};
  c.cell.seed = 18446744073709551615ull;  // the largest seed survives too
  c.layout = json{{"pp", 2}, {"vp", 2}};
  c.tokens_per_step = 1024;
  c.bytes_forward_per_mb = 7168;
  c.wall_seconds = 3.25;
  c.log = "cells/cached/log.txt";
  rp::write_results(dir_.string(), r);

  // In the file: the infinite ulps as the string "inf".
  std::ifstream in(dir_ / "results.json");
  const json file = json::parse(in);
  const auto& jc = file["cells"][2];
  EXPECT_EQ(jc["cell"]["name"], "cached");
  EXPECT_EQ(jc["step1"]["max_ulp"], "inf");
  EXPECT_EQ(jc["step1"]["grad_ulps"], json({0, 37, "inf"}));
  EXPECT_FALSE(fs::exists(dir_ / "results.json.tmp"));

  const auto back = rp::read_results(dir_.string());
  EXPECT_EQ(rp::to_json(back), rp::to_json(r));
  const auto* bc = back.find("cached");
  ASSERT_NE(bc, nullptr);
  EXPECT_EQ(bc->step1.max_ulp, rp::kUlpInfinite);
  EXPECT_EQ(bc->step1.grad_ulps, (std::vector<uint64_t>{0, 37, rp::kUlpInfinite}));
  EXPECT_EQ(bc->cell.gate, rp::Gate::OrderOnly);
  EXPECT_EQ(bc->cell.seed, 18446744073709551615ull);
  EXPECT_EQ(bc->cell.inject, std::vector<std::string>{"drop-deposit:block=1,stage=3"});
  EXPECT_EQ(bc->steps.size(), 100u);
  EXPECT_EQ(bc->steps[99].loss, 7.5);
  EXPECT_EQ(bc->steps[1].loss, 9.0 - 2 / 64.0 + 0.0625);
  EXPECT_EQ(bc->steps[99].loss_hex, hex(7.5));
  EXPECT_EQ(bc->steps[99].grad_norm, 1.53);  // bit for bit through JSON
  const auto* bb = back.find("broken");
  ASSERT_NE(bb, nullptr);
  EXPECT_EQ(bb->status, "failed");
  EXPECT_EQ(bb->error, kBrokenError);
  EXPECT_FALSE(bb->gate.passed);
  EXPECT_EQ(back.report_steps, (std::vector<int64_t>{1, 10, 50, 100}));
  EXPECT_EQ(back.git_sha, "0123456789abcdef");
  EXPECT_EQ(back.wall_seconds, 12.5);
  // The renderings of the two agree.
  EXPECT_EQ(rp::render_markdown(back), rp::render_markdown(r));
}

TEST_F(Results, AnEmptyDirectoryNamesIt) {
  try {
    rp::read_results(dir_.string());
    ADD_FAILURE() << "no error for an empty directory";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), dir_.string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "results.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "parity matrix run")) << e.what();  // the remedy
  }
}

TEST_F(Results, ANonDirectoryNamesIt) {
  const auto file = dir_ / "plain.txt";
  std::ofstream(file) << "hello\n";
  for (const auto& p : {file, dir_ / "absent"}) {
    try {
      rp::read_results(p.string());
      ADD_FAILURE() << "no error for " << p;
    } catch (const rp::MatrixError& e) {
      EXPECT_TRUE(contains(e.what(), p.string())) << e.what();
      EXPECT_TRUE(contains(e.what(), "not a directory")) << e.what();
    }
  }
}

TEST_F(Results, MalformedFilesNameTheFile) {
  std::ofstream(dir_ / "results.json") << "{\"schema\": \"parity.matrix_result\", \"cells\": 3";
  try {
    rp::read_results(dir_.string());
    ADD_FAILURE() << "no error for truncated JSON";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), (dir_ / "results.json").string())) << e.what();
  }
  std::ofstream(dir_ / "results.json") << "{\"schema\": \"something.else\"}";
  try {
    rp::read_results(dir_.string());
    ADD_FAILURE() << "no error for another schema";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), "results.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "something.else")) << e.what();
  }
  std::ofstream(dir_ / "results.json") << "{\"schema\": \"parity.matrix_result\"}";
  try {
    rp::read_results(dir_.string());
    ADD_FAILURE() << "no error for a result without fields";
  } catch (const rp::MatrixError& e) {
    EXPECT_TRUE(contains(e.what(), "malformed")) << e.what();
  }
}

}  // namespace
