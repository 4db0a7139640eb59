// The SVG plotting layer (svg.h). Coordinates are printed with one decimal, enough for a
// screen and short enough for a page with thousands of points.
#include "reports/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "reports/results.h"

namespace parity::reports::svg {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// Seven of the Okabe-Ito colour-blind safe colours (not its yellow, faint on white), then
// brown, grey and purple.
constexpr const char* kPalette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00",
                                    "#56b4e9", "#000000", "#8c564b", "#7f7f7f", "#6a3d9a"};
constexpr size_t kColours = sizeof(kPalette) / sizeof(kPalette[0]);

std::string px(double v) { return fixed(v, 1); }

bool drawable(const Point& p, YScale scale) {
  if (!std::isfinite(p.x) || !std::isfinite(p.y)) return false;
  return scale == YScale::Linear || p.y > 0;
}

// A 1, 2 or 5 x 10^k step giving about `target` intervals over `span` (> 0).
double nice_step(double span, int target) {
  double raw = span / std::max(target, 1);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double nice = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
  return nice * mag;
}

// Multiples of `step` inside [lo, hi] (with a little slack for rounding), labelled with the
// decimals the step needs.
std::vector<Tick> ticks_with_step(double lo, double hi, double step) {
  std::vector<Tick> out;
  if (!(step > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  double slack = step * 1e-6;
  auto first = static_cast<int64_t>(std::ceil((lo - slack) / step));
  auto last = static_cast<int64_t>(std::floor((hi + slack) / step));
  for (int64_t i = first; i <= last && out.size() < 1000; ++i) {
    double v = static_cast<double>(i) * step;
    out.push_back({v, fixed(v, decimals)});
  }
  return out;
}

std::string decade_label(int k) {
  if (k >= -2 && k <= 3) return fixed(std::pow(10.0, k), std::max(0, -k));
  return "1e" + std::to_string(k);
}

// The open tag of an <svg> of the given size, with the defaults every chart shares. No xmlns:
// inline SVG in HTML5 needs none, and the page holds no URL of any kind.
std::string svg_open(int width, int height) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "<svg width=\"%d\" height=\"%d\" "
                "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
                width, height, width, height);
  return buf;
}

std::string text(double x, double y, const std::string& s, const char* anchor,
                 const std::string& extra = "") {
  return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" text-anchor=\"" + anchor + "\"" + extra +
         ">" + escape(s) + "</text>\n";
}

std::string line(double x1, double y1, double x2, double y2, const std::string& style) {
  return "<line x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) + "\" y2=\"" + px(y2) +
         "\" " + style + "/>\n";
}

// Title, axis labels and the plot frame, common to both chart kinds.
std::string frame(const std::string& title, const std::string& x_label, const std::string& y_label,
                  double x0, double y0, double pw, double ph, double x_label_y) {
  std::string s;
  s += text(x0 + pw / 2, 18, title, "middle", " font-size=\"13\" font-weight=\"bold\"");
  s += text(x0 + pw / 2, x_label_y, x_label, "middle");
  double ly = y0 + ph / 2;
  s += "<text x=\"14\" y=\"" + px(ly) + "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " +
       px(ly) + ")\">" + escape(y_label) + "</text>\n";
  s += "<rect x=\"" + px(x0) + "\" y=\"" + px(y0) + "\" width=\"" + px(pw) + "\" height=\"" +
       px(ph) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  return s;
}

}  // namespace

const char* colour(size_t i) { return kPalette[i % kColours]; }

const char* dash_pattern(size_t i) {
  switch ((i / kColours) % 3) {
    case 0: return "";
    case 1: return "6 3";
    default: return "2 2";
  }
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 20), v);
  std::string s = buf;
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::vector<Tick> linear_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return ticks_with_step(lo, lo, 1.0);
  return ticks_with_step(lo, hi, nice_step(hi - lo, target));
}

std::vector<Tick> log_ticks(double lo, double hi) {
  std::vector<Tick> out;
  if (!(lo > 0) || !(hi >= lo) || !std::isfinite(hi)) return out;
  int kmin = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int kmax = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  int every = 1;
  while ((kmax - kmin) / every + 1 > 9) ++every;
  for (int k = kmin; k <= kmax; k += every) out.push_back({std::pow(10.0, k), decade_label(k)});
  return out;
}

size_t drawable_points(const Series& s, YScale scale) {
  return static_cast<size_t>(std::count_if(s.points.begin(), s.points.end(),
                                           [&](const Point& p) { return drawable(p, scale); }));
}

std::string line_chart(const LineChart& c) {
  const bool log = c.y_scale == YScale::Log10;
  const double left = 72, top = 30, bottom = 44, legend_w = 250, row_h = 15;
  int height = std::max(c.height, static_cast<int>(top + row_h * c.series.size() + 12));
  const double x0 = left, y0 = top;
  const double pw = c.width - left - legend_w - 12, ph = height - top - bottom;

  // The data's extent over drawable points.
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const auto& s : c.series)
    for (const auto& p : s.points)
      if (drawable(p, c.y_scale)) {
        xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x);
        ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
      }
  const bool empty = !(xmin <= xmax);

  std::string s = svg_open(c.width, height);
  s += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  s += frame(c.title, c.x_label, c.y_label, x0, y0, pw, ph, height - 8);
  if (empty) {
    s += text(x0 + pw / 2, y0 + ph / 2, "no drawable points", "middle", " fill=\"#888\"");
  } else {
    // Axis domains: x as logged (whole steps), y widened to whole ticks.
    if (xmax == xmin) xmin -= 1, xmax += 1;
    double xstep = std::max(1.0, nice_step(xmax - xmin, 8));
    std::vector<Tick> xt = ticks_with_step(xmin, xmax, xstep);
    std::vector<Tick> yt;
    double ylo, yhi;
    if (log) {
      ylo = std::pow(10.0, std::floor(std::log10(ymin) + 1e-9));
      yhi = std::pow(10.0, std::ceil(std::log10(ymax) - 1e-9));
      if (yhi <= ylo) yhi = ylo * 10;
      yt = log_ticks(ylo, yhi);
      ylo = std::log10(ylo), yhi = std::log10(yhi);
    } else {
      if (ymax == ymin) {
        double pad = std::max(std::fabs(ymin) * 0.05, 1e-12);
        ymin -= pad, ymax += pad;
      }
      double step = nice_step(ymax - ymin, 6);
      ylo = std::floor(ymin / step) * step, yhi = std::ceil(ymax / step) * step;
      yt = ticks_with_step(ylo, yhi, step);
    }
    auto X = [&](double x) { return x0 + (x - xmin) / (xmax - xmin) * pw; };
    auto Y = [&](double y) {
      double v = log ? std::log10(y) : y;
      return y0 + ph - (v - ylo) / (yhi - ylo) * ph;
    };
    for (const auto& t : xt) {
      s += line(X(t.value), y0, X(t.value), y0 + ph, "stroke=\"#e4e4e4\"");
      s += text(X(t.value), y0 + ph + 14, t.label, "middle");
    }
    for (const auto& t : yt) {
      s += line(x0, Y(t.value), x0 + pw, Y(t.value), "stroke=\"#e4e4e4\"");
      s += text(x0 - 5, Y(t.value) + 4, t.label, "end");
    }
    // The series: polylines broken at skipped points, then a marker per drawn point.
    for (size_t i = 0; i < c.series.size(); ++i) {
      std::string stroke = std::string("stroke=\"") + colour(i) + "\"";
      if (*dash_pattern(i)) stroke += std::string(" stroke-dasharray=\"") + dash_pattern(i) + "\"";
      std::string run, marks;
      int in_run = 0;
      auto flush = [&] {
        if (in_run >= 2)
          s += "<polyline fill=\"none\" stroke-width=\"1.4\" " + stroke + " points=\"" + run +
               "\"/>\n";
        run.clear(), in_run = 0;
      };
      for (const auto& p : c.series[i].points) {
        if (!drawable(p, c.y_scale)) {
          flush();
          continue;
        }
        std::string xy = px(X(p.x)) + "," + px(Y(p.y));
        run += (in_run++ ? " " : "") + xy;
        marks += "<circle cx=\"" + px(X(p.x)) + "\" cy=\"" + px(Y(p.y)) + "\" r=\"1.8\"/>";
      }
      flush();
      if (!marks.empty()) s += std::string("<g fill=\"") + colour(i) + "\">" + marks + "</g>\n";
    }
  }
  // The legend: a swatch in the series' colour and dash, then its name.
  double lx = c.width - legend_w;
  for (size_t i = 0; i < c.series.size(); ++i) {
    double ly = top + 6 + row_h * i;
    std::string style = std::string("stroke=\"") + colour(i) + "\" stroke-width=\"2.5\"";
    if (*dash_pattern(i)) style += std::string(" stroke-dasharray=\"") + dash_pattern(i) + "\"";
    s += line(lx, ly, lx + 22, ly, style);
    std::string name = c.series[i].name;
    if (name.size() > 38) name = name.substr(0, 37) + "~";
    s += text(lx + 28, ly + 4, name, "start");
  }
  s += "</svg>\n";
  return s;
}

std::string bar_chart(const BarChart& c) {
  const size_t n = std::min(c.labels.size(), c.counts.size());
  const bool turned = n > 8;
  size_t longest = 0;
  for (size_t i = 0; i < n; ++i) longest = std::max(longest, c.labels[i].size());
  // A label turned 40 degrees reaches down about 3.9 px per character; the chart grows taller
  // rather than squeeze the bars under 120 px.
  const double left = 56, top = 40;
  const double bottom = turned ? 40 + 3.9 * static_cast<double>(longest) : 44;
  const int height = std::max(c.height, static_cast<int>(top + bottom + 120));
  const double x0 = left, y0 = top, pw = c.width - left - 12, ph = height - top - bottom;
  int64_t cmax = 1;
  for (size_t i = 0; i < n; ++i) cmax = std::max(cmax, c.counts[i]);
  // Headroom above the highest bar for its count.
  double step = std::max(1.0, nice_step(static_cast<double>(cmax), 5));
  double yhi = std::ceil(static_cast<double>(cmax) * 1.12 / step) * step;
  auto Y = [&](double v) { return y0 + ph - v / yhi * ph; };

  std::string s = svg_open(c.width, height);
  s += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  s += frame(c.title, c.x_label, c.y_label, x0, y0, pw, ph, height - 8);
  for (const auto& t : ticks_with_step(0, yhi, step)) {
    s += line(x0, Y(t.value), x0 + pw, Y(t.value), "stroke=\"#e4e4e4\"");
    s += text(x0 - 5, Y(t.value) + 4, t.label, "end");
  }
  double slot = n ? pw / static_cast<double>(n) : pw;
  for (size_t i = 0; i < n; ++i) {
    double cx = x0 + slot * (i + 0.5), bw = slot * 0.7;
    double v = static_cast<double>(c.counts[i]);
    s += "<rect class=\"bar\" x=\"" + px(cx - bw / 2) + "\" y=\"" + px(Y(v)) + "\" width=\"" +
         px(bw) + "\" height=\"" + px(y0 + ph - Y(v)) + "\" fill=\"" + colour(0) + "\"/>\n";
    s += text(cx, Y(v) - 3, std::to_string(c.counts[i]), "middle");
    double ly = y0 + ph + 14;
    if (turned)
      s += text(cx, ly, c.labels[i], "end",
                " transform=\"rotate(-40 " + px(cx) + " " + px(ly) + ")\"");
    else
      s += text(cx, ly, c.labels[i], "middle");
  }
  s += "</svg>\n";
  return s;
}

UlpBuckets ulp_buckets(const std::vector<uint64_t>& ulps) {
  // Bucket b >= 1 holds [2^(b-1), 2^b - 1]; bucket 0 holds 0; 65 finite buckets in all.
  std::vector<int64_t> finite(65, 0);
  int64_t infinite = 0;
  size_t highest = 1;
  for (uint64_t u : ulps) {
    if (u == kUlpInfinite) {
      ++infinite;
      continue;
    }
    size_t b = 0;
    for (uint64_t v = u; v; v >>= 1) ++b;  // bit width: 0 -> 0, 1 -> 1, 2..3 -> 2, ...
    ++finite[b];
    highest = std::max(highest, b);
  }
  UlpBuckets out;
  for (size_t b = 0; b <= highest; ++b) {
    if (b < 2) {
      out.labels.push_back(std::to_string(b));
    } else {
      uint64_t lo = uint64_t{1} << (b - 1);
      uint64_t hi = b == 64 ? std::numeric_limits<uint64_t>::max() - 1 : (uint64_t{1} << b) - 1;
      out.labels.push_back(std::to_string(lo) + "-" + std::to_string(hi));
    }
    out.counts.push_back(finite[b]);
  }
  out.labels.push_back("inf");
  out.counts.push_back(infinite);
  return out;
}

}  // namespace parity::reports::svg
