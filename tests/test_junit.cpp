// JUnit XML (dumps/junit.h): counts per suite and in all, the outcomes, and escaping of what
// XML cannot hold as it is. Exact string checks against documents written out by hand.
#include <gtest/gtest.h>

#include <string>

#include "dumps/junit.h"

namespace parity::dumps {
namespace {

TEST(Junit, CountsOutcomesAndEscapesExact) {
  JunitSuite s{"parity.gate", {}};
  s.cases.push_back({"parity.gate", "dp1", 1.5, JunitCase::Passed, "", ""});
  s.cases.push_back({"parity.gate", "pp2vp2 <cached>", 0.25, JunitCase::Failed,
                     "gate \"bitwise\" failed: a & b", "line 1\nline 2"});
  s.cases.push_back({"parity.gate", "x", 0, JunitCase::Skipped, std::string("not\x01run"), ""});
  const std::string want =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<testsuites name=\"parity\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\" time=\"1.750\">\n"
      "  <testsuite name=\"parity.gate\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\" time=\"1.750\">\n"
      "    <testcase classname=\"parity.gate\" name=\"dp1\" time=\"1.500\"/>\n"
      "    <testcase classname=\"parity.gate\" name=\"pp2vp2 &lt;cached&gt;\" time=\"0.250\">\n"
      "      <failure message=\"gate &quot;bitwise&quot; failed: a &amp; b\">line 1\nline 2</failure>\n"
      "    </testcase>\n"
      "    <testcase classname=\"parity.gate\" name=\"x\" time=\"0.000\">\n"
      "      <skipped message=\"not?run\"/>\n"
      "    </testcase>\n"
      "  </testsuite>\n"
      "</testsuites>\n";
  EXPECT_EQ(render_junit({s}), want);
}

// UTF-8 passes through; a byte that starts no valid sequence becomes '?'.
TEST(Junit, KeepsUtf8AndReplacesStrayBytesExact) {
  JunitSuite s{"u", {{"c", "\xc3\xa9t\xe2\x86\x92", 0, JunitCase::Passed, "", ""},
                     {"c", "bad\xff\xc3", 0, JunitCase::Passed, "", ""}}};
  const std::string x = render_junit({s});
  EXPECT_NE(x.find("name=\"\xc3\xa9t\xe2\x86\x92\""), std::string::npos) << x;
  EXPECT_NE(x.find("name=\"bad??\""), std::string::npos) << x;
}

}  // namespace
}  // namespace parity::dumps
