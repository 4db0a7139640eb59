// The one validation pass of a run: nothing is opened for writing, no process is forked and no
// socket is bound before it passes. Every check throws the error the CLI turns into exit 2 and
// one line naming the option, the value and the remedy (UsageError, or the library's own
// ConfigError, DataError or CheckpointError).
//
// What the CLI's option checks cannot see is checked here: combinations of options, the
// configs they make (flavor, dtype, device, split, schedule), injected faults against the
// routing tables, the multi-process environment, the inputs (checkpoint, token file or corpus)
// and the outputs (a writable place, no other run's files in a dump directory).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "datasets/rows.h"
#include "harness/run_options.h"
#include "kernels/params.h"
#include "kernels/train_step.h"
#include "kernels/config.h"
#include "pipelined/trainer.h"
#include "reference/grad_faults.h"

namespace parity::harness {

// A run that passed validation, with everything it was checked against: the trainers, each
// rank of a multi-process run (a fork of this process) and the matrix cells consume it and
// build or read nothing again. The checkpoint (--init) is read once per process, here.
struct PreparedRun {
  kernels::TrainConfig cfg;
  pipelined::PipelineConfig pc;  // the pipelined trainer's (the reference ignores it)
  std::shared_ptr<const datasets::TokenRows> rows;  // checked to hold one step
  kernels::NamedTensors init;    // the initial parameters: the checkpoint's, or a fresh draw
  reference::GradFaults grad_faults;  // the reference's --inject faults (checked)
};

// Everything a run of `o` (o.trainer) needs before it starts, checked and built once.
PreparedRun validate_run(const RunOptions& o);

// The world-size rule of a multi-process run: `world` processes must be dp x pp. `given` names
// where the count came from ("--nproc" or "WORLD_SIZE").
void check_world(const RunOptions& o, const std::string& given, int world);

// Injected faults against the routing tables of the run's split: the stage and block exist,
// the micro-batch is one of the step's, and the stage has what the fault breaks (a deposit of
// that block for drop-deposit, duplicate-deposit and misroute, a neighbour deposit too for
// misroute, a collection of it for skip-collect, a read of it from the store for stale-block).
void check_faults(const kernels::ModelConfig& m, const pipelined::PipelineConfig& pc,
                  int microbatches);

// A file the run will write (`flag` names it in the message): not a directory, in a directory
// that exists and is writable.
void check_output_file(const std::string& flag, const std::string& path);

// A directory the run will write files into: a writable directory, or absent with a writable
// directory as its nearest existing ancestor (it is created).
void check_output_dir(const std::string& flag, const std::string& path);

// A --dump directory: check_output_dir, and free of the rank<R>.h5 files of another run unless
// `overwrite` (only rank<only_rank>.h5 when only_rank >= 0: a rank started on its own, whose
// siblings write the others). Returns the files the run replaces (empty unless overwrite), for
// the caller to remove once every check has passed.
std::vector<std::string> check_dump_dir(const std::string& path, bool overwrite,
                                        int only_rank = -1);

}  // namespace parity::harness
