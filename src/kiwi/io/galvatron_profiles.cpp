#include "kiwi/io/galvatron_profiles.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>

#include "kiwi/io/file_io.h"
#include "kiwi/io/json_fields.h"

namespace kiwi::io {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGBps = 1e9;

// A profile's MiB as bytes. Over 16 TiB (2^24 MiB) for one layer or sample is refused: no device holds
// it, and 1e18 MiB wrapped llround to a small number that made absurd plans "fit".
constexpr double kMaxMiB = double{1 << 24};
Result<int64_t> MiBToBytes(double mib, const JsonPath& at, std::string_view key) {
  if (!(mib <= kMaxMiB))
    return at.Key(key).Bad(fmt::format("{:g} MiB is more than any device holds (at most {:g} MiB)", mib, kMaxMiB));
  return static_cast<int64_t>(std::llround(mib * kMiB));
}

std::optional<int64_t> ParseSuffix(std::string_view token, std::string_view prefix) {
  if (token.substr(0, prefix.size()) != prefix) return std::nullopt;
  int64_t v = 0;
  const char* first = token.data() + prefix.size();
  const char* last = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec != std::errc{} || ptr != last) return std::nullopt;
  return v;
}

// One computation-profile key: "layertype_3_bsz8_seq2048" -> type 3 (-1 for "other"), batch, seq.
struct TimeKey {
  int type = -1;
  int64_t batch = 0, seq = 0;
};

std::optional<TimeKey> ParseTimeKey(std::string_view key) {
  std::vector<std::string_view> tokens;
  for (size_t start = 0; start <= key.size();) {
    size_t end = key.find('_', start);
    if (end == std::string_view::npos) end = key.size();
    tokens.push_back(key.substr(start, end - start));
    start = end + 1;
  }
  if (tokens.size() < 2 || tokens[0] != "layertype") return std::nullopt;
  TimeKey k;
  if (tokens[1] != "other") {
    std::optional<int64_t> type = ParseSuffix(tokens[1], "");
    if (!type || *type < 0 || *type > 1000) return std::nullopt;
    k.type = static_cast<int>(*type);
  }
  for (size_t i = 2; i < tokens.size(); ++i) {
    if (auto b = ParseSuffix(tokens[i], "bsz")) k.batch = *b;
    if (auto s = ParseSuffix(tokens[i], "seq")) k.seq = *s;
  }
  return k;
}

// Forward seconds per sample of each type (index num_types = "other"); the entry with the largest
// batch is used, among those of the requested sequence length.
Result<std::vector<double>> ForwardSeconds(const Json& doc, const JsonPath& at, int num_types, int64_t seq) {
  std::vector<double> seconds(static_cast<size_t>(num_types) + 1, -1.0);
  std::vector<int64_t> batch(seconds.size(), -1);
  for (const auto& [key, value] : doc.items()) {
    const std::optional<TimeKey> k = ParseTimeKey(key);
    if (!k || k->type >= num_types || (seq > 0 && k->seq > 0 && k->seq != seq)) continue;
    Result<double> ms = ReadNumber(value, at.Key(key), 0.0);
    if (!ms) return ms.error();
    const size_t slot = k->type < 0 ? static_cast<size_t>(num_types) : static_cast<size_t>(k->type);
    if (k->batch > batch[slot]) {
      batch[slot] = k->batch;
      seconds[slot] = *ms / 1e3;
    }
  }
  for (int i = 0; i < num_types; ++i)
    if (seconds[static_cast<size_t>(i)] < 0)
      return at.Bad(fmt::format("no \"layertype_{}_bsz*{}\" entry", i, seq > 0 ? fmt::format("_seq{}", seq) : ""));
  if (seconds.back() < 0) seconds.back() = 0.0;  // no embeddings/head profile
  return seconds;
}

// A memory entry given directly or keyed by sequence length: returns the object holding `marker`.
Result<const Json*> BySeq(const Json& entry, const JsonPath& at, std::string_view marker, int64_t seq) {
  KIWI_RETURN_IF_ERROR(CheckObject(entry, at));
  if (FindField(entry, marker)) return &entry;
  if (seq > 0) {
    Result<const Json*> inner = ObjectField(entry, at, std::to_string(seq));
    if (!inner) return inner.error();
    return *inner;
  }
  if (entry.size() != 1)
    return at.Bad(fmt::format("has no \"{}\" and {} sequence lengths: give the sequence length", marker, entry.size()));
  return &entry.begin().value();
}

// A number, or an object keyed by TP degree whose "1" entry is used.
Result<double> TpOne(const Json& object, const JsonPath& at, std::string_view key) {
  Result<const Json*> v = RequireField(object, at, key);
  if (!v) return v.error();
  if ((*v)->is_object()) return NumberField(**v, at.Key(key), "1", 0.0);
  return ReadNumber(**v, at.Key(key), 0.0);
}

Result<cost::LayerProfile> LayerProfileOf(const Json& memory, const JsonPath& at, int type, int64_t seq, double forward) {
  const std::string key = fmt::format("layertype_{}", type);
  Result<const Json*> entry = ObjectField(memory, at, key);
  if (!entry) return entry.error();
  Result<const Json*> m = BySeq(**entry, at.Key(key), "parameter_size", seq);
  if (!m) return m.error();
  const JsonPath here = at.Key(key);
  Result<double> params = NumberField(**m, here, "parameter_size", 0.0);
  if (!params) return params.error();
  Result<const Json*> acts = ObjectField(**m, here, "tp_activation_per_bsz_dict");
  if (!acts) return acts.error();
  Result<double> full = NumberField(**acts, here.Key("tp_activation_per_bsz_dict"), "1", 0.0);
  if (!full) return full.error();
  Result<double> boundary = NumberField(**acts, here.Key("tp_activation_per_bsz_dict"), "checkpoint", 0.0);
  if (!boundary) return boundary.error();
  Result<int64_t> parameter_bytes = MiBToBytes(*params, here, "parameter_size");
  if (!parameter_bytes) return parameter_bytes.error();
  const JsonPath by_bsz = here.Key("tp_activation_per_bsz_dict");
  Result<int64_t> activation_bytes = MiBToBytes(*full, by_bsz, "1");
  if (!activation_bytes) return activation_bytes.error();
  Result<int64_t> boundary_bytes = MiBToBytes(*boundary, by_bsz, "checkpoint");
  if (!boundary_bytes) return boundary_bytes.error();
  cost::LayerProfile p;
  p.name = key;
  p.parameter_bytes = *parameter_bytes;
  p.activation_bytes_per_sample = *activation_bytes;
  p.boundary_bytes_per_sample = *boundary_bytes;
  p.forward_seconds_per_sample = forward;
  p.backward_seconds_per_sample = 2.0 * forward;  // §V: backward ~ twice the forward for matmul layers
  p.tp_comm_bytes_per_sample = 2 * p.boundary_bytes_per_sample;
  return p;
}

// Galvatron profiles embeddings and head together ("other"): kiwi places all of it with the embeddings
// on the first stage (LayerModel::embedding), split over TP like a layer, without TP communication.
Status FillOther(const Json& memory, const JsonPath& at, const GalvatronModelOptions& o, double forward,
                 cost::LayerModel& model) {
  model.embedding.name = "other";
  model.embedding.forward_seconds_per_sample = forward;
  model.embedding.backward_seconds_per_sample = 2.0 * forward;
  const Json* off = FindField(memory, "other_memory_pp_off");
  if (!off) return Status::Ok();
  const JsonPath here = at.Key("other_memory_pp_off");
  Result<const Json*> m = BySeq(*off, here, "model_states", o.seq);
  if (!m) return m.error();
  Result<double> states = TpOne(**m, here, "model_states");
  if (!states) return states.error();
  Result<double> activation = TpOne(**m, here, "activation");
  if (!activation) return activation.error();
  // Galvatron's model states are parameters + gradients + optimizer states.
  Result<int64_t> parameter_bytes = MiBToBytes(*states / (1.0 + o.state_bytes_per_parameter_byte), here, "model_states");
  if (!parameter_bytes) return parameter_bytes.error();
  Result<int64_t> activation_bytes = MiBToBytes(*activation, here, "activation");
  if (!activation_bytes) return activation_bytes.error();
  model.embedding.parameter_bytes = *parameter_bytes;
  model.embedding.activation_bytes_per_sample = *activation_bytes;
  return Status::Ok();
}

}  // namespace

Result<cost::LayerModel> ParseGalvatronModel(const GalvatronProfileTexts& t, const GalvatronModelOptions& o) {
  if (o.layers_per_type.empty()) return BadInput("galvatron profiles: give the number of layers of each layer type");
  for (int n : o.layers_per_type)
    if (n < 1 || n > 10000) return BadInput(fmt::format("galvatron profiles: layer count {} is out of range", n));
  return GuardJson(t.memory_source, [&]() -> Result<cost::LayerModel> {
    Result<Json> computation = ParseJson(t.computation, t.computation_source);
    if (!computation) return computation.error();
    Result<Json> memory = ParseJson(t.memory, t.memory_source);
    if (!memory) return memory.error();
    const JsonPath ct(t.computation_source), mt(t.memory_source);
    KIWI_RETURN_IF_ERROR(CheckObject(*computation, ct));
    KIWI_RETURN_IF_ERROR(CheckObject(*memory, mt));
    const int types = static_cast<int>(o.layers_per_type.size());
    Result<std::vector<double>> forward = ForwardSeconds(*computation, ct, types, o.seq);
    if (!forward) return forward.error();
    cost::LayerModel model;
    model.name = o.name;
    model.state_bytes_per_parameter_byte = o.state_bytes_per_parameter_byte;
    for (int i = 0; i < types; ++i) {
      Result<cost::LayerProfile> p = LayerProfileOf(*memory, mt, i, o.seq, (*forward)[static_cast<size_t>(i)]);
      if (!p) return p.error();
      model.layers.insert(model.layers.end(), static_cast<size_t>(o.layers_per_type[static_cast<size_t>(i)]), *p);
    }
    KIWI_RETURN_IF_ERROR(FillOther(*memory, mt, o, forward->back(), model));
    return model;
  });
}

Result<cost::LayerModel> ReadGalvatronModel(const std::string& computation_path, const std::string& memory_path,
                                           const GalvatronModelOptions& options) {
  Result<std::string> computation = ReadFileText(computation_path);
  if (!computation) return computation.error();
  Result<std::string> memory = ReadFileText(memory_path);
  if (!memory) return memory.error();
  return ParseGalvatronModel({*computation, *memory, computation_path, memory_path}, options);
}

namespace {

Result<Json> ParseObject(std::string_view text, const std::string& source) {
  Result<Json> doc = ParseJson(text, source);
  if (!doc) return doc.error();
  KIWI_RETURN_IF_ERROR(CheckObject(*doc, JsonPath(source)));
  return doc;
}

Status ApplyAllReduce(const Json& doc, const std::string& path, cost::Cluster& c) {
  const JsonPath at(path);
  Result<double> node = NumberField(doc, at, fmt::format("allreduce_size_{}_consec_1", c.devices_per_node), 1e-9);
  if (!node) return node.error();
  c.intra_node.bandwidth = *node * kGBps;
  if (c.num_nodes > 1) {
    Result<double> all = NumberField(doc, at, fmt::format("allreduce_size_{}_consec_1", c.NumDevices()), 1e-9);
    if (!all) return all.error();
    c.inter_node.bandwidth = *all * kGBps;
  }
  return Status::Ok();
}

}  // namespace

Result<GalvatronHardware> ParseGalvatronHardware(const GalvatronHardwareTexts& t, cost::Cluster base) {
  GalvatronHardware h{std::move(base), 1.3, {}};
  return GuardJson(t.allreduce_source, [&]() -> Result<GalvatronHardware> {
    if (!t.allreduce_source.empty()) {
      Result<Json> doc = ParseObject(t.allreduce, t.allreduce_source);
      if (!doc) return doc.error();
      KIWI_RETURN_IF_ERROR(ApplyAllReduce(*doc, t.allreduce_source, h.cluster));
    }
    if (!t.p2p_source.empty()) {
      Result<Json> doc = ParseObject(t.p2p, t.p2p_source);
      if (!doc) return doc.error();
      for (const auto& [key, value] : doc->items()) {
        std::optional<int64_t> k = ParseSuffix(key, "pp_size_");
        if (!k || *k < 1 || *k > 1 << 20) continue;
        Result<double> v = ReadNumber(value, JsonPath(t.p2p_source).Key(key), 0.0);
        if (!v) return v.error();
        h.p2p_bandwidth[static_cast<int>(*k)] = *v * kGBps;
      }
    }
    if (!t.overlap_source.empty()) {
      Result<Json> doc = ParseObject(t.overlap, t.overlap_source);
      if (!doc) return doc.error();
      Result<double> k = NumberField(*doc, JsonPath(t.overlap_source), "overlap_coe", 1.0);
      if (!k) return k.error();
      h.overlap_coefficient = *k;
    }
    return h;
  });
}

Result<GalvatronHardware> ReadGalvatronHardware(const std::string& allreduce_path, const std::string& p2p_path,
                                                const std::string& overlap_path, cost::Cluster base) {
  std::string texts[3];
  const std::string* paths[3] = {&allreduce_path, &p2p_path, &overlap_path};
  for (int i = 0; i < 3; ++i) {
    if (paths[i]->empty()) continue;
    Result<std::string> text = ReadFileText(*paths[i]);
    if (!text) return text.error();
    texts[i] = std::move(*text);
  }
  return ParseGalvatronHardware({texts[0], texts[1], texts[2], allreduce_path, p2p_path, overlap_path}, std::move(base));
}

}  // namespace kiwi::io
