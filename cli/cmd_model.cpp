// parity model --flavor F: the layer pattern, where blocks open, the FQN table, the count.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "kernels/config.h"
#include "kernels/params.h"

namespace parity::cli {

namespace {
std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int run_model(const std::string& name) {
  const auto cfg = kernels::flavor(name);
  std::printf("flavor %s: %d layers, blocks of %d layers, dim %d, %d heads, vocab %d%s\n",
              cfg.name.c_str(), cfg.n_layers, cfg.layers_per_block, cfg.dim, cfg.n_heads,
              cfg.vocab, cfg.shape_only ? " (shape only)" : "");
  std::printf("\n%-6s %-6s %-6s %s\n", "layer", "mixer", "ffn", "block");
  for (int l = 0; l < cfg.n_layers; ++l) {
    const int b = l / cfg.layers_per_block;
    std::string block = cfg.opens_block(l)
                            ? "opens block " + std::to_string(b) + " (commits stack entry " +
                                  std::to_string(b) + ")"
                            : "in block " + std::to_string(b);
    std::printf("%-6d %-6s %-6s %s\n", l, kernels::to_string(cfg.mixer(l)),
                kernels::to_string(cfg.ffn(l)), block.c_str());
  }
  std::string opens;
  for (int l = 0; l < cfg.n_layers; ++l)
    if (cfg.opens_block(l)) opens += (opens.empty() ? "" : ", ") + std::to_string(l);
  std::printf("blocks open at layers %s; the output aggregation reads %d stack entries plus the "
              "partial block\n",
              opens.c_str(), cfg.n_blocks());

  const auto specs = kernels::param_specs(cfg);
  std::printf("\n%-48s %-18s %12s\n", "fqn", "shape", "numel");
  for (const auto& s : specs)
    std::printf("%-48s %-18s %12lld\n", s.fqn.c_str(), shape_text(s.shape).c_str(),
                static_cast<long long>(s.numel()));
  for (const auto& s : kernels::buffer_specs(cfg))
    std::printf("%-48s %-18s %12s\n", s.fqn.c_str(), shape_text(s.shape).c_str(), "buffer");
  const auto total = kernels::total_numel(specs);
  std::printf("\ntotal parameters: %lld (%.2f M) in %zu tensors\n",
              static_cast<long long>(total), total / 1e6, specs.size());
  return 0;
}
}  // namespace

Command add_model_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("model", "print a flavor's layers, blocks and parameters");
  auto name = std::make_shared<std::string>("debugmodel");
  cmd->add_option("--flavor", *name, "debugmodel, tiny or k3shape")->capture_default_str();
  return {cmd, [name] { return run_model(*name); }};
}

}  // namespace parity::cli
