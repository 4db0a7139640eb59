// The `parity` subcommands. Each registers its options on a CLI11 app and returns the exit
// code. Wiring only: options, then configs, then one call into a library.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <type_traits>

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
Command add_truth_command(CLI::App& app);
Command add_memory_command(CLI::App& app);

// Registers the options every training run shares (`train`, `bench`) on `cmd`.
void add_run_options(CLI::App& cmd, harness::RunOptions& o);

// An option whose value is one of a specification table's names (spec/options.h): its flag,
// the accepted names in --help and the refusal of any other value all come from the table.
// `field` is the value (--help shows it as the default) or an optional one that may stay
// unset (its default depends on other options).
template <class Field, class E>
CLI::Option* add_choice(CLI::App& cmd, Field& field, const spec::Choices<E>& table,
                        const std::string& help) {
  static_assert(std::is_same_v<Field, E> || std::is_same_v<Field, std::optional<E>>,
                "add_choice sets a value of the table's type, or an optional one");
  auto* opt = cmd.add_option_function<std::string>(
      table.option(), [&field, &table](const std::string& v) { field = table.parse(v); },
      help + ": " + table.names());
  if constexpr (std::is_same_v<Field, E>) opt->default_str(table.name(field));
  return opt;
}

}  // namespace parity::cli
