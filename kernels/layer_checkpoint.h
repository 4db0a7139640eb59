// Activation checkpointing, one region per transformer layer (`--ac layer`; docs/design.md
// section 4.8): torchtitan's selective AC default, which wraps each transformer block.
//
// The layer's forward runs without building a graph and keeps only its inputs (the running sum
// and the stack it read, which the layer before keeps anyway, and handles of its weights). The
// outputs' backward runs the same forward again from those inputs, with the graph, and
// back-propagates the outputs' gradients through it; what it returns for the inputs and the
// weights is what the graph of an uncheckpointed layer would have delivered, value for value:
// the same ops in the same order on the same bits, and every sum over a tensor's consumers
// formed in the order the engine forms it without checkpointing (tests/test_memory.cpp holds
// both trainers to it bitwise).
//
// A recomputed forward is a training forward (the MoE selects as in training) that records
// nothing: the expert-bias balancer counts the tokens of the first forward only
// (recomputing()).
//
// Besides its inputs a checkpointed layer keeps one tensor of its own: the running sum after
// its mixer (mixer_sum()), so that the rerun need not compute the value of the mixer's output
// projection (the products that feed only sums skip their values in the rerun: kernels/ops.h's
// ProductValue).
#pragma once

#include <functional>
#include <string>

#include "kernels/model.h"

namespace parity::kernels {

using LayerBody = std::function<LayerState(const NamedTensors& weights, const LayerState& in)>;

// body(w, in) under the checkpoint. The weights the layer reads are w's tensors whose FQN
// starts with `prefix` ("layers.3.").
LayerState checkpointed_layer(LayerBody body, const NamedTensors& w, const std::string& prefix,
                              const LayerState& in, int layer);

// True on the thread that is recomputing a checkpointed layer's forward.
bool recomputing();

// The running sum after the mixer, `sum` (the sum the layer entered plus the mixer's output, or
// the mixer's output where the layer opens a block), passed through a layer's body once. In a
// checkpointed layer's first forward the checkpoint keeps it; in the rerun, where the mixer's
// output projection left its value unread (zero), the kept bits are written into `sum`'s
// storage: its graph is the rerun's own (an add's or the projection's, whose backwards read no
// values), its value the first forward's. Elsewhere it returns `sum` as it is.
at::Tensor mixer_sum(const at::Tensor& sum);

}  // namespace parity::kernels
