#include "datasets/rows.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "datasets/corpus.h"

namespace parity::datasets {

TokenRows::TokenRows(std::vector<int32_t> stream, int64_t seq_len, int64_t rows_needed)
    : stream_(std::move(stream)), seq_len_(seq_len) {
  check(rows_needed, nullptr);
}

TokenRows::TokenRows(std::vector<int32_t> stream, int64_t seq_len, const BatchShape& shape,
                     const std::string& source)
    : stream_(std::move(stream)), seq_len_(seq_len) {
  if (shape.dp < 1 || shape.microbatches < 1 || shape.rows_per_microbatch < 1) {
    throw DataError("batch shape dp " + std::to_string(shape.dp) + " x " +
                    std::to_string(shape.microbatches) + " micro-batches x " +
                    std::to_string(shape.rows_per_microbatch) +
                    " rows is invalid; every factor must be at least 1");
  }
  const std::string text = "dp " + std::to_string(shape.dp) + " x " +
                           std::to_string(shape.microbatches) + " micro-batches x " +
                           std::to_string(shape.rows_per_microbatch) + " rows";
  check(shape.rows_per_step(), text.c_str(), source);
}

void TokenRows::check(int64_t rows_needed, const char* shape_text, const std::string& source) {
  if (seq_len_ < 1) {
    throw DataError("--seq-len " + std::to_string(seq_len_) +
                    " is invalid; pass a positive sequence length");
  }
  const int64_t tokens = static_cast<int64_t>(stream_.size());
  const int64_t width = seq_len_ + 1;
  num_rows_ = tokens / width;
  if (num_rows_ < rows_needed) {
    std::string need = std::to_string(rows_needed) + " rows";
    if (shape_text) need += std::string(" (") + shape_text + ")";
    const std::string n = std::to_string(tokens) + " tokens";
    throw DataError("one step needs " + need + " of " + std::to_string(width) +
                    " tokens (--seq-len " + std::to_string(seq_len_) + " + 1), but " +
                    (source.empty() ? "the corpus's " + n : source + " holds " + n + ", which") +
                    " make only " + std::to_string(num_rows_) +
                    "; lower --batch, --microbatches, --dp or --seq-len, or " +
                    (source.empty() ? "pass a larger --data file" : "give more tokens"));
  }
}

const int32_t* TokenRows::row(int64_t i) const {
  if (i < 0 || i >= num_rows_) {
    throw std::out_of_range("row " + std::to_string(i) + " is outside [0, " +
                            std::to_string(num_rows_) + ")");
  }
  return stream_.data() + i * (seq_len_ + 1);
}

void TokenRows::set_positions(std::vector<int32_t> positions, const std::string& source) {
  if (positions.size() != stream_.size())
    throw DataError(source + " holds " + std::to_string(positions.size()) +
                    " positions for a stream of " + std::to_string(stream_.size()) +
                    " tokens; save one position per token, each row's T + 1 (append the "
                    "position after the last input's)");
  const int64_t width = seq_len_ + 1;
  for (int64_t i = 0; i < static_cast<int64_t>(positions.size()); ++i) {
    const int32_t p = positions[static_cast<size_t>(i)];
    if (i % width == 0 || p == 0) continue;
    const int32_t before = positions[static_cast<size_t>(i - 1)];
    if (p != static_cast<int64_t>(before) + 1)
      throw DataError(source + ": position " + std::to_string(p) + " at index " +
                      std::to_string(i) + " follows " + std::to_string(before) +
                      "; inside a document positions count up by one and a new document "
                      "starts at 0. Save the positions of these tokens, in the same order");
  }
  positions_ = std::move(positions);
}

const int32_t* TokenRows::positions(int64_t i) const {
  if (positions_.empty()) return nullptr;
  row(i);  // the range check
  return positions_.data() + i * (seq_len_ + 1);
}

std::vector<int64_t> microbatch_rows(const BatchShape& shape, int64_t num_rows, int64_t step,
                                     int dp_rank, int microbatch, bool reverse_microbatches) {
  const int64_t dp = shape.dp, M = shape.microbatches, B = shape.rows_per_microbatch;
  if (dp < 1 || M < 1 || B < 1) {
    throw std::invalid_argument("microbatch_rows: every BatchShape field must be >= 1");
  }
  if (num_rows < 1) throw std::invalid_argument("microbatch_rows: num_rows must be >= 1");
  if (step < 1) throw std::invalid_argument("microbatch_rows: step is 1-based, got " +
                                            std::to_string(step));
  if (dp_rank < 0 || dp_rank >= dp) {
    throw std::invalid_argument("microbatch_rows: dp_rank " + std::to_string(dp_rank) +
                                " outside [0, " + std::to_string(dp) + ")");
  }
  if (microbatch < 0 || microbatch >= M) {
    throw std::invalid_argument("microbatch_rows: microbatch " + std::to_string(microbatch) +
                                " outside [0, " + std::to_string(M) + ")");
  }
  const int64_t m = reverse_microbatches ? M - 1 - microbatch : microbatch;
  // Reduce modulo num_rows as we go so long runs cannot overflow.
  const int64_t per_rank = (M * B) % num_rows;
  const int64_t slot = (((step - 1) % num_rows) * dp + dp_rank) % num_rows;
  const int64_t base = ((slot * per_rank) % num_rows + (m * B) % num_rows) % num_rows;
  std::vector<int64_t> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) rows[static_cast<size_t>(b)] = (base + b) % num_rows;
  return rows;
}

void fill_microbatch(const TokenRows& token_rows, const std::vector<int64_t>& rows,
                     std::vector<int64_t>& inputs, std::vector<int64_t>& labels,
                     std::vector<int64_t>* positions) {
  const int64_t T = token_rows.seq_len();
  inputs.resize(rows.size() * static_cast<size_t>(T));
  labels.resize(rows.size() * static_cast<size_t>(T));
  if (positions) {
    positions->clear();
    if (token_rows.has_positions())
      for (const int64_t r : rows) {
        const int32_t* p = token_rows.positions(r);
        positions->insert(positions->end(), p, p + T);
      }
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const int32_t* src = token_rows.row(rows[r]);
    int64_t* in = inputs.data() + r * static_cast<size_t>(T);
    int64_t* lab = labels.data() + r * static_cast<size_t>(T);
    for (int64_t t = 0; t < T; ++t) {
      in[t] = src[t];
      lab[t] = src[t + 1];
    }
  }
}

}  // namespace parity::datasets
