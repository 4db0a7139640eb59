// The run specification's tables (spec/options.h): every closed set of option values has one
// table, and every table keeps the same promises. Walking each table: printing a value and
// parsing the name gives the value back; the accepted names are exactly the ones the CLI
// documents (written out here, by hand, as a user would type them); and an unknown value is
// refused with one message form that names the option, the value and every accepted name.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "spec/bad_input.h"
#include "spec/options.h"
#include "spec/printable.h"
#include "spec/run_spec.h"

namespace {

using namespace parity::spec;

// The message a refused value must carry, built from the expected names (not from the table).
std::string expected_message(const std::string& option, const std::string& value,
                             const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return "unknown " + option + " '" + value + "'; accepted: " + list;
}

template <class E>
void check_table(const Choices<E>& t, const std::string& option,
                 const std::vector<std::string>& names) {
  SCOPED_TRACE(option);
  EXPECT_EQ(t.option(), option);
  // The names, in the order --help and the messages list them.
  std::vector<std::string> got;
  for (E v : t.values()) got.push_back(t.name(v));
  EXPECT_EQ(got, names);
  // Print then parse gives the value back, and no two values share a name or a value.
  std::set<std::string> seen_names;
  std::set<int> seen_values;
  for (E v : t.values()) {
    EXPECT_EQ(t.parse(t.name(v)), v) << t.name(v);
    EXPECT_STREQ(to_string(v), t.name(v));
    EXPECT_TRUE(seen_names.insert(t.name(v)).second) << "name twice: " << t.name(v);
    EXPECT_TRUE(seen_values.insert(static_cast<int>(v)).second) << "value twice: " << t.name(v);
  }
  // An unknown value: BadInput (exit 2 in every process), with the whole message form.
  for (const std::string& bad : std::vector<std::string>{"no-such-value", "", " " + names.front(), names.front() + "x"}) {
    try {
      t.parse(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const BadInput& e) {
      EXPECT_EQ(e.what(), expected_message(option, bad, names));
    }
  }
  // A caller's `where` (a matrix file's key) replaces the option in the message.
  try {
    t.parse("no-such-value", "key 'x' of cell 'c'");
    ADD_FAILURE() << "parsed";
  } catch (const BadInput& e) {
    EXPECT_EQ(e.what(), expected_message("key 'x' of cell 'c'", "no-such-value", names));
  }
}

TEST(Spec, EveryTableRoundTripsAndRefusesWithOneMessageForm) {
  check_table(flavors(), "--flavor", {"debugmodel", "tiny", "k3shape", "exact", "exact-wide"});
  check_table(precisions(), "--dtype", {"fp32", "bf16", "bf16-master", "fp64"});
  check_table(trainers(), "--trainer", {"reference", "pipelined"});
  check_table(schedules(), "--schedule", {"1f1b", "interleaved1f1b"});
  check_table(caches(), "--cache", {"on", "off"});
  check_table(kda_forms(), "--kda", {"fused", "chunked", "recurrent"});
  check_table(attn_res_forms(), "--attn-res", {"fused", "recompute", "plain"});
  check_table(checkpointing_modes(), "--ac", {"none", "layer"});
  check_table(grad_accums(), "--grad-accum", {"auto", "bf16", "fp32"});
  check_table(clip_orders(), "--clip-order", {"single", "per-rank"});
  check_table(grad_norm_dtypes(), "--grad-norm-dtype", {"fp32", "bf16"});
  check_table(document_modes(), "--documents", {"off", "on"});
  check_table(lr_schedules(), "--lr-schedule", {"wsd", "constant"});
  check_table(devices(), "--device", {"cpu", "cuda"});
  check_table(backends(), "--backend", {"gloo", "nccl"});
  check_table(pseudo_query_inits(), "--pseudo-query-init", {"trunc-normal", "zero"});
  check_table(token_dtypes(), "--tokens-dtype", {"uint16", "int32", "int64"});
  check_table(report_formats(), "--format", {"txt", "md", "json", "csv", "html"});
  check_table(bench_targets(), "--what",
              {"reference", "step", "pipelined", "ratio", "ac-ratio", "threads-ratio", "kda",
               "compare", "gemm", "readers"});
}

TEST(Spec, NamesMeanTheValuesTheCodeExpects) {
  // The table pairs each name with its value; a swapped pair would still round-trip, so the
  // pairs the rest of the code depends on are checked one by one.
  EXPECT_EQ(precisions().parse("bf16"), Precision::BF16);
  EXPECT_EQ(precisions().parse("bf16-master"), Precision::BF16Master);
  EXPECT_EQ(precisions().parse("fp64"), Precision::FP64);
  EXPECT_EQ(grad_accums().parse("fp32"), GradAccum::FP32);
  EXPECT_EQ(grad_accums().parse("bf16"), GradAccum::BF16);
  EXPECT_EQ(caches().parse("off"), Cache::Off);
  EXPECT_EQ(clip_orders().parse("per-rank"), ClipOrder::PerRank);
  EXPECT_EQ(grad_norm_dtypes().parse("bf16"), GradNormDtype::BF16);
  EXPECT_EQ(document_modes().parse("on"), Documents::On);
  EXPECT_EQ(kda_forms().parse("recurrent"), KdaImpl::Recurrent);
  EXPECT_EQ(attn_res_forms().parse("plain"), AttnResImpl::Plain);
  EXPECT_EQ(trainers().parse("pipelined"), Trainer::Pipelined);
  EXPECT_EQ(flavors().parse("exact-wide"), Flavor::ExactWide);
  EXPECT_EQ(token_dtypes().parse("uint16"), TokenDtype::U16);
}

TEST(Spec, SchedulesFoldCaseAndOthersDoNot) {
  EXPECT_EQ(schedules().parse("Interleaved1F1B"), ScheduleKind::Interleaved1F1B);
  EXPECT_EQ(schedules().parse("1F1B"), ScheduleKind::OneFOneB);
  EXPECT_THROW(precisions().parse("FP32"), BadInput);
}

TEST(Spec, TheDefaultScheduleFollowsVp) {
  EXPECT_EQ(default_schedule(1), ScheduleKind::OneFOneB);
  EXPECT_EQ(default_schedule(2), ScheduleKind::Interleaved1F1B);
  EXPECT_EQ(default_schedule(4), ScheduleKind::Interleaved1F1B);
}

TEST(Spec, FirstLineStopsAtTheFirstNewline) {
  EXPECT_EQ(first_line("a\nb"), "a");
  EXPECT_EQ(first_line("a"), "a");
  EXPECT_EQ(first_line(""), "");
}

}  // namespace

// ---- RunSpec: the typed description of a run and its command line ----

namespace run_spec_test {

using namespace parity::spec;

// RunSpec's fields, counted by the structured binding below: a field added to RunSpec stops
// this file from compiling until the binding, and a mutation of the new field, are added here.
constexpr size_t kFields = 40;

void name_every_field() {
  [[maybe_unused]] auto [trainer, flavor, dtype, steps, microbatches, rows, seq_len, seed,
                         threads, dp, pp, vp, schedule, cache, split, device, init_path,
                         data_path, tokens_path, tokens_dtype, positions_path, clip_order,
                         grad_norm_dtype, grad_accum, attn_res, kda, ac, documents, bos_id, eos_id, lr, warmup, lr_schedule, expert_balance,
                         pseudo_query_init, loss_chunks, max_norm, reverse_microbatches,
                         freeze_embedding, inject] = RunSpec{};
}

// One change per field, each away from its default, in field order.
const std::vector<std::pair<std::string, std::function<void(RunSpec&)>>>& mutations() {
  static const std::vector<std::pair<std::string, std::function<void(RunSpec&)>>> m = {
      {"trainer", [](RunSpec& s) { s.trainer = Trainer::Pipelined; }},
      {"flavor", [](RunSpec& s) { s.flavor = Flavor::Tiny; }},
      {"dtype", [](RunSpec& s) { s.dtype = Precision::BF16Master; }},
      {"steps", [](RunSpec& s) { s.steps = 7; }},
      {"microbatches", [](RunSpec& s) { s.microbatches = 8; }},
      {"rows", [](RunSpec& s) { s.rows = 3; }},
      {"seq_len", [](RunSpec& s) { s.seq_len = 64; }},
      {"seed", [](RunSpec& s) { s.seed = 18446744073709551615ull; }},  // the largest: no wrap
      {"threads", [](RunSpec& s) { s.threads = 2; }},
      {"dp", [](RunSpec& s) { s.dp = 2; }},
      {"pp", [](RunSpec& s) { s.pp = 4; }},
      {"vp", [](RunSpec& s) { s.vp = 2; }},
      {"schedule", [](RunSpec& s) { s.schedule = ScheduleKind::OneFOneB; }},
      {"cache", [](RunSpec& s) { s.cache = Cache::Off; }},
      {"split", [](RunSpec& s) { s.split = "emb,0-8|9-16,head"; }},
      {"device", [](RunSpec& s) { s.device = Device::Cuda; }},
      {"init_path", [](RunSpec& s) { s.init_path = "seed ckpt.h5"; }},  // a space survives
      {"data_path", [](RunSpec& s) { s.data_path = "corpus.jsonl"; }},
      {"tokens_path", [](RunSpec& s) { s.tokens_path = "ids.bin"; }},
      {"tokens_dtype", [](RunSpec& s) { s.tokens_dtype = TokenDtype::I32; }},
      {"positions_path", [](RunSpec& s) { s.positions_path = "positions.npy"; }},
      {"clip_order", [](RunSpec& s) { s.clip_order = ClipOrder::PerRank; }},
      {"grad_norm_dtype", [](RunSpec& s) { s.grad_norm_dtype = GradNormDtype::BF16; }},
      {"grad_accum", [](RunSpec& s) { s.grad_accum = GradAccum::FP32; }},
      {"attn_res", [](RunSpec& s) { s.attn_res = AttnResImpl::Recompute; }},
      {"kda", [](RunSpec& s) { s.kda = KdaImpl::Chunked; }},
      {"ac", [](RunSpec& s) { s.ac = Checkpointing::Layer; }},
      {"documents", [](RunSpec& s) { s.documents = Documents::On; }},
      {"bos_id", [](RunSpec& s) { s.bos_id = -1; }},  // none: a negative value survives
      {"eos_id", [](RunSpec& s) { s.eos_id = 2147483647; }},  // the largest
      {"lr", [](RunSpec& s) { s.lr = 0.1 + 0.2; }},  // 0.30000000000000004: every digit kept
      {"warmup", [](RunSpec& s) { s.warmup = 0; }},
      {"lr_schedule", [](RunSpec& s) { s.lr_schedule = LrSchedule::Constant; }},
      {"expert_balance", [](RunSpec& s) { s.expert_balance = false; }},
      {"pseudo_query_init", [](RunSpec& s) { s.pseudo_query_init = PseudoQueryInit::Zero; }},
      {"loss_chunks", [](RunSpec& s) { s.loss_chunks = 1; }},
      {"max_norm", [](RunSpec& s) { s.max_norm = 0.5; }},
      {"reverse_microbatches", [](RunSpec& s) { s.reverse_microbatches = true; }},
      {"freeze_embedding", [](RunSpec& s) { s.freeze_embedding = true; }},
      {"inject", [](RunSpec& s) { s.inject = {"drop-deposit:block=1,stage=3", "misroute:block=2,stage=5"}; }},
  };
  return m;
}

TEST(RunSpec, EveryFieldPrintsAndParsesBack) {
  name_every_field();
  ASSERT_EQ(mutations().size(), kFields);
  const RunSpec defaults;
  EXPECT_TRUE(to_args(defaults).empty());  // the defaults print as nothing
  EXPECT_EQ(parse_args({}), defaults);
  RunSpec all;
  for (const auto& [field, mutate] : mutations()) {
    SCOPED_TRACE(field);
    RunSpec s;
    mutate(s);
    mutate(all);
    // The mutation is seen by the comparison (a field left out of operator== would not be)...
    EXPECT_NE(s, defaults);
    // ... and by the printer (a field left out of to_args prints nothing and reads back as
    // the default, which the comparison then tells apart).
    const auto args = to_args(s);
    EXPECT_FALSE(args.empty());
    EXPECT_EQ(parse_args(args), s);
  }
  EXPECT_EQ(parse_args(to_args(all)), all);
}

TEST(RunSpec, ThePrintedFlagsAreTheCommandLines) {
  RunSpec s;
  s.trainer = Trainer::Pipelined;
  s.pp = 2;
  s.expert_balance = false;
  s.lr = 8e-3;
  s.inject = {"drop-deposit:block=1,stage=3"};
  const std::vector<std::string> want = {"--trainer", "pipelined", "--pp", "2", "--lr", "0.008",
                                         "--no-expert-balance", "--inject",
                                         "drop-deposit:block=1,stage=3"};
  EXPECT_EQ(to_args(s), want);
}

TEST(RunSpec, BadArgumentsAreRefusedNamingTheFlag) {
  auto message = [](const std::vector<std::string>& args) {
    try {
      parse_args(args);
    } catch (const BadInput& e) {
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  EXPECT_EQ(message({"--steps", "0"}), "--steps: 0 is out of range; give an integer from 1 to 1000000");
  EXPECT_EQ(message({"--seed", "-1"}),
            "--seed: '-1' is not an unsigned integer; give one from 0 to 18446744073709551615");
  EXPECT_EQ(message({"--lr", "nan"}), "--lr: nan is not finite; give a finite number above 0 and up to 1e+12");
  EXPECT_EQ(message({"--dtype", "fp16"}), "unknown --dtype 'fp16'; accepted: fp32, bf16, bf16-master, fp64");
  EXPECT_EQ(message({"--pp"}), "--pp: needs a value");
  EXPECT_EQ(message({"--stepz", "3"}), "unknown option '--stepz'; a run takes the options of `parity train`");
  EXPECT_EQ(message({"--init", ""}), "--init: the path is empty (an unset shell variable?); give a file or directory");
}

}  // namespace run_spec_test

// Names from files, made printable. The expected strings are written out by hand from the
// rules: C0 controls, DEL and C1 controls (U+0080..U+009F, as their UTF-8 bytes) and bytes
// outside well-formed UTF-8 become \xNN; other characters stay whole, and a cut never splits
// one.
TEST(Printable, EscapesControlsAndMalformedUtf8AndKeepsTheRest) {
  using parity::spec::printable;
  EXPECT_EQ(printable("layers.0.w"), "layers.0.w");
  EXPECT_EQ(printable("a\x1b[2J\r\n\x7f"), "a\\x1b[2J\\x0d\\x0a\\x7f");
  EXPECT_EQ(printable("\xc2\x9b" "2J"), "\\xc2\\x9b2J");          // U+009B, the C1 CSI
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x88\x91"), "caf\xc3\xa9 \xe2\x88\x91");  // é, ∑ kept
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                 // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");        // a surrogate
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("x\xe2\x88"), "x\\xe2\\x88");               // cut short
  EXPECT_EQ(printable("ab\xc3\xa9z", 3), "ab\xc3\xa9...");        // é starts before the limit
  EXPECT_EQ(printable("abcd", 2), "ab...");
  EXPECT_EQ(printable("caf\xc3\xa9", 200, true), "caf\\xc3\\xa9");
  EXPECT_TRUE(parity::spec::is_utf8("caf\xc3\xa9"));
  EXPECT_FALSE(parity::spec::is_utf8("\xf4\x90\x80\x80"));         // past U+10FFFF
}
