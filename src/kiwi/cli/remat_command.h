#pragma once
// Internal to `kiwi remat` (remat_command.cpp, remat_max_batch.cpp): its options and the output
// helpers both modes share.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiwi/cli/common.h"
#include "kiwi/solve/remat/problem.h"
#include "kiwi/util/result.h"

namespace kiwi::cli {

struct RematCliOptions {
  std::string path;
  ModelFlags model;
  std::string budget;
  double budget_fraction = 0.0;
  std::string solver = "auto";
  std::string cluster = "v100-nvlink-8";
  std::string out;
  SearchFlags search;
  CostFlags cost;
  bool quiet = false;
  bool json = false;
  bool max_batch = false;                // --max-batch: the largest batch whose plan fits the budget
  std::optional<int64_t> batch_of_file;  // --batch-of-file N: the batch a GRAPH file was built for
};

// --budget SIZE or --budget-fraction F (of `checkpoint_all_peak`), exactly one.
Result<int64_t> ResolveBudget(const RematCliOptions& o, const CLI::App& app, int64_t checkpoint_all_peak);

// The contract's `kiwi remat --json` fields of one plan.
nlohmann::json ResultJson(const solve::remat::RematResult& r, const solve::remat::RematProblem& p);
// The same as "field value" lines for humans.
std::string ResultText(const solve::remat::RematResult& r, const solve::remat::RematProblem& p);
// The schedule as plan JSON at `path`; `model_flags` are recorded when the graph came from --model.
Status WritePlan(const std::string& path, const solve::remat::RematResult& r, const RematCliOptions& o,
                 const plan::ModelFlags& model_flags);

// `kiwi remat ... --max-batch` (remat_max_batch.cpp).
int RunRematMaxBatch(const RematCliOptions& o, const CLI::App& app);

}  // namespace kiwi::cli
