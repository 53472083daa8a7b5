#include "kiwi/cli/common.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <iostream>

#include "kiwi/cli/cost_model_loader.h"
#include "kiwi/cost/cluster.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/io/megatron_args.h"
#include "kiwi/io/plan_json.h"
#include "kiwi/io/torchtitan_config.h"
#include "kiwi/models/hf_config.h"
#include "kiwi/util/elapsed.h"
#include "kiwi/util/one_line.h"
#include "kiwi/util/units.h"

namespace kiwi::cli {
namespace {

Result<ir::Optimizer> ParseOptimizer(const std::string& name) {
  if (std::optional<ir::Optimizer> o = ir::ParseOptimizer(name)) return *o;
  return BadInput(fmt::format("--optimizer: '{}' is not one of {}", name, ir::kOptimizerNames));
}

}  // namespace

void ModelFlags::Add(CLI::App* app, const std::string& default_model) {
  model = default_model;
  app->add_option("--model", model, fmt::format("model family or preset: {}", fmt::join(models::ModelNames(), ", ")))
      ->capture_default_str();
  app->add_option("--layers", flags.layers, "number of transformer layers")->check(WholeNumber());
  app->add_option("--hidden", flags.hidden, "hidden size")->check(WholeNumber());
  app->add_option("--heads", flags.heads, "attention heads")->check(WholeNumber());
  app->add_option("--seq", flags.seq, "sequence length")->check(WholeNumber());
  app->add_option("--batch", flags.batch, "global batch size")->check(WholeNumber());
  app->add_option("--ffn", flags.ffn, "feed-forward size (default 4 x hidden)")->check(WholeNumber());
  app->add_option("--vocab", flags.vocab, "vocabulary of a language model (default: the preset's; gpt: GPT-2's 50,257)")
      ->check(WholeNumber());
  app->add_option("--dropout", flags.dropout,
                  "dropout probability of a transformer at every site, 0 for none (default: the preset's; gpt: 0.1)");
  app->add_option("--capacity-factor", flags.capacity_factor,
                  "mixtures of experts: each expert's slots per its even share of the routed tokens (GShard's "
                  "capacity factor; default 1: dropless with an even load; above 1 also an uneven load's busiest expert)");
  app->add_option("--dtype", flags.dtype, "fp32 | bf16 | fp16 (default: the preset's)");
  app->add_option("--optimizer", flags.optimizer, "adam | fused_adam | sgd (default: the preset's)");
  app->add_option("--runtime", flags.runtime,
                  "kiwi | fsdp2: what will run ZeRO-3 layers, priced by what it holds beside its shards (default "
                  "kiwi: one layer's gathered parameters; fsdp2: PyTorch's fully_shard, as kiwi.torch.parallelize "
                  "runs, also the next layer's prefetched parameters and the last reduce-scatter's input; kiwi plan "
                  "then searches only what kiwi.torch.parallelize runs: one TP degree for all layers of a pipeline "
                  "(per layer without stages, for a head not tied to the input embedding), no offloading, context "
                  "or expert parallelism)");
  app->add_option("--attention", flags.attention,
                  "auto | fused | materialized: FlashAttention-style fused attention or [s, s] scores "
                  "(default auto: fused for bf16/fp16 models but t5 and swin)");
}

Result<models::ModelSpec> ModelFlags::Load() const {
  Result<models::ModelOverrides> o = Overrides();
  if (!o) return o.error();
  return models::LoadModel(model, *o);
}

Result<models::ModelSpec> ModelFlags::LoadHfConfig(const std::string& path, bool with_batch) const {
  Result<models::ModelOverrides> overrides = Overrides();
  if (!overrides) return overrides.error();
  if (!with_batch) overrides->batch.reset();
  Result<std::string> text = io::ReadFileText(path);  // a directory or a missing file: one line, exit 2
  if (!text) return text.error();
  return models::ParseHfConfig(*text, path, *overrides);
}

Result<models::ModelOverrides> ModelFlags::Overrides() const {
  models::ModelOverrides o;
  if (flags.layers) {
    if (*flags.layers > models::kMaxLayers)
      return BadInput(fmt::format("--layers: {} is too many (at most {})", *flags.layers, models::kMaxLayers));
    o.layers = static_cast<int>(*flags.layers);
  }
  o.hidden = flags.hidden;
  o.heads = flags.heads;
  o.seq = flags.seq;
  o.batch = flags.batch;
  o.ffn = flags.ffn;
  o.vocab = flags.vocab;
  o.dropout = flags.dropout;
  o.capacity_factor = flags.capacity_factor;
  if (!flags.dtype.empty()) {
    std::optional<ir::DType> d = ir::ParseDType(flags.dtype);
    if (!d || !ir::IsFloating(*d) || *d == ir::DType::kF64)
      return BadInput(fmt::format("--dtype: '{}' is not one of fp32, bf16, fp16", flags.dtype));
    o.dtype = d;
  }
  if (!flags.attention.empty()) {
    std::optional<models::AttentionKernel> a = models::ParseAttentionKernel(flags.attention);
    if (!a) return BadInput(fmt::format("--attention: '{}' is not one of auto, fused, materialized", flags.attention));
    o.attention = a;
  }
  if (!flags.runtime.empty()) {
    o.zero_runtime = cost::ParseZeroRuntime(flags.runtime);
    if (!o.zero_runtime)
      return BadInput(fmt::format("--runtime: '{}' is not one of {}", flags.runtime, cost::kZeroRuntimeNames));
  }
  if (!flags.optimizer.empty()) {
    Result<ir::Optimizer> opt = ParseOptimizer(flags.optimizer);
    if (!opt) return opt.error();
    o.optimizer = *opt;
  }
  return o;
}

double SearchFlags::SecondsLeft() const {
  return std::max(std::min(time_limit_seconds, 0.01), time_limit_seconds - SecondsSince(start));
}

bool SearchFlags::Spent() const { return SecondsSince(start) >= time_limit_seconds; }

void SearchFlags::Add(CLI::App* app) {
  // Positive seconds; NaN is refused (CLI11's PositiveNumber lets it through), inf means no limit
  // (deadlines clamp at kMaxTimeLimitSeconds, util/elapsed.h).
  const CLI::Validator positive_seconds(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || std::isnan(v) || v <= 0.0)
          return "must be a positive number of seconds (got " + text + ")";
        return {};
      },
      "SECONDS>0");
  app->add_option("--time-limit", time_limit_seconds, "seconds to search; the best answer so far is returned")
      ->check(positive_seconds)
      ->capture_default_str();
  app->add_option("--threads", threads, "solver threads (default: all cores)")->check(CLI::NonNegativeNumber);
}

void CostFlags::Add(CLI::App* app) {
  app->add_option("--profile", profile,
                  "measured per-operator times (profile JSON): used instead of the roofline for the operators it names");
}

Result<cost::CostModel> CostFlags::Make(const cost::Cluster& cluster, const cost::CostModelOptions& options,
                                        const std::vector<cost::CollectiveSample>& collectives) const {
  cost::Profile measured;
  if (!profile.empty()) {
    Result<cost::Profile> read = io::ReadProfileFile(profile);
    if (!read) return read.error();
    measured = *std::move(read);
  }
  measured.device.collectives.insert(measured.device.collectives.end(), collectives.begin(), collectives.end());
  return MakeCostModel(cluster, options, std::move(measured), profile);
}

CLI::Validator WholeNumber() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [at, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range) return fmt::format("{} is too large (at most {})", text, INT64_MAX);
        if (error != std::errc() || at != end) return fmt::format("{} is not a whole number", text);
        return {};
      },
      "INT");
}

CLI::Validator OutputFile() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        Status ok = io::CheckWritableOutput(path);
        return ok ? std::string() : ok.error().message;
      },
      "FILE");
}

void AddThreadsFlag(CLI::App* app) {
  app->add_option_function<int>("--threads", [](int) {}, "accepted for uniformity; this command runs on one thread")
      ->check(CLI::NonNegativeNumber);
}

Result<ir::Graph> LoadGraphOrModel(const std::string& path, const ModelFlags& model, const CLI::App& app) {
  const bool from_model = app.count("--model") > 0;
  if (path.empty() == !from_model)
    return BadInput(fmt::format("give either a GRAPH file or --model NAME (see kiwi {} --help)", app.get_name()));
  if (!path.empty()) return io::ReadGraphFile(path);
  Result<models::ModelSpec> spec = model.Load();
  if (!spec) return spec.error();
  return models::BuildTrainingGraph(*spec);
}

int ReportError(const Error& error) {
  std::cerr << "kiwi: error: " << MessageLine(error.message) << '\n';  // one printable line, whatever it quotes
  return ExitCodeFor(error.code);
}

void PrintJson(const nlohmann::json& object) { std::cout << object.dump(2) << std::endl; }

std::string DescribeModel(const models::ModelSpec& spec) {
  if (const auto* t = std::get_if<models::TransformerConfig>(&spec.config)) {
    const int layers = t->layers + t->decoder_layers;
    return fmt::format("{}: {} layers, hidden {}, {} heads, seq {}, batch {}, {}", spec.name, layers,
                       t->hidden, t->heads, t->seq, t->batch, ir::DTypeName(t->dtype));
  }
  const auto& m = std::get<models::MlpConfig>(spec.config);
  return fmt::format("{}: {} linear layers, batch {}, {}", spec.name, m.widths.size() - 1, m.batch,
                     ir::DTypeName(m.dtype));
}

std::string ClusterHelp() {
  return fmt::format("cluster preset ({}) or cluster JSON file", fmt::join(cost::ClusterPresetNames(), ", "));
}

Result<std::optional<int64_t>> ParseBatch(const std::string& text) {
  if (text == "auto") return std::optional<int64_t>{};
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < 1 || value > (int64_t{1} << 30))
    return BadInput(fmt::format("--batch: '{}' is not a positive integer or auto", text));
  return std::optional<int64_t>{value};
}

Status WriteLayerPlanFile(const std::string& path, const ModelFlags& model, const std::string& hf_config,
                          const std::string& cluster, const std::string& solver, const plan::LayerPlan& layer_plan,
                          const sim::LayerSimResult& simulated, const plan::GalvatronSource* galvatron) {
  plan::Plan p;
  if (galvatron != nullptr) {
    p.galvatron = *galvatron;
  } else {
    p.model = hf_config.empty() ? model.model : "";
    if (!hf_config.empty()) p.hf_config = AbsolutePath(hf_config);
    p.model_flags = model.flags;
  }
  p.cluster = ClusterReference(cluster);
  p.solver = solver;
  p.layer = layer_plan;
  p.claims.peak_memory_bytes = simulated.summary.peak_memory_bytes;
  p.claims.iteration_seconds = simulated.summary.iteration_seconds;
  return io::WriteFileAtomically(path, io::WritePlanJson(p));
}

std::string DescribeCluster(const cost::Cluster& cluster) {
  std::string links = fmt::format("{} {:.0f} GB/s", cluster.intra_node.name, cluster.intra_node.bandwidth / 1e9);
  if (cluster.num_nodes > 1)
    links += cluster.adapters_per_node > 1
                 ? fmt::format(", {} x {} {:.1f} GB/s between nodes", cluster.adapters_per_node, cluster.inter_node.name,
                               cluster.inter_node.bandwidth / 1e9)
                 : fmt::format(", {} {:.1f} GB/s between nodes", cluster.inter_node.name, cluster.inter_node.bandwidth / 1e9);
  return fmt::format("{}: {} x {} ({}), {}", cluster.name, cluster.NumDevices(), cluster.device.name,
                     FormatBytes(cluster.device.memory_bytes), links);
}

Result<plan::LayerPlan> ReadFrameworkConfig(const std::string& path, int devices, int layers) {
  return std::filesystem::path(path).extension() == ".toml" ? io::ReadTorchtitanConfigFile(path, devices, layers)
                                                            : io::ReadMegatronArgsFile(path, devices, layers);
}

bool IsFrameworkConfig(const std::string& path) {
  if (std::filesystem::path(path).extension() == ".toml") return true;
  Result<std::string> text = io::ReadFileText(path);
  if (!text) return false;  // the plan reader names the file
  const size_t first = text->find_first_not_of(" \t\r\n");
  return first != std::string::npos && (*text)[first] != '{';
}

std::string PlanWrittenLine(const std::string& path, const std::string& hf_config) {
  if (hf_config.empty()) return fmt::format("Plan written to {} (replay it with `kiwi simulate {}`).\n", path, path);
  return fmt::format("Plan written to {} (replay it with `kiwi simulate {}`; run it on the model with "
                     "`python -m kiwi.torch.parallel --plan {}`).\n", path, path, path);
}

Result<models::ModelSpec> LoadPlanModelSpec(const plan::Plan& plan) {
  const ModelFlags flags{plan.model, plan.model_flags};
  return plan.hf_config.empty() ? flags.Load() : flags.LoadHfConfig(plan.hf_config, /*with_batch=*/true);
}

std::string ClusterReference(const std::string& given) {
  return cost::ClusterPreset(given) ? given : AbsolutePath(given);
}

std::string AbsolutePath(const std::string& given) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(given, ec);
  return ec ? given : absolute.lexically_normal().string();
}

std::string OperatorPlanJson(const plan::Plan& p, const ir::Graph& graph) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(io::WritePlanJson(p));
  for (nlohmann::ordered_json& e : j["operator"]["shardings"]) {
    const ir::Node& node = graph.node(e["node"].get<ir::NodeId>());
    if (node.output.shape.empty()) e["output"] = "";
    for (size_t i = 0; i < e["operands"].size() && i < node.inputs.size(); ++i)
      if (graph.node(node.inputs[i]).output.shape.empty()) e["operands"][i] = "";
  }
  return j.dump(2) + "\n";
}

}  // namespace kiwi::cli
