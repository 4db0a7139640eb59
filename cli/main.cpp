// parity: numerics verification harness and reference trainer for pipeline-parallel training
// of Block Attention Residual decoders.
//
// Exit codes: 0 success, 1 a check failed or the run failed, 2 bad input (one line on stderr).
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/version.h"
#include "compare/checkpoint.h"
#include "compare/h5.h"
#include "datasets/corpus.h"
#include "kernels/config.h"
#include "pipelined/rank_store.h"
#include "pipelined/schedule.h"
#include "pipelined/split.h"

int main(int argc, char** argv) {
  using namespace parity;
  CLI::App app{"parity: is this difference only reduction order, or is it a bug?"};
  app.require_subcommand(1);
  app.set_version_flag("--version", cli::version_text());
  std::map<CLI::App*, std::function<int()>> actions;
  for (auto add : {cli::add_model_command, cli::add_init_command, cli::add_train_command,
                   cli::add_bench_command, cli::add_layout_command, cli::add_schedule_command}) {
    auto cmd = add(app);
    actions[cmd.app] = cmd.run;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "parity: " << e.what() << " (see parity --help)\n";
    return 2;
  }
  try {
    for (auto* sub : app.get_subcommands()) return actions.at(sub)();
  } catch (const cli::UsageError& e) {
    std::cerr << "parity: " << e.what() << "\n";
    return 2;
  } catch (const kernels::ConfigError& e) {
    std::cerr << "parity: " << e.what() << "\n";
    return 2;
  } catch (const datasets::DataError& e) {
    std::cerr << "parity: " << e.what() << "\n";
    return 2;
  } catch (const compare::CheckpointError& e) {
    std::cerr << "parity: " << e.what() << "\n";
    return 2;
  } catch (const pipelined::SplitError& e) {
    std::cerr << "parity: " << e.what() << "\n";
    return 2;
  } catch (const pipelined::ScheduleError& e) {
    std::cerr << "parity: " << e.what() << "\n";
    return 2;
  } catch (const pipelined::DeadlockError& e) {
    std::cerr << "parity: " << e.what() << "\n";
    return 1;
  } catch (const h5::Error& e) {
    std::cerr << "parity: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "parity: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
