// The `parity` subcommands. Each registers its options on a CLI11 app and returns the exit
// code. Wiring only: options, then configs, then one call into a library.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>

#include "harness/errors.h"
#include "harness/run_options.h"
#include "spec/options.h"

namespace parity::cli {

// Bad input from the user: one line on stderr, exit code 2.
using harness::UsageError;

// A registered subcommand and the action to run once the command line is parsed.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};
Command add_model_command(CLI::App& app);
Command add_init_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_layout_command(CLI::App& app);
Command add_schedule_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_closed_form_command(CLI::App& app);
Command add_localise_command(CLI::App& app);
Command add_matrix_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_gate_command(CLI::App& app);
Command add_drift_command(CLI::App& app);

// Registers the options every training run shares (`train`, `bench`) on `cmd`.
void add_run_options(CLI::App& cmd, harness::RunOptions& o);

// An option whose value is one of a specification table's names (spec/options.h): its flag,
// the accepted names in --help and the refusal of any other value all come from the table,
// and --help shows the field's value as the default.
template <class E>
CLI::Option* add_choice(CLI::App& cmd, E& field, const spec::Choices<E>& table,
                        const std::string& help) {
  return cmd
      .add_option_function<std::string>(
          table.option(), [&field, &table](const std::string& v) { field = table.parse(v); },
          help + ": " + table.names())
      ->default_str(table.name(field));
}

// The same for a field that may stay unset (its default depends on other options).
template <class E>
CLI::Option* add_choice(CLI::App& cmd, std::optional<E>& field, const spec::Choices<E>& table,
                        const std::string& help) {
  return cmd.add_option_function<std::string>(
      table.option(), [&field, &table](const std::string& v) { field = table.parse(v); },
      help + ": " + table.names());
}

}  // namespace parity::cli
