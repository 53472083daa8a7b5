// SVG line plots (report/svg_plot.h): ticks, coordinates, gaps, legend, escaping, grids.
#include "kiwi/report/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace kiwi::report {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void ExpectTicks(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
}

TEST(SvgPlot, NiceTicksAreOneTwoFiveStepsCoveringTheRange) {
  ExpectTicks(NiceTicks(0, 10, 5), {0, 2, 4, 6, 8, 10});
  ExpectTicks(NiceTicks(0.3, 0.95, 6), {0.2, 0.4, 0.6, 0.8, 1.0});  // step 0.65 / 6 -> 0.2
  ExpectTicks(NiceTicks(0.3, 0.95, 12), {0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0});  // 0.054 -> 0.1
  ExpectTicks(NiceTicks(-7, 12, 4), {-10, -5, 0, 5, 10, 15});
  EXPECT_FALSE(NiceTicks(5, 5, 5).empty());  // a single value still gets an axis
  EXPECT_TRUE(NiceTicks(2, 1, 5).empty());
  EXPECT_TRUE(NiceTicks(0, std::numeric_limits<double>::infinity(), 5).empty());
  ExpectTicks(LogTicks(1, 1000), {1, 10, 100, 1000});
  ExpectTicks(LogTicks(1, 100), {1, 2, 5, 10, 20, 50, 100});
  EXPECT_TRUE(LogTicks(0, 10).empty());
}

TEST(SvgPlot, SeriesBecomePolylinesWithMarkersAndALegend) {
  LinePlot p;
  p.title = "GPT <4 layers> & mesh 2x4";
  p.x_label = "memory (GB)";
  p.y_label = "normalized latency";
  p.series.push_back({"KIWI", {4, 6, 8}, {1.3, 1.1, 1.0}, "", false});
  p.series.push_back({"Alpa", {4, 6, 8}, {std::nan(""), 1.2, 1.0}, "#000000", true});
  const std::string svg = RenderSvg(p);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(Count(svg, "<polyline"), 2);
  EXPECT_EQ(Count(svg, "<circle"), 5);  // Alpa has no point at 4 GB
  EXPECT_NE(svg.find("GPT &lt;4 layers&gt; &amp; mesh 2x4"), std::string::npos);
  EXPECT_NE(svg.find(">KIWI</text>"), std::string::npos);
  EXPECT_NE(svg.find(">Alpa</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(svg.find("#000000"), std::string::npos);
  EXPECT_EQ(svg, RenderSvg(p));  // deterministic
}

// x from 0 to 10 over the plot's inner width (72 .. 560-16), y from 0 to 1 over (36 .. 380-52).
TEST(SvgPlot, PointsMapLinearlyIntoTheFrame) {
  LinePlot p;
  p.y_min = 0.0;
  p.y_max = 1.0;
  p.series.push_back({"s", {0, 10}, {0, 1}, "", false});
  const std::string svg = RenderSvg(p);
  EXPECT_NE(svg.find(R"(points="72.00,328.00 544.00,36.00")"), std::string::npos) << svg;
}

TEST(SvgPlot, GapsSplitTheLine) {
  LinePlot p;
  const double nan = std::nan("");
  p.series.push_back({"s", {1, 2, 3, 4, 5}, {1, 2, nan, 4, 5}, "", false});
  EXPECT_EQ(Count(RenderSvg(p), "<polyline"), 2);
  p.log_y = true;
  p.series[0].y = {1, 10, -1, 100, 1000};  // a non-positive value on a log axis is a gap too
  const std::string svg = RenderSvg(p);
  EXPECT_EQ(Count(svg, "<polyline"), 2);
  EXPECT_NE(svg.find(">1000</text>"), std::string::npos);
}

TEST(SvgPlot, EmptyPlotsAndGridsRender) {
  LinePlot empty;
  EXPECT_NE(RenderSvg(empty).find("</svg>"), std::string::npos);
  LinePlot a, b, c;
  a.title = "a", b.title = "b", c.title = "c";
  const std::string grid = RenderSvgGrid({a, b, c}, 2);
  EXPECT_EQ(Count(grid, "<g transform="), 3);
  EXPECT_NE(grid.find(R"(width="1120" height="760")"), std::string::npos);
  EXPECT_NE(grid.find("translate(0,380)"), std::string::npos);
  EXPECT_EQ(EscapeXml("a\"b'c"), "a&quot;b&apos;c");
}

}  // namespace
}  // namespace kiwi::report
