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

}  // namespace parity::kernels
