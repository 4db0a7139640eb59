// parity init --flavor F --seed S --out ckpt.h5: the fp32 master parameters in HDF5.
#include <iostream>

#include "cli/commands.h"
#include "cli/validators.h"
#include "harness/limits.h"
#include "dumps/checkpoint.h"
#include "harness/run_options.h"
#include "harness/version.h"
#include "kernels/config.h"
#include "kernels/params.h"

namespace parity::cli {

namespace {
struct InitOptions {
  std::string flavor = "debugmodel";
  uint64_t seed = 42;
  std::string pseudo_query_init = "trunc-normal";
  std::string out;
};

int run_init(const InitOptions& o) {
  const auto cfg = kernels::flavor(o.flavor);
  const auto params = kernels::init_params(cfg, o.seed, harness::init_options(o.pseudo_query_init));
  dumps::write_checkpoint(o.out, cfg, o.seed, params, harness::git_sha());
  std::cout << "wrote " << o.out << ": flavor " << cfg.name << ", seed " << o.seed << ", "
            << params.size() << " tensors, "
            << kernels::total_numel(kernels::param_specs(cfg)) << " parameters\n";
  return 0;
}
}  // namespace

Command add_init_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "write a seed checkpoint (fp32 master parameters)");
  auto o = std::make_shared<InitOptions>();
  cmd->add_option("--flavor", o->flavor, "debugmodel or tiny")->capture_default_str();
  cmd->add_option("--seed", o->seed, "initialisation seed")->capture_default_str()
      ->check(unsigned_integer());
  cmd->add_option("--pseudo-query-init", o->pseudo_query_init,
                  "AttnRes pseudo-queries: trunc-normal (std 0.02, the PR era) or zero")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "checkpoint file to write (.h5)")->required()
      ->check(non_empty_path());
  return {cmd, [o] { return run_init(*o); }};
}

}  // namespace parity::cli
