#include "dumps/state_dict.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "dumps/checkpoint.h"
#include "dumps/external.h"
#include "dumps/h5.h"

namespace parity::dumps {

namespace {

// "a, b, c and 4 more".
std::string first_few(const std::vector<std::string>& v, size_t n = 4) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < n; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > n) out += " and " + std::to_string(v.size() - n) + " more";
  return out;
}

at::ScalarType scalar_type(h5::DType t) {
  switch (t) {
    case h5::DType::BF16: return at::kBFloat16;
    case h5::DType::F16: return at::kHalf;
    case h5::DType::F32: return at::kFloat;
    case h5::DType::F64: return at::kDouble;
    default: return at::kByte;  // not a float: refused before use
  }
}

}  // namespace

StateDictImport params_from_state_dict(const std::string& path, const kernels::ModelConfig& cfg) {
  std::vector<NamedArray> tensors;
  try {
    tensors = read_tensor_file(path);
  } catch (const DumpError& e) {
    throw CheckpointError(std::string("--from: ") + e.what());
  }
  StateDictImport out;
  // A whole training state (older torchtitan checkpoints: model.*, optimizer.*, ...): its
  // model's entries under their own names, the rest set aside.
  std::set<std::string> in_file;
  bool prefixed = false;
  for (const auto& t : tensors) {
    in_file.insert(t.name);
    prefixed |= t.name.rfind(kModelPrefix, 0) == 0;
  }
  const auto specs = kernels::param_specs(cfg);
  const bool nested = prefixed && std::none_of(specs.begin(), specs.end(), [&](const auto& p) {
                        return in_file.count(p.fqn) > 0;
                      });
  if (nested) {
    std::vector<NamedArray> model;
    for (auto& t : tensors) {
      if (t.name.rfind(kModelPrefix, 0) == 0)
        model.push_back({t.name.substr(std::strlen(kModelPrefix)), std::move(t.array)});
      else
        out.outside_model.push_back(t.name);
    }
    tensors = std::move(model);
  }
  std::map<std::string, const h5::Array*> by_name;
  for (const auto& t : tensors) by_name[t.name] = &t.array;

  std::set<std::string> buffer_names;
  for (const auto& b : kernels::buffer_specs(cfg)) buffer_names.insert(b.fqn);

  std::vector<std::string> missing, misshaped, extra, not_float, not_finite;
  std::set<std::string> wanted;
  // One tensor of the file as fp32, or an undefined tensor with the reason recorded.
  auto take = [&](const std::string& fqn, const std::vector<int64_t>& shape) -> at::Tensor {
    const h5::Array& a = *by_name.at(fqn);
    if (a.shape != shape) {
      misshaped.push_back(fqn + " " + h5::shape_text(a.shape) + " (want " +
                          h5::shape_text(shape) + ")");
      return {};
    }
    if (a.dtype != h5::DType::BF16 && a.dtype != h5::DType::F16 && a.dtype != h5::DType::F32 &&
        a.dtype != h5::DType::F64) {
      not_float.push_back(fqn + " (" + h5::dtype_name(a.dtype) + ")");
      return {};
    }
    if (a.dtype == h5::DType::F64) out.rounded.push_back(fqn);
    auto raw = at::from_blob(const_cast<unsigned char*>(a.bytes.data()), shape,
                             at::TensorOptions().dtype(scalar_type(a.dtype)));
    return raw.to(at::kFloat).clone();
  };
  std::vector<std::string> names;
  std::vector<at::Tensor> values;
  for (const auto& spec : specs) {
    wanted.insert(spec.fqn);
    if (!by_name.count(spec.fqn)) {
      missing.push_back(spec.fqn);
      continue;
    }
    auto t = take(spec.fqn, spec.shape);
    if (!t.defined()) continue;
    names.push_back(spec.fqn);
    values.push_back(t);
  }
  // The persistent buffers are state: the expert bias routes the next forward.
  std::vector<std::string> buffer_fqns;
  std::vector<at::Tensor> buffer_values;
  for (const auto& b : persistent_buffers(cfg)) {
    if (!by_name.count(b.fqn)) {
      out.absent_buffers.push_back(b.fqn);
      continue;
    }
    wanted.insert(b.fqn);
    auto t = take(b.fqn, b.shape);
    if (!t.defined()) continue;
    if (!at::isfinite(t).all().item<bool>()) {
      not_finite.push_back(b.fqn);
      continue;
    }
    buffer_fqns.push_back(b.fqn);
    buffer_values.push_back(t);
  }
  for (const auto& t : tensors) {
    if (wanted.count(t.name)) continue;
    if (buffer_names.count(t.name))
      out.skipped_buffers.push_back(t.name);
    else if (t.name.rfind("vision_encoder.", 0) == 0)
      out.vision.push_back(t.name);
    else
      extra.push_back(t.name);
  }
  if (!missing.empty() || !misshaped.empty() || !extra.empty() || !not_float.empty() ||
      !not_finite.empty()) {
    std::string why;
    auto add = [&](const std::vector<std::string>& v, const char* what) {
      if (v.empty()) return;
      why += (why.empty() ? "" : "; ") + std::to_string(v.size()) + " " + what + ": " + first_few(v);
    };
    add(missing, "missing");
    add(misshaped, "mis-shaped");
    add(not_float, "not floating-point");
    add(not_finite, "not finite");
    add(extra, "extra");
    throw CheckpointError("--from '" + path + "' is not a " + cfg.name + " state dict in "
                          "torchtitan's names (" + why + "); see `parity model --flavor " +
                          cfg.name + "` for the keys and shapes");
  }
  out.params = kernels::NamedTensors(std::move(names), std::move(values));
  out.buffers = kernels::NamedTensors(std::move(buffer_fqns), std::move(buffer_values));
  return out;
}

}  // namespace parity::dumps
