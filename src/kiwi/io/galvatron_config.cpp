#include "kiwi/io/galvatron_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <optional>
#include <tuple>

#include "kiwi/io/file_io.h"
#include "kiwi/io/json_fields.h"

namespace kiwi::io {
namespace {

template <typename F>
std::string Joined(const plan::LayerPlan& plan, F value) {
  std::vector<int> v;
  for (const plan::LayerStrategy& s : plan.layers) v.push_back(value(s));
  return fmt::format("{}", fmt::join(v, ","));
}

// A per-layer list: "1,2,2" or [1, 2, 2].
Result<std::vector<int64_t>> IntList(const Json& object, const JsonPath& at, std::string_view key, IntRange range) {
  Result<const Json*> field = RequireField(object, at, key);
  if (!field) return field.error();
  const JsonPath here = at.Key(key);
  std::vector<int64_t> out;
  if ((*field)->is_array()) {
    for (size_t i = 0; i < (*field)->size(); ++i) {
      Result<int64_t> v = ReadInt((**field)[i], here.Index(i), range);
      if (!v) return v.error();
      out.push_back(*v);
    }
    return out;
  }
  if ((*field)->is_number_integer()) {
    Result<int64_t> v = ReadInt(**field, here, range);
    if (!v) return v.error();
    return std::vector<int64_t>{*v};
  }
  Result<std::string> text = ReadString(**field, here);
  if (!text) return here.Bad("must be a comma-separated list of integers or an array");
  for (size_t start = 0; start <= text->size();) {
    size_t end = text->find(',', start);
    if (end == std::string::npos) end = text->size();
    int64_t v = 0;
    const char* first = text->data() + start;
    const auto [ptr, ec] = std::from_chars(first, text->data() + end, v);
    if (ec != std::errc{} || ptr != text->data() + end || v < range.min || v > range.max)
      return here.Index(out.size()).Bad(fmt::format("'{}' is not an integer in [{}, {}]",
                                                    text->substr(start, end - start), range.min, range.max));
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

struct RawConfig {
  int64_t pp = 1, batch = 1, chunks = 1;
  std::vector<int64_t> tp, consecutive, dp_types, sp, checkpoint, division, cp;
  std::string pipeline, default_dp_type;
  int64_t vtp = 0, vsp = 0, vcp = 1, embed_sdp = -1;  // vtp 0, embed_sdp -1: not given
  int64_t world_size = 0;                             // as Galvatron's search writes it (0: not given)
};

Result<RawConfig> ReadRaw(const Json& doc, const JsonPath& at, int num_devices) {
  RawConfig c;
  const IntRange devices{1, num_devices};
  Result<int64_t> pp = IntField(doc, at, "pp_deg", devices);
  if (!pp) return pp.error();
  c.pp = *pp;
  Result<std::vector<int64_t>> tp = IntList(doc, at, "tp_sizes_enc", devices);
  if (!tp) return tp.error();
  c.tp = *tp;
  const size_t layers = c.tp.size();
  for (auto [key, list] : {std::pair{"tp_consecutive_flags", &c.consecutive}, std::pair{"dp_types_enc", &c.dp_types},
                           std::pair{"use_sp", &c.sp}, std::pair{"checkpoint", &c.checkpoint}}) {
    if (!FindField(doc, key)) {
      list->assign(layers, std::string_view(key) == "tp_consecutive_flags" ? 1 : 0);
      continue;
    }
    Result<std::vector<int64_t>> v = IntList(doc, at, key, {0, 1});
    if (!v) return v.error();
    if (v->size() != layers)
      return at.BadKey(key, fmt::format("has {} entries, tp_sizes_enc has {}", v->size(), layers));
    *list = *v;
  }
  Result<int64_t> batch = IntField(doc, at, "global_bsz", kPositive);
  if (!batch) return batch.error();
  c.batch = *batch;
  Result<int64_t> chunks = IntFieldOr(doc, at, "chunks", 1, kPositive);
  if (!chunks) return chunks.error();
  c.chunks = *chunks;
  if (FindField(doc, "pp_division")) {
    Result<std::vector<int64_t>> division = IntList(doc, at, "pp_division", kPositive);
    if (!division) return division.error();
    c.division = *division;
  }
  Result<std::string> pipeline = StringFieldOr(doc, at, "pipeline_type", "pipedream_flush");
  if (!pipeline) return pipeline.error();
  c.pipeline = *pipeline;
  Result<std::string> dp_type = StringFieldOr(doc, at, "default_dp_type", "ddp");
  if (!dp_type) return dp_type.error();
  c.default_dp_type = *dp_type;
  Result<int64_t> world = IntFieldOr(doc, at, "world_size", 0, IntRange{0, 1 << 24});
  if (!world) return world.error();
  c.world_size = *world;
  if (FindField(doc, "cp_sizes_enc")) {
    Result<std::vector<int64_t>> cp = IntList(doc, at, "cp_sizes_enc", devices);
    if (!cp) return cp.error();
    c.cp = *cp;
  }
  // The embeddings' and head's strategy (Galvatron's vocabulary-parallel parts).
  for (auto [key, value, range] : {std::tuple{"vtp", &c.vtp, devices}, std::tuple{"vsp", &c.vsp, IntRange{0, 1}},
                                   std::tuple{"vcp", &c.vcp, devices}}) {
    Result<int64_t> v = IntFieldOr(doc, at, key, *value, range);
    if (!v) return v.error();
    *value = *v;
  }
  for (const char* key : {"embed_sdp", "vocab_sdp"}) {  // what Galvatron's search writes, what its runtime reads
    if (!FindField(doc, key)) continue;
    Result<int64_t> v = IntField(doc, at, key, {0, 1});
    if (!v) return v.error();
    if (c.embed_sdp >= 0 && c.embed_sdp != *v) return at.BadKey(key, "contradicts embed_sdp");
    c.embed_sdp = *v;
  }
  return c;
}

// What Galvatron's zero2 is in kiwi's terms. Under gradient accumulation Galvatron by default
// reduce-scatters the gradients only after the last backward pass (async_grad_reduce, its
// models/README.md: "Zero-2 degrade[s] to Zero-1"; its cost model keeps parameters and gradients whole,
// 2/8 of mixed-precision model states): kiwi's ZeRO-1. With one micro-batch it is ZeRO-2.
plan::Zero GalvatronZero2(int64_t chunks) { return chunks > 1 ? plan::Zero::kOptimizerStates : plan::Zero::kGradients; }

Result<plan::LayerPlan> ToPlan(const RawConfig& c, const JsonPath& at, const GalvatronConfigReading& reading,
                               std::vector<std::string>* notes) {
  const int num_devices = reading.num_devices;
  if (num_devices % c.pp != 0)
    return at.BadKey("pp_deg", fmt::format("{} does not divide the {} devices", c.pp, num_devices));
  if (c.pipeline != "pipedream_flush" && c.pipeline != "gpipe")
    return at.BadKey("pipeline_type", fmt::format("'{}' is not pipedream_flush or gpipe", c.pipeline));
  if (c.default_dp_type != "ddp" && c.default_dp_type != "zero2" && c.default_dp_type != "zero3")
    return at.BadKey("default_dp_type", fmt::format("'{}' is not ddp, zero2 or zero3", c.default_dp_type));
  if (c.tp.empty()) return at.BadKey("tp_sizes_enc", "has no layers");
  if (!c.cp.empty() && c.cp.size() != c.tp.size())
    return at.BadKey("cp_sizes_enc", fmt::format("has {} entries, tp_sizes_enc has {}", c.cp.size(), c.tp.size()));
  if (c.world_size > 0 && c.world_size != num_devices)
    return at.BadKey("world_size", fmt::format("{} devices, but the cluster has {}", c.world_size, num_devices));
  plan::LayerPlan p;
  const int64_t stage = num_devices / c.pp;
  for (size_t i = 0; i < c.tp.size(); ++i) {
    if (stage % c.tp[i] != 0)
      return at.Key("tp_sizes_enc").Index(i).Bad(fmt::format("{} does not divide the {} devices of a stage", c.tp[i], stage));
    // use_sp 1: the degree is Ulysses' (Galvatron's sp_size), over all of the stage's ranks in kiwi's
    // terms: cp of dp = the stage, whose replicas are Galvatron's dp (its sdp_size = dp x sp x cp). Its
    // cp_sizes_enc is a ring (zigzag ring attention) beside them: kiwi's cp = sp x ring, ulysses = sp.
    const bool ulysses = c.sp[i] != 0 && c.tp[i] > 1;
    const int tp = ulysses ? 1 : static_cast<int>(c.tp[i]), dp = static_cast<int>(stage / tp);
    const int ring = c.cp.empty() ? 1 : static_cast<int>(c.cp[i]);
    if (dp % ring != 0)
      return at.Key("cp_sizes_enc").Index(i).Bad(fmt::format("{} does not divide the {} devices of a stage over "
                                                             "{} {}", ring, stage, ulysses ? "use_sp's" : "TP's",
                                                             c.tp[i]));
    if (c.consecutive[i] == 0 && tp > 1 && dp > 1)
      return at.Key("tp_consecutive_flags").Index(i).Bad("0 (TP across DP groups) is not supported: kiwi places TP innermost");
    // dp_types_enc 1 is ZeRO-3; 0 the default type (DDP or zero2, GalvatronZero2).
    plan::Zero zero = plan::Zero::kNone;
    if (dp > 1 && (c.dp_types[i] == 1 || c.default_dp_type == "zero3")) zero = plan::Zero::kParameters;
    else if (dp > 1 && c.default_dp_type == "zero2") zero = GalvatronZero2(c.chunks);
    p.layers.push_back({tp, dp, zero, c.checkpoint[i] == 1});
    p.layers.back().sequence_parallel = reading.sequence_parallel && tp > 1;  // Galvatron's run-wide Megatron SP
    p.layers.back().cp = (ulysses ? static_cast<int>(c.tp[i]) : 1) * ring;
    if (ulysses) p.layers.back().ulysses = static_cast<int>(c.tp[i]);
  }
  if (c.vtp > 0 && stage % c.vtp != 0)
    return at.BadKey("vtp", fmt::format("{} does not divide the {} devices of a stage", c.vtp, stage));
  // kiwi's embeddings go with the first layer, its head with the last (cost::LayerModel::embedding).
  if (notes != nullptr) {
    const plan::LayerStrategy& first = p.layers.front();
    if (c.vtp > 0 && (c.vtp != first.tp || c.vtp != p.layers.back().tp))
      notes->push_back(fmt::format("{}: vtp {} is priced as the first layer's TP {} (embeddings) and the last's TP {} "
                                   "(head): kiwi runs them with those layers",
                                   at.source(), c.vtp, first.tp, p.layers.back().tp));
    if (c.vsp != 0 || c.vcp != 1)  // the embeddings' Ulysses or CP degree: vtp's, over their sequence
      notes->push_back(fmt::format("{}: vsp {} / vcp {} (the embeddings and head split by sequence) are priced as the "
                                   "first and last layers' strategies: kiwi runs them with those layers",
                                   at.source(), c.vsp, c.vcp));
    if (c.embed_sdp >= 0 && (c.embed_sdp == 1) != first.Shards(plan::Zero::kParameters))
      notes->push_back(fmt::format("{}: embed_sdp {} is priced as the first layer's {}: kiwi shards the embeddings as "
                                   "that layer",
                                   at.source(), c.embed_sdp, plan::DataParallelName(first.ZeroStage())));
  }
  p.pp_degree = static_cast<int>(c.pp);
  int64_t covered = 0;
  for (int64_t n : c.division) {
    p.pp_partition.push_back(static_cast<int>(n));
    covered += n;
  }
  if (c.division.empty() && c.pp == 1) p.pp_partition = {static_cast<int>(c.tp.size())};
  if (!c.division.empty() && (static_cast<int64_t>(c.division.size()) != c.pp || covered != static_cast<int64_t>(c.tp.size())))
    return at.BadKey("pp_division", fmt::format("must have pp_deg = {} stages covering the {} layers", c.pp, c.tp.size()));
  if (c.division.empty() && c.pp > 1) return at.BadKey("pp_division", "missing (required when pp_deg > 1)");
  p.global_batch = c.batch;
  p.micro_batches = static_cast<int>(c.chunks);
  p.pipeline = c.pipeline == "gpipe" ? plan::PipelineSchedule::kGPipe : plan::PipelineSchedule::k1F1B;
  return p;
}

}  // namespace

namespace {

// Galvatron gives a layer ZeRO-3 or the config's one default type, DDP or zero2 (GalvatronZero2: kiwi's
// ZeRO-1 under gradient accumulation, ZeRO-2 without): the default of a plan's other data-parallel
// layers, or an error naming the first layer Galvatron cannot express (Megatron SP, selective
// recomputation and expert parallelism among them).
Result<std::string> DefaultDpType(const plan::LayerPlan& plan, bool sequence_parallel) {
  const plan::Zero zero2 = GalvatronZero2(plan.micro_batches);
  std::optional<plan::Zero> common;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    if (sequence_parallel && plan.layers[i].tp > 1 && !plan.layers[i].SequenceParallel())
      return BadInput(fmt::format("layer {} uses TP without sequence parallelism ({}), which a Galvatron run with "
                                  "sequence_parallel gives every TP layer",
                                  i, plan::StrategyName(plan.layers[i])));
    if (!sequence_parallel && plan.layers[i].SequenceParallel())  // its use_sp is Ulysses', not Megatron's SP
      return BadInput(fmt::format("layer {} uses Megatron sequence parallelism ({}), which Galvatron's config cannot "
                                  "express (its use_sp is Ulysses sequence parallelism; a Galvatron run with "
                                  "sequence_parallel on, --galvatron-sp, gives every TP layer Megatron's)",
                                  i, plan::StrategyName(plan.layers[i])));
    if (plan.layers[i].SelectiveRecompute())  // its checkpoint flag is whole-layer recomputation
      return BadInput(fmt::format("layer {} uses selective recomputation ({}), which Galvatron's config cannot "
                                  "express (its checkpoint recomputes the whole layer)",
                                  i, plan::StrategyName(plan.layers[i])));
    if (plan.layers[i].ep > 1)  // Galvatron-BMW's strategy configs have no expert dimension
      return BadInput(fmt::format("layer {} uses expert parallelism ({}), which Galvatron's config cannot express",
                                  i, plan::StrategyName(plan.layers[i])));
    if (plan.layers[i].RecomputesSet())  // its checkpoint flag is whole-layer recomputation
      return BadInput(fmt::format("layer {} recomputes a set of its ops ({}), which Galvatron's config cannot "
                                  "express (its checkpoint recomputes the whole layer)",
                                  i, plan::StrategyName(plan.layers[i])));
    if (plan.layers[i].offload)
      return BadInput(fmt::format("layer {} offloads its optimizer ({}), which Galvatron's config cannot express",
                                  i, plan::StrategyName(plan.layers[i])));
    const plan::Zero zero = plan.layers[i].ZeroStage();
    if (plan.layers[i].dp == 1 || zero == plan::Zero::kParameters) continue;
    if (zero != plan::Zero::kNone && zero != zero2)
      return BadInput(fmt::format("layer {} uses {}, which Galvatron cannot express with {} micro-batches (its zero2 "
                                  "is kiwi's {} there)",
                                  i, plan::DataParallelName(zero), plan.micro_batches, plan::DataParallelName(zero2)));
    if (common && *common != zero)
      return BadInput(fmt::format("layer {} uses {} where an earlier layer uses {}; Galvatron gives "
                                  "every layer but its ZeRO-3 ones one data-parallel type",
                                  i, plan::DataParallelName(zero), plan::DataParallelName(*common)));
    common = zero;
  }
  return std::string(common && *common != plan::Zero::kNone ? "zero2" : "ddp");
}

}  // namespace

Result<std::string> WriteGalvatronConfig(const plan::LayerPlan& plan, bool sequence_parallel) {
  if (plan.virtual_stages > 1)  // its pipelines are GPipe and PipeDream-flush, one chunk per stage
    return BadInput(fmt::format("the plan interleaves {} model chunks per stage (interleaved 1F1B), which Galvatron's "
                                "config cannot express (its pipeline_type is gpipe or pipedream_flush)",
                                plan.virtual_stages));
  Result<std::string> default_dp_type = DefaultDpType(plan, sequence_parallel);
  if (!default_dp_type) return default_dp_type.error();
  OrderedJson j;
  j["pp_deg"] = plan.pp_degree;
  j["tp_sizes_enc"] = Joined(plan, [](const plan::LayerStrategy& s) { return s.Ulysses() ? s.UlyssesDegree() : s.tp; });
  j["tp_consecutive_flags"] = Joined(plan, [](const plan::LayerStrategy&) { return 1; });
  j["dp_types_enc"] = Joined(plan, [](const plan::LayerStrategy& s) { return s.Shards(plan::Zero::kParameters) ? 1 : 0; });
  j["use_sp"] = Joined(plan, [](const plan::LayerStrategy& s) { return s.Ulysses() ? 1 : 0; });
  j["cp_sizes_enc"] = Joined(plan, [](const plan::LayerStrategy& s) { return s.RingDegree(); });
  j["checkpoint"] = Joined(plan, [](const plan::LayerStrategy& s) { return s.checkpoint ? 1 : 0; });
  j["global_bsz"] = plan.global_batch;
  j["chunks"] = plan.micro_batches;
  const std::vector<int> division =
      plan.pp_partition.empty() ? std::vector<int>{static_cast<int>(plan.layers.size())} : plan.pp_partition;
  j["pp_division"] = fmt::format("{}", fmt::join(division, ","));
  j["pipeline_type"] = plan.pipeline == plan::PipelineSchedule::kGPipe ? "gpipe" : "pipedream_flush";
  j["default_dp_type"] = *default_dp_type;
  // The embeddings and head: kiwi runs them with the first layer (vocabulary-parallel at its TP degree,
  // sharded as it is), never with Ulysses or context parallelism.
  const plan::LayerStrategy& first = plan.layers.front();
  j["vtp"] = first.tp;
  j["vsp"] = 0;
  j["vcp"] = 1;
  j["embed_sdp"] = first.Shards(plan::Zero::kParameters) ? 1 : 0;
  j["vocab_sdp"] = first.Shards(plan::Zero::kParameters) ? 1 : 0;
  return j.dump(4) + "\n";
}

Result<plan::LayerPlan> ParseGalvatronConfig(std::string_view text, const std::string& source,
                                             const GalvatronConfigReading& reading, std::vector<std::string>* notes) {
  if (reading.num_devices < 1) return BadInput(fmt::format("{}: the cluster has no devices", source));
  return GuardJson(source, [&]() -> Result<plan::LayerPlan> {
    Result<Json> doc = ParseJson(text, source);
    if (!doc) return doc.error();
    const JsonPath at(source);
    KIWI_RETURN_IF_ERROR(CheckObject(*doc, at));
    Result<RawConfig> raw = ReadRaw(*doc, at, reading.num_devices);
    if (!raw) return raw.error();
    return ToPlan(*raw, at, reading, notes);
  });
}

Result<plan::LayerPlan> ReadGalvatronConfigFile(const std::string& path, const GalvatronConfigReading& reading,
                                                std::vector<std::string>* notes) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return text.error();
  return ParseGalvatronConfig(*text, path, reading, notes);
}

}  // namespace kiwi::io
