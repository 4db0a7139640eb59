// JUnit XML, the report format CI systems read (Jenkins, GitLab, GitHub Actions' test
// reporters): one <testsuite> per check family, one <testcase> per gate, cell or tensor group,
// a <failure> with its reason where one failed, <skipped> where one did not run. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace parity::dumps {

struct JunitCase {
  std::string classname;  // e.g. "parity.gate"
  std::string name;       // the gate, cell or tensor group
  double seconds = 0;
  enum Outcome { Passed, Failed, Skipped } outcome = Passed;
  std::string message;  // one line: why it failed or was skipped
  std::string detail;   // more lines, the body of <failure>
};

struct JunitSuite {
  std::string name;
  std::vector<JunitCase> cases;
};

// The document: <testsuites> with each suite's counts. Text is escaped for XML, and characters
// XML 1.0 cannot hold (control characters, a stray byte that is not UTF-8) become '?'.
std::string render_junit(const std::vector<JunitSuite>& suites);

// Writes it atomically to `path` (dumps/temp_files.h); throws std::runtime_error naming the
// path when it cannot.
void write_junit(const std::string& path, const std::vector<JunitSuite>& suites);

}  // namespace parity::dumps
