#include "kiwi/io/torchtitan_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>
#include <toml++/toml.h>

#include "kiwi/io/file_io.h"
#include "kiwi/io/uniform_plan.h"
#include "kiwi/util/one_line.h"

namespace kiwi::io {
namespace {

constexpr std::string_view kTorchtitan = "torchtitan";

// torchtitan's selective layer checkpointing with option k checkpoints a rank's layers whose count
// (from 1, over the layers the rank builds) is a multiple of k: the (k-1)-th, (2k-1)-th, ... of each stage.
bool EveryKth(size_t within_stage, int64_t k) { return (static_cast<int64_t>(within_stage) + 1) % k == 0; }

// Each layer's index among its stage's layers (the count torchtitan's every-k-th checkpointing keeps).
std::vector<size_t> IndexWithinStage(const plan::LayerPlan& p) {
  const std::vector<int> stages = plan::LayerStages(p);
  std::vector<size_t> within(p.layers.size(), 0);
  for (size_t i = 1; i < within.size(); ++i) within[i] = stages[i] == stages[i - 1] ? within[i - 1] + 1 : 0;
  return within;
}

// [activation_checkpoint]'s mode and option for the plan's checkpointing.
Result<std::pair<std::string, std::string>> Checkpointing(const plan::LayerPlan& p) {
  const size_t n = p.layers.size();
  size_t checkpointed = 0;
  for (const plan::LayerStrategy& s : p.layers) checkpointed += s.checkpoint ? 1 : 0;
  if (checkpointed == n) return std::pair<std::string, std::string>{"full", ""};
  if (checkpointed == 0)
    return p.layers.front().SelectiveRecompute() ? std::pair<std::string, std::string>{"selective", "op"}
                                                 : std::pair<std::string, std::string>{"none", ""};
  for (const plan::LayerStrategy& s : p.layers)
    if (!s.checkpoint && s.SelectiveRecompute())
      return Unexpressible(0, "op-level selective checkpointing beside checkpointed layers", kTorchtitan);
  const std::vector<size_t> within = IndexWithinStage(p);
  for (int64_t k = 2; k <= static_cast<int64_t>(n) && p.virtual_stages == 1; ++k) {
    bool matches = true;
    for (size_t i = 0; i < n && matches; ++i) matches = p.layers[i].checkpoint == EveryKth(within[i], k);
    if (matches) return std::pair<std::string, std::string>{"selective", std::to_string(k)};
  }
  return BadInput("checkpointing some layers: torchtitan's selective_ac_option k checkpoints every k-th layer of each "
                  "stage, and this plan checkpoints others");
}

// torchtitan splits a pipeline's model chunks evenly over the layers plus `first_less` and `last_less`
// (its embeddings' and output's weight in layers): every chunk has per_chunk layers but the first
// (per_chunk - first_less) and the last (per_chunk - last_less).
struct Split {
  int64_t per_chunk = 0, first_less = 0, last_less = 0;
};
Result<Split> SplitOf(const plan::LayerPlan& p) {
  const int64_t layers = static_cast<int64_t>(p.layers.size());
  const int64_t chunks = p.NumChunks();
  std::vector<int64_t> parts(p.pp_partition.begin(), p.pp_partition.end());
  if (parts.empty()) parts.assign(static_cast<size_t>(chunks), chunks > 0 ? layers / chunks : 0);
  Split s;
  s.per_chunk = chunks > 2 ? parts[1] : std::max(parts.front(), parts.back());
  bool fits = static_cast<int64_t>(parts.size()) == chunks && parts.front() <= s.per_chunk && parts.back() <= s.per_chunk;
  for (size_t c = 1; c + 1 < parts.size(); ++c) fits = fits && parts[c] == s.per_chunk;
  int64_t total = 0;
  for (int64_t part : parts) total += part;
  if (!fits || total != layers)
    return BadInput("stages whose layers torchtitan's split cannot give (equal chunks, the first and last possibly fewer)");
  s.first_less = s.per_chunk - parts.front();
  s.last_less = chunks > 1 ? s.per_chunk - parts.back() : 0;
  return s;
}

const char* ScheduleName(const plan::LayerPlan& p) {
  if (p.virtual_stages > 1) return "Interleaved1F1B";
  return p.pipeline == plan::PipelineSchedule::kGPipe ? "GPipe" : "1F1B";
}

}  // namespace

Result<std::string> WriteTorchtitanConfig(const plan::LayerPlan& p) {
  KIWI_RETURN_IF_ERROR(CheckOneStrategy(p, kTorchtitan));
  const plan::LayerStrategy& s = p.layers.front();
  if (s.ZeroStage() == plan::Zero::kOptimizerStates || s.ZeroStage() == plan::Zero::kGradients)
    return Unexpressible(0, fmt::format("{} (torchtitan has FSDP, ZeRO-3, and DDP)", plan::DataParallelName(s.ZeroStage())),
                         kTorchtitan);
  if (s.ZeroStage() == plan::Zero::kNone && s.cp > 1)
    return Unexpressible(0, "plain data parallelism beside context parallelism (torchtitan shards over dp_shard x cp)",
                         kTorchtitan);
  if (s.tp > 1 && !s.SequenceParallel())
    return Unexpressible(0, "tensor parallelism without sequence parallelism (torchtitan's TP plans are sequence parallel)",
                         kTorchtitan);
  Result<Split> split = SplitOf(p);
  if (!split) return split.error();
  const int64_t replicas = s.Replicas();  // torchtitan's data-parallel ranks: dp_replicate x dp_shard
  if (p.micro_batches < 1 || p.global_batch % (int64_t{p.micro_batches} * replicas) != 0)
    return BadInput(fmt::format("a batch of {} that does not split into {} micro-batches over {} data-parallel ranks",
                                p.global_batch, p.micro_batches, replicas));
  Result<std::pair<std::string, std::string>> ac = Checkpointing(p);
  if (!ac) return ac.error();
  const bool sharded = s.ZeroStage() == plan::Zero::kParameters;  // DDP beside CP was refused above
  const int64_t micro_batch = p.global_batch / p.micro_batches / replicas;
  // With pipelining the local batch is split into micro-batches; without it, micro-batches accumulate.
  const int64_t local = p.pp_degree > 1 ? p.global_batch / replicas : micro_batch;
  std::string out = "# kiwi's plan as torchtitan's job config: its [training], [parallelism] and [activation_checkpoint]\n"
                    "# sections (add [job], [model], [optimizer], ... of your own).\n";
  out += fmt::format("[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\n\n", local, p.global_batch);
  out += fmt::format("[parallelism]\ndata_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\n",
                     sharded ? 1 : replicas, sharded ? replicas : 1);
  out += fmt::format("tensor_parallel_degree = {}\npipeline_parallel_degree = {}\npipeline_parallel_schedule = \"{}\"\n",
                     s.tp, p.pp_degree, ScheduleName(p));
  out += fmt::format("pipeline_parallel_microbatch_size = {}\n", micro_batch);
  if (p.pp_degree > 1)
    out += fmt::format("pipeline_parallel_layers_per_stage = {}\npipeline_parallel_first_stage_less_layers = {}\n"
                       "pipeline_parallel_last_stage_less_layers = {}\n",
                       split->per_chunk, split->first_less, split->last_less);
  out += fmt::format("context_parallel_degree = {}\nexpert_parallel_degree = {}\n\n", s.cp, s.ep);
  out += fmt::format("[activation_checkpoint]\nmode = \"{}\"\n", ac->first);
  if (!ac->second.empty()) out += fmt::format("selective_ac_option = \"{}\"\n", ac->second);
  return out;
}

namespace {

// One field of a section: its value, the default when absent, kBadInput naming it when of another type.
struct Fields {
  const toml::table& root;
  const std::string& source;

  Error Bad(std::string_view section, std::string_view key, std::string_view what) const {
    return BadInput(OneLine(fmt::format("{}: [{}] {}: {}", source, section, key, what)));
  }
  Result<int64_t> Int(std::string_view section, std::string_view key, int64_t fallback, int64_t min) const {
    const toml::node_view<const toml::node> node = root[section][key];
    if (!node) return fallback;
    const std::optional<int64_t> v = node.value_exact<int64_t>();
    if (!v || *v < min || *v > (int64_t{1} << 40))
      return Bad(section, key, fmt::format("must be an integer of at least {}", min));
    return *v;
  }
  Result<std::string> String(std::string_view section, std::string_view key, std::string fallback) const {
    const toml::node_view<const toml::node> node = root[section][key];
    if (!node) return fallback;
    if (const std::optional<std::string> v = node.value_exact<std::string>()) return *v;
    if (const std::optional<int64_t> v = node.value_exact<int64_t>()) return std::to_string(*v);  // selective_ac_option = 2
    return Bad(section, key, "must be a string");
  }
};

}  // namespace

Result<plan::LayerPlan> ParseTorchtitanConfig(std::string_view text, const std::string& source, int num_devices,
                                              int num_layers) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return BadInput(OneLine(fmt::format("{}: line {}: {}", source, e.source().begin.line, e.description())));
  }
  const Fields f{root, source};
  Result<int64_t> replicate = f.Int("parallelism", "data_parallel_replicate_degree", 1, 1),
                  shard = f.Int("parallelism", "data_parallel_shard_degree", -1, -1),
                  tp = f.Int("parallelism", "tensor_parallel_degree", 1, 1),
                  pp = f.Int("parallelism", "pipeline_parallel_degree", 1, 1),
                  cp = f.Int("parallelism", "context_parallel_degree", 1, 1),
                  ep = f.Int("parallelism", "expert_parallel_degree", 1, 1),
                  micro = f.Int("parallelism", "pipeline_parallel_microbatch_size", 1, 1),
                  per_stage = f.Int("parallelism", "pipeline_parallel_layers_per_stage", 0, 1),
                  first_less = f.Int("parallelism", "pipeline_parallel_first_stage_less_layers", 1, 0),
                  last_less = f.Int("parallelism", "pipeline_parallel_last_stage_less_layers", 1, 0),
                  local = f.Int("training", "local_batch_size", 8, 1),
                  global = f.Int("training", "global_batch_size", -1, -1);
  for (const Result<int64_t>* r :
       {&replicate, &shard, &tp, &pp, &cp, &ep, &micro, &per_stage, &first_less, &last_less, &local, &global})
    if (!*r) return r->error();
  Result<std::string> schedule = f.String("parallelism", "pipeline_parallel_schedule", "1F1B"),
                      mode = f.String("activation_checkpoint", "mode", "none"),
                      option = f.String("activation_checkpoint", "selective_ac_option", "2");
  for (const Result<std::string>* r : {&schedule, &mode, &option})
    if (!*r) return r->error();

  const int64_t fixed = *replicate * *tp * *pp * *cp;
  if (*shard == 0) return f.Bad("parallelism", "data_parallel_shard_degree", "must be -1 (the devices left) or positive");
  if (*shard == -1) {
    if (fixed > num_devices || num_devices % fixed != 0)
      return f.Bad("parallelism", "tensor_parallel_degree", fmt::format("the degrees multiply to {}, which does not divide "
                                                                        "the {} devices", fixed, num_devices));
    *shard = num_devices / fixed;
  }
  if (fixed * *shard != num_devices)
    return f.Bad("parallelism", "data_parallel_shard_degree",
                 fmt::format("the degrees multiply to {}, not the {} devices", fixed * *shard, num_devices));
  if (*replicate > 1 && *shard > 1)
    return f.Bad("parallelism", "data_parallel_replicate_degree",
                 "HSDP (replicate and shard both above 1) shards within groups, which kiwi does not model");
  const int64_t replicas = *replicate * *shard;  // data-parallel ranks, each a CP group
  if ((replicas * *cp) % *ep != 0)
    return f.Bad("parallelism", "expert_parallel_degree",
                 fmt::format("{} does not divide the {} data x context parallel ranks", *ep, replicas * *cp));
  plan::LayerPlan p;
  p.pp_degree = static_cast<int>(*pp);
  const bool looped = *schedule == "Interleaved1F1B";
  if (*schedule == "GPipe") {
    p.pipeline = plan::PipelineSchedule::kGPipe;
  } else if (!looped && *schedule != "1F1B") {
    return f.Bad("parallelism", "pipeline_parallel_schedule",
                 fmt::format("'{}' is not one kiwi models (1F1B, GPipe, Interleaved1F1B)", *schedule));
  }
  if (*pp > 1) {
    // The model chunks: layers_per_stage of the weighted layers each, or one per rank (two with a looped schedule).
    const int64_t weighted = num_layers + *first_less + *last_less;
    const int64_t chunks = *per_stage > 0 ? (weighted + *per_stage - 1) / *per_stage : *pp * (looped ? 2 : 1);
    if (chunks % *pp != 0 || weighted % chunks != 0 || (chunks > *pp) != looped)
      return f.Bad("parallelism", "pipeline_parallel_layers_per_stage",
                   fmt::format("the {} layers (and {} + {} for the first and last stage) do not split into equal chunks, "
                               "{} per rank with {}", num_layers, *first_less, *last_less,
                               looped ? "several" : "one", *schedule));
    const int64_t per_chunk = weighted / chunks;
    if (per_chunk <= std::max(*first_less, *last_less))
      return f.Bad("parallelism", "pipeline_parallel_first_stage_less_layers",
                   fmt::format("leaves the first or last stage without layers ({} per chunk)", per_chunk));
    p.virtual_stages = static_cast<int>(chunks / *pp);
    p.pp_partition.assign(static_cast<size_t>(chunks), static_cast<int>(per_chunk));
    p.pp_partition.front() -= static_cast<int>(*first_less);
    p.pp_partition.back() -= static_cast<int>(*last_less);
  } else if (looped) {
    return f.Bad("parallelism", "pipeline_parallel_schedule", "Interleaved1F1B needs pipeline_parallel_degree above 1");
  }
  const int64_t chunks = p.NumChunks();
  const int64_t batch = *global == -1 ? *local * replicas : *global;
  if (batch % (*local * replicas) != 0)
    return f.Bad("training", "global_batch_size",
                 fmt::format("{} is not a multiple of local_batch_size {} x {} data-parallel ranks", batch, *local, replicas));
  const int64_t accumulation = batch / (*local * replicas);
  if (*pp > 1 && *local % *micro != 0)
    return f.Bad("parallelism", "pipeline_parallel_microbatch_size",
                 fmt::format("{} does not divide local_batch_size {}", *micro, *local));
  p.global_batch = batch;
  p.micro_batches = static_cast<int>(accumulation * (*pp > 1 ? *local / *micro : 1));

  plan::LayerStrategy s;
  s.tp = static_cast<int>(*tp);
  s.cp = static_cast<int>(*cp);
  s.ep = static_cast<int>(*ep);
  s.dp = static_cast<int>(replicas * *cp);
  s.zero = *shard > 1 || *cp > 1 ? plan::Zero::kParameters : plan::Zero::kNone;  // FSDP over dp_shard x cp
  s.sequence_parallel = *tp > 1;
  p.layers.assign(static_cast<size_t>(num_layers), s);
  if (*mode == "full") {
    for (plan::LayerStrategy& l : p.layers) l.checkpoint = true;
  } else if (*mode == "selective") {
    if (*option == "op") {
      for (plan::LayerStrategy& l : p.layers) l.selective_recompute = true;
    } else {
      int64_t k = 0;
      try {
        size_t used = 0;
        k = std::stoll(*option, &used);
        if (used != option->size()) k = 0;
      } catch (const std::exception&) {
        k = 0;
      }
      if (k < 1)
        return f.Bad("activation_checkpoint", "selective_ac_option", fmt::format("must be 'op' or a positive integer, got '{}'", *option));
      if (chunks > *pp && k > 1)
        return f.Bad("activation_checkpoint", "selective_ac_option", "every k-th layer with Interleaved1F1B, which kiwi does not model");
      const std::vector<size_t> within = IndexWithinStage(p);
      for (size_t i = 0; i < p.layers.size(); ++i) p.layers[i].checkpoint = EveryKth(within[i], k);
    }
  } else if (*mode != "none") {
    return f.Bad("activation_checkpoint", "mode", fmt::format("must be none, selective or full, got '{}'", *mode));
  }
  return p;
}

Result<plan::LayerPlan> ReadTorchtitanConfigFile(const std::string& path, int num_devices, int num_layers) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return text.error();
  return ParseTorchtitanConfig(*text, path, num_devices, num_layers);
}

}  // namespace kiwi::io
