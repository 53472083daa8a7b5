#include "kiwi/cli/galvatron_flags.h"

#include <algorithm>

#include <fmt/format.h>

#include "kiwi/cli/common.h"
#include "kiwi/cost/pipeline.h"
#include "kiwi/io/galvatron_profiles.h"
#include "kiwi/models/layer_model.h"
#include "kiwi/models/presets.h"

namespace kiwi::cli {

CLI::Option* GalvatronFlags::Add(CLI::App* app, CLI::Option* model) {
  CLI::Option* given = app->add_option("--galvatron-profiles", profiles,
                                       "read Galvatron's profiles instead of --model: COMPUTATION.json,MEMORY.json")
                           ->delimiter(',');
  if (model != nullptr) given->excludes(model);
  CLI::Option* count = app->add_option("--galvatron-layers", layers,
                                       "with --galvatron-profiles (which need it): layers per layer type, e.g. 24,24")
                           ->delimiter(',')
                           ->check(CLI::Range(1, models::kMaxLayers))
                           ->needs(given);
  given->needs(count);  // the profiles price one layer of each type; how many there are is the user's
  app->add_option("--galvatron-seq", seq, "with --galvatron-profiles: the sequence length to use")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->needs(given);
  app->add_option("--galvatron-hardware", hardware,
                  "Galvatron hardware profiles: ALLREDUCE.json[,P2P.json[,OVERLAP.json]]")
      ->delimiter(',')
      ->needs(given);
  app->add_option("--galvatron-sp-time", sp_time,
                  "with --galvatron-profiles: Galvatron's collective times over message sizes (sp_time_*.json), "
                  "which then price the collectives")
      ->needs(given);
  app->add_option("--galvatron-precision", precision,
                  fmt::format("with --galvatron-profiles: the precision they were taken in and training runs in ({}; "
                              "default: what the computation profile's file name says, else fp32)",
                              io::kGalvatronPrecisionNames))
      ->needs(given);
  app->add_option("--galvatron-time-mode", time_mode,
                  fmt::format("with --galvatron-profiles: how the computation profile was taken, Galvatron's "
                              "time_profile_mode ({}; default batch: a line over micro-batch sizes where several)",
                              io::kGalvatronTimeModeNames))
      ->needs(given);
  app->add_option("--galvatron-memory-mode", memory_mode,
                  fmt::format("with --galvatron-profiles: how the memory profile was taken, Galvatron's "
                              "memory_profile_mode ({}; default static)", io::kGalvatronMemoryModeNames))
      ->needs(given);
  app->add_flag("--galvatron-sp", sequence_parallel,
                "with --galvatron-profiles: read their sequence-parallel memory entries (\"layertype_0_sp\", ...) "
                "first, as Galvatron does with sequence_parallel on")
      ->needs(given);
  app->add_option("--galvatron-hidden", hidden,
                  "with --galvatron-profiles: the model's hidden size, so TP's collectives carry [seq, hidden] in "
                  "the training precision as Galvatron's do (default: twice the checkpointed activation)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->needs(given);
  return given;
}

Result<LayerProblem> GalvatronFlags::Load(cost::Cluster base, int64_t memory_budget_bytes) const {
  if (profiles.size() != 2) return BadInput("--galvatron-profiles: give COMPUTATION.json,MEMORY.json");
  io::GalvatronModelOptions mo;
  mo.layers_per_type = layers;
  mo.seq = seq;
  mo.sequence_parallel = sequence_parallel;
  mo.hidden = hidden;
  if (std::optional<io::GalvatronNameError> bad = io::SetGalvatronNames(precision, time_mode, memory_mode, mo)) {
    std::string flag = fmt::format("--galvatron-{}", bad->key);
    std::replace(flag.begin(), flag.end(), '_', '-');
    return BadInput(fmt::format("{}: {}", flag, bad->message));
  }
  if ((mo.time_mode == io::GalvatronTimeMode::kSequence || mo.memory_mode == io::GalvatronMemoryMode::kSequence) &&
      seq <= 0)
    return BadInput("--galvatron-seq: the sequence profile modes evaluate the profiles at a sequence length: give it");
  Result<cost::LayerModel> model = io::ReadGalvatronModel(profiles[0], profiles[1], mo);
  if (!model) return model.error();
  LayerProblem p{std::move(*model), std::move(base), {}, {}, ""};
  if (!hardware.empty() || !sp_time.empty()) {
    const auto file = [&](size_t i) { return i < hardware.size() ? hardware[i] : ""; };
    if (hardware.size() > 3) return BadInput("--galvatron-hardware: give at most ALLREDUCE.json,P2P.json,OVERLAP.json");
    Result<io::GalvatronHardware> hw = io::ReadGalvatronHardware(file(0), file(1), file(2), p.cluster, sp_time);
    if (!hw) return hw.error();
    p.cluster = std::move(hw->cluster);
    p.cost_options.overlap_slowdown = hw->overlap_coefficient;
    p.collectives = std::move(hw->collectives);
  }
  p.cluster.device.reserved_bytes = cost::GalvatronReservedBytes(memory_budget_bytes);
  p.description = fmt::format("Galvatron profiles {}: {} layers", profiles[1], p.model.layers.size());
  return p;
}

Result<LayerProblem> SpecLayerProblem(const models::ModelSpec& spec, cost::Cluster cluster, const CostFlags& cost) {
  Result<cost::CostModel> cm = cost.Make(cluster);
  if (!cm) return cm.error();
  Result<cost::LayerModel> model = models::BuildSpecLayerModel(spec, *cm);
  if (!model) return model.error();
  return LayerProblem{std::move(*model), std::move(cluster), {}, {}, DescribeModel(spec)};
}

plan::GalvatronSource GalvatronFlags::Source(int64_t memory_budget_bytes) const {
  plan::GalvatronSource s;
  for (const std::string& f : profiles) s.profiles.push_back(AbsolutePath(f));
  for (const std::string& f : hardware) s.hardware.push_back(f.empty() ? f : AbsolutePath(f));
  if (!sp_time.empty()) {
    s.hardware.resize(3);
    s.hardware.push_back(AbsolutePath(sp_time));
  }
  s.layers = layers;
  s.seq = seq;
  s.precision = precision;
  s.time_mode = time_mode;
  s.memory_mode = memory_mode;
  s.sequence_parallel = sequence_parallel;
  s.hidden = hidden;
  s.memory_budget_bytes = memory_budget_bytes;
  return s;
}

GalvatronFlags GalvatronFlags::FromSource(const plan::GalvatronSource& source) {
  GalvatronFlags f;
  f.profiles = source.profiles;
  f.layers = source.layers;
  f.seq = source.seq;
  f.hardware = source.hardware;
  if (f.hardware.size() > 3) {
    f.sp_time = f.hardware[3];
    f.hardware.resize(3);
  }
  f.precision = source.precision;
  f.time_mode = source.time_mode;
  f.memory_mode = source.memory_mode;
  f.sequence_parallel = source.sequence_parallel;
  f.hidden = source.hidden;
  return f;
}

}  // namespace kiwi::cli
