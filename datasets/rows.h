// Training rows cut from the packed token stream, and the deterministic assignment of
// rows to (step, data-parallel rank, micro-batch).
//
// Everything here uses plain std types; no torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parity::datasets {

// How one optimizer step consumes rows: `dp` data-parallel ranks, each running
// `microbatches` micro-batches of `rows_per_microbatch` rows.
struct BatchShape {
  int dp = 1;
  int microbatches = 4;
  int rows_per_microbatch = 1;

  int64_t rows_per_step() const {
    return static_cast<int64_t>(dp) * microbatches * rows_per_microbatch;
  }
};

// Consecutive non-overlapping windows of T+1 tokens over the packed stream: row i covers
// stream[i*(T+1) ... i*(T+1)+T]. A row's inputs are its first T tokens, its labels the
// last T (inputs shifted by one). A trailing partial window is dropped. Documents are
// packed across row boundaries (EOS separates them), as in standard LM pretraining.
class TokenRows {
 public:
  // Throws DataError if seq_len < 1, or if the stream makes fewer than `rows_needed`
  // rows; the message names --seq-len, the token count, the rows it makes and the rows
  // one step needs, and says to lower --seq-len, --microbatches or --batch, or to pass
  // a larger --data file.
  TokenRows(std::vector<int32_t> stream, int64_t seq_len, int64_t rows_needed = 1);
  // Same, with rows_needed = shape.rows_per_step(); the message spells out the shape
  // ("one step needs 4 (dp 1 x 4 micro-batches x 1 rows)"). `source` names where the stream
  // came from ("--tokens 'ids.npy'"); empty, the corpus (and the remedy is a larger --data).
  TokenRows(std::vector<int32_t> stream, int64_t seq_len, const BatchShape& shape,
            const std::string& source = {});

  int64_t seq_len() const { return seq_len_; }
  int64_t num_rows() const { return num_rows_; }
  int64_t num_tokens() const { return static_cast<int64_t>(stream_.size()); }
  // Pointer to the T+1 tokens of row i, 0 <= i < num_rows() (std::out_of_range otherwise).
  const int32_t* row(int64_t i) const;

  // Per-token positions beside the stream (`--positions`), as torchtitan's dataloader emits
  // them: 0 at each document's first token, counting up by one inside a document. Throws
  // DataError naming `source` when their count is not the stream's, or when inside a row's
  // window a position is neither 0 nor its predecessor's plus one (the file does not belong to
  // these tokens); a row's first position may be anything (a document continued from before).
  void set_positions(std::vector<int32_t> positions, const std::string& source);
  bool has_positions() const { return !positions_.empty(); }
  // The T+1 positions of row i; null without positions.
  const int32_t* positions(int64_t i) const;

 private:
  void check(int64_t rows_needed, const char* shape_text, const std::string& source = {});

  std::vector<int32_t> stream_;
  std::vector<int32_t> positions_;  // empty, or one per stream token
  int64_t seq_len_ = 0;
  int64_t num_rows_ = 0;
};

// Row indices of one micro-batch, in order. With M = shape.microbatches and
// B = shape.rows_per_microbatch, element b is the global row counter
//   ((step-1)*dp + dp_rank)*M*B + m'*B + b   modulo num_rows,
// where m' = reverse_microbatches ? M-1-m : m. Wrapping around starts the next epoch in
// the same order. Reversing feeds a step the same rows with the micro-batches in reverse
// order (--reverse-microbatches), so gradient accumulation order is the only change.
// step is 1-based. Throws std::invalid_argument on step < 1, dp_rank outside [0, dp),
// microbatch outside [0, M), a non-positive shape field or num_rows < 1.
std::vector<int64_t> microbatch_rows(const BatchShape& shape, int64_t num_rows, int64_t step,
                                     int dp_rank, int microbatch, bool reverse_microbatches);

// Fills inputs and labels (each resized to rows.size() * T, row-major [B, T]) with the
// rows' first T and last T tokens, and `positions` (when given) with the inputs' positions, or
// empties it when the rows have none. Throws std::out_of_range on a bad row index.
void fill_microbatch(const TokenRows& token_rows, const std::vector<int64_t>& rows,
                     std::vector<int64_t>& inputs, std::vector<int64_t>& labels,
                     std::vector<int64_t>* positions = nullptr);

}  // namespace parity::datasets
