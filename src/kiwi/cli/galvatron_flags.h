#pragma once
// The flags that read Galvatron's profiles instead of a kiwi model (kiwi hybrid, kiwi simulate), and the
// problem they make: the layer model, the cluster with Galvatron's measured links and memory reserve,
// and the cost model's overlap coefficient.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/cost_model.h"
#include "kiwi/cost/layer_profile.h"
#include "kiwi/cost/profile.h"
#include "kiwi/models/presets.h"
#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::cli {

// A layer-level planning problem: the model, the cluster it runs on, the cost model's options.
struct LayerProblem {
  cost::LayerModel model;
  cost::Cluster cluster;
  cost::CostModelOptions cost_options;
  std::vector<cost::CollectiveSample> collectives;  // measured collective times for the cost model
  std::string description;
};

// A model-zoo or HuggingFace model as a layer problem: priced by the cost model --cost's flags make.
struct CostFlags;
Result<LayerProblem> SpecLayerProblem(const models::ModelSpec& spec, cost::Cluster cluster, const CostFlags& cost);

struct GalvatronFlags {
  std::vector<std::string> profiles;  // COMPUTATION.json,MEMORY.json
  std::vector<int> layers;            // layers per Galvatron layer type
  int64_t seq = 0;
  std::vector<std::string> hardware;  // ALLREDUCE.json[,P2P.json[,OVERLAP.json]]
  std::string sp_time;                // SP_TIME.json: measured collective times
  std::string precision;              // fp32 | bf16 | fp16 (empty: the profiles' file name says)
  std::string time_mode, memory_mode;  // io::GalvatronTimeMode, io::GalvatronMemoryMode (empty: batch, static)
  bool sequence_parallel = false;
  int64_t hidden = 0;

  // Adds --galvatron-profiles and the flags that need it; `model` (--model, may be null) excludes them.
  // Returns the --galvatron-profiles option.
  CLI::Option* Add(CLI::App* app, CLI::Option* model);
  bool Given() const { return !profiles.empty(); }
  // The model and cluster the profiles describe; `base` is the cluster named by --cluster, and the
  // device's reserve becomes Galvatron's for a budget of `memory_budget_bytes` (cost::GalvatronReservedBytes).
  Result<LayerProblem> Load(cost::Cluster base, int64_t memory_budget_bytes) const;
  // What a plan file records of them (files by absolute path), and the flags a recorded source gives.
  plan::GalvatronSource Source(int64_t memory_budget_bytes) const;
  static GalvatronFlags FromSource(const plan::GalvatronSource& source);
};

}  // namespace kiwi::cli
