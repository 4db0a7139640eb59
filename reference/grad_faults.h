// Gradient defects made on purpose (--inject on the reference trainer, docs/design.md section
// 6.6): the accumulation bugs that `parity truth` must name from a run's files alone.
//
//   drop-microbatch:mb=M    the step's micro-batch M (its rows, whatever the execution order;
//                           over dp replicas, replica r's m is r*M+m) is forwarded and its loss
//                           logged, but its backward is skipped: accumulation that keeps only
//                           some micro-batches
//   scale-grads:factor=F    every accumulated gradient multiplied by F before the norm: a loss
//                           normalised after the backward instead of before
//   zero-grad:param=FQN     that parameter's gradient zeroed before the norm: a frozen parameter
//   swap-grads:a=FQN,b=FQN  two same-shaped gradients exchanged before the norm
//
// Torch-free; the trainer applies them (reference/trainer.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace parity::reference {

struct GradFaults {
  std::vector<int> drop_microbatches;
  double scale = 1;
  std::vector<std::string> zero;
  std::vector<std::pair<std::string, std::string>> swap;

  bool empty() const {
    return drop_microbatches.empty() && scale == 1 && zero.empty() && swap.empty();
  }
  bool drops(int microbatch) const;
};

// Whether an --inject spec names one of the kinds above (the others are the pipelined
// transport's, pipelined/faults.h).
bool is_grad_fault(const std::string& spec);

// Adds one spec to `f`. Throws std::invalid_argument naming the spec, the part it cannot read
// and how to write it. Whether an FQN or micro-batch exists is the caller's check.
void parse_grad_fault(const std::string& spec, GradFaults& f);

}  // namespace parity::reference
