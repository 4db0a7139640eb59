#include "dumps/checkpoint.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "dumps/h5.h"

namespace parity::dumps {

namespace {

std::string remedy(const std::string& flavor) {
  return "regenerate it with `parity init --flavor " + flavor + " --out FILE`";
}

// One float32 dataset of `group` ("params" or "buffers"), of the given shape, every value
// finite.
at::Tensor read_finite(h5::File& file, const std::string& path, const std::string& group,
                       const std::string& fqn, const std::vector<int64_t>& shape,
                       const std::string& fix) {
  const char* what = group == "params" ? "parameter" : "buffer";
  const std::string obj = "/" + group + "/" + fqn;
  if (!h5::exists(file, obj))
    throw CheckpointError("'" + path + "' lacks " + what + " " + fqn + "; " + fix);
  auto a = h5::read(file, obj);
  if (a.dtype != h5::DType::F32 || a.shape != shape)
    throw CheckpointError("'" + path + "': " + what + " " + fqn + " is " +
                          h5::dtype_name(a.dtype) + " " + h5::shape_text(a.shape) +
                          ", expected float32 " + h5::shape_text(shape) + "; " + fix);
  auto t = at::empty(shape, at::kFloat);
  std::memcpy(t.data_ptr(), a.bytes.data(), a.bytes.size());
  const float* v = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(v[i]))
      throw CheckpointError("'" + path + "': " + what + " " + fqn + " holds " +
                            std::to_string(v[i]) + " at index " + std::to_string(i) +
                            "; a seed checkpoint must be finite: " + fix);
  return t;
}

}  // namespace

std::vector<kernels::BufferSpec> persistent_buffers(const kernels::ModelConfig& cfg) {
  std::vector<kernels::BufferSpec> out;
  for (auto& b : kernels::buffer_specs(cfg))
    if (b.persistent) out.push_back(std::move(b));
  return out;
}

void write_checkpoint(const std::string& path, const kernels::ModelConfig& cfg, uint64_t seed,
                      const kernels::NamedTensors& params, const kernels::NamedTensors& buffers,
                      const std::string& git_sha) {
  const auto persistent = persistent_buffers(cfg);
  auto file = h5::File::create(path);
  h5::set_attr(file, "/", "schema", "parity-checkpoint");
  h5::set_attr(file, "/", "schema_version", kCheckpointSchemaVersion);
  h5::set_attr(file, "/", "flavor", cfg.name);
  h5::set_attr(file, "/", "seed", static_cast<int64_t>(seed));
  h5::set_attr(file, "/", "git_sha", git_sha);
  h5::set_attr(file, "/", "param_count", static_cast<int64_t>(params.size()));
  h5::set_attr(file, "/", "buffer_count", static_cast<int64_t>(persistent.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    auto t = params[i].to(at::kCPU, at::kFloat).contiguous();
    h5::write(file, "/params/" + params.names()[i], h5::DType::F32, t.sizes().vec(),
              t.data_ptr());
  }
  for (const auto& b : persistent) {
    auto t = buffers.contains(b.fqn) ? buffers.at(b.fqn).to(at::kCPU, at::kFloat).contiguous()
                                     : at::zeros(b.shape, at::kFloat);
    h5::write(file, "/buffers/" + b.fqn, h5::DType::F32, t.sizes().vec(), t.data_ptr());
  }
  file.commit();
}

namespace {
std::atomic<int64_t> g_reads{0};
}  // namespace

int64_t checkpoint_reads() { return g_reads.load(); }

Checkpoint read_checkpoint(const std::string& path, const kernels::ModelConfig& cfg) {
  ++g_reads;
  if (const char* t = std::getenv("PARITY_TRACE"); t && std::string(t) == "checkpoint-reads")
    std::cerr << "parity: trace: checkpoint read '" << path << "' (pid " << ::getpid() << ")\n";
  try {
    auto file = h5::File::open_read(path);
    const std::string fix = remedy(cfg.name);
    if (!h5::has_attr(file, "/", "schema") ||
        h5::attr_string(file, "/", "schema") != "parity-checkpoint")
      throw CheckpointError("'" + path + "' is not a parity checkpoint; " + fix);
    const auto version = h5::attr_int(file, "/", "schema_version");
    if (version != 1 && version != kCheckpointSchemaVersion)
      throw CheckpointError("'" + path + "' has checkpoint schema version " +
                            std::to_string(version) + ", this build reads version " +
                            std::to_string(kCheckpointSchemaVersion) + "; " + fix);
    Checkpoint ck;
    ck.flavor = h5::attr_string(file, "/", "flavor");
    ck.seed = static_cast<uint64_t>(h5::attr_int(file, "/", "seed"));
    if (ck.flavor != cfg.name)
      throw CheckpointError("'" + path + "' holds flavor '" + ck.flavor + "' but the run uses '" +
                            cfg.name + "'; pass --flavor " + ck.flavor + " or " + fix);
    const auto specs = kernels::param_specs(cfg);
    const auto stored = h5::list(file, "/params");
    if (stored.size() != specs.size())
      throw CheckpointError("'" + path + "' holds " + std::to_string(stored.size()) +
                            " parameters, flavor " + cfg.name + " has " +
                            std::to_string(specs.size()) + "; " + fix);
    std::vector<std::string> names;
    std::vector<at::Tensor> tensors;
    for (const auto& s : specs) {
      names.push_back(s.fqn);
      tensors.push_back(read_finite(file, path, "params", s.fqn, s.shape, fix));
    }
    ck.params = kernels::NamedTensors(std::move(names), std::move(tensors));
    if (version == 1) return ck;  // before buffers were kept: they start at zero
    const auto persistent = persistent_buffers(cfg);
    const auto stored_buffers = h5::exists(file, "/buffers") ? h5::list(file, "/buffers")
                                                             : std::vector<std::string>{};
    if (stored_buffers.size() != persistent.size())
      throw CheckpointError("'" + path + "' holds " + std::to_string(stored_buffers.size()) +
                            " buffers, flavor " + cfg.name + " has " +
                            std::to_string(persistent.size()) + " persistent ones; " + fix);
    names.clear();
    tensors.clear();
    for (const auto& b : persistent) {
      names.push_back(b.fqn);
      tensors.push_back(read_finite(file, path, "buffers", b.fqn, b.shape, fix));
    }
    ck.buffers = kernels::NamedTensors(std::move(names), std::move(tensors));
    return ck;
  } catch (const h5::Error& e) {
    throw CheckpointError(std::string("cannot read checkpoint: ") + e.what() + "; " +
                          remedy(cfg.name));
  }
}

}  // namespace parity::dumps
