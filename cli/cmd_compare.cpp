// parity compare A B: every tensor of two runs, side by side (harness/compare_command.h). A run
// is a parity dump, a torch.save or safetensors file, an HDF5 file, or a directory of them.
//
// Exit codes: 0 every tensor agrees under --tol (bitwise by default), 1 a difference (or a
// vacuous agreement: all-zero gradients, a flat loss, both runs dead; or, with --layout, a
// differing gradient outside the predicted set), 2 bad input.
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "compare/float_formats.h"
#include "compare/tensor_compare.h"
#include "harness/compare_command.h"
#include "harness/validate.h"
#include "spec/limits.h"

namespace parity::cli {

Command add_compare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("compare", "compare two runs tensor by tensor");
  auto o = std::make_shared<harness::CompareOptions>();
  const char* run = "a parity dump, a torch.save / safetensors / HDF5 file, or a directory of them";
  cmd->add_option("a", o->a, run)->required()->check(non_empty_path());
  cmd->add_option("b", o->b, run)->required()->check(non_empty_path());
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_option("--tol", o->tol,
                  "when tensors agree (K ulps in the ulp dtype; torch: "
                  "torch.testing.assert_close's default rtol/atol for the ulp dtype): " +
                      compare::tolerance_kinds().names())
      ->capture_default_str();
  cmd->add_option("--max-ulp", o->max_ulp, "the same as --tol ulp:K")->check(unsigned_integer());
  add_choice(*cmd, o->ulp_dtype, compare::ulp_dtypes(),
             "count ulps in this dtype (default: the compute dtype where the dump knows it, "
             "else each tensor's own)");
  cmd->add_option("--map", o->map, "a name map: lines 'FROM TO' (a trailing * maps a prefix)")
      ->check(non_empty_path());
  cmd->add_option("--layout", o->layout,
                  "layers=L,block=B,pp=P,vp=V[,split=SPEC]: judge every differing gradient "
                  "against the predicted set of the cached transport");
  cmd->add_option("--step", o->step, "the dumped step a single-step file stands for")
      ->check(integer_in(1, spec::kMaxSteps));
  cmd->add_flag("--allow-nonfinite", o->allow_nonfinite,
                "let NaN and Inf that match bit for bit agree (by default a non-finite value "
                "fails, even against itself)");
  cmd->add_flag("--all", o->all_rows, "list the bitwise-equal tensors too");
  cmd->add_option("--truth", o->truth, "an fp64 run of the same cell: report each run's error "
                                       "against it in its own ulps")
      ->check(non_empty_path());
  cmd->add_option("--threads", o->threads, "comparison threads")->capture_default_str()
      ->check(threads());
  cmd->add_option("--junit", o->junit, "write JUnit XML: one testcase per step and tensor "
                                       "group, and one per guard")
      ->check(non_empty_path());
  cmd->add_option("--markdown", o->markdown, "write a Markdown summary (for a PR comment)")
      ->check(non_empty_path());
  return {cmd, [o] {
            if (!o->junit.empty()) harness::check_output_file("--junit", o->junit);
            if (!o->markdown.empty()) harness::check_output_file("--markdown", o->markdown);
            return harness::compare_command(*o);
          }};
}

}  // namespace parity::cli
