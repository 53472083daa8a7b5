#include "kiwi/io/galvatron_profiles.h"

#include <fmt/format.h>

#include <algorithm>
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

// One layer type's forward time (index num_types: "other"): per sample, and fixed per micro-batch.
struct ForwardTime {
  double per_sample = -1.0, per_microbatch = 0.0;
};

// Galvatron's "batch" time mode: a least-squares line through (b, b x ms per sample) over the profiled
// micro-batch sizes b (search_engine.py get_profiled_model_configs). Without `fit_line`, with one size,
// or data a line does not fit (no positive slope, a negative intercept), the largest size's per-sample
// time and no intercept.
ForwardTime FitForward(const std::vector<std::pair<int64_t, double>>& points, bool fit_line) {
  ForwardTime t;
  int64_t largest = -1;
  for (const auto& [b, ms] : points)
    if (b > largest) largest = b, t.per_sample = ms / 1e3;
  if (!fit_line || points.size() < 2) return t;  // Galvatron's "static" mode: the profiled per-sample time
  double mx = 0.0, my = 0.0;
  for (const auto& [b, ms] : points) mx += static_cast<double>(b), my += static_cast<double>(b) * ms;
  mx /= static_cast<double>(points.size());
  my /= static_cast<double>(points.size());
  double sxy = 0.0, sxx = 0.0;
  for (const auto& [b, ms] : points) {
    const double dx = static_cast<double>(b) - mx;
    sxy += dx * (static_cast<double>(b) * ms - my);
    sxx += dx * dx;
  }
  if (sxx <= 0.0) return t;
  const double slope = sxy / sxx, intercept = my - slope * mx;
  if (!(slope > 0.0) || !(intercept >= 0.0)) return t;
  return {slope / 1e3, intercept / 1e3};
}

// Forward times of each type (index num_types = "other"), from the entries of the requested sequence
// length (any, when none is requested); `seq_seen` gets the sequence lengths the entries have.
Result<std::vector<ForwardTime>> ForwardTimes(const Json& doc, const JsonPath& at, int num_types, int64_t seq,
                                              std::vector<int64_t>& seq_seen, bool fit_line) {
  std::vector<std::vector<std::pair<int64_t, double>>> points(static_cast<size_t>(num_types) + 1);
  for (const auto& [key, value] : doc.items()) {
    const std::optional<TimeKey> k = ParseTimeKey(key);
    if (!k || k->type >= num_types || (seq > 0 && k->seq > 0 && k->seq != seq)) continue;
    Result<double> ms = ReadNumber(value, at.Key(key), 0.0);
    if (!ms) return ms.error();
    const size_t slot = k->type < 0 ? static_cast<size_t>(num_types) : static_cast<size_t>(k->type);
    std::vector<std::pair<int64_t, double>>& here = points[slot];
    const auto same = std::find_if(here.begin(), here.end(), [&](const auto& p) { return p.first == k->batch; });
    if (same != here.end()) {
      if (seq == 0 && k->seq > 0)
        return at.Bad(fmt::format("has micro-batch {} at several sequence lengths: give the sequence length", k->batch));
      same->second = *ms;
    } else {
      here.emplace_back(k->batch, *ms);
    }
    if (k->seq > 0 && std::find(seq_seen.begin(), seq_seen.end(), k->seq) == seq_seen.end()) seq_seen.push_back(k->seq);
  }
  std::vector<ForwardTime> times;
  for (size_t i = 0; i < points.size(); ++i) times.push_back(FitForward(points[i], fit_line));
  for (int i = 0; i < num_types; ++i)
    if (times[static_cast<size_t>(i)].per_sample < 0)
      return at.Bad(fmt::format("no \"layertype_{}_bsz*{}\" entry", i, seq > 0 ? fmt::format("_seq{}", seq) : ""));
  if (times.back().per_sample < 0) times.back() = {0.0, 0.0};  // no embeddings/head profile
  return times;
}

// Least squares of y over the powers x^0..x^degree (x scaled by its largest value), evaluated at `at`;
// nullopt when the points do not determine the curve.
std::optional<double> FitAt(const std::vector<std::pair<int64_t, double>>& points, int degree, double at) {
  const size_t n = static_cast<size_t>(degree) + 1;
  if (points.size() < n) return std::nullopt;
  double scale = 1.0;
  for (const auto& [x, y] : points) scale = std::max(scale, static_cast<double>(x));
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));  // normal equations | right side
  for (const auto& [x, y] : points) {
    std::vector<double> pw(n, 1.0);
    for (size_t k = 1; k < n; ++k) pw[k] = pw[k - 1] * static_cast<double>(x) / scale;
    for (size_t r = 0; r < n; ++r) {
      for (size_t c = 0; c < n; ++c) a[r][c] += pw[r] * pw[c];
      a[r][n] += pw[r] * y;
    }
  }
  for (size_t c = 0; c < n; ++c) {  // Gaussian elimination, partial pivoting
    size_t pivot = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    if (!(std::abs(a[pivot][c]) > 1e-12)) return std::nullopt;
    std::swap(a[c], a[pivot]);
    for (size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k <= n; ++k) a[r][k] -= f * a[c][k];
    }
  }
  double value = 0.0, pw = 1.0;
  for (size_t k = 0; k < n; ++k, pw *= at / scale) value += a[k][n] / a[k][k] * pw;
  return value;
}

// Galvatron's "sequence" time mode (search_engine.py get_profiled_model_configs): the micro-batch-1
// entries over several sequence lengths, a layer type's forward time a quadratic in the length and the
// "other" time a line, each evaluated at `seq`; per sample, nothing fixed per micro-batch.
Result<std::vector<ForwardTime>> SequenceForwardTimes(const Json& doc, const JsonPath& at, int num_types, int64_t seq) {
  if (seq <= 0) return at.Bad("the sequence time mode needs the sequence length to evaluate at: give it");
  std::vector<std::vector<std::pair<int64_t, double>>> points(static_cast<size_t>(num_types) + 1);
  for (const auto& [key, value] : doc.items()) {
    const std::optional<TimeKey> k = ParseTimeKey(key);
    if (!k || k->type >= num_types || k->batch != 1 || k->seq <= 0) continue;
    Result<double> ms = ReadNumber(value, at.Key(key), 0.0);
    if (!ms) return ms.error();
    const size_t slot = k->type < 0 ? static_cast<size_t>(num_types) : static_cast<size_t>(k->type);
    points[slot].emplace_back(k->seq, *ms);
  }
  std::vector<ForwardTime> times;
  for (size_t i = 0; i < points.size(); ++i) {
    const bool other = i == static_cast<size_t>(num_types);
    const int degree = other ? 1 : 2;
    if (other && points[i].empty()) {  // no embeddings/head profile
      times.push_back({0.0, 0.0});
      continue;
    }
    std::vector<int64_t> lengths;
    for (const auto& [x, y] : points[i])
      if (std::find(lengths.begin(), lengths.end(), x) == lengths.end()) lengths.push_back(x);
    const std::string name = other ? "other" : std::to_string(i);
    const std::optional<double> ms = static_cast<int>(lengths.size()) > degree
                                         ? FitAt(points[i], degree, static_cast<double>(seq))
                                         : std::nullopt;
    if (!ms)
      return at.Bad(fmt::format("the sequence time mode fits layertype_{}'s micro-batch-1 times over at least {} "
                                "sequence lengths (\"layertype_{}_bsz1_seq*\"), the profile has {}",
                                name, degree + 1, name, lengths.size()));
    if (!(*ms > 0.0))
      return at.Bad(fmt::format("the sequence time mode's fit of layertype_{} gives {:g} ms at sequence length {}: "
                                "profile lengths around it", name, *ms, seq));
    times.push_back({*ms / 1e3, 0.0});
  }
  return times;
}

// Galvatron's "sequence" memory mode (search_engine.py get_profiled_model_configs): every entry keyed by
// sequence length becomes the entry at `seq`: a layer type's parameter_size from its shortest profiled
// length and its activations per sample from its longest, scaled by seq / longest; the "other" entries'
// model states at their longest and their activations scaled likewise.
Result<Json> SequenceModeMemory(const Json& memory, const JsonPath& at, int64_t seq) {
  if (seq <= 0) return at.Bad("the sequence memory mode needs the sequence length to scale to: give it");
  Json out = memory;
  for (auto& [key, entry] : out.items()) {
    if (!entry.is_object() || entry.empty()) continue;
    int64_t shortest = 0, longest = 0;
    bool by_length = true;
    for (const auto& [length, v] : entry.items()) {
      const std::optional<int64_t> n = ParseSuffix(length, "");
      if (!n || *n < 1 || !v.is_object()) {
        by_length = false;
        break;
      }
      shortest = shortest == 0 ? *n : std::min(shortest, *n);
      longest = std::max(longest, *n);
    }
    if (!by_length) continue;
    const JsonPath here = at.Key(key);
    const double scale = static_cast<double>(seq) / static_cast<double>(longest);
    Json at_seq = entry[std::to_string(longest)];
    const auto scaled = [&](Json& v, const JsonPath& where) -> Status {
      if (v.is_object()) {
        for (auto& [k, x] : v.items()) {
          Result<double> mb = ReadNumber(x, where.Key(k), 0.0);
          if (!mb) return mb.error();
          x = *mb * scale;
        }
        return Status::Ok();
      }
      Result<double> mb = ReadNumber(v, where, 0.0);
      if (!mb) return mb.error();
      v = *mb * scale;
      return Status::Ok();
    };
    const JsonPath longest_at = here.Key(std::to_string(longest));
    if (at_seq.contains("tp_activation_per_bsz_dict")) {
      KIWI_RETURN_IF_ERROR(scaled(at_seq["tp_activation_per_bsz_dict"], longest_at.Key("tp_activation_per_bsz_dict")));
      const Json& first = entry[std::to_string(shortest)];
      if (!first.contains("parameter_size"))
        return here.Key(std::to_string(shortest)).Bad("no \"parameter_size\" (the sequence memory mode reads it at the "
                                                      "shortest length)");
      at_seq["parameter_size"] = first["parameter_size"];
    } else if (at_seq.contains("activation")) {
      KIWI_RETURN_IF_ERROR(scaled(at_seq["activation"], longest_at.Key("activation")));
    }
    entry = std::move(at_seq);
  }
  return out;
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

// The memory entry `base` or its sequence-parallel twin `base_sp`, the preferred one first; the key
// found (empty: neither).
std::string EntryKey(const Json& memory, const std::string& base, bool sequence_parallel) {
  const std::string sp = base + "_sp";
  for (const std::string& key : sequence_parallel ? std::vector{sp, base} : std::vector{base, sp})
    if (FindField(memory, key)) return key;
  return "";
}

// A figure by TP degree: a number (the same at every degree) or {"1": MB, "2": MB, ...}. Returns the
// whole (degree 1) and the part TP keeps whole, fitted through degree 1 and the largest as
// whole_part + (whole - whole_part) / tp, within [0, whole].
struct ByTp {
  double whole = 0.0, kept_whole = 0.0;
};
Result<ByTp> ByTpDegree(const Json& value, const JsonPath& at) {
  if (!value.is_object()) {
    Result<double> v = ReadNumber(value, at, 0.0);
    if (!v) return v.error();
    return ByTp{*v, 0.0};
  }
  Result<double> whole = NumberField(value, at, "1", 0.0);
  if (!whole) return whole.error();
  int64_t largest = 1;
  double at_largest = *whole;
  for (const auto& [key, v] : value.items()) {
    std::optional<int64_t> tp = ParseSuffix(key, "");
    if (!tp || *tp <= largest || *tp > 1 << 20) continue;
    Result<double> mb = ReadNumber(v, at.Key(key), 0.0);
    if (!mb) return mb.error();
    largest = *tp;
    at_largest = *mb;
  }
  if (largest == 1) return ByTp{*whole, 0.0};
  const double n = static_cast<double>(largest);
  return ByTp{*whole, std::clamp((n * at_largest - *whole) / (n - 1.0), 0.0, *whole)};
}

int DtypeBytes(GalvatronPrecision p) { return p == GalvatronPrecision::kFp32 ? 4 : 2; }

struct Reading {
  const GalvatronModelOptions& options;
  GalvatronPrecision precision;
  int64_t seq;  // the sequence length read (0: unknown)
  double state_ratio() const {
    return options.state_bytes_per_parameter_byte > 0.0 ? options.state_bytes_per_parameter_byte
                                                        : 16.0 / DtypeBytes(precision) - 1.0;
  }
};

Result<cost::LayerProfile> LayerProfileOf(const Json& memory, const JsonPath& at, int type, const Reading& r,
                                          const ForwardTime& forward) {
  const std::string key = EntryKey(memory, fmt::format("layertype_{}", type), r.options.sequence_parallel);
  if (key.empty()) return at.Bad(fmt::format("no \"layertype_{0}\" or \"layertype_{0}_sp\" entry", type));
  Result<const Json*> m = BySeq(*FindField(memory, key), at.Key(key), "parameter_size", r.options.seq);
  if (!m) return m.error();
  const JsonPath here = at.Key(key);
  Result<double> params = NumberField(**m, here, "parameter_size", 0.0);
  if (!params) return params.error();
  Result<const Json*> acts = ObjectField(**m, here, "tp_activation_per_bsz_dict");
  if (!acts) return acts.error();
  const JsonPath by_bsz = here.Key("tp_activation_per_bsz_dict");
  Json by_tp = **acts;  // the degrees alone, for ByTpDegree
  by_tp.erase("checkpoint");
  Result<ByTp> activation = ByTpDegree(by_tp, by_bsz);
  if (!activation) return activation.error();
  Result<double> boundary = NumberField(**acts, by_bsz, "checkpoint", 0.0);
  if (!boundary) return boundary.error();
  // parameter_size is fp32: the layer's weights in the training precision are dtype_bytes / 4 of it.
  Result<int64_t> parameter_bytes = MiBToBytes(*params, here, "parameter_size");
  if (!parameter_bytes) return parameter_bytes.error();
  Result<int64_t> activation_bytes = MiBToBytes(activation->whole, by_bsz, "1");
  if (!activation_bytes) return activation_bytes.error();
  Result<int64_t> boundary_bytes = MiBToBytes(*boundary, by_bsz, "checkpoint");
  if (!boundary_bytes) return boundary_bytes.error();
  cost::LayerProfile p;
  p.name = fmt::format("layertype_{}", type);
  p.parameter_bytes = *parameter_bytes * DtypeBytes(r.precision) / 4;
  p.activation_bytes_per_sample = *activation_bytes;
  p.replicated_activation_bytes_per_sample = static_cast<int64_t>(std::llround(activation->kept_whole * kMiB));
  p.boundary_bytes_per_sample = *boundary_bytes;
  p.forward_seconds_per_sample = forward.per_sample;
  p.backward_seconds_per_sample = 2.0 * forward.per_sample;  // bct_fct_coe: backward ~ twice the forward
  p.forward_overhead_seconds = forward.per_microbatch;
  p.backward_overhead_seconds = 2.0 * forward.per_microbatch;
  // Galvatron's TP messages: the micro-batch's [seq, hidden] hidden states in the training precision.
  const int64_t hidden_state = r.options.hidden * r.seq * DtypeBytes(r.precision);
  p.tp_comm_bytes_per_sample = 2 * (r.options.hidden > 0 ? hidden_state : p.boundary_bytes_per_sample);
  // Galvatron's layers are transformer layers over the profiled sequence, which its cp_sizes_enc splits
  // with a (zigzag) ring: keys and values as large as two of those hidden states (its profiles say neither
  // the heads nor the attention's own time, so no key-value grouping and nothing hides the ring's sends).
  if (r.seq > 0) {
    p.attention_sequence = r.seq;
    p.attention_kv_bytes_per_sample = p.tp_comm_bytes_per_sample;
  }
  return p;
}

// One of Galvatron's "other" entries (embeddings and head): model states and activation per sample,
// each by TP degree, with `share` of the "other" forward time.
// One of Galvatron's "other" entries (embeddings and head): model states and activation per sample,
// each by TP degree.
struct OtherMemory {
  ByTp states, activation;
};
Result<OtherMemory> ReadOther(const Json& entry, const JsonPath& here, const Reading& r) {
  Result<const Json*> m = BySeq(entry, here, "model_states", r.options.seq);
  if (!m) return m.error();
  OtherMemory out;
  for (auto [key, into] : {std::pair{"model_states", &out.states}, std::pair{"activation", &out.activation}}) {
    Result<const Json*> field = RequireField(**m, here, key);
    if (!field) return field.error();
    Result<ByTp> v = ByTpDegree(**field, here.Key(key));
    if (!v) return v.error();
    if (!(v->whole <= kMaxMiB)) return here.Key(key).Bad(fmt::format("{:g} MiB is more than any device holds", v->whole));
    *into = *v;
  }
  return out;
}

OtherMemory Minus(const OtherMemory& a, const OtherMemory& b) {
  const auto minus = [](const ByTp& x, const ByTp& y) {
    const double whole = std::max(x.whole - y.whole, 0.0);
    return ByTp{whole, std::clamp(x.kept_whole - y.kept_whole, 0.0, whole)};
  };
  return {minus(a.states, b.states), minus(a.activation, b.activation)};
}

// `m` as one of kiwi's parts (embeddings or head), with `share` of the "other" forward time. Galvatron's
// model states are parameters + gradients + optimizer states.
void AssignOther(const OtherMemory& m, const Reading& r, const ForwardTime& forward, double share,
                 cost::LayerProfile& part) {
  const double per_state = 1.0 + r.state_ratio();
  part.parameter_bytes = static_cast<int64_t>(std::llround(m.states.whole / per_state * kMiB));
  part.replicated_parameter_bytes = static_cast<int64_t>(std::llround(m.states.kept_whole / per_state * kMiB));
  part.activation_bytes_per_sample = static_cast<int64_t>(std::llround(m.activation.whole * kMiB));
  part.replicated_activation_bytes_per_sample = static_cast<int64_t>(std::llround(m.activation.kept_whole * kMiB));
  part.forward_seconds_per_sample = share * forward.per_sample;
  part.backward_seconds_per_sample = 2.0 * part.forward_seconds_per_sample;
  part.forward_overhead_seconds = share * forward.per_microbatch;
  part.backward_overhead_seconds = 2.0 * part.forward_overhead_seconds;
}

// Galvatron profiles embeddings and head together ("other"): one entry for a single stage
// (other_memory_pp_off) and one for each end of a pipeline (_pp_on_first, _pp_on_last), each half of
// the "other" time there. kiwi's head gets the last stage's entry and its embeddings the rest of the
// single-stage one, so that a single stage holds exactly Galvatron's single-stage figures and a
// pipeline's last stage its last-stage ones (its first stage then differs from Galvatron's first-stage
// entry by what the two profiles disagree on: 2,109 vs 2,021 MB of states on Llama-2-7B). With only the
// pipeline entries the embeddings get the first's; with only the single-stage one, all of it.
Status FillOthers(const Json& memory, const JsonPath& at, const Reading& r, const ForwardTime& forward,
                  cost::LayerModel& model) {
  model.embedding.name = "other";
  model.head.name = "head";
  const bool sp = r.options.sequence_parallel;
  std::optional<OtherMemory> off, first, last;
  for (auto [base, into] : {std::pair{"other_memory_pp_off", &off}, std::pair{"other_memory_pp_on_first", &first},
                            std::pair{"other_memory_pp_on_last", &last}}) {
    const std::string key = EntryKey(memory, base, sp);
    if (key.empty()) continue;
    Result<OtherMemory> m = ReadOther(*FindField(memory, key), at.Key(key), r);
    if (!m) return m.error();
    *into = *m;
  }
  if (last && (off || first)) {
    AssignOther(off ? Minus(*off, *last) : *first, r, forward, 0.5, model.embedding);
    AssignOther(*last, r, forward, 0.5, model.head);
    return Status::Ok();
  }
  AssignOther(off ? *off : first ? *first : OtherMemory{}, r, forward, 1.0, model.embedding);
  return Status::Ok();
}

}  // namespace

std::optional<GalvatronPrecision> ParseGalvatronPrecision(std::string_view name) {
  if (name == "fp32") return GalvatronPrecision::kFp32;
  if (name == "bf16") return GalvatronPrecision::kBf16;
  if (name == "fp16") return GalvatronPrecision::kFp16;
  return std::nullopt;
}

std::optional<GalvatronTimeMode> ParseGalvatronTimeMode(std::string_view name) {
  if (name == "static") return GalvatronTimeMode::kStatic;
  if (name == "batch") return GalvatronTimeMode::kBatch;
  if (name == "sequence") return GalvatronTimeMode::kSequence;
  return std::nullopt;
}

std::optional<GalvatronMemoryMode> ParseGalvatronMemoryMode(std::string_view name) {
  if (name == "static") return GalvatronMemoryMode::kStatic;
  if (name == "sequence") return GalvatronMemoryMode::kSequence;
  return std::nullopt;
}

std::optional<GalvatronNameError> SetGalvatronNames(std::string_view precision, std::string_view time_mode,
                                                    std::string_view memory_mode, GalvatronModelOptions& options) {
  const auto unknown = [](std::string_view key, std::string_view name, std::string_view names) {
    return GalvatronNameError{key, fmt::format("'{}' is not one of {}", name, names)};
  };
  if (!precision.empty()) {
    options.precision = ParseGalvatronPrecision(precision);
    if (!options.precision) return unknown("precision", precision, kGalvatronPrecisionNames);
  }
  if (!time_mode.empty()) {
    const std::optional<GalvatronTimeMode> mode = ParseGalvatronTimeMode(time_mode);
    if (!mode) return unknown("time_mode", time_mode, kGalvatronTimeModeNames);
    options.time_mode = *mode;
  }
  if (!memory_mode.empty()) {
    const std::optional<GalvatronMemoryMode> mode = ParseGalvatronMemoryMode(memory_mode);
    if (!mode) return unknown("memory_mode", memory_mode, kGalvatronMemoryModeNames);
    options.memory_mode = *mode;
  }
  return std::nullopt;
}

std::optional<GalvatronPrecision> GalvatronPrecisionOfFile(std::string_view path) {
  const size_t slash = path.find_last_of('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (std::string_view p : {"fp32", "bf16", "fp16"})
    if (name.find(fmt::format("_{}_", p)) != std::string_view::npos) return ParseGalvatronPrecision(p);
  return std::nullopt;
}

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
    std::vector<int64_t> seqs;
    Result<std::vector<ForwardTime>> forward = o.time_mode == GalvatronTimeMode::kSequence
                                                   ? SequenceForwardTimes(*computation, ct, types, o.seq)
                                                   : ForwardTimes(*computation, ct, types, o.seq, seqs,
                                                                  o.time_mode == GalvatronTimeMode::kBatch);
    if (!forward) return forward.error();
    if (o.memory_mode == GalvatronMemoryMode::kSequence) {
      Result<Json> scaled = SequenceModeMemory(*memory, mt, o.seq);
      if (!scaled) return scaled.error();
      *memory = std::move(*scaled);
    }
    const std::optional<GalvatronPrecision> named = GalvatronPrecisionOfFile(t.computation_source);
    const Reading r{o, o.precision.value_or(named.value_or(GalvatronPrecision::kFp32)),
                    o.seq > 0 ? o.seq : (seqs.size() == 1 ? seqs[0] : 0)};
    if (o.hidden > 0 && r.seq == 0)
      return ct.Bad("give the sequence length: the TP messages of a hidden size need it");
    cost::LayerModel model;
    model.name = o.name;
    model.state_bytes_per_parameter_byte = r.state_ratio();
    for (int i = 0; i < types; ++i) {
      Result<cost::LayerProfile> p = LayerProfileOf(*memory, mt, i, r, (*forward)[static_cast<size_t>(i)]);
      if (!p) return p.error();
      model.layers.insert(model.layers.end(), static_cast<size_t>(o.layers_per_type[static_cast<size_t>(i)]), *p);
    }
    KIWI_RETURN_IF_ERROR(FillOthers(*memory, mt, r, forward->back(), model));
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

// "allreduce_size_8_16MB_time" -> (all-reduce, 8 devices, 16 MB); nullopt for other keys.
struct TimedKey {
  cost::Collective op;
  int devices;
  int64_t mib;
};
std::optional<TimedKey> ParseTimedKey(std::string_view key) {
  constexpr std::string_view kSuffix = "MB_time";
  if (key.size() <= kSuffix.size() || key.substr(key.size() - kSuffix.size()) != kSuffix) return std::nullopt;
  key.remove_suffix(kSuffix.size());
  cost::Collective op;
  if (key.rfind("allreduce_size_", 0) == 0) op = cost::Collective::kAllReduce, key.remove_prefix(15);
  else if (key.rfind("all2all_size_", 0) == 0) op = cost::Collective::kAllToAll, key.remove_prefix(13);
  else return std::nullopt;
  const size_t underscore = key.find('_');
  if (underscore == std::string_view::npos) return std::nullopt;
  std::optional<int64_t> devices = ParseSuffix(key.substr(0, underscore), "");
  std::optional<int64_t> mib = ParseSuffix(key.substr(underscore + 1), "");
  if (!devices || !mib || *devices < 2 || *devices > 1 << 20 || *mib < 1 || *mib > kMaxMiB) return std::nullopt;
  return TimedKey{op, static_cast<int>(*devices), *mib};
}

Status ReadCollectiveTimes(const Json& doc, const std::string& path, std::vector<cost::CollectiveSample>& out) {
  for (const auto& [key, value] : doc.items()) {
    const std::optional<TimedKey> k = ParseTimedKey(key);
    if (!k) continue;
    Result<double> ms = ReadNumber(value, JsonPath(path).Key(key), 1e-9);
    if (!ms) return ms.error();
    const int64_t bytes = k->mib * static_cast<int64_t>(kMiB);
    out.push_back({k->op, k->devices, bytes, *ms / 1e3});
    if (k->op == cost::Collective::kAllReduce)  // remap_config_for_latency: half an all-reduce each
      for (cost::Collective half : {cost::Collective::kAllGather, cost::Collective::kReduceScatter})
        out.push_back({half, k->devices, bytes, *ms / 2e3});
  }
  return Status::Ok();
}

}  // namespace

Result<GalvatronHardware> ParseGalvatronHardware(const GalvatronHardwareTexts& t, cost::Cluster base) {
  GalvatronHardware h{std::move(base), 1.3, {}, {}};
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
    if (!t.sp_time_source.empty()) {
      Result<Json> doc = ParseObject(t.sp_time, t.sp_time_source);
      if (!doc) return doc.error();
      KIWI_RETURN_IF_ERROR(ReadCollectiveTimes(*doc, t.sp_time_source, h.collectives));
      if (h.collectives.empty())
        return JsonPath(t.sp_time_source).Bad("has no \"allreduce_size_{devices}_{MB}MB_time\" entry");
    }
    return h;
  });
}

Result<GalvatronHardware> ReadGalvatronHardware(const std::string& allreduce_path, const std::string& p2p_path,
                                                const std::string& overlap_path, cost::Cluster base,
                                                const std::string& sp_time_path) {
  std::string texts[4];
  const std::string* paths[4] = {&allreduce_path, &p2p_path, &overlap_path, &sp_time_path};
  for (int i = 0; i < 4; ++i) {
    if (paths[i]->empty()) continue;
    Result<std::string> text = ReadFileText(*paths[i]);
    if (!text) return text.error();
    texts[i] = std::move(*text);
  }
  return ParseGalvatronHardware(
      {texts[0], texts[1], texts[2], texts[3], allreduce_path, p2p_path, overlap_path, sp_time_path}, std::move(base));
}

}  // namespace kiwi::io
