// `kiwi solvers [--family NAME] [--json]`: the solver registry (solve/registry.h), every solver kiwi
// has by family, with the subcommand that runs it and what it does.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <memory>

#include "kiwi/cli/command.h"
#include "kiwi/cli/common.h"
#include "kiwi/report/table.h"
#include "kiwi/solve/registry.h"

namespace kiwi::cli {
namespace {

struct SolversOptions {
  std::string family;  // empty: every family
  bool json = false;
};

constexpr solve::Family kFamilies[] = {solve::Family::kLayers, solve::Family::kHybrid, solve::Family::kRemat,
                                       solve::Family::kSharding, solve::Family::kJoint};

// Where a user reaches a family's solvers.
std::string UsedBy(solve::Family family) {
  switch (family) {
    case solve::Family::kLayers: return "kiwi plan (all of them)";
    case solve::Family::kRemat: return "kiwi remat --solver NAME";
    case solve::Family::kSharding: return "kiwi iopddl --solver NAME";
    case solve::Family::kJoint: return "kiwi joint --method NAME";
    case solve::Family::kHybrid: return "kiwi hybrid --method NAME";
  }
  return "";
}

int RunSolvers(const SolversOptions& o) {
  std::vector<solve::Family> families;
  for (solve::Family f : kFamilies)
    if (o.family.empty() || o.family == solve::FamilyName(f)) families.push_back(f);
  if (families.empty()) {
    std::vector<std::string> names;
    for (solve::Family f : kFamilies) names.push_back(solve::FamilyName(f));
    return ReportError(BadInput(fmt::format("--family: '{}' is not one of {}", o.family, fmt::join(names, ", "))));
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (solve::Family f : families)
      for (const solve::Solver& s : solve::Solvers())
        if (s.family == f)
          out.push_back({{"family", solve::FamilyName(f)}, {"name", s.name}, {"summary", s.summary}, {"run_with", UsedBy(f)}});
    PrintJson(out);
    return 0;
  }
  for (solve::Family f : families) {
    std::cout << fmt::format("{} ({}):\n", solve::FamilyName(f), UsedBy(f));
    report::Table t({"name", "what it does"});
    for (const solve::Solver& s : solve::Solvers())
      if (s.family == f) t.AddRow({s.name, s.summary});
    std::cout << t.Render() << '\n';
  }
  std::cout << "Every plan a solver returns is checked by the simulator (ir::Evaluate for sharding) before kiwi shows it.\n";
  return 0;
}

}  // namespace

Command AddSolversCommand(CLI::App& root) {
  auto o = std::make_shared<SolversOptions>();
  CLI::App* app = root.add_subcommand("solvers", "list every solver kiwi has, by family, and the command that runs it");
  app->add_option("--family", o->family, "only this family: layers | hybrid | remat | sharding | joint");
  app->add_flag("--json", o->json, "print one JSON array");
  return {app, [o] { return RunSolvers(*o); }};
}

}  // namespace kiwi::cli
