#pragma once
// Flags and output helpers shared by subcommands.
#include <CLI/CLI.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/io/file_io.h"
#include "kiwi/models/presets.h"
#include "kiwi/plan/plan.h"
#include "kiwi/sim/layer_simulator.h"
#include "kiwi/util/result.h"

namespace kiwi::cli {

// --model NAME and the size flags of CONTRACT.md (--layers --hidden --heads --seq --batch --ffn --vocab
// --dropout --dtype --optimizer), held in the form a plan records them (plan::ModelFlags).
struct ModelFlags {
  std::string model;
  plan::ModelFlags flags;

  void Add(CLI::App* app, const std::string& default_model);
  Result<models::ModelSpec> Load() const;
  Result<models::ModelOverrides> Overrides() const;  // the flags parsed, for a preset or an HF config
  // --hf-config FILE instead of --model: the sizes are the config's (ParseHfConfig refuses --layers,
  // --hidden, --heads, --ffn); --seq, --dtype, --optimizer, --attention apply, and --batch when
  // `with_batch` (false where the command takes the global batch elsewhere).
  Result<models::ModelSpec> LoadHfConfig(const std::string& path, bool with_batch) const;
};

// --time-limit SECONDS and --threads N (CONTRACT.md: every subcommand that searches).
struct SearchFlags {
  double time_limit_seconds = 60.0;
  int threads = 0;  // 0 = all cores
  // When the command started: --time-limit counts from here, reading and building included (a
  // 10,000-layer model spent 6 s building before a 5 s search).
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void Add(CLI::App* app);
  // What is left of --time-limit for the search: at least 10 ms (or the whole limit, if smaller), in
  // which searches return what they have, an answer or none.
  double SecondsLeft() const;
  // Whether all of --time-limit is spent (optional work is then skipped).
  bool Spent() const;
};

// --profile FILE (measured per-operator times, docs/cluster-format.md) and the cost model a subcommand
// prices with: the cluster's device, the profile's time for every operator it names.
struct CostFlags {
  std::string profile;

  void Add(CLI::App* app);
  // `collectives`: measured collective times beside --profile's (Galvatron's sp_time file).
  Result<cost::CostModel> Make(const cost::Cluster& cluster, const cost::CostModelOptions& options = {},
                               const std::vector<cost::CollectiveSample>& collectives = {}) const;
};

// Integer flags: CLI11 2.1 saturates an out-of-range value silently (--hidden 99999999999999999999
// was refused as "9223372036854775807 is larger than 16777216"); this says what the user typed.
CLI::Validator WholeNumber();

// For --out and --export: the file must be writable as WriteFileAtomically writes it (a new name, a
// regular file or a link to one), checked when the flags are parsed, before any search.
CLI::Validator OutputFile();

// --threads on commands that do not search (CONTRACT.md: accepted everywhere); they run on one thread.
void AddThreadsFlag(CLI::App* app);

// A graph given as a GRAPH file or built from --model (exactly one of the two).
Result<ir::Graph> LoadGraphOrModel(const std::string& path, const ModelFlags& model, const CLI::App& app);

// Prints "kiwi: error: <message>" (one line) on stderr and returns the contract's exit code.
int ReportError(const Error& error);

// Prints exactly one JSON object on stdout (CONTRACT.md --json).
void PrintJson(const nlohmann::json& object);

// "gpt: 4 layers, hidden 1024, 16 heads, seq 1024, batch 8, f32"
std::string DescribeModel(const models::ModelSpec& spec);
// Help text of --cluster, listing the presets.
std::string ClusterHelp();
// --batch N|auto where the batch may be searched (kiwi hybrid, kiwi plan): N, or nullopt for auto.
Result<std::optional<int64_t>> ParseBatch(const std::string& text);

// How a written plan names its cluster: a preset by name, a cluster file by its absolute path (so
// `kiwi simulate PLAN` finds it from any directory).
std::string ClusterReference(const std::string& given);
// `given` as an absolute, normalised path (as given when that fails).
std::string AbsolutePath(const std::string& given);
// Writes a layer-level plan file atomically: the model it was made for (`model`'s flags, and the
// HuggingFace config file by its absolute path when `hf_config` is given), the cluster as given on the
// command line (ClusterReference), the solver's name, the simulator's numbers as claims.
// A plan made from Galvatron's profiles records them (`galvatron`) instead of a model.
Status WriteLayerPlanFile(const std::string& path, const ModelFlags& model, const std::string& hf_config,
                          const std::string& cluster, const std::string& solver, const plan::LayerPlan& plan,
                          const sim::LayerSimResult& simulated, const plan::GalvatronSource* galvatron = nullptr);
// A framework's configuration as a layer plan of `layers` layers on `devices` devices: a torchtitan job
// config (.toml) or Megatron-LM arguments (anything else). Errors name the file and the option.
Result<plan::LayerPlan> ReadFrameworkConfig(const std::string& path, int devices, int layers);
// Whether `path` is such a configuration rather than plan JSON: a .toml file, or a file whose first
// non-blank character does not open a JSON object (a plan is one).
bool IsFrameworkConfig(const std::string& path);
// The line after a plan file is written: how to replay it and, for a HuggingFace config's plan, run it.
std::string PlanWrittenLine(const std::string& path, const std::string& hf_config);
// The model a plan file was made for: its HuggingFace config (hf_config) or its preset, with its flags.
Result<models::ModelSpec> LoadPlanModelSpec(const plan::Plan& plan);
// An operator-level plan's JSON for `kiwi simulate` with `graph`: io::WritePlanJson's, except that a
// scalar's replicated layout is written "" (its "R" reads back as one dim: the rank is read off the text).
std::string OperatorPlanJson(const plan::Plan& plan, const ir::Graph& graph);
// "v100-nvlink-8: 8 x V100-SXM2-16GB (16.0 GiB), nvlink2 150 GB/s"
std::string DescribeCluster(const cost::Cluster& cluster);

}  // namespace kiwi::cli
