// plot_svg.cpp — see plot_svg.h. Layout: a fixed 800x480 canvas, the plot area inset by margins
// that leave room for the title (top), tick labels and axis titles (left, bottom); light grid
// lines at major ticks, a legend in the top-right corner of the plot area.
#include "train/plot_svg.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

namespace gr {
namespace {

constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 84, kRight = 32, kTop = 44, kBottom = 56;  // margins around the plot area
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;
constexpr size_t kMaxPoints = 2000;  // above this many finite points the train curve is reduced
constexpr const char* kTrainColor = "#1f77b4";
constexpr const char* kValColor = "#e6550d";
constexpr const char* kStepColor = "#9ecae1";  // the per-step train loss, behind the epoch means
constexpr size_t kMaxMarkers = 60;             // a marker per epoch only for short runs

// Formats with std::to_chars (never locale-dependent); `fixed` → that many decimals, trailing
// zeros trimmed; otherwise %g-like with `digits` significant digits and a compact exponent.
std::string fmt(double v, bool fixed, int digits) {
  if (!std::isfinite(v)) return "0";
  if (v == 0) v = 0;  // no "-0"
  char buf[64];
  const auto fmt_kind = fixed ? std::chars_format::fixed : std::chars_format::general;
  std::string s(buf, std::to_chars(buf, buf + sizeof buf, v, fmt_kind, digits).ptr);
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e), expo = e == std::string::npos ? "" : s.substr(e + 1);
  if (mant.find('.') != std::string::npos) {  // "0.50" → "0.5", "2.00" → "2"
    mant.erase(mant.find_last_not_of('0') + 1);
    if (mant.back() == '.') mant.pop_back();
  }
  if (mant == "-0") mant = "0";
  if (expo.empty()) return mant;
  const bool neg = expo[0] == '-';  // "e-05" → "e-5", "e+04" → "e4"
  expo.erase(0, expo.find_first_not_of("+-0"));
  return mant + "e" + (neg ? "-" : "") + expo;
}
std::string coord(double v) { return fmt(v, true, 2); }
std::string label(double v, int digits = 4) {  // whole numbers below a million print in full
  if (std::fabs(v) < 1e6 && v == std::floor(v)) return fmt(v, true, 0);
  return fmt(v, false, digits);
}

// Escapes XML specials, drops control characters XML 1.0 forbids and keeps the title to a length
// that fits the canvas (cutting on a UTF-8 character boundary).
std::string xml_escape(std::string_view s) {
  constexpr size_t kMaxBytes = 64;
  if (s.size() > kMaxBytes) {
    size_t cut = kMaxBytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    return xml_escape(s.substr(0, cut)) + "\xE2\x80\xA6";  // "…"
  }
  std::string out;
  for (const char c : s) {
    const char* entity = c == '&'    ? "&amp;"
                         : c == '<'  ? "&lt;"
                         : c == '>'  ? "&gt;"
                         : c == '"'  ? "&quot;"
                         : c == '\'' ? "&apos;"
                                     : nullptr;
    if (entity) out += entity;
    if (!entity && (static_cast<unsigned char>(c) >= 0x20 || c == '\t')) out += c;
  }
  return out;
}

// A 1-2-5 step giving about `target` intervals over `span`.
double nice_step(double span, int target) {
  const double raw = span / target, mag = std::pow(10.0, std::floor(std::log10(raw))), f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

struct Tick {
  double at;  // position in axis units (log10 of the value on a log axis)
  std::string text;
};

// Maps data values to pixels along one axis; `lo`/`hi` are in axis units.
struct Scale {
  double lo = 0, hi = 1, p0 = 0, p1 = 1;
  bool log = false;
  double unit(double v) const { return log ? std::log10(v) : v; }
  double px(double v) const { return p0 + (unit(v) - lo) / (hi - lo) * (p1 - p0); }
  double px_unit(double u) const { return p0 + (u - lo) / (hi - lo) * (p1 - p0); }
};

// Linear 1-2-5 ticks inside [lo, hi]; `min_step` keeps step ticks integral. Labels get more than
// 4 significant digits only when needed to tell neighbours apart (e.g. a plateau at 2.30259).
std::vector<Tick> linear_ticks(double lo, double hi, double min_step) {
  const double step = std::max(nice_step(hi - lo, 6), min_step);
  const double need = std::floor(std::log10(std::max(std::fabs(lo), std::fabs(hi)))) - std::floor(std::log10(step)) + 1;
  const int digits = need > 4 ? int(std::min(need, 15.0)) : 4;
  std::vector<Tick> ticks;
  for (double i = std::ceil(lo / step); i * step <= hi + step * 1e-9 && ticks.size() < 50; ++i)
    ticks.push_back({i * step, label(i * step, digits)});
  return ticks;
}

// Powers of ten inside [lo, hi] (log10 units), thinned to at most 8 labels; "1e-3" style outside
// 0.01..1000.
std::vector<Tick> log_ticks(double lo, double hi) {
  const int first = static_cast<int>(std::ceil(lo)), last = static_cast<int>(std::floor(hi));
  int stride = 1;
  while ((last - first) / stride + 1 > 8) stride = stride == 1 ? 2 : stride == 2 ? 5 : stride * 2;
  std::vector<Tick> ticks;
  for (int e = first; e <= last; ++e) {
    if (((e % stride) + stride) % stride != 0) continue;
    ticks.push_back({double(e), e >= -2 && e <= 3 ? label(std::pow(10.0, e)) : "1e" + std::to_string(e)});
  }
  return ticks;
}

// Appends a polyline through `pts`, or a dot when there is a single point.
void emit_run(std::string& out, const std::vector<std::pair<double, double>>& pts, const char* color, double width) {
  if (pts.empty()) return;
  if (pts.size() == 1) {
    out += "<circle cx=\"" + coord(pts[0].first) + "\" cy=\"" + coord(pts[0].second) + "\" r=\"" + coord(width + 1.3) +
           "\" fill=\"" + color + "\"/>\n";
    return;
  }
  out += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"" + coord(width) +
         "\" stroke-linejoin=\"round\" points=\"";
  for (size_t i = 0; i < pts.size(); ++i) out += (i ? " " : "") + coord(pts[i].first) + "," + coord(pts[i].second);
  out += "\"/>\n";
}

// A curve over (x, y) points in x order: one polyline per run of finite values (NaN/inf breaks the
// line). Beyond kMaxPoints finite points, each pixel column keeps only its min and max (in x order),
// and a gap is only drawn when a whole column has no finite value — so the output is bounded by ~2
// points per column whatever the run length. Returns the number of points drawn.
size_t emit_curve(std::string& out, const std::vector<std::pair<double, double>>& xy, const Scale& sx, const Scale& sy,
                  const char* color, double width) {
  const auto finite = static_cast<size_t>(
      std::count_if(xy.begin(), xy.end(), [](const auto& p) { return std::isfinite(p.first) && std::isfinite(p.second); }));
  const bool reduce = finite > kMaxPoints;
  std::vector<std::pair<double, double>> run;
  size_t drawn = 0;
  auto point = [&](size_t i) { run.emplace_back(sx.px(xy[i].first), sy.px(xy[i].second)), ++drawn; };
  auto flush = [&] {
    emit_run(out, run, color, width);
    run.clear();
  };
  long col = 0;
  size_t lo_i = 0, hi_i = 0;
  bool have = false, gap = false;
  auto flush_col = [&] {
    if (!have) return;
    point(std::min(lo_i, hi_i));
    if (lo_i != hi_i) point(std::max(lo_i, hi_i));
  };
  for (size_t i = 0; i < xy.size(); ++i) {
    if (!std::isfinite(xy[i].first) || !std::isfinite(xy[i].second)) {
      if (reduce)
        gap = true;
      else
        flush();
      continue;
    }
    if (!reduce) {
      point(i);
      continue;
    }
    const long c = std::lround(std::floor(sx.px(xy[i].first)));
    if (have && c == col) {
      if (xy[i].second < xy[lo_i].second) lo_i = i;
      if (xy[i].second > xy[hi_i].second) hi_i = i;
    } else {
      flush_col();
      if (gap && c > col + 1) flush();  // at least one whole column without a finite value
      col = c, lo_i = hi_i = i, have = true;
    }
    gap = false;  // a gap narrower than a pixel column would be invisible anyway
  }
  flush_col();
  flush();
  return drawn;
}

}  // namespace

std::string render_loss_svg(const LossPlot& plot) {
  const std::string W = coord(kWidth), H = coord(kHeight), cx = coord(kLeft + kPlotW / 2);
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + W + "\" height=\"" + H +
                    "\" viewBox=\"0 0 " + W + " " + H +
                    "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"" + cx + "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">" +
         xml_escape(plot.title) + "</text>\n";
  const std::string frame = "<rect x=\"" + coord(kLeft) + "\" y=\"" + coord(kTop) + "\" width=\"" + coord(kPlotW) +
                            "\" height=\"" + coord(kPlotH) + "\" fill=\"none\" stroke=\"#333\"/>\n";

  // Data extent over every finite value (train and validation).
  std::vector<std::pair<double, double>> val;  // finite validation points only
  for (const auto& [s, v] : plot.validation)
    if (std::isfinite(s) && std::isfinite(v)) val.emplace_back(s, v);
  double xmin = 1, xmax = double(std::max<size_t>(plot.train.size(), 1));
  double ymin = INFINITY, ymax = -INFINITY;
  for (const double v : plot.train)
    if (std::isfinite(v)) ymin = std::min(ymin, v), ymax = std::max(ymax, v);
  for (const auto& [s, v] : val)
    xmin = std::min(xmin, s), xmax = std::max(xmax, s), ymin = std::min(ymin, v), ymax = std::max(ymax, v);
  for (const auto& [s, v] : plot.epoch_train)
    if (std::isfinite(s) && std::isfinite(v))
      xmin = std::min(xmin, s), xmax = std::max(xmax, s), ymin = std::min(ymin, v), ymax = std::max(ymax, v);

  if (plot.train.empty() || !(ymin <= ymax)) {
    out += frame + "<text x=\"" + cx + "\" y=\"" + coord(kTop + kPlotH / 2) +
           "\" text-anchor=\"middle\" font-size=\"20\" fill=\"#888\">no data</text>\n</svg>\n";
    return out;
  }

  // x: tight on the steps, from 0 on longer runs so the first tick is 0 (a single step gets a
  // little room on each side).
  Scale sx{xmin >= 0 && xmax > 10 ? 0 : xmin, xmax, kLeft, kLeft + kPlotW, false};
  if (xmax - xmin < 1) sx.lo = xmin - 1, sx.hi = xmax + 1;
  const std::vector<Tick> xticks = linear_ticks(sx.lo, sx.hi, 1.0);

  // y: log when all positive over more than two decades, else linear; padded 4-5% each side.
  Scale sy{0, 1, kTop + kPlotH, kTop, ymin > 0 && ymax / ymin > 100};
  std::vector<Tick> yticks;
  std::vector<double> yminor;  // unlabeled ticks at 2..9 × 10^e on a log axis of few decades
  if (sy.log) {
    const double lo = std::log10(ymin), hi = std::log10(ymax), pad = 0.04 * (hi - lo);
    sy.lo = lo - pad, sy.hi = hi + pad;
    yticks = log_ticks(sy.lo, sy.hi);
    if (sy.hi - sy.lo <= 7)
      for (int e = int(std::floor(sy.lo)); e <= int(std::ceil(sy.hi)); ++e)
        for (int m = 2; m <= 9; ++m)
          if (const double u = e + std::log10(double(m)); u > sy.lo && u < sy.hi) yminor.push_back(u);
  } else {
    double pad = 0.05 * (ymax - ymin);
    if (!(pad > 1e-9 * std::fabs(ymax))) pad = ymax != 0 ? 0.1 * std::fabs(ymax) : 1.0;  // flat curve
    sy.lo = ymin - pad, sy.hi = ymax + pad;
    yticks = linear_ticks(sy.lo, sy.hi, 0.0);
  }

  // Grid, frame, ticks and tick labels.
  const std::string bottom = coord(kTop + kPlotH), left = coord(kLeft);
  out += "<g stroke=\"#e6e6e6\">\n";
  for (const Tick& t : xticks) {
    const std::string x = coord(sx.px_unit(t.at));
    out += "<line x1=\"" + x + "\" y1=\"" + coord(kTop) + "\" x2=\"" + x + "\" y2=\"" + bottom + "\"/>\n";
  }
  for (const Tick& t : yticks) {
    const std::string y = coord(sy.px_unit(t.at));
    out += "<line x1=\"" + left + "\" y1=\"" + y + "\" x2=\"" + coord(kLeft + kPlotW) + "\" y2=\"" + y + "\"/>\n";
  }
  out += "</g>\n" + frame + "<g stroke=\"#333\">\n";
  for (const Tick& t : xticks) {
    const std::string x = coord(sx.px_unit(t.at));
    out += "<line x1=\"" + x + "\" y1=\"" + bottom + "\" x2=\"" + x + "\" y2=\"" + coord(kTop + kPlotH + 5) + "\"/>\n";
  }
  for (const Tick& t : yticks) {
    const std::string y = coord(sy.px_unit(t.at));
    out += "<line x1=\"" + coord(kLeft - 5) + "\" y1=\"" + y + "\" x2=\"" + left + "\" y2=\"" + y + "\"/>\n";
  }
  for (const double u : yminor) {
    const std::string y = coord(sy.px_unit(u));
    out += "<line x1=\"" + coord(kLeft - 3) + "\" y1=\"" + y + "\" x2=\"" + left + "\" y2=\"" + y + "\"/>\n";
  }
  out += "</g>\n<g fill=\"#333\">\n";
  for (const Tick& t : xticks)
    out += "<text x=\"" + coord(sx.px_unit(t.at)) + "\" y=\"" + coord(kTop + kPlotH + 19) +
           "\" text-anchor=\"middle\">" + t.text + "</text>\n";
  for (const Tick& t : yticks)
    out += "<text x=\"" + coord(kLeft - 8) + "\" y=\"" + coord(sy.px_unit(t.at) + 4) + "\" text-anchor=\"end\">" +
           t.text + "</text>\n";
  out += "</g>\n";

  // Axis titles.
  const std::string ymid = coord(kTop + kPlotH / 2);
  out +=
      "<text x=\"" + cx + "\" y=\"" + coord(kHeight - 14) + "\" text-anchor=\"middle\" font-size=\"13\">step</text>\n";
  out += "<text x=\"16\" y=\"" + ymid + "\" transform=\"rotate(-90 16 " + ymid +
         ")\" text-anchor=\"middle\" font-size=\"13\">" + (sy.log ? "loss (log scale)" : "loss") + "</text>\n";

  // Curves: the per-step train loss (light, or the train colour when there are no epoch means),
  // the epoch-mean train loss, then validation on top — each reduced per pixel column when long,
  // with a marker per epoch only for short runs.
  const bool means = !plot.epoch_train.empty();
  std::vector<std::pair<double, double>> steps;
  steps.reserve(plot.train.size());
  for (size_t i = 0; i < plot.train.size(); ++i) steps.emplace_back(double(i + 1), plot.train[i]);
  out += "<g class=\"train\">\n";
  emit_curve(out, steps, sx, sy, means ? kStepColor : kTrainColor, means ? 1.0 : 1.2);
  out += "</g>\n";
  auto epoch_curve = [&](const char* cls, const std::vector<std::pair<double, double>>& pts, const char* color) {
    out += std::string("<g class=\"") + cls + "\">\n";
    emit_curve(out, pts, sx, sy, color, 1.6);
    if (pts.size() <= kMaxMarkers)
      for (const auto& [x, y] : pts)
        if (std::isfinite(x) && std::isfinite(y))
          out += "<circle cx=\"" + coord(sx.px(x)) + "\" cy=\"" + coord(sy.px(y)) + "\" r=\"3.5\" fill=\"" + color +
                 "\" stroke=\"white\" stroke-width=\"1\"/>\n";
    out += "</g>\n";
  };
  if (means) epoch_curve("epoch-train", plot.epoch_train, kTrainColor);
  if (!val.empty()) epoch_curve("validation", val, kValColor);

  // Legend, top-right inside the plot area, on a translucent white box.
  const double lx = kLeft + kPlotW - 152, ly = kTop + 10, lh = 26 + (val.empty() ? 0 : 20) + (means ? 20 : 0);
  out += "<g class=\"legend\">\n<rect x=\"" + coord(lx) + "\" y=\"" + coord(ly) + "\" width=\"142\" height=\"" +
         coord(lh) + "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n";
  auto entry = [&](double y, const char* color, const char* name, bool marker) {
    out += "<line x1=\"" + coord(lx + 10) + "\" y1=\"" + coord(y) + "\" x2=\"" + coord(lx + 36) + "\" y2=\"" +
           coord(y) + "\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n";
    if (marker)
      out += "<circle cx=\"" + coord(lx + 23) + "\" cy=\"" + coord(y) + "\" r=\"3.5\" fill=\"" + color +
             "\" stroke=\"white\" stroke-width=\"1\"/>\n";
    out += "<text x=\"" + coord(lx + 44) + "\" y=\"" + coord(y + 4) + "\">" + name + "</text>\n";
  };
  entry(ly + 13, means ? kStepColor : kTrainColor, means ? "train (per step)" : "train", false);
  if (means) entry(ly + 33, kTrainColor, "train (epoch mean)", plot.epoch_train.size() <= kMaxMarkers);
  if (!val.empty()) entry(ly + (means ? 53 : 33), kValColor, "validation", val.size() <= kMaxMarkers);
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace gr
