// parity init --flavor F --seed S --out ckpt.h5: the fp32 master parameters and the persistent
// buffers in HDF5, drawn from the seed (buffers zero), or (--from PATH) taken from a torchtitan
// state dict in torch.save or safetensors, or from a DCP checkpoint directory.
#include <iostream>

#include "cli/commands.h"
#include "cli/validators.h"
#include "spec/limits.h"
#include "dumps/checkpoint.h"
#include "dumps/state_dict.h"
#include "harness/run_options.h"
#include "harness/version.h"
#include "kernels/config.h"
#include "kernels/params.h"

namespace parity::cli {

namespace {
struct InitOptions {
  spec::Flavor flavor = spec::Flavor::Debugmodel;
  uint64_t seed = 42;
  spec::PseudoQueryInit pseudo_query_init = spec::PseudoQueryInit::TruncNormal;
  std::string from;
  std::string out;
};

int run_init(const InitOptions& o) {
  const auto cfg = kernels::flavor(o.flavor);
  kernels::NamedTensors params, buffers;
  if (o.from.empty()) {
    params = kernels::init_params(cfg, o.seed, harness::init_options(o.pseudo_query_init));
  } else {
    auto sd = dumps::params_from_state_dict(o.from, cfg);
    params = std::move(sd.params);
    buffers = std::move(sd.buffers);
    std::cout << "read " << o.from << ": " << params.size() << " parameters of " << cfg.name;
    if (buffers.size() > 0)
      std::cout << " and " << buffers.size() << " persistent buffer(s) (the expert biases)";
    if (!sd.absent_buffers.empty())
      std::cout << "; " << sd.absent_buffers.size()
                << " expert bias(es) not in the file start at zero (" << sd.absent_buffers[0]
                << (sd.absent_buffers.size() > 1 ? ", ..." : "") << ")";
    if (!sd.skipped_buffers.empty())
      std::cout << "; skipped " << sd.skipped_buffers.size() << " non-persistent buffer(s)";
    if (!sd.vision.empty())
      std::cout << "; skipped " << sd.vision.size() << " vision_encoder tensor(s) (not modelled)";
    if (!sd.outside_model.empty())
      std::cout << "; skipped " << sd.outside_model.size() << " entr"
                << (sd.outside_model.size() == 1 ? "y" : "ies") << " outside '"
                << dumps::kModelPrefix << "' (optimizer and train state)";
    if (!sd.rounded.empty()) std::cout << "; rounded " << sd.rounded.size() << " fp64 tensor(s) to fp32";
    std::cout << "\n";
  }
  dumps::write_checkpoint(o.out, cfg, o.seed, params, buffers, harness::git_sha());
  std::cout << "wrote " << o.out << ": flavor " << cfg.name << ", seed " << o.seed << ", "
            << params.size() << " tensors, "
            << kernels::total_numel(kernels::param_specs(cfg)) << " parameters, "
            << dumps::persistent_buffers(cfg).size() << " persistent buffer(s)\n";
  return 0;
}
}  // namespace

Command add_init_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "write a seed checkpoint (fp32 master parameters, expert biases)");
  auto o = std::make_shared<InitOptions>();
  add_choice(*cmd, o->flavor, spec::flavors(), "model flavor");
  cmd->add_option("--seed", o->seed, "initialisation seed")->capture_default_str()
      ->check(unsigned_integer());
  auto* pq = add_choice(*cmd, o->pseudo_query_init, spec::pseudo_query_inits(),
                        "AttnRes pseudo-queries (trunc-normal: std 0.02, the PR era)");
  cmd->add_option("--from", o->from,
                  "take the parameters from a torchtitan state dict (torch.save or safetensors "
                  "file, or DCP checkpoint directory) instead of drawing them")
      ->check(non_empty_path())->excludes(pq);
  cmd->add_option("--out", o->out, "checkpoint file to write (.h5)")->required()
      ->check(non_empty_path());
  return {cmd, [o] { return run_init(*o); }};
}

}  // namespace parity::cli
