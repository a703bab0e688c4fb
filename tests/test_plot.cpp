// test_plot.cpp — the loss-curve SVG renderer (train/plot_svg.h): document structure, escaping,
// log/linear choice, gaps for NaN/inf, the size bound on long curves, determinism, empty input.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "train/plot_svg.h"

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// A small XML well-formedness check: every tag is closed in order; no stray '<' or '&' in text.
bool balanced(const std::string& s, std::string* why) {
  std::vector<std::string> open;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string ent = semi == std::string::npos ? "" : s.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;")
        return *why = "bad entity at " + std::to_string(i), false;
      continue;
    }
    if (s[i] == '>') return *why = "stray '>' at " + std::to_string(i), false;
    if (s[i] != '<') continue;
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return *why = "unterminated tag", false;
    const std::string tag = s.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos) return *why = "'<' inside tag " + tag, false;
    i = end;
    if (tag.back() == '/') continue;  // self-closing
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return *why = "mismatched </" + tag.substr(1) + ">", false;
      open.pop_back();
    } else {
      open.push_back(tag.substr(0, tag.find_first_of(" \t\n")));
    }
  }
  if (!open.empty()) return *why = "unclosed <" + open.back() + ">", false;
  return true;
}

void check_document(const std::string& svg) {
  REQUIRE(svg.rfind("<svg", 0) == 0);
  REQUIRE(svg.size() >= 7);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  std::string why;
  const bool ok = balanced(svg, &why);
  INFO(why);
  CHECK(ok);
  CHECK(count(svg, "<svg") == 1);
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf") == std::string::npos);
}

// Number of "x,y" pairs across all polylines of a group (class="train" / "validation").
size_t points_in_group(const std::string& svg, const std::string& cls) {
  const size_t start = svg.find("<g class=\"" + cls + "\">");
  if (start == std::string::npos) return 0;
  const std::string g = svg.substr(start, svg.find("</g>", start) - start);
  return count(g, ",");
}

// The smallest (highest on the page) y coordinate among the polyline points of a group.
double min_y_in_group(const std::string& svg, const std::string& cls) {
  const size_t start = svg.find("<g class=\"" + cls + "\">");
  const size_t end = svg.find("</g>", start);
  double best = 1e9;
  for (size_t p = svg.find(',', start); p < end; p = svg.find(',', p + 1))
    best = std::min(best, std::stod(svg.substr(p + 1, 12)));
  return best;
}

gr::LossPlot decaying(size_t n, double floor_value) {
  gr::LossPlot p;
  p.title = "demo";
  for (size_t i = 0; i < n; ++i) p.train.push_back(floor_value + 2.0 * std::exp(-double(i) / double(n) * 4.0));
  return p;
}

}  // namespace

TEST_CASE("plot: a typical curve is a complete SVG document with axes, labels and legend") {
  gr::LossPlot p = decaying(500, 0.3);
  p.validation = {{100, 1.2}, {200, 0.8}, {300, 0.6}, {400, 0.5}, {500, 0.45}};
  const std::string svg = gr::render_loss_svg(p);
  check_document(svg);
  CHECK(svg.find(">step</text>") != std::string::npos);
  CHECK(svg.find(">loss</text>") != std::string::npos);
  CHECK(svg.find(">train</text>") != std::string::npos);
  CHECK(svg.find(">validation</text>") != std::string::npos);
  CHECK(svg.find(">demo</text>") != std::string::npos);
  CHECK(svg.find(">0.5</text>") != std::string::npos);  // a 1-2-5 y tick
  CHECK(svg.find(">500</text>") != std::string::npos);  // a round x tick
  CHECK(count(svg, "<polyline") == 2);                  // train + validation
  CHECK(points_in_group(svg, "train") == 500);
  CHECK(count(svg, "<circle") == 5 + 1);  // one marker per epoch + the legend's
}

TEST_CASE("plot: the title is XML-escaped") {
  gr::LossPlot p = decaying(10, 0.1);
  p.title = "a<b> & \"c\" 'd'";
  const std::string svg = gr::render_loss_svg(p);
  check_document(svg);
  CHECK(svg.find("a&lt;b&gt; &amp; &quot;c&quot; &apos;d&apos;") != std::string::npos);
}

TEST_CASE("plot: log scale only for positive losses spanning more than two decades") {
  SECTION("four decades, positive → log, power-of-ten ticks") {
    gr::LossPlot p;
    for (int i = 0; i < 200; ++i) p.train.push_back(std::pow(10.0, 1.0 - 4.0 * i / 199.0));  // 10 .. 1e-3
    const std::string svg = gr::render_loss_svg(p);
    check_document(svg);
    CHECK(svg.find(">loss (log scale)</text>") != std::string::npos);
    CHECK(svg.find(">1e-3</text>") != std::string::npos);
    CHECK(svg.find(">0.1</text>") != std::string::npos);
    CHECK(svg.find(">10</text>") != std::string::npos);
  }
  SECTION("one decade → linear") {
    const std::string svg = gr::render_loss_svg(decaying(200, 0.2));
    CHECK(svg.find(">loss</text>") != std::string::npos);
    CHECK(svg.find("log scale") == std::string::npos);
  }
  SECTION("a zero or negative value → linear even over many decades") {
    gr::LossPlot p;
    p.train = {100.0, 1.0, 0.01, 0.0};
    CHECK(gr::render_loss_svg(p).find("log scale") == std::string::npos);
    p.train = {100.0, 1.0, 0.01, 0.001};
    CHECK(gr::render_loss_svg(p).find("log scale") != std::string::npos);
    p.validation = {{4, -1.0}};
    CHECK(gr::render_loss_svg(p).find("log scale") == std::string::npos);
  }
}

TEST_CASE("plot: NaN and inf leave gaps and never reach the output") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  gr::LossPlot p;
  p.train = {1.0, 0.9, nan, 0.8, 0.7, inf, 0.6, 0.5, -inf, 0.4};
  p.validation = {{3, nan}, {5, 0.75}, {nan, 0.5}, {10, 0.45}};
  const std::string svg = gr::render_loss_svg(p);
  check_document(svg);
  CHECK(count(svg, "<polyline") == 3 + 1);  // three train runs of 2 points, one validation line
  CHECK(points_in_group(svg, "train") == 6);
  CHECK(count(svg, "<circle") == 1 + 2 + 1);  // the lone last train point, 2 markers, the legend's
  CHECK(points_in_group(svg, "validation") == 2);

  SECTION("an isolated finite point is drawn as a dot") {
    p.train = {nan, 0.5, nan};
    p.validation.clear();
    const std::string one = gr::render_loss_svg(p);
    check_document(one);
    CHECK(count(one, "<polyline") == 0);
    CHECK(count(one, "<circle") == 1);
  }
  SECTION("all non-finite → no data") {
    p.train = {nan, inf};
    p.validation.clear();
    CHECK(gr::render_loss_svg(p).find(">no data</text>") != std::string::npos);
  }
}

TEST_CASE("plot: a long curve is reduced to min/max per pixel column, keeping spikes") {
  gr::LossPlot p = decaying(100000, 0.1);
  p.train[54321] = 5.0;  // one spike must survive the reduction
  const std::string svg = gr::render_loss_svg(p);
  check_document(svg);
  const size_t pts = points_in_group(svg, "train");
  CHECK(pts >= 700);
  CHECK(pts <= 2000);
  CHECK(svg.size() < 60000);
  CHECK(svg.find(">5</text>") != std::string::npos);  // the y axis reaches the spike
  CHECK(min_y_in_group(svg, "train") < 70);           // and the line goes up to it (top = 44)

  SECTION("sparse NaNs do not multiply the polylines") {
    for (size_t i = 0; i < p.train.size(); i += 3) p.train[i] = std::numeric_limits<double>::quiet_NaN();
    const std::string gappy = gr::render_loss_svg(p);
    check_document(gappy);
    CHECK(count(gappy, "<polyline") <= 2);
    CHECK(points_in_group(gappy, "train") <= 2000);
  }
}

// A 12,000-epoch run used to write a 1.25 MB loss.svg whose validation markers merged into a blob:
// the epoch curves are reduced per pixel column like the step curve, and lose their markers.
TEST_CASE("plot: 12,000 epochs of validation and epoch means stay small, markers only for short runs") {
  gr::LossPlot p = decaying(12000 * 4, 0.05);
  for (size_t e = 1; e <= 12000; ++e) {
    const double step = double(e * 4);
    p.validation.emplace_back(step, 0.1 + 1.0 / double(e) + (e == 7777 ? 3.0 : 0.0));  // one spike survives
    p.epoch_train.emplace_back(step, 0.05 + 1.0 / double(e));
  }
  const std::string svg = gr::render_loss_svg(p);
  check_document(svg);
  CHECK(svg.size() < 150000);
  CHECK(count(svg, "<circle") == 0);
  CHECK(points_in_group(svg, "validation") <= 2000);
  CHECK(points_in_group(svg, "validation") >= 700);
  CHECK(points_in_group(svg, "epoch-train") <= 2000);
  CHECK(min_y_in_group(svg, "validation") < 70);  // the spike reaches near the top
  CHECK(svg.find("train (epoch mean)") != std::string::npos);

  SECTION("a short run keeps a marker per epoch") {
    gr::LossPlot q = decaying(40, 0.1);
    for (size_t e = 1; e <= 10; ++e) q.validation.emplace_back(double(e * 4), 0.5 / double(e)), q.epoch_train.emplace_back(double(e * 4), 0.4 / double(e));
    const std::string s = gr::render_loss_svg(q);
    check_document(s);
    CHECK(count(s, "<circle") == 10 + 10 + 2);  // two curves, and the two legend markers
  }
}

TEST_CASE("plot: output is deterministic") {
  gr::LossPlot p = decaying(3000, 0.01);
  p.title = "same";
  p.validation = {{1000, 0.5}, {2000, 0.1}, {3000, 0.05}};
  const std::string a = gr::render_loss_svg(p), b = gr::render_loss_svg(p);
  CHECK(a == b);
  CHECK(a == gr::render_loss_svg(gr::LossPlot(p)));
}

TEST_CASE("plot: empty and tiny inputs") {
  SECTION("empty train says no data") {
    gr::LossPlot p;
    p.title = "nothing yet";
    const std::string svg = gr::render_loss_svg(p);
    check_document(svg);
    CHECK(svg.find(">no data</text>") != std::string::npos);
    CHECK(svg.find(">nothing yet</text>") != std::string::npos);
    CHECK(count(svg, "<polyline") == 0);
  }
  SECTION("a single point") {
    gr::LossPlot p;
    p.train = {0.693};
    const std::string svg = gr::render_loss_svg(p);
    check_document(svg);
    CHECK(count(svg, "<circle") == 1);
    CHECK(svg.find(">1</text>") != std::string::npos);  // x tick at step 1
  }
  SECTION("a flat curve") {
    gr::LossPlot p;
    p.train.assign(50, 0.0);
    const std::string svg = gr::render_loss_svg(p);
    check_document(svg);
    CHECK(count(svg, "<polyline") == 1);
    CHECK(svg.find(">0</text>") != std::string::npos);
  }
}

TEST_CASE("plot: a plateau gets tick labels precise enough to tell apart") {
  gr::LossPlot p;
  for (int i = 0; i < 100; ++i) p.train.push_back(2.30258 + 4e-5 * std::sin(i * 0.3));
  const std::string svg = gr::render_loss_svg(p);
  check_document(svg);
  CHECK(svg.find(">2.3026</text>") != std::string::npos);
  CHECK(svg.find(">2.30255</text>") != std::string::npos);
}

TEST_CASE("plot: extreme values still give a well-formed document") {
  gr::LossPlot p;
  p.train = {1e300, -1e300, 5e-324, 0.0};
  check_document(gr::render_loss_svg(p));
  p.train = {1e-300, 1e300};
  check_document(gr::render_loss_svg(p));
}

TEST_CASE("plot: numbers are compact") {
  gr::LossPlot p;
  p.train = {1e-6, 2e-6, 3e-6};
  const std::string svg = gr::render_loss_svg(p);
  check_document(svg);
  CHECK(svg.find("e-6</text>") != std::string::npos);  // "1e-6", not "1e-06" or "0.000001"
  CHECK(svg.find("e-06") == std::string::npos);
  CHECK(svg.find(".00\"") == std::string::npos);  // coordinates trimmed: "78" not "78.00"
}
