// Bringing your own runs, end to end: `parity compare` on files written by PyTorch's own writers
// (torch.save, safetensors by the specification, h5py), the compute dtype's ulps, the predicted
// set from a layout, `parity init --from` a state dict, and token ids from .npy and raw .bin
// files. The files come from tests/py/export_run.py under Debian's python3 with python3-torch,
// python3-h5py and python3-numpy (scripts/setup installs them); without them the suite skips
// and says so.
//
// Every check here is bitwise or exact (rows, verdicts, metrics bits); no tolerance.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "tests/cli_harness.h"
#include "tests/metric_lines.h"

namespace fs = std::filesystem;

namespace {

using parity::testing::CliResult;
using parity::testing::expect_one_line_error;
using parity::testing::metric_bits;
using parity::testing::run_parity;
using parity::testing::slurp;

const std::string kScript = std::string(PARITY_SOURCE_DIR) + "/tests/py/export_run.py";

class External : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string probe = std::string(PARITY_PYTHON) +
                              " -c 'import torch, h5py, numpy' >/dev/null 2>&1";
    python_ok_ = std::system(probe.c_str()) == 0;
    // Warm the tokenizer cache so each test sees only its own output.
    const std::string warm = std::string(PARITY_BIN) +
                             " train --flavor tiny --steps 1 --seq-len 16 --quiet >/dev/null 2>&1";
    ASSERT_EQ(std::system(warm.c_str()), 0);
  }

  void SetUp() override {
    if (!python_ok_)
      GTEST_SKIP() << PARITY_PYTHON << " lacks torch, h5py or numpy (python3-torch, python3-h5py, "
                   << "python3-numpy; scripts/setup installs them)";
    dir_ = fs::temp_directory_path() /
           ("parity-ext-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  CliResult run(const std::string& args) { return run_parity(dir_, args); }

  void python(const std::string& args) {
    const std::string cmd = std::string(PARITY_PYTHON) + " " + kScript + " " + args + " > " +
                            (dir_ / "py.log").string() + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(dir_ / "py.log");
  }

  std::string p(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  static bool python_ok_;
};
bool External::python_ok_ = false;

// The comparable part of a row: everything `compare` measured, keyed by tensor name.
std::map<std::string, std::string> measured(const nlohmann::json& out) {
  std::map<std::string, std::string> rows;
  for (const auto& r : out["rows"]) {
    const std::string name = r["tensor"];
    if (name.rfind("grads/", 0) != 0 && name.rfind("params/", 0) != 0) continue;
    nlohmann::json m = {r["dtype"], r["ulp_dtype"], r["numel"],      r["bitwise"],
                        r["wrong"], r["max_ulp"],   r["scale_ulps"], r["nmse"],
                        r["cosine"], r["share_rel_below_1e-3"], r["share_rel_below_5e-3"],
                        r["over_torch_tolerance"], r["max_abs"], r["first_diff"]};
    rows[name] = m.dump();
  }
  return rows;
}

const std::string kCell = "train --flavor tiny --steps 1 --seq-len 16 --quiet --dump-steps 1 ";

// The reference and pp2 x vp2 cached, one step, bf16-master (gradients are bf16 values held in
// fp32: the dumps know their compute dtype), dumped and exported with the real writers.
class ExternalRuns : public External {
 protected:
  void make_runs(const std::string& extra = "") {
    const std::string dt = "--dtype bf16-master ";
    ASSERT_EQ(run(kCell + dt + extra + "--dump " + p("ref")).code, 0);
    ASSERT_EQ(run(kCell + dt + extra + "--trainer pipelined --pp 2 --vp 2 --cache on --dump " +
                  p("pipe")).code, 0);
    python("dump " + p("ref/rank0.h5") + " 1 " + p("ref_x"));
    python("dump " + p("pipe/rank0.h5") + " 1 " + p("pipe_x"));
  }
};

// `compare` gives the same rows for torch.save, safetensors, h5py and a directory of two
// torch.save files as for the dumps of the same tensors, tensor by tensor; and each export
// against its own dump is bitwise (every value went through the writer and back).
TEST_F(ExternalRuns, EveryFormatGivesTheDumpsRowsBitwise) {
  make_runs();
  auto dumps = run("compare " + p("ref") + " " + p("pipe") + " --json --ulp-dtype bf16");
  ASSERT_EQ(dumps.code, 1) << dumps.err;  // the cached transport differs by reduction order
  const auto want = measured(nlohmann::json::parse(dumps.out));
  ASSERT_FALSE(want.empty());

  fs::create_directories(p("ref_dir"));
  fs::copy_file(p("ref_x.part0.pt"), p("ref_dir/rank0.pt"));
  fs::copy_file(p("ref_x.part1.pt"), p("ref_dir/rank1.pt"));
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"ref_x.pt", "pipe_x.pt"},
           {"ref_x.safetensors", "pipe_x.safetensors"},
           {"ref_x.h5", "pipe_x.h5"},
           {"ref_dir", "pipe_x.pt"},
           {"ref_x.h5", "pipe_x.safetensors"}}) {
    SCOPED_TRACE(a + " vs " + b);
    auto r = run("compare " + p(a) + " " + p(b) + " --json --ulp-dtype bf16");
    ASSERT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(measured(nlohmann::json::parse(r.out)), want);
  }
  for (const std::string x : {"ref_x.pt", "ref_x.safetensors", "ref_x.h5", "ref_dir"}) {
    auto r = run("compare " + p(x) + " " + p("ref"));
    EXPECT_EQ(r.code, 0) << x << ": " << r.out << r.err;
  }
}

// Ulps in the compute dtype: the dumps' gradients are measured in bf16 without being told
// (they know their run was bf16-master), and a torch.save of the same gradients cast to bf16
// gives the same counts in its own dtype.
TEST_F(ExternalRuns, Bf16ValuesInFp32AreCountedInBf16Ulps) {
  make_runs();
  auto dumps = nlohmann::json::parse(run("compare " + p("ref") + " " + p("pipe") + " --json").out);
  auto bf16 = nlohmann::json::parse(
      run("compare " + p("ref_x.bf16.pt") + " " + p("pipe_x.bf16.pt") + " --json").out);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& r : bf16["rows"]) by_name[r["tensor"]] = r;
  int grads = 0, differing = 0;
  for (const auto& r : dumps["rows"]) {
    const std::string name = r["tensor"];
    if (name.rfind("grads/", 0) != 0) continue;
    ++grads;
    EXPECT_EQ(r["dtype"], "float32");
    EXPECT_EQ(r["ulp_dtype"], "bf16") << name;
    ASSERT_TRUE(by_name.count(name)) << name;
    const auto& b = by_name[name];
    EXPECT_EQ(b["dtype"], "bfloat16");
    EXPECT_EQ(b["max_ulp"], r["max_ulp"]) << name;
    EXPECT_EQ(b["wrong"], r["wrong"]) << name;
    EXPECT_EQ(b["scale_ulps"], r["scale_ulps"]) << name;
    differing += !r["bitwise"].get<bool>();
  }
  EXPECT_GT(grads, 400);
  EXPECT_GT(differing, 0);
}

// The predicted set without a ledger. On pp2 x vp2 and pp4 x vp4 (bf16, cache on against off,
// one step, both runs with their ledger), `compare --layout` names exactly the gradients that
// `localise` puts in its predicted set, and no differing gradient falls outside it. The same
// tensors exported with torch.save give the same answer. A layout that claims one stage per rank
// predicts nothing, so every differing gradient is outside it and the exit is 1.
TEST_F(External, LayoutAgreesWithLocalisesPredictedSet) {
  for (const auto& [pp, vp] : std::vector<std::pair<int, int>>{{2, 2}, {4, 4}}) {
    const std::string shape = "pp" + std::to_string(pp) + "vp" + std::to_string(vp);
    SCOPED_TRACE(shape);
    const std::string cell = kCell + "--dtype bf16 --ledger --trainer pipelined --pp " +
                             std::to_string(pp) + " --vp " + std::to_string(vp);
    const std::string on = p(shape + "_on"), off = p(shape + "_off");
    ASSERT_EQ(run(cell + " --cache on --dump " + on).code, 0);
    ASSERT_EQ(run(cell + " --cache off --dump " + off).code, 0);

    auto loc = run("localise " + on + " " + off + " --json");
    ASSERT_EQ(loc.code, 0) << loc.err;  // order only: nothing WRONG
    const auto loc_json = nlohmann::json::parse(loc.out);
    std::set<std::string> localised;
    for (const auto& n : loc_json["predicted"])
      localised.insert(n.get<std::string>());
    ASSERT_FALSE(localised.empty());

    const std::string layout = " --layout layers=17,block=4,pp=" + std::to_string(pp) +
                               ",vp=" + std::to_string(vp) + " --json";
    // The predicted set worked by hand, not through the routing tables both commands share: a
    // stage reads blocks from its rank's store (deposits) for blocks 0-2 at pp2 x vp2 and 0-3
    // at pp4 x vp4 (the default split of 19 units; `parity layout` prints the same tables), and
    // block b > 0 is the sum of layers 4(b-1) to 4b-1, block 0 the embedding. So the
    // parameters upstream of a deposited block are the embedding and layers below 8 (pp2 x vp2)
    // or 12 (pp4 x vp4).
    const int upstream = pp == 2 ? 8 : 12;
    auto by_hand = [&](const std::string& n) {
      int l = 0;
      return n.rfind("tok_embeddings.", 0) == 0 ||
             (std::sscanf(n.c_str(), "layers.%d.", &l) == 1 && l < upstream);
    };
    // The gradients the layout predicts, the differing ones, and those outside the prediction.
    auto answer = [&](const std::string& a, const std::string& b) {
      auto r = run("compare " + a + " " + b + layout);
      EXPECT_EQ(r.code, 1) << r.err;  // bitwise is the default tolerance: the runs differ
      const auto j = nlohmann::json::parse(r.out);
      std::set<std::string> predicted, differing;
      for (const auto& row : j["rows"]) {
        const std::string name = row["tensor"];
        if (name.rfind("grads/", 0) != 0) continue;
        if (row["predicted"].get<bool>()) predicted.insert(name.substr(6));
        EXPECT_EQ(row["predicted"].get<bool>(), by_hand(name.substr(6))) << name;
        if (!row["bitwise"].get<bool>()) differing.insert(name.substr(6));
      }
      EXPECT_TRUE(j["prediction"]["outside"].empty()) << j["prediction"].dump();
      return std::make_pair(predicted, differing);
    };
    const auto [predicted, differing] = answer(on, off);
    EXPECT_EQ(predicted, localised);
    EXPECT_FALSE(differing.empty());
    for (const auto& d : differing) EXPECT_TRUE(predicted.count(d)) << d;

    python("dump " + on + "/rank0.h5 1 " + p(shape + "_on_x"));
    python("dump " + off + "/rank0.h5 1 " + p(shape + "_off_x"));
    EXPECT_EQ(answer(p(shape + "_on_x.pt"), p(shape + "_off_x.pt")),
              std::make_pair(predicted, differing));

    auto wrong = run("compare " + on + " " + off + " --layout layers=17,block=4,pp=" +
                     std::to_string(pp) + ",vp=1 --json");
    EXPECT_EQ(wrong.code, 1);
    const auto wrong_json = nlohmann::json::parse(wrong.out);
    std::set<std::string> outside;
    for (const auto& n : wrong_json["prediction"]["outside"])
      outside.insert(n.get<std::string>().substr(6));
    EXPECT_EQ(outside, differing);
  }
}

// `init --from` a raw state_dict (an OrderedDict with buffers and a vision tensor beside the
// text parameters), saved with torch.save, as safetensors and as DCP checkpoints (whole, and as
// a sharded training state under "model."): the checkpoint it writes trains bitwise as the HDF5
// checkpoint the state dict came from. A state dict with a key missing, one
// extra and one mis-shaped is refused with exit 2 and each listed.
TEST_F(External, InitFromAStateDictTrainsAsTheCheckpoint) {
  ASSERT_EQ(run("init --flavor tiny --seed 7 --out " + p("seed.h5")).code, 0);
  python("state-dict " + p("seed.h5") + " " + p("sd"));
  python("state-dict " + p("seed.h5") + " " + p("bad") + " bad");
  const std::string train = "train --flavor tiny --steps 3 --seq-len 16 --quiet --dtype bf16 ";
  ASSERT_EQ(run(train + "--init " + p("seed.h5") + " --metrics " + p("want.jsonl")).code, 0);
  const auto want = metric_bits(slurp(p("want.jsonl")));
  ASSERT_EQ(want.size(), 3u);
  for (const std::string ext : {"pt", "safetensors", "dcp", "dcp-sharded"}) {
    SCOPED_TRACE(ext);
    auto r = run("init --flavor tiny --from " + p("sd." + ext) + " --out " + p(ext + ".h5"));
    ASSERT_EQ(r.code, 0) << r.err;
    // The state dict's one expert bias is taken (zero, as the checkpoint's); tiny's other 15
    // MoE layers have none in the file and start at zero.
    EXPECT_NE(r.out.find("and 1 persistent buffer(s) (the expert biases)"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("15 expert bias(es) not in the file start at zero"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("skipped 1 vision_encoder tensor(s)"), std::string::npos) << r.out;
    if (ext == "dcp-sharded") {
      EXPECT_NE(r.out.find("skipped 1 entry outside 'model.'"), std::string::npos) << r.out;
    }
    ASSERT_EQ(run(train + "--init " + p(ext + ".h5") + " --metrics " + p(ext + ".jsonl")).code, 0);
    EXPECT_EQ(metric_bits(slurp(p(ext + ".jsonl"))), want);
    if (ext == "dcp-sharded") continue;  // the bad state dict is written whole

    auto bad = run("init --flavor tiny --from " + p("bad." + ext) + " --out " + p("bad.h5"));
    EXPECT_EQ(bad.code, 2);
    for (const std::string named : {"norm.weight", "layers.0.extra.weight", "lm_head.weight"})
      EXPECT_NE(bad.err.find(named), std::string::npos) << named << " not in: " << bad.err;
    EXPECT_FALSE(fs::exists(p("bad.h5")));
  }
}

// The expert bias is state: init --from takes each expert_bias_E of a torch.save state dict,
// the checkpoint carries it, and the first step routes with it. Predicted by hand: every MoE
// layer's bias is 10 on experts 2 and 3 of tiny's 4 (top-2) and 0 on 0 and 1; the router's
// sigmoid scores lie in (0, 1), so every token's biased scores put 2 and 3 first, and experts
// 0 and 1 take no token. Their weights then reach neither the loss nor any gradient (the
// mixing weights are the unbiased scores of the chosen two only), so replacing them (-3x)
// leaves step 1's loss and grad norm bitwise. Without the bias the same replacement moves the
// loss (tokens do route to 0 and 1), and the biased run's loss differs from the unbiased one.
TEST_F(External, InitFromTakesTheExpertBiasAndRoutesWithIt) {
  ASSERT_EQ(run("init --flavor tiny --seed 7 --out " + p("seed.h5")).code, 0);
  python("expert-bias " + p("seed.h5") + " " + p("eb"));
  const std::string train = "train --flavor tiny --steps 1 --seq-len 16 --quiet ";
  auto step1 = [&](const std::string& ckpt) {
    const std::string out = p(ckpt + ".jsonl");
    auto r = run(train + "--init " + p(ckpt) + " --metrics " + out);
    EXPECT_EQ(r.code, 0) << r.err;
    auto bits = metric_bits(slurp(out));
    EXPECT_EQ(bits.size(), 1u);
    return bits.empty() ? std::string() : bits[0];
  };
  for (const std::string sd : {"biased", "biased-junk", "junk"}) {
    auto r = run("init --flavor tiny --from " + p("eb." + sd + ".pt") + " --out " + p(sd + ".h5"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("persistent buffer(s) (the expert biases)") != std::string::npos,
              sd != "junk") << r.out;
  }
  const auto seed = step1("seed.h5"), biased = step1("biased.h5"),
             biased_junk = step1("biased-junk.h5"), junk = step1("junk.h5");
  EXPECT_EQ(biased, biased_junk) << "a token reached expert 0 or 1 despite the bias";
  EXPECT_NE(junk, seed) << "without the bias, experts 0 and 1 take tokens";
  EXPECT_NE(biased, seed) << "the bias did not change the routing";
}

// Token ids from outside: the ids of parity's own token file as .npy (uint16, int32, int64)
// and as a raw uint16 .bin train bitwise as the token file itself.
TEST_F(External, NpyAndRawTokenFilesTrainAsTheTokenFile) {
  const fs::path tool = fs::path(PARITY_BIN).parent_path() / "parity-tokenize";
  ASSERT_EQ(std::system((tool.string() + " > " + p("tok.txt") + " 2>/dev/null").c_str()), 0);
  std::string tokens = slurp(p("tok.txt"));
  while (!tokens.empty() && tokens.back() == '\n') tokens.pop_back();
  ASSERT_TRUE(fs::is_regular_file(tokens)) << tokens;
  python("tokens " + tokens + " " + p("ids"));
  const std::string train = "train --flavor tiny --steps 3 --seq-len 16 --quiet ";
  ASSERT_EQ(run(train + "--tokens " + tokens + " --metrics " + p("want.jsonl")).code, 0);
  const auto want = metric_bits(slurp(p("want.jsonl")));
  ASSERT_EQ(want.size(), 3u);
  for (const std::string f : {"ids.u16.npy", "ids.i32.npy", "ids.i64.npy",
                              "ids.bin --tokens-dtype uint16"}) {
    SCOPED_TRACE(f);
    const std::string out = p("got.jsonl");
    fs::remove(out);
    auto r = run(train + "--tokens " + p(f) + " --metrics " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(metric_bits(slurp(out)), want);
  }
}

// Documents from positions (--positions, as torchtitan's dataloader emits them) are the
// documents the ids give: positions written by numpy from the same stream (0 after each EOS)
// train bitwise as the EOS rule, with the ids' rule switched off, through the reference and
// the pipelined trainer; without masking the run differs, so the documents took effect.
TEST_F(External, PositionsGiveTheDocumentsOfTheIds) {
  const fs::path tool = fs::path(PARITY_BIN).parent_path() / "parity-tokenize";
  ASSERT_EQ(std::system((tool.string() + " > " + p("tok.txt") + " 2>/dev/null").c_str()), 0);
  std::string tokens = slurp(p("tok.txt"));
  while (!tokens.empty() && tokens.back() == '\n') tokens.pop_back();
  python("tokens " + tokens + " " + p("ids"));
  python("positions " + tokens + " 64 " + p("pos.npy"));
  const std::string train = "train --flavor tiny --steps 2 --seq-len 64 --quiet --tokens " +
                            p("ids.i32.npy") + " ";
  auto metrics = [&](const std::string& args, const std::string& name) {
    const std::string out = p(name + ".jsonl");
    auto r = run(train + args + " --metrics " + out);
    EXPECT_EQ(r.code, 0) << r.err;
    return metric_bits(slurp(out));
  };
  const auto ids = metrics("--documents on", "ids");
  ASSERT_EQ(ids.size(), 2u);
  const std::string positions = "--documents on --bos-id -1 --eos-id -1 --positions " + p("pos.npy");
  EXPECT_EQ(metrics(positions, "positions"), ids);
  EXPECT_EQ(metrics(positions + " --trainer pipelined --pp 2 --vp 2 --cache off", "naive"), ids);
  EXPECT_NE(metrics("--documents off", "off"), ids);
}

// A fuzz pass over the readers through the command line, with a fixed seed: small files written
// by torch.save, by the safetensors specification, by h5py and by numpy, each cut short at 3
// places and mutated 4 times (one to eight bytes overwritten, or a run of bytes zeroed). The
// readers' own suites fuzz them in-process by the thousand; this pass checks that what they
// refuse reaches the user as exit 2 and one line.
// Whatever comes out, parity must exit 0, 1 or 2, never die of a signal, never take more than
// 30 s, and say a refusal in one line.
TEST_F(External, DamagedFilesOfEveryKindAreRefusedInOneLine) {
  python("small " + p("seed"));
  std::mt19937_64 rng(15);
  int runs = 0, refused = 0;
  for (const std::string ext : {"pt", "safetensors", "h5", "npy"}) {
    const std::string good = slurp(p("seed." + ext));
    ASSERT_GT(good.size(), 64u) << ext;
    const std::string file = p("fuzz." + ext);
    const std::string cmd =
        ext == "npy" ? "train --flavor tiny --steps 1 --seq-len 8 --microbatches 1 --quiet --tokens " + file
                     : "compare " + file + " " + file;
    auto attempt = [&](const std::string& bytes, const std::string& what) {
      std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
      CliResult r;
      const int status = std::system(("timeout 30 " + std::string(PARITY_BIN) + " " + cmd + " >" +
                                      p("out.txt") + " 2>" + p("err.txt")).c_str());
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      r.err = slurp(p("err.txt"));
      ++runs;
      SCOPED_TRACE(ext + ", " + what);
      // 124: the timeout; -1: a signal.
      EXPECT_TRUE(r.code == 0 || r.code == 1 || r.code == 2) << "exit " << r.code << ": " << r.err;
      if (r.code == 2) {
        ++refused;
        EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
        EXPECT_EQ(r.err.rfind("parity: ", 0), 0u) << r.err;
      }
    };
    attempt(good, "intact");
    for (int i = 1; i <= 3; ++i) {
      const size_t at = good.size() * i / 4;
      attempt(good.substr(0, at), "cut at " + std::to_string(at));
    }
    for (int i = 0; i < 4; ++i) {
      std::string bytes = good;
      const size_t at = rng() % bytes.size();
      if (i % 3 == 2) {
        const size_t n = std::min<size_t>(bytes.size() - at, 1 + rng() % 64);
        std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(at), n, '\0');
      } else {
        for (size_t k = 0, n = 1 + rng() % 8; k < n; ++k)
          bytes[(at + k * 7) % bytes.size()] = static_cast<char>(rng() & 0xff);
      }
      attempt(bytes, "mutation " + std::to_string(i) + " at " + std::to_string(at));
    }
  }
  EXPECT_EQ(runs, 4 * 8);
  // Every cut-short file is a refusal (12 of them); mutations may land in tensor data.
  EXPECT_GE(refused, 12);
}

// A safetensors file of one F32 tensor [1] named `name`, holding `v`.
std::string safetensors_of(const std::string& name, float v) {
  std::string header = "{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  out += header;
  out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

// A tensor name holding ESC, carriage return and newline (JSON escapes \u001b, \r, \n) was
// printed verbatim: it could clear the line and forge "# 0 tensors compared; OK" over a
// failing report. The report now shows such bytes as \xNN and its real last line stands.
TEST(CompareOutput, ControlBytesInNamesAreEscaped) {
  const auto dir = fs::temp_directory_path() / ("parity-escape-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string name = "w\\u001b[2K\\r# 0 tensors compared, 0 bitwise equal, 0 differ; OK\\n";
  std::ofstream(dir / "a.safetensors", std::ios::binary) << safetensors_of(name, 1.0f);
  std::ofstream(dir / "b.safetensors", std::ios::binary) << safetensors_of(name, 2.0f);
  const auto r = run_parity(dir, "compare " + (dir / "a.safetensors").string() + " " +
                                     (dir / "b.safetensors").string());
  fs::remove_all(dir);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("w\\x1b[2K\\x0d# 0 tensors"), std::string::npos) << r.out;
  // No line begins with the forged verdict; the report's own last line says FAILED.
  EXPECT_EQ(r.out.find("\n# 0 tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 differ (max"), std::string::npos) << r.out;
}

// A file past PARITY_MAX_FILE_BYTES is refused before it is read, naming the file and the limit.
TEST(CompareOutput, AFilePastTheFileLimitIsRefusedBeforeReading) {
  const auto dir = fs::temp_directory_path() / ("parity-file-limit-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto a = dir / "a.safetensors";
  std::ofstream(a, std::ios::binary) << safetensors_of("w", 1.0f);
  const auto size = fs::file_size(a);
  ::setenv("PARITY_MAX_FILE_BYTES", std::to_string(size - 1).c_str(), 1);
  const auto r = run_parity(dir, "compare " + a.string() + " " + a.string());
  ::setenv("PARITY_MAX_FILE_BYTES", std::to_string(size).c_str(), 1);
  const auto at_limit = run_parity(dir, "compare " + a.string() + " " + a.string());
  ::unsetenv("PARITY_MAX_FILE_BYTES");
  fs::remove_all(dir);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("'" + a.string() + "' is " + std::to_string(size) + " bytes, more than the " +
                       std::to_string(size - 1)),
            std::string::npos)
      << r.err;
  EXPECT_EQ(at_limit.code, 0) << at_limit.out << at_limit.err;
}

// ---- parity truth: users' files judged against the fp64 truth of the same step

// Clean runs and one run per defect, each made by parity with an --inject fault, exported with
// torch.save and judged from those files alone, as anyone's files would be. The expected names
// come from the injected faults themselves: the micro-batch dropped, the factor, the parameter
// zeroed, the pair swapped, the deposit (block, stage, micro-batch) dropped or duplicated.
TEST_F(External, TruthPassesCleanRunsAndNamesEachDefectFromTorchSaveFiles) {
  const std::string cell = "train --flavor tiny --steps 1 --seq-len 16 --quiet --init " +
                           p("ck.h5") + " ";
  const std::string pipe = "--trainer pipelined --pp 2 --vp 2 ";
  ASSERT_EQ(run("init --flavor tiny --seed 3 --out " + p("ck.h5")).code, 0);
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"ref", ""},
      {"reversed", "--reverse-microbatches"},
      {"cached", pipe},
      {"naive", pipe + "--cache off"},
      {"dp2pp2", "--trainer pipelined --pp 2 --dp 2 --microbatches 2"},
      {"no_mb1", "--inject drop-microbatch:mb=1"},
      {"x4", "--inject scale-grads:factor=4"},
      {"zeroed", "--inject zero-grad:param=layers.1.moe.router.gate.weight"},
      {"swapped", "--inject swap-grads:a=layers.2.attention_norm.weight,b=layers.2.ffn_norm.weight"},
      {"dropped", pipe + "--inject drop-deposit:block=1,stage=3,mb=2"},
      {"doubled", pipe + "--inject duplicate-deposit:block=1,stage=3,mb=0"},
      {"bf16", "--dtype bf16"},
      {"bf16_no_mb1", "--dtype bf16 --inject drop-microbatch:mb=1"},
  };
  std::string exports, files, layouts;
  for (const auto& [name, args] : runs) {
    ASSERT_EQ(run(cell + args + " --dump " + p(name)).code, 0) << name;
    exports += " " + p(name + "/rank0.h5") + " 1 " + p(name);
    // A bf16 run's gradients in their own dtype, so that the file says bf16.
    files += " " + p(name + (name.rfind("bf16", 0) == 0 ? ".bf16.pt" : ".pt"));
    const bool piped = args.find(pipe) != std::string::npos;
    layouts += " --layout " + std::string(piped ? "pp=2,vp=2" : name == "dp2pp2" ? "pp=2" : "''");
  }
  python("dump" + exports);
  const auto r = run("truth" + files + layouts + " --flavor tiny --seq-len 16 --init " +
                     p("ck.h5") + " --json --quiet --junit " + p("truth.xml"));
  ASSERT_EQ(r.code, 1) << r.err << r.out;
  const auto out = nlohmann::json::parse(r.out);
  const std::map<std::string, std::string> expected = {
      {"no_mb1", "micro-batch 1 missing"},
      {"x4", "all gradients x 4.00 (the micro-batch count)"},
      {"zeroed", "gradient of layers.1.moe.router.gate.weight zeroed"},
      {"swapped", "gradients of layers.2.attention_norm.weight and layers.2.ffn_norm.weight swapped"},
      {"dropped", "deposit of block 1 read by stage 3, micro-batch 2 missing"},
      {"doubled", "deposit of block 1 read by stage 3, micro-batch 0 duplicated"},
      {"bf16_no_mb1", "micro-batch 1 missing"},
  };
  ASSERT_EQ(out["runs"].size(), runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& j = out["runs"][i];
    const std::string name = runs[i].first;
    SCOPED_TRACE(name);
    EXPECT_EQ(j["dtype"], name.rfind("bf16", 0) == 0 ? "bf16" : "fp32");
    EXPECT_EQ(j["suspect"], 0);
    const auto want = expected.find(name);
    if (want == expected.end()) {  // a clean run: every tensor within the floor
      EXPECT_TRUE(j["pass"].get<bool>());
      EXPECT_EQ(j["wrong"], 0);
      EXPECT_TRUE(j["defects"].empty());
      continue;
    }
    EXPECT_FALSE(j["pass"].get<bool>());
    ASSERT_EQ(j["defects"].size(), 1u) << j["notes"];
    EXPECT_EQ(j["defects"][0]["text"], want->second);
    // fit = 1 - |e|^2 / |e + d|^2 with e the run's rounding and d the defect: in fp32 e is
    // about 1e-6 of a gradient and d a tenth or more, so 0.99 is far from the bar; in bf16 e is
    // a few percent and a missing quarter of the step about 30%, 1 - (0.08 / 0.25)^2 = 0.9.
    EXPECT_GT(j["defects"][0]["fit"].get<double>(), name.rfind("bf16", 0) == 0 ? 0.9 : 0.99);
    EXPECT_EQ(j["wrong"], j["defects"][0]["tensors"].size());
  }
  const std::string xml = slurp(p("truth.xml"));
  EXPECT_NE(xml.find("micro-batch 1 missing"), std::string::npos);
}

// The checkpoint as torchtitan's users hold it (a torch.save state dict, imported as `init
// --from` does) and the run's log: the loss of step 1 is judged like the gradients, CONSISTENT
// as logged, SUSPECT when the log says another loss (9.0 against a truth near 8.26: a relative
// distance near 0.09, far beyond any fp32 floor).
TEST_F(External, TruthTakesAStateDictCheckpointAndJudgesTheLoggedLoss) {
  const std::string shape = " --flavor tiny --seq-len 16 --microbatches 2";
  ASSERT_EQ(run("init --flavor tiny --seed 7 --out " + p("ck.h5")).code, 0);
  python("state-dict " + p("ck.h5") + " " + p("sd"));
  ASSERT_EQ(run("train --steps 1 --quiet --init " + p("ck.h5") + shape + " --metrics " +
                p("m.jsonl") + " --dump " + p("R")).code, 0);
  std::ofstream(p("wrong.log")) << "1 9.0\n";
  const auto r = run("truth " + p("R") + " " + p("R") + shape + " --init " + p("sd.pt") +
                     " --log " + p("m.jsonl") + " --log " + p("wrong.log") + " --json --quiet");
  ASSERT_EQ(r.code, 1) << r.err << r.out;
  const auto out = nlohmann::json::parse(r.out);
  const auto& good = out["runs"][0];
  const auto& bad = out["runs"][1];
  EXPECT_TRUE(good["pass"].get<bool>());
  EXPECT_EQ(good["loss"]["verdict"], "CONSISTENT");
  EXPECT_EQ(good["loss"]["from"], "--log");
  EXPECT_FALSE(bad["pass"].get<bool>());
  EXPECT_EQ(bad["loss"]["verdict"], "SUSPECT");
  EXPECT_EQ(bad["consistent"], 443);  // the same gradients: only the loss is off
}

// `parity memory`'s files, read by what PyTorch users open them with: the snapshot by pickle and
// torch.cuda._memory_viz, the Chrome trace as JSON trace events (tests/py/memory_files.py);
// the JSON's categories against the allocator's count at every mark.
TEST_F(External, MemoryFilesOpenInPyTorchsReaders) {
  const auto r = run("memory --flavor tiny --seq-len 16 --layers 8 --ac layer --json --snapshot " +
                     p("s.pickle") + " --trace " + p("t.json") + " --html " + p("m.html"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string cmd = std::string(PARITY_PYTHON) + " " + PARITY_SOURCE_DIR +
                          "/tests/py/memory_files.py " + p("s.pickle") + " " + p("t.json") +
                          " > " + p("py.log") + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir_ / "py.log");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_layers"], 8);
  EXPECT_GT(j["peak_bytes"].get<int64_t>(), 0);
  int layer_marks = 0;
  for (const auto& m : j["marks"]) {
    int64_t sum = 0;
    for (const auto& [name, bytes] : m["live"].items()) sum += bytes.get<int64_t>();
    EXPECT_EQ(sum, m["total"].get<int64_t>()) << m["label"];
    layer_marks += m["label"].get<std::string>().rfind("forward layer ", 0) == 0;
  }
  EXPECT_EQ(layer_marks, 8 * 4);  // 8 layers x 4 micro-batches
  const std::string html = slurp(dir_ / "m.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("Forward of micro-batch 0"), std::string::npos);
}

}  // namespace
