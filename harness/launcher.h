// Multi-process pipelined runs: the local launcher (--nproc N: N forked workers on 127.0.0.1
// and a free port) and the torchrun-style rendezvous (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK), each rank over torch c10d (pipelined/comm.h).
#pragma once

#include <memory>

#include "datasets/rows.h"
#include "harness/run.h"
#include "harness/run_options.h"
#include "harness/validate.h"
#include "kernels/observer.h"
#include "pipelined/comm.h"

namespace parity::harness {

// Whether this process is meant to be one rank of a run started elsewhere: a --backend given
// and RANK or WORLD_SIZE in the environment.
bool rank_from_environment(const RunOptions& o);

// This rank's rendezvous from the environment (MASTER_ADDR defaults to 127.0.0.1, MASTER_PORT
// to 29500, LOCAL_RANK to 0). Throws UsageError, naming the variable and the remedy, for one
// missing (RANK without WORLD_SIZE), not an integer, out of range (a port above 65535, a RANK
// outside the world) or a MASTER_ADDR that does not resolve.
pipelined::CommOptions comm_from_environment(const RunOptions& o);

// One rank of a multi-process pipelined run on what validate_run prepared (the launcher's, for
// a forked worker); rank 0 reports to the observer. The rendezvous ends within --timeout-s
// whatever the peer is (one line and exit 2 otherwise), and what the c10d and Gloo libraries
// log meanwhile is kept from the user unless --verbose. Throws UsageError when the rendezvous
// fails.
void run_rank(const RunOptions& o, const pipelined::CommOptions& co, const PreparedRun& run,
              kernels::StepObserver& obs, const RunReport& report);

// --nproc N: N workers on 127.0.0.1; the run succeeds or fails together. Each worker dies with
// the launcher (harness/process.h: a stop of the launcher stops them, and PR_SET_PDEATHSIG
// covers a SIGKILL). After the first failure the others have --timeout-s to notice (each exits
// with its own one-line error) and 10 s more; then they are told to stop, and killed 5 s
// later. Throws when any worker failed, naming it.
void launch_local(const RunOptions& o, const PreparedRun& run, kernels::StepObserver& obs,
                  const RunReport& report);

}  // namespace parity::harness
