#pragma once
// Line plots as standalone SVG text (no dependencies), for the benchmark figures (KIWI Fig. 5-7):
//
//   LinePlot p;
//   p.title = "GPT, mesh 2x4";
//   p.x_label = "memory budget per device (GB)";
//   p.y_label = "latency / Alpa without limit";
//   p.series.push_back({"KIWI", {4, 6, 8}, {1.3, 1.1, 1.0}});
//   std::string svg = RenderSvg(p);                 // one plot
//   std::string grid = RenderSvgGrid({p, q}, 2);    // several, side by side
//
// Points whose x or y is not finite are gaps: the line breaks there (a method without a plan at that
// budget). Output is deterministic (fixed number formatting, stable order).
#include <optional>
#include <string>
#include <vector>

namespace kiwi::report {

struct Series {
  std::string name;
  std::vector<double> x, y;  // same length
  std::string color;         // "" = the palette's next color
  bool dashed = false;
};

struct LinePlot {
  std::string title;
  std::string x_label, y_label;
  std::vector<Series> series;
  bool log_x = false, log_y = false;  // base-10 axes (non-positive values become gaps)
  std::optional<double> y_min, y_max; // fixed y range (default: the data's, padded)
  int width = 560, height = 380;      // pixels of one plot
};

std::string RenderSvg(const LinePlot& plot);
std::string RenderSvgGrid(const std::vector<LinePlot>& plots, int columns);

// Axis ticks at 1, 2 or 5 times a power of ten covering [lo, hi], about `target` of them; for log axes
// the powers of ten in range (plus 2x and 5x when there are few). Empty when lo > hi or not finite.
std::vector<double> NiceTicks(double lo, double hi, int target);
std::vector<double> LogTicks(double lo, double hi);

// "&", "<", ">", quotes escaped for SVG text.
std::string EscapeXml(const std::string& text);

}  // namespace kiwi::report
