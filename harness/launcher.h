// Multi-process pipelined runs: the local launcher (--nproc N: N forked workers on 127.0.0.1
// and a free port) and the torchrun-style rendezvous (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK), each rank over torch c10d (pipelined/comm.h).
#pragma once

#include "harness/run.h"
#include "harness/run_options.h"
#include "kernels/observer.h"
#include "pipelined/comm.h"

namespace parity::harness {

// Whether the environment names this process one rank of a run started elsewhere: RANK and
// WORLD_SIZE set, and a --backend given.
bool rank_from_environment(const RunOptions& o);

// This rank's rendezvous from the environment (MASTER_ADDR defaults to 127.0.0.1,
// MASTER_PORT to 29500, LOCAL_RANK to 0). Throws UsageError for a variable that is not an
// integer.
pipelined::CommOptions comm_from_environment(const RunOptions& o);

// One rank of a multi-process pipelined run; rank 0 reports to the observer. Throws
// UsageError when the world is not dp x pp.
void run_rank(const RunOptions& o, const pipelined::CommOptions& co, kernels::StepObserver& obs,
              const RunReport& report);

// --nproc N: N workers on 127.0.0.1; the run succeeds or fails together. After the first
// failure the others have --timeout-s to notice (each exits with its own one-line error) and
// a grace period more; then they are killed. Throws when any worker failed, naming it.
void launch_local(const RunOptions& o, kernels::StepObserver& obs, const RunReport& report);

}  // namespace parity::harness
