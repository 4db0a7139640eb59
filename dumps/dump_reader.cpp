// Reading run dumps (dump.h): one file, or a directory of rank files merged by FQN.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "dumps/dump.h"
#include "dumps/guard.h"
#include "spec/numbers.h"
#include "spec/printable.h"

namespace parity::dumps {

namespace fs = std::filesystem;

std::string dump_remedy() {
  return "regenerate it with `parity train ... --dump DIR --dump-steps ...`";
}

namespace {

std::string mixed_remedy() {
  return "the directory mixes runs: rerun into an empty directory (or with --overwrite)";
}

void read_file_into(const std::string& path, Dump& d, bool first) {
  try {
    auto f = h5::File::open_read(path);
    if (!h5::exists(f, "/meta") || !h5::has_attr(f, "/meta", "schema") ||
        h5::attr_string(f, "/meta", "schema") != "parity-dump")
      throw DumpError("'" + path + "' is not a parity dump; " + dump_remedy());
    const auto version = h5::attr_int(f, "/meta", "schema_version");
    if (version != kDumpSchemaVersion)
      throw DumpError("'" + path + "' has dump schema version " + std::to_string(version) +
                      ", this build reads version " + std::to_string(kDumpSchemaVersion) + "; " +
                      dump_remedy());
    for (const char* key : {"git_sha", "config", "trainer", "flavor", "dtype", "device",
                            "torch_version", "split", "fqns"}) {
      const auto v = h5::attr_string(f, "/meta", key);
      if (first)
        d.meta[key] = v;
      else if (std::string(key) == "flavor" && d.meta[key] != v)
        throw DumpError("'" + path + "' is a dump of flavor " + v + " but its sibling ranks are " +
                        d.meta[key] + "; " + mixed_remedy());
    }
    // Which run wrote the file, and how many files it wrote (dumps before these attributes
    // carry neither and are taken as they are).
    if (h5::has_attr(f, "/meta", "run_id")) {
      const auto run = h5::attr_string(f, "/meta", "run_id");
      const auto files = std::to_string(h5::attr_int(f, "/meta", "files"));
      if (first) {
        d.meta["run_id"] = run;
        d.meta["files"] = files;
      } else if (d.meta["run_id"] != run) {
        throw DumpError("'" + path + "' was written by another run than its sibling rank files "
                        "(run " + run + ", not " + d.meta["run_id"] + "); " + mixed_remedy());
      }
    }
    auto read_f64 = [&](const std::string& obj) {
      auto a = h5::read(f, obj);
      if (a.dtype != h5::DType::F64 || a.shape.size() != 1)
        throw DumpError("'" + path + "': " + obj + " is not a float64 vector; " + dump_remedy());
      std::vector<double> v(static_cast<size_t>(a.numel()));
      std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
      return v;
    };
    if (h5::exists(f, "/metrics/loss")) {
      auto l = read_f64("/metrics/loss");
      auto n = read_f64("/metrics/grad_norm");
      if (d.losses.empty()) {
        d.losses = l;
        d.grad_norms = n;
      }
    }
    for (const auto& child : h5::list(f, "/")) {
      if (child.rfind("step_", 0) != 0) continue;
      // The whole rest of the name is the step, from 0 to 2^63 - 1: "step_1x" is not step 1,
      // and 20 digits are refused, not wrapped.
      const std::string number = child.substr(5);
      const std::string problem = spec::integer_problem(number, 0, INT64_MAX);
      if (!problem.empty())
        throw DumpError("'" + path + "' has a step group '" + spec::printable(child) +
                        "' whose step " + spec::printable(problem) + "; " + dump_remedy());
      const int64_t step = std::stoll(number);
      auto& sd = d.steps[step];
      sd.step = step;
      const std::string g = "/" + child;
      for (const char* k : {"loss", "grad_norm", "mb_losses"})
        if (h5::exists(f, g + "/" + k) && !sd.scalars.count(k)) sd.scalars[k] = h5::read(f, g + "/" + k);
      for (const char* kind : {"grads", "params", "buffers"}) {
        if (!h5::exists(f, g + "/" + kind)) continue;
        const std::string k = kind;
        auto& dst = k == "grads" ? sd.grads : k == "params" ? sd.params : sd.buffers;
        for (const auto& fqn : h5::list(f, g + "/" + kind)) {
          if (dst.count(fqn))
            throw DumpError("'" + path + "': " + kind + "/" + fqn + " of step " +
                            std::to_string(step) + " is also in another rank's file");
          dst[fqn] = h5::read(f, g + "/" + kind + "/" + fqn);
          if (std::string(kind) == "grads") sd.fqns.push_back(fqn);
        }
      }
    }
  } catch (const h5::Error& e) {
    throw DumpError(std::string("cannot read dump: ") + e.what() + "; " + dump_remedy());
  }
}

void check_parses_safely(const std::string& path) {
  parse_guarded(
      path,
      [&] {
        Dump scratch;
        read_file_into(path, scratch, true);
      },
      dump_remedy());
}

}  // namespace

std::vector<std::string> dump_files(const std::string& path) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path)) {
      const auto name = e.path().filename().string();
      if (name.rfind("rank", 0) == 0 && e.path().extension() == ".h5") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty())
      throw DumpError("dump directory '" + path + "' holds no rank*.h5 file; " + dump_remedy());
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    throw DumpError("dump '" + path + "' does not exist; " + dump_remedy());
  }
  return files;
}

Dump read_dump(const std::string& path) {
  Dump d;
  d.source = path;
  const auto files = dump_files(path);
  for (size_t i = 0; i < files.size(); ++i) {
    check_parses_safely(files[i]);
    read_file_into(files[i], d, i == 0);
    // The first file says how many its run wrote; a directory with another count mixes runs
    // or lacks a rank.
    if (i == 0 && fs::is_directory(path) && d.meta.count("files") &&
        d.meta["files"] != std::to_string(files.size()))
      throw DumpError("dump '" + path + "' holds " + std::to_string(files.size()) +
                      " rank files, but its run wrote " + d.meta["files"] + "; " + mixed_remedy());
  }
  return d;
}

}  // namespace parity::dumps
