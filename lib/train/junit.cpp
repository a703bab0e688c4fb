// junit.cpp — see junit.h.
#include "train/junit.h"

#include <cstdio>
#include <ctime>

namespace gr {

namespace {

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      case '\r': out += "&#13;"; break;
      default:
        if (c < 0x20) continue;  // other control characters are not allowed in XML 1.0
        out += static_cast<char>(c);
    }
  }
  return out;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

}  // namespace

std::string render_junit(const std::vector<JunitSuite>& suites) {
  int tests = 0, failures = 0, errors = 0;
  double total = 0.0;
  for (const JunitSuite& s : suites)
    for (const JunitCase& c : s.cases) ++tests, failures += c.failed, errors += c.error, total += c.seconds;
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", std::gmtime(&now));
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<testsuites name=\"gradrun\" tests=\"" + std::to_string(tests) + "\" failures=\"" + std::to_string(failures) + "\" errors=\"" +
       std::to_string(errors) + "\" time=\"" + seconds(total) + "\">\n";
  for (const JunitSuite& s : suites) {
    int f = 0, e = 0, k = 0;
    double t = 0.0;
    for (const JunitCase& c : s.cases) f += c.failed, e += c.error, k += c.skipped, t += c.seconds;
    x += "  <testsuite name=\"" + escaped(s.name) + "\" tests=\"" + std::to_string(s.cases.size()) + "\" failures=\"" +
         std::to_string(f) + "\" errors=\"" + std::to_string(e) + "\" skipped=\"" + std::to_string(k) + "\" time=\"" + seconds(t) +
         "\" timestamp=\"" + stamp + "\">\n";
    for (const JunitCase& c : s.cases) {
      x += "    <testcase classname=\"" + escaped(c.classname) + "\" name=\"" + escaped(c.name) + "\" time=\"" + seconds(c.seconds) + "\"";
      if (!c.failed && !c.error && !c.skipped) {
        x += "/>\n";
        continue;
      }
      x += ">\n";
      const char* tag = c.skipped ? "skipped" : c.error ? "error" : "failure";
      x += std::string("      <") + tag + " message=\"" + escaped(c.message) + "\"";
      x += c.detail.empty() ? "/>\n" : ">" + escaped(c.detail) + "</" + tag + ">\n";
      x += "    </testcase>\n";
    }
    x += "  </testsuite>\n";
  }
  x += "</testsuites>\n";
  return x;
}

}  // namespace gr
