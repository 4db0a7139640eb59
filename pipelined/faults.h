// Fault injection in the block-stack transport (docs/design.md section 6): routing bugs made on
// purpose, so that the comparison engine can be shown to catch them on its own.
//
//   drop-deposit       the reader at `stage` does not deposit block `block`'s gradient
//   duplicate-deposit  it deposits it twice
//   misroute           it deposits it under a neighbouring block it also deposits (a no-op
//                      when it deposits no neighbour)
//   skip-collect       the owner at `stage` drops block `block`'s deposits instead of adding them
//   stale-block        the reader at `stage` reads block `block` of another micro-batch from the
//                      store (cached transport only; a no-op when the store holds no other
//                      micro-batch's copy at that moment)
// Each applies to micro-batch `mb`, or to every micro-batch when mb is -1. Runs with faults
// skip the deposit count check (which would stop them) unless a test asks for it. The trainer
// counts how often each fault fired; one that never fired named a place with nothing to break
// (the CLI says so).
#pragma once

#include <string>
#include <vector>

namespace parity::pipelined {

enum class FaultKind { DropDeposit, DuplicateDeposit, Misroute, SkipCollect, StaleBlock };

struct Fault {
  FaultKind kind = FaultKind::DropDeposit;
  int block = 0;
  int stage = 0;
  int mb = -1;
  bool matches(FaultKind k, int at_stage, int at_block, int at_mb) const {
    return kind == k && stage == at_stage && block == at_block && (mb < 0 || mb == at_mb);
  }
  std::string str() const;
};

// "drop-deposit:block=0,stage=2" or "...,mb=1". Throws std::invalid_argument naming the
// part it cannot read and the kinds it knows.
Fault parse_fault(const std::string& spec);


}  // namespace parity::pipelined
