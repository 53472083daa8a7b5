#pragma once
// The line plot of a budget sweep shared by the KIWI figure drivers (joint_fig5.cpp, joint_fig6.cpp):
// latency normalized to Alpa without a memory limit against the budget, one series per method.
#include <cmath>
#include <string>

#include "kiwi/report/svg_plot.h"
#include "kiwi/solve/joint/sweep.h"

inline kiwi::report::LinePlot SweepPlot(const kiwi::solve::joint::Sweep& s, const std::string& title) {
  using kiwi::solve::joint::JointMethod;
  kiwi::report::LinePlot p;
  p.title = title;
  p.x_label = "memory budget per device (GB)";
  p.y_label = "latency / Alpa without limit";
  for (JointMethod m : s.config.methods) {
    kiwi::report::Series series{kiwi::solve::joint::SweepMethodLabel(m), {}, {}, "", m != JointMethod::kKiwi};
    for (const auto& point : s.points) {
      series.x.push_back(static_cast<double>(point.budget) / 1e9);
      auto e = point.entries.find(m);
      series.y.push_back(e != point.entries.end() && e->second.feasible ? e->second.normalized : std::nan(""));
    }
    p.series.push_back(std::move(series));
  }
  return p;
}
