// The stage protocol (docs/design.md section 5): one implementation for both transports.
//
// Forward of stage s for micro-batch m:
//   * assemble the entry stack in block order: columns the rank's store holds (cached) are
//     read from the store, the rest arrive over the wire as the delta, in block order;
//   * the hidden state and the assembled stack become fresh autograd leaves;
//   * run the stage's units (embedding, layers, head); the head stage's loss is the
//     micro-batch's loss_sum / N_global, chunked as in the reference (kernels::HeadLoss);
//   * cached: put what it received or committed into the store;
//   * send (hidden, out-stack columns the next rank lacks), dense, in block order;
//   * release the micro-batch from the store after the rank's last stage forward.
// Backward:
//   * the incoming gradient of each out-stack column is the wire gradient (if sent), plus,
//     for blocks this stage stored, the deposits of the later stages on its rank that read them
//     (wire first, then deposits in deposit order); the deposit count is checked;
//   * one autograd backward from (hidden out, stack out), or the head stage's chunked loss
//     backward (each chunk, then one backward from the hidden state): parameter gradients
//     accumulate in .grad, the leaves receive the stage's input gradients;
//   * the leaf gradient's wire columns go back dense, in wire order; its store columns become
//     deposits in the store.
// [Note: bitwise contract] With the naive transport every column travels, the receiving
// stage's leaf accumulates its readers' contributions in autograd's order, and the sender adds
// its own readers' contributions to that sum, so each block gradient has the association it
// has in the single-device graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <vector>

#include "kernels/model.h"
#include "kernels/params.h"
#include "kernels/ledger.h"
#include "pipelined/faults.h"
#include "pipelined/rank_store.h"
#include "pipelined/routing.h"
#include "pipelined/transport.h"

namespace parity::pipelined {

// Everything one step's stages share. The referenced objects outlive the run.
struct StepContext {
  const kernels::Model* model = nullptr;
  const kernels::NamedTensors* weights = nullptr;  // compute copies, all parameters
  const kernels::NamedTensors* buffers = nullptr;
  const RoutingTables* tables = nullptr;
  bool cache = false;
  std::vector<RankStore>* stores = nullptr;  // one per rank
  Transport* transport = nullptr;
  std::vector<at::Tensor> tokens, labels;    // per micro-batch, [B, T] int64 on the device
  // Per micro-batch, where its documents start (null: each row one sequence); every stage
  // hands them to the mixers.
  std::vector<std::shared_ptr<const kernels::Documents>> docs;
  double n_global = 1;                       // label tokens of the whole step
  bool training = true;                      // false: forward-only (no graph, no backward)
  std::vector<Fault> faults;                 // injected routing bugs (see faults.h)
  std::vector<int64_t> fault_hits;           // per fault: how often it fired this step
  kernels::Ledger* ledger = nullptr;         // ledger mode: reads, hops, deposits, collections
  int ledger_mb_base = 0;                    // dp replica r records micro-batches r*M + m
  bool check_deposit_counts = true;          // off when faults are injected on purpose
};

class StageRunner {
 public:
  StageRunner(int stage, StepContext* ctx);

  bool forward_ready(int mb) const;
  bool backward_ready(int mb) const;
  void forward(int mb);
  void backward(int mb);

  int stage() const { return stage_; }
  int rank() const { return route().rank; }
  // The head stage's micro-batch loss (detached), once its forward ran.
  const at::Tensor& loss(int mb) const { return losses_.at(mb); }
  bool holds_state() const { return !saved_.empty(); }

 private:
  const StageRoute& route() const { return ctx_->tables->stages[stage_]; }
  bool last() const;
  const Blocks& send_blocks() const;
  const Blocks& recv_blocks() const;
  // What a message for micro-batch mb carrying `wire` columns holds: (hidden[, columns]).
  std::vector<TensorSpec> expected(int mb, const Blocks& wire) const;
  // Whether an injected fault of kind k applies here to (block, mb); counts it as fired.
  bool fires(FaultKind k, int block, int mb);

  struct Saved {
    at::Tensor h_leaf, stack_leaf;  // inputs (undefined on the embedding stage)
    at::Tensor out_x, out_stack;    // outputs
    kernels::HeadLoss loss;         // the head stage's l_m, chunked
  };

  int stage_;
  StepContext* ctx_;
  std::map<int, Saved> saved_;
  std::map<int, at::Tensor> losses_;
};

}  // namespace parity::pipelined
