// parity model --flavor F: the layer pattern, where blocks open, the FQN table, the counts
// (parameters, and state-dict entries as torchtitan's state_dict() lists them).
#include <ATen/core/ScalarType.h>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "dumps/h5.h"
#include "kernels/config.h"
#include "kernels/params.h"

namespace parity::cli {

namespace {
// 22479088 -> "22,479,088".
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
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
  std::printf("\n%-66s %-18s %10s  %s\n", "fqn (module order)", "shape", "numel", "kind");
  size_t in_state_dict = 0, persistent = 0;
  for (const auto& e : kernels::module_entries(cfg)) {
    in_state_dict += e.kind != kernels::ModuleEntry::NonPersistentBuffer;
    persistent += e.kind == kernels::ModuleEntry::Buffer;
    int64_t n = 1;
    for (auto d : e.shape) n *= d;
    const char* kind = e.kind == kernels::ModuleEntry::Parameter ? "parameter"
                       : e.kind == kernels::ModuleEntry::Buffer
                           ? "buffer, fp32, in the state dict"
                           : (e.dtype == at::kInt ? "buffer, int32, not in the state dict"
                                                  : "buffer, fp32, not in the state dict");
    std::printf("%-66s %-18s %10lld  %s\n", e.fqn.c_str(), h5::shape_text(e.shape).c_str(),
                static_cast<long long>(n), kind);
  }
  const auto total = kernels::total_numel(specs);
  std::printf("\ntext parameters: %s (%.2f M) in %zu tensors\n", grouped(total).c_str(),
              total / 1e6, specs.size());
  std::printf("state dict: %zu entries (%zu parameters, %zu persistent buffers)\n",
              in_state_dict, specs.size(), persistent);
  if (cfg.name == "debugmodel")
    std::printf("not modelled: the vision tower (vision_encoder.*, %s parameters; text batches "
                "give it zero gradients), %s with it\n",
                grouped(kernels::kDebugmodelVisionParams).c_str(),
                grouped(total + kernels::kDebugmodelVisionParams).c_str());
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
