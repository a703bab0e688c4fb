// junit.h — JUnit XML as CI servers read it (Jenkins, GitLab, GitHub Actions reporters): one
// <testsuites> with <testsuite> elements of <testcase>s, a failed case carrying <failure message>
// with the detail as text. `gradrun regress --junit`, `train --junit`, `check --junit`.
#pragma once
#include <string>
#include <vector>

namespace gr {

struct JunitCase {
  std::string classname, name;
  double seconds = 0.0;
  bool failed = false, error = false, skipped = false;  // failed: a check said no; error: it could not run
  std::string message, detail;                          // message: one line; detail: the failure's text
};

struct JunitSuite {
  std::string name;
  std::vector<JunitCase> cases;
};

// The XML document (UTF-8, attribute and text escaped).
std::string render_junit(const std::vector<JunitSuite>& suites);

}  // namespace gr
