#include "kiwi/report/plan_figures.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "kiwi/report/svg_plot.h"
#include "kiwi/util/units.h"

namespace kiwi::report {
namespace {

std::string Num(double v) { return fmt::format("{:.2f}", v); }

std::string Rect(double x, double y, double w, double h, const char* fill, const std::string& title) {
  return fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>)" "\n", Num(x),
                     Num(y), Num(std::max(w, 0.0)), Num(std::max(h, 0.0)), fill, EscapeXml(title));
}

std::string Text(double x, double y, const std::string& text, const char* anchor = "start", int size = 12) {
  return fmt::format(R"(<text x="{}" y="{}" font-size="{}" text-anchor="{}">{}</text>)" "\n", Num(x), Num(y), size, anchor,
                     EscapeXml(text));
}

std::string Svg(double width, double height, const std::string& body) {
  return fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" )"
                     R"(font-family="sans-serif">)" "\n{2}</svg>\n",
                     Num(width), Num(height), body);
}

// A legend row of (color, label) swatches from (x, y).
std::string Legend(double x, double y, const std::vector<std::pair<const char*, std::string>>& entries) {
  std::string out;
  for (const auto& [color, label] : entries) {
    out += Rect(x, y - 10, 12, 12, color, label);
    out += Text(x + 16, y, label);
    x += 16 + 7.5 * static_cast<double>(label.size()) + 18;
  }
  return out;
}

}  // namespace

std::string TimelineSvg(const sim::PipelineTimeline& timeline, int stages, double predicted_seconds) {
  constexpr double kLeft = 70, kRight = 20, kTop = 34, kRow = 34, kWidth = 1100;
  const double span = std::max(timeline.makespan, predicted_seconds);
  const double scale = span > 0.0 ? (kWidth - kLeft - kRight) / span : 0.0;
  const double height = kTop + kRow * stages + 60;
  const FigureColors& c = kFigureColors;
  std::string body;
  for (int s = 0; s < stages; ++s) body += Text(kLeft - 8, kTop + kRow * s + kRow * 0.62, fmt::format("stage {}", s), "end");
  for (const sim::TimelineBlock& b : timeline.blocks) {
    using Kind = sim::TimelineBlock::Kind;
    const char* fill = b.kind == Kind::kForward ? c.forward : b.kind == Kind::kBackward ? c.backward
                       : b.kind == Kind::kGradientSync                                ? c.gradient_sync
                                                                                      : c.optimizer_step;
    const char* what = b.kind == Kind::kForward ? "forward" : b.kind == Kind::kBackward ? "backward"
                       : b.kind == Kind::kGradientSync                                 ? "gradient sync"
                                                                                       : "optimizer step";
    const double x = kLeft + b.start * scale, w = (b.end - b.start) * scale, y = kTop + kRow * b.stage + 3;
    const std::string title = b.micro_batch >= 0
                                  ? fmt::format("stage {} {} micro-batch {} chunk {}: {} - {}", b.stage, what, b.micro_batch,
                                                b.chunk, FormatSeconds(b.start), FormatSeconds(b.end))
                                  : fmt::format("stage {} {}: {}", b.stage, what, FormatSeconds(b.end - b.start));
    body += Rect(x, y, std::max(w - 0.5, 0.5), kRow - 6, fill, title);
    if (b.micro_batch >= 0 && w > 16) body += Text(x + w / 2, y + kRow * 0.55, std::to_string(b.micro_batch), "middle", 10);
  }
  const double axis_y = kTop + kRow * stages + 4;
  body += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="#333"/>)" "\n", Num(kLeft), Num(axis_y),
                      Num(kWidth - kRight));
  for (double t : NiceTicks(0.0, span, 8)) {
    const double x = kLeft + t * scale;
    body += Text(x, axis_y + 16, FormatSeconds(t), "middle", 11);
  }
  const double px = kLeft + predicted_seconds * scale;
  body += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#333" stroke-dasharray="5,4"/>)" "\n",
                      Num(px), Num(kTop - 6), Num(axis_y));
  body += Text(px, kTop - 10, fmt::format("predicted iteration {}", FormatSeconds(predicted_seconds)), "end", 11);
  body += Legend(kLeft, height - 12,
                 {{c.forward, "forward"}, {c.backward, "backward (+ recompute)"}, {c.gradient_sync, "gradient sync"},
                  {c.optimizer_step, "optimizer step"}});
  return Svg(kWidth, height, body);
}

std::string StageMemorySvg(const sim::LayerSimResult& result, int64_t budget_bytes) {
  constexpr double kLeft = 80, kTop = 20, kPlot = 260, kBar = 46, kGap = 24;
  const int stages = static_cast<int>(result.stages.size());
  const double width = std::max(kLeft + stages * (kBar + kGap) + 40, 760.0);
  int64_t top = budget_bytes;
  for (const sim::StageResult& s : result.stages) top = std::max(top, s.peak_memory_bytes);
  const double scale = top > 0 ? kPlot / static_cast<double>(top) : 0.0;
  const FigureColors& c = kFigureColors;
  std::string body;
  for (double t : NiceTicks(0.0, static_cast<double>(top), 5)) {
    const double y = kTop + kPlot - t * scale;
    if (y < kTop - 1) continue;
    body += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="#eee"/>)" "\n", Num(kLeft), Num(y), Num(width - 20));
    body += Text(kLeft - 6, y + 4, FormatBytes(static_cast<int64_t>(t)), "end", 11);
  }
  for (int s = 0; s < stages; ++s) {
    const sim::StageMemorySplit& m = result.stages[static_cast<size_t>(s)].memory;
    const double x = kLeft + 12 + s * (kBar + kGap);
    double y = kTop + kPlot;
    for (const auto& [bytes, color, what] :
         std::array<std::tuple<int64_t, const char*, const char*>, 6>{{{m.parameters, c.parameters, "parameters"},
                                                                       {m.gradients, c.gradients, "gradients"},
                                                                       {m.optimizer_states, c.optimizer_states, "optimizer states"},
                                                                       {m.activations, c.activations, "activations"},
                                                                       {m.buffers, c.buffers, "backward / ZeRO buffers"},
                                                                       {m.reserved, c.reserved, "reserve"}}}) {
      const double h = static_cast<double>(bytes) * scale;
      y -= h;
      body += Rect(x, y, kBar, h, color, fmt::format("stage {} {}: {}", s, what, FormatBytes(bytes)));
    }
    body += Text(x + kBar / 2, kTop + kPlot + 16, std::to_string(s), "middle", 11);
  }
  const double by = kTop + kPlot - static_cast<double>(budget_bytes) * scale;
  body += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="{3}" stroke-width="2" stroke-dasharray="6,3"/>)" "\n",
                      Num(kLeft), Num(by), Num(width - 20), c.budget);
  body += Text(width - 20, by - 5, fmt::format("budget {}", FormatBytes(budget_bytes)), "end", 11);
  body += Text(kLeft + (width - kLeft) / 2, kTop + kPlot + 34, "pipeline stage", "middle", 11);
  const double height = kTop + kPlot + 70;
  body += Legend(kLeft, height - 10,
                 {{c.parameters, "parameters"}, {c.gradients, "gradients"}, {c.optimizer_states, "optimizer states"},
                  {c.activations, "activations"}, {c.buffers, "buffers"}, {c.reserved, "reserve"}});
  return Svg(width, height, body);
}

std::string LayerStrategySvg(const plan::LayerPlan& plan) {
  constexpr std::array<const char*, 10> kStrategyPalette = {"#a0cbe8", "#ffbe7d", "#b07aa1", "#b6992d", "#f1ce63",
                                                            "#86bcb6", "#ff9d9a", "#d4a6c8", "#fabfd2", "#d7b5a6"};
  constexpr double kLeft = 20, kTop = 24, kHeight = 40, kWidth = 1100;
  const int n = static_cast<int>(plan.layers.size());
  const double cell = n > 0 ? (kWidth - 2 * kLeft) / n : 0.0;
  const std::vector<int> stage_of = plan::LayerStages(plan);
  std::map<std::string, const char*> color;
  std::vector<std::pair<const char*, std::string>> legend;
  std::string body;
  for (int i = 0; i < n; ++i) {
    const std::string name = plan::StrategyName(plan.layers[static_cast<size_t>(i)]);
    if (!color.count(name)) {
      color[name] = kStrategyPalette[color.size() % kStrategyPalette.size()];
      legend.push_back({color[name], name});
    }
    body += Rect(kLeft + i * cell, kTop, cell, kHeight, color[name],
                 fmt::format("layer {} (stage {}): {}", i, stage_of[static_cast<size_t>(i)], name));
    if (i > 0 && stage_of[static_cast<size_t>(i)] != stage_of[static_cast<size_t>(i) - 1])
      body += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#222" stroke-width="2"/>)" "\n",
                          Num(kLeft + i * cell), Num(kTop - 6), Num(kTop + kHeight + 6));
  }
  body += Text(kLeft, kTop - 8, "layer 0", "start", 11);
  body += Text(kWidth - kLeft, kTop - 8, fmt::format("layer {}", n - 1), "end", 11);
  double y = kTop + kHeight + 26;
  for (size_t i = 0; i < legend.size(); i += 4) {  // four strategies a row
    std::vector<std::pair<const char*, std::string>> row(legend.begin() + static_cast<std::ptrdiff_t>(i),
                                                         legend.begin() + static_cast<std::ptrdiff_t>(std::min(i + 4, legend.size())));
    body += Legend(kLeft, y, row);
    y += 20;
  }
  return Svg(kWidth, y + 4, body);
}

}  // namespace kiwi::report
