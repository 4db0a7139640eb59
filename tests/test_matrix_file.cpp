// Matrix files (reports/matrix.h): defaults and cell keys, tables, labels, the shipped
// matrices, and every refusal with its file, line, cell, key and remedy.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "reports/matrix.h"
#include "tests/report_fixtures.h"

namespace rp = parity::reports;
namespace fs = std::filesystem;
using namespace parity::testing;

namespace {

// The MatrixError message parse_matrix gives for `text` (named "m.toml"); "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    rp::parse_matrix(text, "m.toml");
  } catch (const rp::MatrixError& e) {
    return e.what();
  }
  return "";
}

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
  EXPECT_STREQ(parity::spec::to_string(ref->flavor), "tiny");  // from [defaults]
  EXPECT_EQ(ref->steps, 7);
  EXPECT_EQ(ref->seq_len, 32);
  EXPECT_STREQ(parity::spec::to_string(ref->dtype), "bf16");  // the built-in default (matrix.h)
  EXPECT_EQ(ref->microbatches, 4);
  EXPECT_STREQ(parity::spec::to_string(ref->trainer), "reference");
  EXPECT_EQ(ref->gate, rp::Gate::None);
  const rp::Cell* ref64 = m.find("ref64");
  ASSERT_NE(ref64, nullptr);
  EXPECT_EQ(ref64->steps, 3);  // its own value over [defaults]' 7
  EXPECT_STREQ(parity::spec::to_string(ref64->dtype), "fp64");
  EXPECT_EQ(ref64->seq_len, 32);
  const rp::Cell* c64 = m.find("cached64");
  ASSERT_NE(c64, nullptr);
  EXPECT_EQ(c64->dp, 2);
  EXPECT_EQ(c64->nproc, 2);
  EXPECT_EQ(c64->gate, rp::Gate::Bitwise);  // order-only would need a ledger, in-process
  EXPECT_STREQ(parity::spec::to_string(c64->cache), "on");
  EXPECT_EQ(c64->label, "my own label");  // a given label is kept as it is
  EXPECT_EQ(m.find("naive")->gate, rp::Gate::Bitwise);
  EXPECT_STREQ(parity::spec::to_string(m.find("naive")->cache), "off");
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
  // The default device prints as nothing (spec::to_args), and a command line without it runs
  // on the CPU (the RunSpec's default).
  EXPECT_EQ(arg_after(a, "--device"), "<absent>");
  EXPECT_EQ(parity::spec::parse_args(a).device, parity::spec::Device::Cpu);
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
  // The place, then the one form every unknown value has (spec/choices.h).
  EXPECT_TRUE(contains(e, "m.toml:3 (cell 'a'), key 'dtype': unknown dtype 'fp16'; accepted: "
                          "fp32, bf16, bf16-master, fp64"))
      << e;
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

TEST(ParseMatrixErrors, AnUnknownGateNamesTheKeyTheValueAndEveryGate) {
  const std::string e = parse_error(
      "[[cell]]\nname = \"r\"\n[[cell]]\nname = \"a\"\nreference = \"r\"\ngate = \"exact\"\n");
  EXPECT_TRUE(contains(e, "cell 'a'")) << e;
  EXPECT_TRUE(contains(e, "unknown gate 'exact'; accepted: none, bitwise, order-only")) << e;
  for (const auto g : rp::gates().values()) EXPECT_EQ(rp::gates().parse(rp::to_string(g)), g);
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

// A twin is the same run carried out another way (nproc, backend), held bit for bit: another
// run's keys, another gate or a missing cell is refused with the key and the remedy.
TEST(ParseMatrixErrors, ATwinIsTheSameRunHeldBitwise) {
  const std::string base = "[[cell]]\nname = \"r\"\n[[cell]]\nname = \"c\"\nreference = \"r\"\n"
                           "trainer = \"pipelined\"\npp = 2\nvp = 2\ngate = \"order-only\"\n"
                           "[[cell]]\nname = \"t\"\nreference = \"r\"\ntwin = \"c\"\n"
                           "trainer = \"pipelined\"\npp = 2\nvp = 2\n";
  EXPECT_EQ(parse_error(base + "nproc = 2\ngate = \"bitwise\"\n"), "");
  std::string e = parse_error(base + "gate = \"order-only\"\n");
  EXPECT_TRUE(contains(e, "cell 't'")) << e;
  EXPECT_TRUE(contains(e, "key 'twin'")) << e;
  EXPECT_TRUE(contains(e, "give it gate = \"bitwise\"")) << e;
  e = parse_error(base + "cache = \"off\"\ngate = \"bitwise\"\n");
  EXPECT_TRUE(contains(e, "key 'twin'")) << e;
  EXPECT_TRUE(contains(e, "'c' is another run")) << e;
  e = parse_error(base + "gate = \"bitwise\"\n" + "[[cell]]\nname = \"u\"\nreference = \"r\"\n"
                  "twin = \"nosuch\"\ngate = \"bitwise\"\n");
  EXPECT_TRUE(contains(e, "cell 'u'")) << e;
  EXPECT_TRUE(contains(e, "no cell named 'nosuch'")) << e;
  const auto m = rp::parse_matrix(base + "nproc = 2\ngate = \"bitwise\"\n", "m.toml");
  ASSERT_NE(m.find("t"), nullptr);
  EXPECT_EQ(m.find("t")->gate_target(), "c");
  EXPECT_EQ(m.find("c")->gate_target(), "r");
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
// `pairs`: how many naive/cached pairs the matrix has.
void expect_seed_structure(const rp::Matrix& m, int pairs) {
  int bitwise = 0, order_only = 0;
  for (const auto& c : m.cells) {
    SCOPED_TRACE(m.name + ": " + c.name);
    if (c.pipelined()) {
      const rp::Cell* ref = m.find(c.reference);
      ASSERT_NE(ref, nullptr);
      EXPECT_FALSE(ref->pipelined());
    }
    if (c.pipelined() && c.cache == parity::spec::Cache::Off) {
      EXPECT_EQ(c.gate, rp::Gate::Bitwise);
      ++bitwise;
    }
    if (c.pipelined() && c.vp > 1 && c.cache == parity::spec::Cache::On && !c.multi_process()) {
      EXPECT_EQ(c.gate, rp::Gate::OrderOnly);
      ++order_only;
    }
  }
  EXPECT_EQ(bitwise, pairs);
  EXPECT_EQ(order_only, pairs);
}

TEST(ShippedMatrices, SeedIsDebugmodel100StepsReportedAt1_10_50_100) {
  const auto m = rp::parse_matrix(rp::embedded_matrix("seed"), "seed");
  EXPECT_EQ(m.report_steps, (std::vector<int64_t>{1, 10, 50, 100}));
  for (const auto& c : m.cells) {
    SCOPED_TRACE(c.name);
    EXPECT_STREQ(parity::spec::to_string(c.flavor), "debugmodel");
    EXPECT_EQ(c.steps, 100);
    EXPECT_EQ(c.microbatches, 4);  // "four 256-token micro-batches per rank"
    EXPECT_EQ(c.seq_len, 256);
    EXPECT_EQ(c.rows, 1);
  }
  // Three tables: bf16, fp32, dp2.
  const auto t = m.tables();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0][0]->name, "ref");
  EXPECT_STREQ(parity::spec::to_string(t[1][0]->dtype), "fp32");
  EXPECT_EQ(t[2][0]->dp, 2);
  // Naive and cached in pairs: bf16 pp2vp2, pp2vp4, pp4vp2, pp4vp4; fp32 pp2vp2, pp4vp4;
  // dp2 pp2vp2: 7.
  expect_seed_structure(m, 7);
}

TEST(ShippedMatrices, QuickHasTheSeedsStructureOnTiny) {
  const auto q = rp::parse_matrix(rp::embedded_matrix("quick"), "quick");
  const auto s = rp::parse_matrix(rp::embedded_matrix("seed"), "seed");
  EXPECT_EQ(q.report_steps, (std::vector<int64_t>{1, 5, 10, 20}));
  for (const auto& c : q.cells) {
    EXPECT_STREQ(parity::spec::to_string(c.flavor), "tiny") << c.name;
    EXPECT_EQ(c.steps, 20) << c.name;
  }
  // The seed's 7 pairs and a bf16-master pp2vp2 pair; the seed's three tables with the
  // bf16-master one between bf16 and fp32.
  expect_seed_structure(q, 8);
  const auto t = q.tables();
  ASSERT_EQ(t.size(), 4u);
  EXPECT_STREQ(parity::spec::to_string(t[1][0]->dtype), "bf16-master");
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
  }  // The quick matrix's two-process cell is held bitwise against its in-process twin.
  const rp::Cell* two = q.find("pp2vp2_cached_2proc");
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->twin, "pp2vp2_cached");
  EXPECT_EQ(two->gate, rp::Gate::Bitwise);
}

}  // namespace
