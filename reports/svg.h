// A small SVG plotting layer for the HTML report: line charts, bar histograms and the text
// escaping they need. Written by us, no external tools. Torch-free, JSON-free.
//
// Every function returns one inline <svg> element (explicit width, height and viewBox) as a
// string. Output is deterministic: no randomness, and every number is printed with a fixed
// printf format in the "C" locale (the report never calls setlocale).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parity::reports::svg {

// Text for XML character data and attribute values: & < > " ' become entities.
std::string escape(const std::string& text);

// The series colour for index i: a fixed palette of 10 colours, cycling. Series 10..19 reuse
// the colours with a dashed line, 20..29 dotted (dash_pattern), so ~20 cells stay apart.
const char* colour(size_t i);
const char* dash_pattern(size_t i);  // "" (solid), "6 3" or "2 2"

// Fixed formatting: "%.*f" with `decimals` digits, "-0.00" printed as "0.00".
std::string fixed(double v, int decimals);

struct Tick {
  double value = 0;
  std::string label;
};

// Linear ticks: multiples of a 1, 2 or 5 x 10^k step inside [lo, hi], about `target` of them
// (at least 2 when lo < hi). Labels carry as many decimals as the step needs.
std::vector<Tick> linear_ticks(double lo, double hi, int target = 6);

// Log10 ticks, for 0 < lo <= hi: the powers of ten from 10^floor(log10 lo) to
// 10^ceil(log10 hi), every k-th decade when there are more than 9 (k the smallest that brings
// them to 9 or fewer). Labels: "0.01" .. "1000" for 10^-2 .. 10^3, else "1e-7", "1e5".
std::vector<Tick> log_ticks(double lo, double hi);

struct Point {
  double x = 0, y = 0;
};

struct Series {
  std::string name;
  std::vector<Point> points;  // in x order
};

enum class YScale { Linear, Log10 };

// A line chart, x = step. Each series is a polyline with a small circle on every drawn point
// (an isolated point stays visible). Points that cannot be drawn are skipped and break the
// line: non-finite x or y, and on a Log10 axis every y <= 0 (a bitwise-equal step's |delta|
// is 0: the caption, not the plot, says how many). The legend, right of the plot, lists every
// series in order; the chart grows taller when the legend needs it.
struct LineChart {
  std::string title, x_label, y_label;
  YScale y_scale = YScale::Linear;
  std::vector<Series> series;
  int width = 1100, height = 360;  // pixels, before the legend makes it taller
};
std::string line_chart(const LineChart& chart);

// How many points of `s` line_chart draws on the given scale (the rest are skipped).
size_t drawable_points(const Series& s, YScale scale);

// A histogram over named buckets: one bar per bucket, its count written above it, y linear
// from 0. Bucket labels are set under the bars, turned 40 degrees when there are more than 8
// (the chart then grows taller when long labels need it).
struct BarChart {
  std::string title, x_label, y_label;
  std::vector<std::string> labels;
  std::vector<int64_t> counts;  // one per label
  int width = 560, height = 260;
};
std::string bar_chart(const BarChart& chart);

// Ulp distances in buckets 0, 1, 2-3, 4-7, ..., 2^k..2^(k+1)-1, then "inf" (kUlpInfinite, a
// NaN/Inf mismatch). The finite buckets run from 0 up to the highest non-empty one (at least
// "0" and "1"); "inf" is always last, possibly empty.
struct UlpBuckets {
  std::vector<std::string> labels;
  std::vector<int64_t> counts;
};
UlpBuckets ulp_buckets(const std::vector<uint64_t>& ulps);

}  // namespace parity::reports::svg
