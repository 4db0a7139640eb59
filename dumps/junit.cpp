#include "dumps/junit.h"

#include <cstdio>

#include "dumps/temp_files.h"

namespace parity::dumps {

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8_length(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return 0;
  return n;
}

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r')) {
      out += '?';
      ++i;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out.append(s, i, n);
    }
    i += n;
  }
  return out;
}

std::string seconds_attr(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s < 0 ? 0.0 : s);
  return buf;
}

}  // namespace

std::string render_junit(const std::vector<JunitSuite>& suites) {
  int tests = 0, failures = 0, skipped = 0;
  double total = 0;
  for (const auto& s : suites)
    for (const auto& c : s.cases) {
      ++tests;
      failures += c.outcome == JunitCase::Failed;
      skipped += c.outcome == JunitCase::Skipped;
      total += c.seconds;
    }
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<testsuites name=\"parity\" tests=\"" + std::to_string(tests) + "\" failures=\"" +
       std::to_string(failures) + "\" errors=\"0\" skipped=\"" + std::to_string(skipped) +
       "\" time=\"" + seconds_attr(total) + "\">\n";
  for (const auto& s : suites) {
    int f = 0, k = 0;
    double t = 0;
    for (const auto& c : s.cases) {
      f += c.outcome == JunitCase::Failed;
      k += c.outcome == JunitCase::Skipped;
      t += c.seconds;
    }
    x += "  <testsuite name=\"" + escape(s.name) + "\" tests=\"" + std::to_string(s.cases.size()) +
         "\" failures=\"" + std::to_string(f) + "\" errors=\"0\" skipped=\"" + std::to_string(k) +
         "\" time=\"" + seconds_attr(t) + "\">\n";
    for (const auto& c : s.cases) {
      x += "    <testcase classname=\"" + escape(c.classname) + "\" name=\"" + escape(c.name) +
           "\" time=\"" + seconds_attr(c.seconds) + "\"";
      if (c.outcome == JunitCase::Passed) {
        x += "/>\n";
        continue;
      }
      x += ">\n";
      if (c.outcome == JunitCase::Failed)
        x += "      <failure message=\"" + escape(c.message) + "\">" + escape(c.detail) +
             "</failure>\n";
      else
        x += "      <skipped message=\"" + escape(c.message) + "\"/>\n";
      x += "    </testcase>\n";
    }
    x += "  </testsuite>\n";
  }
  x += "</testsuites>\n";
  return x;
}

void write_junit(const std::string& path, const std::vector<JunitSuite>& suites) {
  write_file_atomically(path, render_junit(suites));
}

}  // namespace parity::dumps
