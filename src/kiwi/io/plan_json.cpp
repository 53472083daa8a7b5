// The versioned plan JSON (docs/plan-format.md): reader and writer.
#include "kiwi/io/plan_json.h"

#include <fmt/format.h>

#include <tuple>

#include "kiwi/io/file_io.h"
#include "kiwi/io/galvatron_profiles.h"
#include "kiwi/io/json_fields.h"

namespace kiwi::io {
namespace {

constexpr std::string_view kVersionKey = "kiwi_plan_version";
constexpr int kMaxMeshRank = 8;
constexpr IntRange kNodeRange{0, std::numeric_limits<int32_t>::max()};
constexpr IntRange kDegreeRange{1, std::numeric_limits<int32_t>::max()};

// The plan alone does not know tensor ranks: the rank is the number of dims written (one R or S group
// each); the simulator checks it against the graph.
Result<ir::ShardingSpec> ReadSharding(const Json& value, const JsonPath& at, int mesh_rank) {
  Result<std::string> text = ReadString(value, at);
  if (!text) return text.error();
  int rank = 0;
  for (char c : *text) rank += (c == 'R' || c == 'S') ? 1 : 0;
  Result<ir::ShardingSpec> spec = ir::ParseShardingSpec(*text, rank, mesh_rank);
  if (!spec) return at.Bad(spec.error().message);
  return spec;
}

Result<std::vector<int>> ReadMesh(const Json& op, const JsonPath& at) {
  std::vector<int> mesh;
  const Json* value = FindField(op, "mesh");
  if (value == nullptr) return mesh;
  if (!value->is_array()) return at.BadKey("mesh", "must be a list of axis sizes, e.g. [2, 4]");
  if (value->size() > kMaxMeshRank) return at.BadKey("mesh", fmt::format("has more than {} axes", kMaxMeshRank));
  int64_t devices = 1;
  for (size_t i = 0; i < value->size(); ++i) {
    Result<int64_t> size = ReadInt((*value)[i], at.Key("mesh").Index(i), kDegreeRange);
    if (!size) return size.error();
    devices *= *size;
    if (devices > std::numeric_limits<int32_t>::max()) return at.BadKey("mesh", "has too many devices");
    mesh.push_back(static_cast<int>(*size));
  }
  return mesh;
}

Result<ir::AxisMask> ReadReduceAxes(const Json& entry, const JsonPath& at, int mesh_rank) {
  ir::AxisMask mask = 0;
  const Json* value = FindField(entry, "reduce_axes");
  if (value == nullptr) return mask;
  if (!value->is_array()) return at.BadKey("reduce_axes", "must be a list of mesh axes");
  for (size_t i = 0; i < value->size(); ++i) {
    const JsonPath axis_at = at.Key("reduce_axes").Index(i);
    Result<int64_t> axis = ReadInt((*value)[i], axis_at, kNonNegative);
    if (!axis) return axis.error();
    if (*axis >= mesh_rank) return axis_at.Bad(fmt::format("mesh axis {} does not exist (mesh has {})", *axis, mesh_rank));
    if (mask & ir::AxisBit(static_cast<int>(*axis))) return axis_at.Bad(fmt::format("mesh axis {} listed twice", *axis));
    mask |= ir::AxisBit(static_cast<int>(*axis));
  }
  return mask;
}

Result<std::pair<ir::NodeId, plan::OpSharding>> ReadOpSharding(const Json& entry, const JsonPath& at, int mesh_rank) {
  KIWI_RETURN_IF_ERROR(CheckObject(entry, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(entry, at, {"node", "output", "operands", "reduce_axes", "strategy"}));
  Result<int64_t> node = IntField(entry, at, "node", kNodeRange);
  if (!node) return node.error();
  plan::OpSharding s;
  Result<const Json*> output = RequireField(entry, at, "output");
  if (!output) return output.error();
  Result<ir::ShardingSpec> out = ReadSharding(**output, at.Key("output"), mesh_rank);
  if (!out) return out.error();
  s.output = std::move(*out);
  if (const Json* operands = FindField(entry, "operands")) {
    if (!operands->is_array()) return at.BadKey("operands", "must be a list of shardings");
    for (size_t i = 0; i < operands->size(); ++i) {
      Result<ir::ShardingSpec> spec = ReadSharding((*operands)[i], at.Key("operands").Index(i), mesh_rank);
      if (!spec) return spec.error();
      s.operands.push_back(std::move(*spec));
    }
  }
  Result<ir::AxisMask> reduce = ReadReduceAxes(entry, at, mesh_rank);
  if (!reduce) return reduce.error();
  s.reduce_axes = *reduce;
  Result<std::string> strategy = StringFieldOr(entry, at, "strategy", "");
  if (!strategy) return strategy.error();
  s.strategy = std::move(*strategy);
  return std::make_pair(static_cast<ir::NodeId>(*node), std::move(s));
}

Result<plan::Step> ReadStep(const Json& entry, const JsonPath& at) {
  KIWI_RETURN_IF_ERROR(CheckObject(entry, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(entry, at, {"op", "node"}));
  Result<std::string> op = StringField(entry, at, "op");
  if (!op) return op.error();
  if (*op != "compute" && *op != "free") return at.BadKey("op", "must be \"compute\" or \"free\"");
  Result<int64_t> node = IntField(entry, at, "node", kNodeRange);
  if (!node) return node.error();
  return plan::Step{*op == "compute" ? plan::StepKind::kCompute : plan::StepKind::kFree,
                    static_cast<ir::NodeId>(*node)};
}

Result<plan::OperatorPlan> ReadOperatorPlan(const Json& op, const JsonPath& at) {
  KIWI_RETURN_IF_ERROR(CheckObject(op, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(op, at, {"mesh", "shardings", "schedule"}));
  plan::OperatorPlan p;
  Result<std::vector<int>> mesh = ReadMesh(op, at);
  if (!mesh) return mesh.error();
  p.mesh_shape = std::move(*mesh);
  const int mesh_rank = static_cast<int>(p.mesh_shape.size());
  if (const Json* list = FindField(op, "shardings")) {
    if (!list->is_array()) return at.BadKey("shardings", "must be a list");
    for (size_t i = 0; i < list->size(); ++i) {
      const JsonPath entry_at = at.Key("shardings").Index(i);
      Result<std::pair<ir::NodeId, plan::OpSharding>> s = ReadOpSharding((*list)[i], entry_at, mesh_rank);
      if (!s) return s.error();
      if (!p.shardings.emplace(s->first, std::move(s->second)).second)
        return entry_at.BadKey("node", fmt::format("node {} has a sharding already", s->first));
    }
  }
  if (const Json* list = FindField(op, "schedule")) {
    if (!list->is_array()) return at.BadKey("schedule", "must be a list of steps");
    for (size_t i = 0; i < list->size(); ++i) {
      Result<plan::Step> step = ReadStep((*list)[i], at.Key("schedule").Index(i));
      if (!step) return step.error();
      p.schedule.push_back(*step);
    }
  }
  return p;
}

Result<plan::LayerStrategy> ReadLayerStrategy(const Json& entry, const JsonPath& at) {
  KIWI_RETURN_IF_ERROR(CheckObject(entry, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(entry, at, {"tp", "dp", "zero", "sdp", "checkpoint", "sequence_parallel",
                                                "selective_recompute", "ep", "cp", "ulysses", "offload", "recompute"}));
  Result<int64_t> tp = IntFieldOr(entry, at, "tp", 1, kDegreeRange);
  if (!tp) return tp.error();
  Result<int64_t> dp = IntFieldOr(entry, at, "dp", 1, kDegreeRange);
  if (!dp) return dp.error();
  // "sdp": true, the format's first spelling of ZeRO-3, is still read; beside "zero" it must agree.
  Result<bool> sdp = BoolFieldOr(entry, at, "sdp", false);
  if (!sdp) return sdp.error();
  Result<int64_t> zero = IntFieldOr(entry, at, "zero", *sdp ? 3 : 0, IntRange{0, 3});
  if (!zero) return zero.error();
  if (FindField(entry, "sdp") && *sdp != (*zero == 3))
    return at.BadKey("sdp", fmt::format("{} contradicts zero {}", *sdp, *zero));
  Result<bool> ckpt = BoolFieldOr(entry, at, "checkpoint", false);
  if (!ckpt) return ckpt.error();
  Result<bool> sp = BoolFieldOr(entry, at, "sequence_parallel", false);
  if (!sp) return sp.error();
  Result<bool> selective = BoolFieldOr(entry, at, "selective_recompute", false);
  if (!selective) return selective.error();
  Result<int64_t> ep = IntFieldOr(entry, at, "ep", 1, kDegreeRange);
  if (!ep) return ep.error();
  if (*dp % *ep != 0) return at.BadKey("ep", fmt::format("{} does not divide dp {}", *ep, *dp));
  if (*ep > 1 && *zero == 3)
    return at.BadKey("ep", "expert parallelism with ZeRO-3 is not modelled (zero 0, 1 or 2: Megatron-LM's choices)");
  Result<int64_t> cp = IntFieldOr(entry, at, "cp", 1, kDegreeRange);
  if (!cp) return cp.error();
  if (*dp % *cp != 0) return at.BadKey("cp", fmt::format("{} does not divide dp {}", *cp, *dp));
  if (*cp > 1 && *ep > 1) return at.BadKey("cp", "context parallelism beside expert parallelism is not modelled");
  // "ulysses": the Ulysses degree within the CP group; true (the first spelling) is all of it.
  int64_t ulysses = 1;
  if (const Json* u = FindField(entry, "ulysses")) {
    bool asked = false;  // true asks for Ulysses even where cp 1 makes "all of cp" a degree of 1
    if (u->is_boolean()) {
      asked = u->get<bool>();
      ulysses = asked ? *cp : 1;
    } else {
      Result<int64_t> degree = ReadInt(*u, at.Key("ulysses"), kDegreeRange);
      if (!degree) return at.BadKey("ulysses", "must be the Ulysses degree (an integer dividing cp) or true (all of cp)");
      ulysses = *degree;
      asked = ulysses > 1;
    }
    if (asked && (*cp < 2 || *tp != 1))
      return at.BadKey("ulysses", fmt::format("Ulysses needs cp above 1 and tp 1 (cp {}, tp {})", *cp, *tp));
    if (*cp % ulysses != 0) return at.BadKey("ulysses", fmt::format("{} does not divide cp {}", ulysses, *cp));
  }
  Result<bool> offload = BoolFieldOr(entry, at, "offload", false);
  if (!offload) return offload.error();
  std::vector<std::string> recompute;
  if (const Json* list = FindField(entry, "recompute")) {
    if (!list->is_array()) return at.BadKey("recompute", "must be a list of op names (the layer's, e.g. \"mlp.act\")");
    for (size_t i = 0; i < list->size(); ++i) {
      Result<std::string> name = ReadString((*list)[i], at.Key("recompute").Index(i));
      if (!name) return name.error();
      if (name->empty()) return at.Key("recompute").Index(i).Bad("must name an op, got \"\"");
      if (std::find(recompute.begin(), recompute.end(), *name) != recompute.end())
        return at.Key("recompute").Index(i).Bad(fmt::format("\"{}\" is named twice", *name));
      recompute.push_back(*std::move(name));
    }
    if (!recompute.empty() && *selective)
      return at.BadKey("recompute", "a recompute set beside selective_recompute (the attention core is one such set): "
                                    "give one of them");
  }
  return plan::LayerStrategy{static_cast<int>(*tp), static_cast<int>(*dp), static_cast<plan::Zero>(*zero), *ckpt, *sp,
                             *selective, static_cast<int>(*ep), static_cast<int>(*cp), *offload, std::move(recompute),
                             static_cast<int>(ulysses)};
}

Status ReadPipeline(const Json& layer, const JsonPath& at, plan::LayerPlan& p) {
  Result<int64_t> pp = IntFieldOr(layer, at, "pp_degree", 1, kDegreeRange);
  if (!pp) return pp.error();
  p.pp_degree = static_cast<int>(*pp);
  Result<int64_t> virtual_stages = IntFieldOr(layer, at, "virtual_stages", 1, kDegreeRange);
  if (!virtual_stages) return virtual_stages.error();
  p.virtual_stages = static_cast<int>(*virtual_stages);
  if (const Json* list = FindField(layer, "pp_partition")) {
    if (!list->is_array()) return at.BadKey("pp_partition", "must be a list of layer counts");
    int64_t total = 0;
    for (size_t i = 0; i < list->size(); ++i) {
      Result<int64_t> n = ReadInt((*list)[i], at.Key("pp_partition").Index(i), kDegreeRange);
      if (!n) return n.error();
      total += *n;
      p.pp_partition.push_back(static_cast<int>(*n));
    }
    if (!p.pp_partition.empty() && static_cast<int64_t>(p.pp_partition.size()) != p.NumChunks())
      return at.BadKey("pp_partition", plan::PartitionLengthError(p));
    if (!p.pp_partition.empty() && total != static_cast<int64_t>(p.layers.size()))
      return at.BadKey("pp_partition", fmt::format("sums to {} layers, the plan has {}", total, p.layers.size()));
  }
  Result<std::string> pipeline = StringFieldOr(layer, at, "pipeline", "1f1b");
  if (!pipeline) return pipeline.error();
  if (*pipeline != "1f1b" && *pipeline != "gpipe") return at.BadKey("pipeline", "must be \"1f1b\" or \"gpipe\"");
  p.pipeline = *pipeline == "gpipe" ? plan::PipelineSchedule::kGPipe : plan::PipelineSchedule::k1F1B;
  if (p.virtual_stages > 1 && p.pipeline != plan::PipelineSchedule::k1F1B)
    return at.BadKey("virtual_stages", fmt::format("{} model chunks per stage (interleaved 1F1B) need pipeline \"1f1b\"",
                                                   p.virtual_stages));
  if (p.virtual_stages > 1 && p.pp_degree < 2)
    return at.BadKey("virtual_stages", fmt::format("{} model chunks per stage need pp_degree >= 2", p.virtual_stages));
  return Status::Ok();
}

Result<plan::LayerPlan> ReadLayerPlan(const Json& layer, const JsonPath& at) {
  KIWI_RETURN_IF_ERROR(CheckObject(layer, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(
      layer, at, {"layers", "pp_degree", "pp_partition", "global_batch", "micro_batches", "pipeline", "virtual_stages"}));
  plan::LayerPlan p;
  Result<const Json*> layers = ArrayField(layer, at, "layers");
  if (!layers) return layers.error();
  for (size_t i = 0; i < (*layers)->size(); ++i) {
    Result<plan::LayerStrategy> s = ReadLayerStrategy((**layers)[i], at.Key("layers").Index(i));
    if (!s) return s.error();
    p.layers.push_back(*s);
  }
  KIWI_RETURN_IF_ERROR(ReadPipeline(layer, at, p));
  Result<int64_t> batch = IntFieldOr(layer, at, "global_batch", 1, kPositive);
  if (!batch) return batch.error();
  p.global_batch = *batch;
  Result<int64_t> micro = IntFieldOr(layer, at, "micro_batches", 1, kDegreeRange);
  if (!micro) return micro.error();
  p.micro_batches = static_cast<int>(*micro);
  return p;
}

Result<plan::Claims> ReadClaims(const Json& doc, const JsonPath& root) {
  plan::Claims c;
  const Json* claims = FindField(doc, "claims");
  if (claims == nullptr) return c;
  const JsonPath at = root.Key("claims");
  KIWI_RETURN_IF_ERROR(CheckObject(*claims, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(*claims, at, {"peak_memory_bytes", "iteration_seconds"}));
  if (FindField(*claims, "peak_memory_bytes") != nullptr) {
    Result<int64_t> peak = IntField(*claims, at, "peak_memory_bytes", kNonNegative);
    if (!peak) return peak.error();
    c.peak_memory_bytes = *peak;
  }
  if (FindField(*claims, "iteration_seconds") != nullptr) {
    Result<double> t = NumberField(*claims, at, "iteration_seconds", 0.0);
    if (!t) return t.error();
    c.iteration_seconds = *t;
  }
  return c;
}

constexpr std::string_view kModelSizeFlags[] = {"layers", "hidden", "heads", "seq", "batch", "ffn", "vocab"};

std::optional<int64_t>* SizeFlag(plan::ModelFlags& f, std::string_view key) {
  if (key == "layers") return &f.layers;
  if (key == "hidden") return &f.hidden;
  if (key == "heads") return &f.heads;
  if (key == "seq") return &f.seq;
  if (key == "batch") return &f.batch;
  if (key == "ffn") return &f.ffn;
  return &f.vocab;
}

Result<plan::ModelFlags> ReadModelFlags(const Json& value, const JsonPath& at) {
  KIWI_RETURN_IF_ERROR(CheckObject(value, at));
  KIWI_RETURN_IF_ERROR(
      CheckKnownKeys(value, at,
                     {"layers", "hidden", "heads", "seq", "batch", "ffn", "vocab", "dropout", "capacity_factor",
                      "dtype", "optimizer", "attention", "runtime"}));
  plan::ModelFlags f;
  for (std::string_view key : kModelSizeFlags) {
    if (FindField(value, key) == nullptr) continue;
    Result<int64_t> v = IntField(value, at, key, kDegreeRange);
    if (!v) return v.error();
    *SizeFlag(f, key) = *v;
  }
  if (FindField(value, "dropout") != nullptr) {
    Result<double> p = NumberField(value, at, "dropout", 0.0);
    if (!p) return p.error();
    if (*p >= 1.0) return at.BadKey("dropout", fmt::format("must be in [0, 1), got {}", *p));
    f.dropout = *p;
  }
  if (FindField(value, "capacity_factor") != nullptr) {  // models::LoadModel checks its range and model
    Result<double> c = NumberField(value, at, "capacity_factor", 0.0);
    if (!c) return c.error();
    if (*c <= 0.0) return at.BadKey("capacity_factor", fmt::format("must be positive, got {}", *c));
    f.capacity_factor = *c;
  }
  Result<std::string> dtype = StringFieldOr(value, at, "dtype", "");
  if (!dtype) return dtype.error();
  Result<std::string> optimizer = StringFieldOr(value, at, "optimizer", "");
  if (!optimizer) return optimizer.error();
  Result<std::string> attention = StringFieldOr(value, at, "attention", "");
  if (!attention) return attention.error();
  Result<std::string> runtime = StringFieldOr(value, at, "runtime", "");
  if (!runtime) return runtime.error();
  f.runtime = std::move(*runtime);
  f.dtype = std::move(*dtype);
  f.optimizer = std::move(*optimizer);
  f.attention = std::move(*attention);
  return f;
}

OrderedJson ModelFlagsJson(const plan::ModelFlags& flags) {
  OrderedJson j = OrderedJson::object();
  plan::ModelFlags f = flags;
  for (std::string_view key : kModelSizeFlags)
    if (const std::optional<int64_t>& v = *SizeFlag(f, key)) j[std::string(key)] = *v;
  if (f.dropout) j["dropout"] = *f.dropout;
  if (f.capacity_factor) j["capacity_factor"] = *f.capacity_factor;
  if (!f.dtype.empty()) j["dtype"] = f.dtype;
  if (!f.optimizer.empty()) j["optimizer"] = f.optimizer;
  if (!f.attention.empty()) j["attention"] = f.attention;
  if (!f.runtime.empty()) j["runtime"] = f.runtime;
  return j;
}

Result<std::vector<std::string>> StringList(const Json& object, const JsonPath& at, std::string_view key) {
  Result<const Json*> list = ArrayField(object, at, key);
  if (!list) return list.error();
  std::vector<std::string> out;
  for (size_t i = 0; i < (*list)->size(); ++i) {
    Result<std::string> v = ReadString((**list)[i], at.Key(key).Index(i));
    if (!v) return v.error();
    out.push_back(std::move(*v));
  }
  return out;
}

Result<plan::GalvatronSource> ReadGalvatronSource(const Json& j, const JsonPath& at) {
  KIWI_RETURN_IF_ERROR(CheckObject(j, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(j, at, {"profiles", "hardware", "layers", "seq", "precision", "sequence_parallel",
                                              "hidden", "memory_budget_bytes", "time_mode", "memory_mode"}));
  plan::GalvatronSource g;
  Result<std::vector<std::string>> profiles = StringList(j, at, "profiles");
  if (!profiles) return profiles.error();
  if (profiles->size() != 2) return at.BadKey("profiles", "must name the computation and the memory profile");
  g.profiles = std::move(*profiles);
  if (FindField(j, "hardware")) {
    Result<std::vector<std::string>> hardware = StringList(j, at, "hardware");
    if (!hardware) return hardware.error();
    if (hardware->size() > 4) return at.BadKey("hardware", "names at most 4 files (all-reduce, p2p, overlap, sp_time)");
    g.hardware = std::move(*hardware);
  }
  Result<const Json*> layers = ArrayField(j, at, "layers");
  if (!layers) return layers.error();
  if ((*layers)->empty()) return at.BadKey("layers", "must give the layers of each layer type");
  for (size_t i = 0; i < (*layers)->size(); ++i) {
    Result<int64_t> n = ReadInt((**layers)[i], at.Key("layers").Index(i), {1, 100000});
    if (!n) return n.error();
    g.layers.push_back(static_cast<int>(*n));
  }
  for (auto [key, field] : {std::pair{"seq", &g.seq}, std::pair{"hidden", &g.hidden},
                            std::pair{"memory_budget_bytes", &g.memory_budget_bytes}}) {
    Result<int64_t> v = IntFieldOr(j, at, key, 0, kNonNegative);
    if (!v) return v.error();
    *field = *v;
  }
  // The names the Galvatron flags take ("": their default), checked as they are.
  for (auto [key, field] : {std::pair{"precision", &g.precision}, std::pair{"time_mode", &g.time_mode},
                            std::pair{"memory_mode", &g.memory_mode}}) {
    Result<std::string> v = StringFieldOr(j, at, key, "");
    if (!v) return v.error();
    *field = std::move(*v);
  }
  GalvatronModelOptions checked;
  if (std::optional<GalvatronNameError> bad = SetGalvatronNames(g.precision, g.time_mode, g.memory_mode, checked))
    return at.BadKey(bad->key, bad->message);
  Result<bool> sp = BoolFieldOr(j, at, "sequence_parallel", false);
  if (!sp) return sp.error();
  g.sequence_parallel = *sp;
  return g;
}

OrderedJson GalvatronSourceJson(const plan::GalvatronSource& g) {
  OrderedJson j;
  j["profiles"] = g.profiles;
  if (!g.hardware.empty()) j["hardware"] = g.hardware;
  j["layers"] = g.layers;
  if (g.seq > 0) j["seq"] = g.seq;
  if (!g.precision.empty()) j["precision"] = g.precision;
  if (!g.time_mode.empty()) j["time_mode"] = g.time_mode;
  if (!g.memory_mode.empty()) j["memory_mode"] = g.memory_mode;
  if (g.sequence_parallel) j["sequence_parallel"] = true;
  if (g.hidden > 0) j["hidden"] = g.hidden;
  j["memory_budget_bytes"] = g.memory_budget_bytes;
  return j;
}

Result<plan::Plan> ReadPlan(const Json& doc, const std::string& source) {
  const JsonPath at(source);
  KIWI_RETURN_IF_ERROR(CheckObject(doc, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(
      doc, at, {kVersionKey, "graph", "model", "hf_config", "model_flags", "galvatron", "cluster", "solver", "operator",
               "layer", "claims"}));
  KIWI_RETURN_IF_ERROR(CheckVersion(doc, at, kVersionKey, plan::kPlanVersion));
  plan::Plan p;
  const std::pair<std::string_view, std::string*> names[] = {
      {"graph", &p.graph}, {"model", &p.model}, {"hf_config", &p.hf_config}, {"cluster", &p.cluster},
      {"solver", &p.solver}};
  for (const auto& [key, field] : names) {
    Result<std::string> value = StringFieldOr(doc, at, key, "");
    if (!value) return value.error();
    *field = std::move(*value);
  }
  if (const Json* flags = FindField(doc, "model_flags")) {
    Result<plan::ModelFlags> f = ReadModelFlags(*flags, at.Key("model_flags"));
    if (!f) return f.error();
    p.model_flags = std::move(*f);
  }
  if (const Json* galvatron = FindField(doc, "galvatron")) {
    Result<plan::GalvatronSource> g = ReadGalvatronSource(*galvatron, at.Key("galvatron"));
    if (!g) return g.error();
    p.galvatron = std::move(*g);
  }
  if (const Json* op = FindField(doc, "operator")) {
    Result<plan::OperatorPlan> o = ReadOperatorPlan(*op, at.Key("operator"));
    if (!o) return o.error();
    p.op = std::move(*o);
  }
  if (const Json* layer = FindField(doc, "layer")) {
    Result<plan::LayerPlan> l = ReadLayerPlan(*layer, at.Key("layer"));
    if (!l) return l.error();
    p.layer = std::move(*l);
  }
  Result<plan::Claims> claims = ReadClaims(doc, at);
  if (!claims) return claims.error();
  p.claims = *claims;
  return p;
}

std::vector<int> AxisList(ir::AxisMask mask) {
  std::vector<int> axes;
  for (int a = 0; a < 32; ++a)
    if (mask & ir::AxisBit(a)) axes.push_back(a);
  return axes;
}

OrderedJson OperatorJson(const plan::OperatorPlan& op) {
  OrderedJson j;
  j["mesh"] = op.mesh_shape;
  j["shardings"] = OrderedJson::array();
  for (const auto& [node, s] : op.shardings) {
    OrderedJson e;
    e["node"] = node;
    e["output"] = s.output.ToString();
    e["operands"] = OrderedJson::array();
    for (const ir::ShardingSpec& spec : s.operands) e["operands"].push_back(spec.ToString());
    e["reduce_axes"] = AxisList(s.reduce_axes);
    e["strategy"] = s.strategy;
    j["shardings"].push_back(std::move(e));
  }
  j["schedule"] = OrderedJson::array();
  for (const plan::Step& step : op.schedule)
    j["schedule"].push_back({{"op", step.kind == plan::StepKind::kCompute ? "compute" : "free"}, {"node", step.node}});
  return j;
}

OrderedJson LayerJson(const plan::LayerPlan& lp) {
  OrderedJson j;
  j["layers"] = OrderedJson::array();
  for (const plan::LayerStrategy& s : lp.layers)
    j["layers"].push_back(LayerStrategyJson<OrderedJson>(s));
  j["pp_degree"] = lp.pp_degree;
  j["pp_partition"] = lp.pp_partition;
  j["global_batch"] = lp.global_batch;
  j["micro_batches"] = lp.micro_batches;
  j["pipeline"] = lp.pipeline == plan::PipelineSchedule::kGPipe ? "gpipe" : "1f1b";
  if (lp.virtual_stages != 1) j["virtual_stages"] = lp.virtual_stages;  // interleaved 1F1B only
  return j;
}

}  // namespace

Result<plan::Plan> ParsePlanJson(std::string_view text, const std::string& source) {
  return GuardJson(source, [&]() -> Result<plan::Plan> {
    Result<Json> doc = ParseJson(text, source);
    if (!doc) return doc.error();
    return ReadPlan(*doc, source);
  });
}

Result<plan::Plan> ReadPlanFile(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return text.error();
  return ParsePlanJson(*text, path);
}

std::string WritePlanJson(const plan::Plan& plan) {
  OrderedJson doc;
  doc[kVersionKey] = plan::kPlanVersion;
  doc["graph"] = plan.graph;
  doc["model"] = plan.model;
  if (!plan.hf_config.empty()) doc["hf_config"] = plan.hf_config;
  if (plan.model_flags != plan::ModelFlags{}) doc["model_flags"] = ModelFlagsJson(plan.model_flags);
  if (plan.galvatron) doc["galvatron"] = GalvatronSourceJson(*plan.galvatron);
  doc["cluster"] = plan.cluster;
  doc["solver"] = plan.solver;
  if (plan.op) doc["operator"] = OperatorJson(*plan.op);
  if (plan.layer) doc["layer"] = LayerJson(*plan.layer);
  doc["claims"] = OrderedJson::object();
  if (plan.claims.peak_memory_bytes) doc["claims"]["peak_memory_bytes"] = *plan.claims.peak_memory_bytes;
  if (plan.claims.iteration_seconds) doc["claims"]["iteration_seconds"] = *plan.claims.iteration_seconds;
  return DumpReadable(doc, 3);
}

}  // namespace kiwi::io
