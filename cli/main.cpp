// parity: numerics verification harness and reference trainer for pipeline-parallel training
// of Block Attention Residual decoders.
//
// Exit codes: 0 success, 1 a check failed or the run failed, 2 bad input (one line on stderr).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "cli/commands.h"
#include "matrix/runner.h"
#include "harness/process.h"
#include "harness/version.h"
#include "kernels/host_allocator.h"
#include "kernels/vector_kernels.h"
#include "spec/printable.h"
#include "spec/bad_input.h"

namespace {

// Errors that mean the input was bad (exit 2): every library throws spec::BadInput (or a kind
// of it) for those; anything else is a failed run (exit 1).
bool is_bad_input(const std::exception& e) {
  return dynamic_cast<const parity::spec::BadInput*>(&e) != nullptr;
}

// Training allocates and frees the same large tensors every micro-batch. glibc's defaults
// return each one to the kernel and fault it back in page by page (a quarter of a debugmodel
// step). Where glibc serves malloc (a build without jemalloc, cli/CMakeLists.txt), the commands
// that train run again once with it told to keep freed memory (trim and mmap thresholds) and
// to back its heap with transparent huge pages; this changes no result. Those commands also
// get OpenBLAS's AVX-512 GEMM kernels where OpenBLAS would run AVX2 ones on an AVX-512 CPU,
// which OpenBLAS only reads when it loads; every command gets ATen's AVX-512 kernels there
// (kernels/vector_kernels.h). What the user set is left alone. After a failed exec the process
// goes on as it started, and its children too.
void tune_process(int argc, char** argv) {
  const std::string command = argc >= 2 ? argv[1] : "";
  const bool trains = command == "train" || command == "bench" || command == "gate" ||
                      command == "closed-form" || command == "truth" || command == "memory";
  const bool blas = parity::kernels::apply_vector_kernels(trains);
  const bool allocator = trains && !parity::kernels::malloc_is_jemalloc() &&
                         std::getenv("GLIBC_TUNABLES") == nullptr;
  if (allocator)
    setenv("GLIBC_TUNABLES",
           "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:"
           "glibc.malloc.trim_threshold=1073741824",
           /*overwrite=*/0);
  if (!blas && !allocator) return;
  execv("/proc/self/exe", argv);
  if (allocator) unsetenv("GLIBC_TUNABLES");
  if (blas) parity::kernels::forget_openblas_choice();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace parity;
  tune_process(argc, argv);
  // A peer that closed its socket is an error the transport reports, not a silent death.
  std::signal(SIGPIPE, SIG_IGN);
  // A stop removes the temporary files and the workers (harness/process.h).
  harness::install_stop_handlers();
  CLI::App app{"parity: is this difference only reduction order, or is it a bug?"};
  app.require_subcommand(1);
  app.set_version_flag("--version", harness::version_text());
  std::map<CLI::App*, std::function<int()>> actions;
  std::string names;  // in the order --help lists them
  for (auto add : {cli::add_model_command, cli::add_init_command, cli::add_train_command,
                   cli::add_bench_command, cli::add_layout_command, cli::add_schedule_command,
                   cli::add_compare_command, cli::add_closed_form_command,
                   cli::add_localise_command, cli::add_matrix_command, cli::add_report_command,
                   cli::add_gate_command, cli::add_drift_command, cli::add_truth_command,
                   cli::add_memory_command}) {
    auto cmd = add(app);
    actions[cmd.app] = cmd.run;
    names += (names.empty() ? "" : ", ") + cmd.app->get_name();
  }
  if (argc > 1 && argv[1][0] != '-' && app.get_subcommands([&](CLI::App* sub) {
        return sub->get_name() == argv[1];
      }).empty()) {
    std::cerr << "parity: unknown command '" << argv[1] << "'; the commands are " << names
              << " (see parity --help)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "parity: " << parity::spec::first_line(e.what()) << " (see parity --help)\n";
    return 2;
  } catch (const parity::spec::BadInput& e) {  // an option's value, refused by its table
    std::cerr << "parity: " << parity::spec::printable(parity::spec::first_line(e.what()), 4000) << "\n";
    return parity::spec::kBadInputExit;
  }
  try {
    for (auto* sub : app.get_subcommands()) return actions.at(sub)();
  } catch (const matrix::Interrupted& e) {
    std::cerr << "parity: " << parity::spec::first_line(e.what()) << "\n";
    return 128 + e.signal();
  } catch (const std::exception& e) {
    const bool bad_input = is_bad_input(e);
    std::cerr << "parity: " << (bad_input ? "" : "error: ") << parity::spec::first_line(e.what()) << "\n";
    return bad_input ? parity::spec::kBadInputExit : 1;
  }
  return 0;
}
