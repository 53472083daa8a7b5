#include "kiwi/report/plan_report.h"

#include <fmt/format.h>

#include "kiwi/report/layer_plan_table.h"
#include "kiwi/report/plan_figures.h"

namespace kiwi::report {
namespace {

std::string Html(const std::string& text) { return EscapeXml(text); }

std::string TableHtml(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table>\n<tr>";
  for (const std::string& h : headers) out += "<th>" + Html(h) + "</th>";
  out += "</tr>\n";
  for (const std::vector<std::string>& row : rows) {
    out += "<tr>";
    for (size_t i = 0; i < row.size(); ++i) {
      const bool section = i == 0 && !row[i].empty() && row[i][0] != ' ' && row.size() > 1 && row[1].empty();
      out += section ? "<th class=\"section\">" + Html(row[i]) + "</th>" : "<td>" + Html(row[i]) + "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 24px 32px; color: #222; max-width: 1180px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; white-space: pre; }
th:first-child, td:first-child { text-align: left; }
th.section { text-align: left; padding-top: 8px; }
.facts td { text-align: left; } .verdict { font-size: 15px; font-weight: bold; }
.note { color: #666; font-size: 12px; }
)";

}  // namespace

std::string RenderPlanReport(const PlanReport& r) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + Html(r.title) +
                    "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  out += "<h1>" + Html(r.title) + "</h1>\n<table class=\"facts\">\n";
  for (const auto& [key, value] : r.facts) out += "<tr><td>" + Html(key) + "</td><td>" + Html(value) + "</td></tr>\n";
  out += "</table>\n<p class=\"verdict\">" + Html(r.verdict) + "</p>\n";
  out += "<h2>Planners</h2>\n<p class=\"note\">Each planner's fastest plan that fits, on the same cost model and "
         "simulator. kiwi's search runs last and looks only for plans faster than the others' best (\"none "
         "faster\" when it finds none).</p>\n" + TableHtml(r.planners.headers, r.planners.rows);
  out += "<h2>Why it wins</h2>\n" + TableHtml(BreakdownHeader(r.breakdowns), BreakdownRows(r.breakdowns));
  if (!r.refinement.rows.empty())
    out += "<h2>Operator-level refinement</h2>\n<p class=\"note\">One layer of each strategy on the devices of one "
           "data-parallel replica, priced by the operator-level simulator: the layer as planned (its recomputation, the "
           "best sharding of those devices) beside KIWI's joint sharding + recomputation within the same peak memory.</p>\n" +
           TableHtml(r.refinement.headers, r.refinement.rows);
  out += "<h2>Pipeline timeline (one iteration)</h2>\n<p class=\"note\">Each stage's passes in its schedule's order, "
         "replayed from the simulator's per-stage times; the dashed line is the simulator's iteration.</p>\n" +
         TimelineSvg(r.timeline, r.best_plan.pp_degree, r.best.summary.iteration_seconds);
  out += "<h2>Memory per stage</h2>\n" + StageMemorySvg(r.best, r.budget_bytes);
  out += "<h2>Layers' strategies</h2>\n" + LayerStrategySvg(r.best_plan);
  out += "<h2>Throughput against the memory budget</h2>\n<p class=\"note\">kiwi's per-layer line shows the "
         "budgets where its search beats every alternative.</p>\n" + RenderSvg(r.throughput_curve);
  out += "<h2>The plan, layer by layer</h2>\n<pre>" + Html(LayerPlanTable(r.best_plan)) + "</pre>\n";
  return out + "</body>\n</html>\n";
}

}  // namespace kiwi::report
