#include "dumps/ledger_dump.h"

#include <nlohmann/json.hpp>

#include "dumps/dump.h"
#include "dumps/guard.h"
#include "spec/limits.h"

namespace parity::dumps {

namespace {

std::string ledger_group(int64_t step) { return step_group(step) + "/ledger"; }

void merge_file(const std::string& path, int64_t step, StepLedger& out) {
  auto f = h5::File::open_read(path);
  const auto g = ledger_group(step);
  if (!h5::exists(f, g + "/index.json")) return;
  const auto raw = h5::read(f, g + "/index.json");
  const std::string text(raw.bytes.begin(), raw.bytes.end());
  if (spec::json_depth(text) > spec::kMaxJsonDepth)
    throw DumpError("'" + path + "': the ledger index of step " + std::to_string(step) +
                    " nests more than " + std::to_string(spec::kMaxJsonDepth) +
                    " deep (parity writes 3); regenerate the dump with --ledger");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw DumpError("'" + path + "': the ledger index of step " + std::to_string(step) +
                    " is not valid JSON (" + e.what() + "); regenerate the dump with --ledger");
  }
  try {
    const size_t read_base = out.reads.size();
    for (const auto& r : j.at("reads"))
      out.reads.push_back({r.at("mb").get<int>(), r.at("block").get<int>(), r.at("unit").get<int>(),
                           r.at("reader").get<std::string>(), r.at("hash").get<std::string>(),
                           r.at("row").get<int>()});
    for (const auto& c : j.at("commits")) {
      LedgerBlock b;
      b.mb = c.at("mb").get<int>();
      b.block = c.at("block").get<int>();
      b.unit = c.at("unit").get<int>();
      b.hash = c.at("hash").get<std::string>();
      b.has_grad = c.at("grad").get<bool>();
      const std::string p = g + "/mb" + std::to_string(b.mb) + "/b" + std::to_string(b.block);
      if (b.has_grad) b.grad = h5::read(f, p + "/grad");
      out.blocks[{b.mb, b.block}] = std::move(b);
    }
    // Contributions live with the readers' rank file; attach them to their blocks.
    std::map<std::pair<int, int>, std::vector<size_t>> rows;
    for (size_t i = read_base; i < out.reads.size(); ++i)
      if (out.reads[i].row >= 0) rows[{out.reads[i].mb, out.reads[i].block}].push_back(i);
    for (auto& [key, idx] : rows) {
      auto& b = out.blocks[key];
      b.mb = key.first;
      b.block = key.second;
      const std::string p =
          g + "/mb" + std::to_string(key.first) + "/b" + std::to_string(key.second);
      auto a = h5::read(f, p + "/contributions");
      if (a.shape.empty() || a.shape[0] != static_cast<int64_t>(idx.size()))
        throw DumpError("'" + path + "': " + p + "/contributions has the wrong row count");
      if (b.contributions.bytes.empty()) {
        b.contributions = std::move(a);
      } else {  // another rank's readers of the same block: append the rows
        b.contributions.shape[0] += a.shape[0];
        b.contributions.bytes.insert(b.contributions.bytes.end(), a.bytes.begin(), a.bytes.end());
      }
      b.reads.insert(b.reads.end(), idx.begin(), idx.end());
    }
    for (const auto& h : j.at("hops"))
      out.hops.push_back({h.at("mb").get<int>(), h.at("from").get<int>(), h.at("to").get<int>(),
                          h.at("dir").get<std::string>() == "F", h.at("tensor").get<std::string>(),
                          h.at("hash").get<std::string>()});
    for (const auto& e : j.at("events"))
      out.events.push_back({e.at("kind").get<std::string>(), e.at("mb").get<int>(),
                            e.at("block").get<int>(), e.at("stage").get<int>(),
                            e.at("count").get<int>()});
  } catch (const nlohmann::json::exception& e) {
    throw DumpError("'" + path + "': the ledger index of step " + std::to_string(step) +
                    " lacks a field (" + e.what() + "); regenerate the dump with --ledger");
  }
}

}  // namespace

bool has_ledger(const std::string& dump_path, int64_t step) {
  for (const auto& p : dump_files(dump_path)) {
    auto f = h5::File::open_read(p);
    if (h5::exists(f, ledger_group(step) + "/index.json")) return true;
  }
  return false;
}

StepLedger read_ledger(const std::string& dump_path, int64_t step) {
  StepLedger out;
  bool any = false;
  for (const auto& p : dump_files(dump_path)) {
    bool has_ledger = false;
    try {
      auto f = h5::File::open_read(p);
      has_ledger = h5::exists(f, ledger_group(step) + "/index.json");
    } catch (const h5::Error& e) {  // a damaged file: refused as a dump, as the read below is
      throw DumpError("'" + p + "' cannot be read as a dump (" + e.what() + "); " + dump_remedy());
    }
    if (!has_ledger) continue;
    any = true;
    parse_guarded(
        p,
        [&] {
          StepLedger scratch;
          merge_file(p, step, scratch);
        },
        dump_remedy());
    try {
      merge_file(p, step, out);
    } catch (const h5::Error& e) {
      throw DumpError("'" + p + "': the ledger of step " + std::to_string(step) +
                      " cannot be read (" + e.what() + "); regenerate the dump with --ledger");
    }
  }
  if (!any)
    throw DumpError("dump '" + dump_path + "' has no ledger for step " + std::to_string(step) +
                    "; rerun `parity train` with --ledger and --dump-steps including " +
                    std::to_string(step));
  return out;
}

}  // namespace parity::dumps
