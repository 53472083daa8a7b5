#pragma once
// Named models (CONTRACT.md): the families with size flags, and presets: the Galvatron-BMW paper's
// Table I (bert-huge-32/48, vit-huge-32/48, t5-large-32/48, t5-512-4-32/48, swin-huge-32/48) plus
// gpt3-13b, llama2-7b, llama2-70b, llama3-8b, llama3-70b, llama3-405b, and the mixtures of experts
// mixtral-8x7b, qwen3-30b-a3b, deepseek-v2-lite, deepseek-v2 and deepseek-v3 (latent attention).
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kiwi/cost/layer_profile.h"
#include "kiwi/ir/backward.h"
#include "kiwi/models/mlp.h"
#include "kiwi/models/transformer.h"

namespace kiwi::models {

struct ModelSpec {
  std::string name;
  std::variant<TransformerConfig, MlpConfig> config;
  ir::TrainingOptions training;  // optimizer and master weights the preset's paper trains with
  cost::ZeroRuntime zero_runtime = cost::ZeroRuntime::kOneLayer;  // what will run its ZeRO-3 layers
};

// The largest capacity factor kiwi builds (an expert with 64 times its share of the tokens: beyond any
// router worth training, and no more slots than tokens anyway).
inline constexpr double kMaxCapacityFactor = 64.0;

// --capacity-factor's range, (0, kMaxCapacityFactor]: bad input naming the flag otherwise.
Status CheckCapacityFactor(double capacity_factor);

// The most transformer layers kiwi builds (--layers, an HF config's layer count, Galvatron's layers per
// type): far beyond any real model, small enough that graphs and searches stay bounded.
inline constexpr int kMaxLayers = 10000;

// Overrides users give on the command line (--layers, --hidden, ...); unset fields keep the preset's.
struct ModelOverrides {
  std::optional<int> layers = {};
  std::optional<int64_t> hidden = {}, heads = {}, seq = {}, batch = {}, ffn = {}, vocab = {};
  std::optional<ir::DType> dtype = {};
  std::optional<ir::Optimizer> optimizer = {};
  std::optional<cost::ZeroRuntime> zero_runtime = {};
  std::optional<AttentionKernel> attention = {};  // transformers only
  std::optional<double> dropout = {};  // transformers only: the probability at every site, 0 for none
  std::optional<double> capacity_factor = {};  // mixtures of experts only (TransformerConfig::capacity_factor)
};

// A family name (gpt, bert, t5, vit, swin, llama, mlp) or a preset, with overrides applied.
// Unknown names and invalid sizes (heads not dividing hidden, non-positive values) are kBadInput.
Result<ModelSpec> LoadModel(const std::string& name, const ModelOverrides& overrides = {});
std::vector<std::string> ModelNames();

Result<ir::Graph> BuildForwardGraph(const ModelSpec& spec);
Result<ir::Graph> BuildTrainingGraph(const ModelSpec& spec);  // forward + backward + optimizer

// Closed-form counts for the same architectures (Narayanan et al. 2021, Korthikanti et al. 2022),
// used to check the builders.
int64_t ClosedFormParameterCount(const TransformerConfig& config);
// Per-layer activation bytes saved for backward by a standard GPT/BERT layer, 16-bit activations and
// 1-byte dropout masks, no parallelism: 34*s*b*h + 5*a*s^2*b (Korthikanti et al. 2022, eq. 1).
int64_t ClosedFormLayerActivationBytes16(int64_t seq, int64_t batch, int64_t hidden, int64_t heads);

}  // namespace kiwi::models
