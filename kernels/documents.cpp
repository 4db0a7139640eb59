#include "kernels/documents.h"

#include <ATen/ATen.h>

namespace parity::kernels {

bool Documents::whole_rows() const {
  for (const auto& s : starts)
    if (s.size() > 1) return false;
  return true;
}

Documents documents_of(const int64_t* tokens, int64_t rows, int64_t seq_len,
                       const DocumentRule& rule) {
  Documents d;
  d.starts.resize(static_cast<size_t>(rows));
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t* row = tokens + b * seq_len;
    auto& s = d.starts[static_cast<size_t>(b)];
    s.push_back(0);
    if (!rule.on) continue;
    for (int64_t t = 1; t < seq_len; ++t)
      if ((rule.bos >= 0 && row[t] == rule.bos) || (rule.eos >= 0 && row[t - 1] == rule.eos))
        s.push_back(t);
  }
  return d;
}

Documents documents_at_positions(const int64_t* positions, int64_t rows, int64_t seq_len) {
  Documents d;
  d.starts.resize(static_cast<size_t>(rows));
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t* row = positions + b * seq_len;
    auto& s = d.starts[static_cast<size_t>(b)];
    s.push_back(0);
    for (int64_t t = 1; t < seq_len; ++t)
      if (row[t] == 0) s.push_back(t);
  }
  return d;
}

Documents documents_of(const at::Tensor& tokens_BT, const DocumentRule& rule) {
  const auto host = tokens_BT.to(at::kCPU, at::kLong).contiguous();
  return documents_of(host.data_ptr<int64_t>(), host.size(0), host.size(1), rule);
}

}  // namespace parity::kernels
