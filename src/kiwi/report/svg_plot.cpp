// SVG line plots (svg_plot.h): axes with 1-2-5 ticks, one polyline per series (broken at gaps),
// markers, a legend, and a grid of plots.
#include "kiwi/report/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace kiwi::report {
namespace {

constexpr double kLeft = 72, kRight = 16, kTop = 36, kBottom = 52;
constexpr std::array<const char*, 8> kPalette = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                 "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string Num(double v) { return fmt::format("{:.2f}", v); }

// A tick label: short, without trailing zeros ("0.5", "12", "1e+03").
std::string Label(double v) {
  if (v == 0.0) return "0";
  return fmt::format("{:.4g}", v);
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;  // data values

  double T(double v) const { return log ? std::log10(v) : v; }
  bool Valid(double v) const { return std::isfinite(v) && (!log || v > 0.0); }
  double Fraction(double v) const { return (T(v) - T(lo)) / (T(hi) - T(lo)); }
};

// The axis over the valid values (or the fixed range), widened to whole ticks unless fixed.
Axis MakeAxis(const std::vector<double>& values, bool log, std::optional<double> min, std::optional<double> max) {
  Axis a;
  a.log = log;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values)
    if (a.Valid(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  const bool fixed_lo = min && a.Valid(*min), fixed_hi = max && a.Valid(*max);
  if (fixed_lo) lo = *min;
  if (fixed_hi) hi = *max;
  if (!(lo <= hi)) lo = log ? 1.0 : 0.0, hi = log ? 10.0 : 1.0;
  if (lo == hi) {
    if (log) lo /= 2, hi *= 2;
    else lo -= std::max(1.0, std::abs(lo) * 0.1), hi += std::max(1.0, std::abs(hi) * 0.1);
  }
  if (log) {
    if (!fixed_lo) lo = std::pow(10.0, std::floor(std::log10(lo)));
    if (!fixed_hi) hi = std::pow(10.0, std::ceil(std::log10(hi)));
    a.ticks = LogTicks(lo, hi);
  } else {
    a.ticks = NiceTicks(lo, hi, 6);
    if (!fixed_lo && !a.ticks.empty()) lo = std::min(lo, a.ticks.front());
    if (!fixed_hi && !a.ticks.empty()) hi = std::max(hi, a.ticks.back());
  }
  a.lo = lo, a.hi = hi;
  return a;
}

struct Frame {
  double width, height, x0, y0, w, h;
  double X(const Axis& a, double v) const { return x0 + a.Fraction(v) * w; }
  double Y(const Axis& a, double v) const { return y0 + (1.0 - a.Fraction(v)) * h; }
};

void AppendAxes(std::string& out, const LinePlot& p, const Frame& f, const Axis& x, const Axis& y) {
  out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#333"/>)" "\n", Num(f.x0),
                     Num(f.y0), Num(f.w), Num(f.h));
  for (double t : x.ticks) {
    if (t < x.lo || t > x.hi) continue;
    const double px = f.X(x, t);
    out += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#ddd"/>)" "\n", Num(px), Num(f.y0), Num(f.y0 + f.h));
    out += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>)" "\n", Num(px),
                       Num(f.y0 + f.h + 15), Label(t));
  }
  for (double t : y.ticks) {
    if (t < y.lo || t > y.hi) continue;
    const double py = f.Y(y, t);
    out += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="#ddd"/>)" "\n", Num(f.x0), Num(py), Num(f.x0 + f.w));
    out += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)" "\n", Num(f.x0 - 6),
                       Num(py + 4), Label(t));
  }
  out += fmt::format(R"(<text x="{}" y="{}" font-size="14" text-anchor="middle" font-weight="bold">{}</text>)" "\n",
                     Num(f.x0 + f.w / 2), Num(f.y0 - 14), EscapeXml(p.title));
  out += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>)" "\n", Num(f.x0 + f.w / 2),
                     Num(f.height - 12), EscapeXml(p.x_label));
  out += fmt::format(R"svg(<text x="16" y="{0}" font-size="12" text-anchor="middle" transform="rotate(-90 16 {0})">{1}</text>)svg" "\n",
                     Num(f.y0 + f.h / 2), EscapeXml(p.y_label));
}

void AppendSeries(std::string& out, const Series& s, const std::string& color, const Frame& f, const Axis& x, const Axis& y) {
  const std::string dash = s.dashed ? R"( stroke-dasharray="6 4")" : "";
  std::string points, markers;
  auto flush = [&] {
    if (!points.empty())
      out += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="2"{} points="{}"/>)" "\n", color, dash, points);
    points.clear();
  };
  for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
    if (!x.Valid(s.x[i]) || !y.Valid(s.y[i])) {
      flush();
      continue;
    }
    const std::string px = Num(f.X(x, s.x[i])), py = Num(f.Y(y, s.y[i]));
    points += (points.empty() ? "" : " ") + px + "," + py;
    markers += fmt::format(R"(<circle cx="{}" cy="{}" r="3" fill="{}"/>)" "\n", px, py, color);
  }
  flush();
  out += markers;
}

void AppendLegend(std::string& out, const LinePlot& p, const std::vector<std::string>& colors, const Frame& f) {
  size_t longest = 0;
  for (const Series& s : p.series) longest = std::max(longest, s.name.size());
  const double w = 34 + 6.5 * static_cast<double>(longest), x = f.x0 + f.w - w - 6, y = f.y0 + 6;
  out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="white" fill-opacity="0.85" stroke="#999"/>)" "\n",
                     Num(x), Num(y), Num(w), Num(8 + 16 * static_cast<double>(p.series.size())));
  for (size_t i = 0; i < p.series.size(); ++i) {
    const double ly = y + 14 + 16 * static_cast<double>(i);
    const std::string dash = p.series[i].dashed ? R"( stroke-dasharray="6 4")" : "";
    out += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"{}/>)" "\n", Num(x + 6),
                       Num(ly - 4), Num(x + 26), Num(ly - 4), colors[i], dash);
    out += fmt::format(R"(<text x="{}" y="{}" font-size="11">{}</text>)" "\n", Num(x + 30), Num(ly), EscapeXml(p.series[i].name));
  }
}

// The plot's elements, drawn in a width x height box at the origin.
std::string PlotBody(const LinePlot& p) {
  std::vector<double> xs, ys;
  for (const Series& s : p.series) xs.insert(xs.end(), s.x.begin(), s.x.end()), ys.insert(ys.end(), s.y.begin(), s.y.end());
  const Axis x = MakeAxis(xs, p.log_x, std::nullopt, std::nullopt);
  const Axis y = MakeAxis(ys, p.log_y, p.y_min, p.y_max);
  const double width = p.width, height = p.height;
  const Frame f{width, height, kLeft, kTop, width - kLeft - kRight, height - kTop - kBottom};
  std::string out = fmt::format(R"(<rect width="{}" height="{}" fill="white"/>)" "\n", p.width, p.height);
  AppendAxes(out, p, f, x, y);
  std::vector<std::string> colors;
  for (size_t i = 0; i < p.series.size(); ++i)
    colors.push_back(p.series[i].color.empty() ? kPalette[i % kPalette.size()] : p.series[i].color);
  for (size_t i = 0; i < p.series.size(); ++i) AppendSeries(out, p.series[i], colors[i], f, x, y);
  if (!p.series.empty()) AppendLegend(out, p, colors, f);
  return out;
}

std::string Open(int width, int height) {
  return fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" )"
                     R"(font-family="Helvetica, Arial, sans-serif">)" "\n", width, height);
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(std::isfinite(lo) && std::isfinite(hi)) || lo > hi || target < 1) return ticks;
  const double span = hi > lo ? hi - lo : std::max(1.0, std::abs(lo));
  const double raw = span / target, power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10.0 * power;
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);  // 0.3 / 0.1 < 3
  for (double k = first; k <= last + 1e-9; k += 1.0) ticks.push_back(std::abs(k * step) < step * 1e-9 ? 0.0 : k * step);
  return ticks;
}

std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> ticks;
  if (!(lo > 0.0 && std::isfinite(hi)) || lo > hi) return ticks;
  const int first = static_cast<int>(std::floor(std::log10(lo))), last = static_cast<int>(std::ceil(std::log10(hi)));
  for (int e = first; e <= last; ++e) {
    ticks.push_back(std::pow(10.0, e));
    if (last - first <= 2 && e < last) ticks.push_back(2 * std::pow(10.0, e)), ticks.push_back(5 * std::pow(10.0, e));
  }
  return ticks;
}

std::string EscapeXml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string RenderSvg(const LinePlot& plot) { return Open(plot.width, plot.height) + PlotBody(plot) + "</svg>\n"; }

std::string RenderSvgGrid(const std::vector<LinePlot>& plots, int columns) {
  columns = std::max(1, columns);
  int cell_w = 1, cell_h = 1;
  for (const LinePlot& p : plots) cell_w = std::max(cell_w, p.width), cell_h = std::max(cell_h, p.height);
  const int rows = std::max(1, (static_cast<int>(plots.size()) + columns - 1) / columns);
  const int used = std::min(columns, std::max(1, static_cast<int>(plots.size())));
  std::string out = Open(cell_w * used, cell_h * rows);
  for (size_t i = 0; i < plots.size(); ++i) {
    const int col = static_cast<int>(i) % columns, row = static_cast<int>(i) / columns;
    out += fmt::format(R"svg(<g transform="translate({},{})">)svg" "\n", col * cell_w, row * cell_h) + PlotBody(plots[i]) + "</g>\n";
  }
  return out + "</svg>\n";
}

}  // namespace kiwi::report
