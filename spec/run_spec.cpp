#include "spec/run_spec.h"

#include <functional>
#include <tuple>

#include "spec/limits.h"
#include "spec/numbers.h"

namespace parity::spec {

namespace {

// One field's flag: how it prints (no words when the field has its default) and how a value
// reads back.
struct Field {
  const char* flag;
  bool is_switch;  // a flag without a value
  std::function<std::vector<std::string>(const RunSpec&)> print;
  std::function<void(RunSpec&, const std::string&)> read;
};

[[noreturn]] void refuse(const char* flag, const std::string& problem) {
  throw BadInput(std::string(flag) + ": " + problem);
}

template <class T>
Field value(const char* flag, T RunSpec::*m, std::function<std::string(const T&)> text,
            std::function<T(const std::string&)> from) {
  return {flag, false,
          [m, text](const RunSpec& s) {
            return s.*m == RunSpec{}.*m ? std::vector<std::string>{}
                                        : std::vector<std::string>{text(s.*m)};
          },
          [m, from](RunSpec& s, const std::string& v) { s.*m = from(v); }};
}

template <class E>
Field choice(E RunSpec::*m, const Choices<E>& table) {
  return value<E>(
      table.option(), m, [&table](const E& v) { return std::string(table.name(v)); },
      [&table](const std::string& v) { return table.parse(v); });
}

template <class E>
Field optional_choice(std::optional<E> RunSpec::*m, const Choices<E>& table) {
  return value<std::optional<E>>(
      table.option(), m, [&table](const std::optional<E>& v) { return std::string(table.name(*v)); },
      [&table](const std::string& v) { return std::optional<E>(table.parse(v)); });
}

template <class I>
Field integer(const char* flag, I RunSpec::*m, int64_t lo, int64_t hi) {
  return value<I>(
      flag, m, [](const I& v) { return std::to_string(v); },
      [flag, lo, hi](const std::string& v) {
        const std::string problem = integer_problem(v, lo, hi);
        if (!problem.empty()) refuse(flag, problem);
        return static_cast<I>(std::stoll(v));
      });
}

Field real(const char* flag, double RunSpec::*m, double lo, double hi, bool lo_open) {
  return value<double>(
      flag, m, [](const double& v) { return shortest_text(v); },
      [flag, lo, hi, lo_open](const std::string& v) {
        const std::string problem = real_problem(v, lo, hi, lo_open);
        if (!problem.empty()) refuse(flag, problem);
        return std::stod(v);
      });
}

Field path(const char* flag, std::string RunSpec::*m) {
  return value<std::string>(
      flag, m, [](const std::string& v) { return v; },
      [flag](const std::string& v) {
        const std::string problem = path_problem(v);
        if (!problem.empty()) refuse(flag, problem);
        return v;
      });
}

// A switch: its flag alone sets the field to `when_given` (the default is the other value).
Field toggle(const char* flag, bool RunSpec::*m, bool when_given) {
  return {flag, true,
          [m, when_given](const RunSpec& s) {
            return s.*m == when_given ? std::vector<std::string>{""} : std::vector<std::string>{};
          },
          [m, when_given](RunSpec& s, const std::string&) { s.*m = when_given; }};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      choice(&RunSpec::trainer, trainers()),
      choice(&RunSpec::flavor, flavors()),
      choice(&RunSpec::dtype, precisions()),
      integer("--steps", &RunSpec::steps, 1, kMaxSteps),
      integer("--microbatches", &RunSpec::microbatches, 1, kMaxMicrobatches),
      integer("--batch", &RunSpec::rows, 1, kMaxRows),
      integer("--seq-len", &RunSpec::seq_len, 1, kMaxSeqLen),
      value<uint64_t>(
          "--seed", &RunSpec::seed, [](const uint64_t& v) { return std::to_string(v); },
          [](const std::string& v) {
            const std::string problem = unsigned_problem(v);
            if (!problem.empty()) refuse("--seed", problem);
            return static_cast<uint64_t>(std::stoull(v));
          }),
      integer("--threads", &RunSpec::threads, 1, max_threads()),
      integer("--dp", &RunSpec::dp, 1, kMaxRanks),
      integer("--pp", &RunSpec::pp, 1, kMaxRanks),
      integer("--vp", &RunSpec::vp, 1, kMaxVirtualStages),
      optional_choice(&RunSpec::schedule, schedules()),
      choice(&RunSpec::cache, caches()),
      path("--split", &RunSpec::split),
      choice(&RunSpec::device, devices()),
      path("--init", &RunSpec::init_path),
      path("--data", &RunSpec::data_path),
      path("--tokens", &RunSpec::tokens_path),
      optional_choice(&RunSpec::tokens_dtype, token_dtypes()),
      path("--positions", &RunSpec::positions_path),
      choice(&RunSpec::clip_order, clip_orders()),
      choice(&RunSpec::grad_norm_dtype, grad_norm_dtypes()),
      choice(&RunSpec::grad_accum, grad_accums()),
      choice(&RunSpec::attn_res, attn_res_forms()),
      choice(&RunSpec::kda, kda_forms()),
      choice(&RunSpec::ac, checkpointing_modes()),
      choice(&RunSpec::documents, document_modes()),
      integer("--bos-id", &RunSpec::bos_id, -1, kMaxTokenId),
      integer("--eos-id", &RunSpec::eos_id, -1, kMaxTokenId),
      real("--lr", &RunSpec::lr, 0, kMaxLr, /*lo_open=*/true),
      integer("--warmup", &RunSpec::warmup, 0, kMaxSteps),
      choice(&RunSpec::lr_schedule, lr_schedules()),
      toggle("--no-expert-balance", &RunSpec::expert_balance, false),
      choice(&RunSpec::pseudo_query_init, pseudo_query_inits()),
      integer("--loss-chunks", &RunSpec::loss_chunks, 1, kMaxSeqLen),
      real("--max-norm", &RunSpec::max_norm, 0, kMaxMaxNorm, /*lo_open=*/true),
      toggle("--reverse-microbatches", &RunSpec::reverse_microbatches, true),
      toggle("--freeze-embedding", &RunSpec::freeze_embedding, true),
      {"--inject", false, [](const RunSpec& s) { return s.inject; },
       [](RunSpec& s, const std::string& v) {
         if (v.empty()) refuse("--inject", "an empty fault spec; write KIND:block=B,stage=S");
         s.inject.push_back(v);
       }},
  };
  return f;
}

auto tied(const RunSpec& s) {
  return std::tie(s.trainer, s.flavor, s.dtype, s.steps, s.microbatches, s.rows, s.seq_len,
                  s.seed, s.threads, s.dp, s.pp, s.vp, s.schedule, s.cache, s.split, s.device,
                  s.init_path, s.data_path, s.tokens_path, s.tokens_dtype, s.positions_path,
                  s.clip_order, s.grad_norm_dtype, s.grad_accum, s.attn_res, s.kda, s.ac, s.documents,
                  s.bos_id, s.eos_id, s.lr, s.warmup, s.lr_schedule,
                  s.expert_balance, s.pseudo_query_init, s.loss_chunks, s.max_norm,
                  s.reverse_microbatches, s.freeze_embedding, s.inject);
}

}  // namespace

bool operator==(const RunSpec& a, const RunSpec& b) { return tied(a) == tied(b); }

std::vector<std::string> to_args(const RunSpec& s) {
  std::vector<std::string> out;
  for (const auto& f : fields())
    for (const auto& v : f.print(s)) {
      out.push_back(f.flag);
      if (!f.is_switch) out.push_back(v);
    }
  return out;
}

RunSpec parse_args(const std::vector<std::string>& args) {
  RunSpec s;
  for (size_t i = 0; i < args.size(); ++i) {
    const Field* field = nullptr;
    for (const auto& f : fields())
      if (args[i] == f.flag) field = &f;
    if (!field)
      throw BadInput("unknown option '" + args[i] + "'; a run takes the options of `parity train`");
    if (field->is_switch) {
      field->read(s, "");
      continue;
    }
    if (i + 1 >= args.size()) refuse(field->flag, "needs a value");
    field->read(s, args[++i]);
  }
  return s;
}

}  // namespace parity::spec
