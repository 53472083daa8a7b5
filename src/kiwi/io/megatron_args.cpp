#include "kiwi/io/megatron_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <vector>

#include "kiwi/io/file_io.h"
#include "kiwi/io/uniform_plan.h"
#include "kiwi/util/one_line.h"

namespace kiwi::io {
namespace {

// Megatron-LM's --recompute-granularity full: every layer (--recompute-method uniform
// --recompute-num-layers 1) or the first N of each stage (--recompute-method block).
Result<std::vector<std::string>> RecomputeFlags(const plan::LayerPlan& p) {
  const size_t n = p.layers.size();
  size_t checkpointed = 0;
  for (const plan::LayerStrategy& s : p.layers) checkpointed += s.checkpoint ? 1 : 0;
  if (checkpointed == n) return std::vector<std::string>{"--recompute-granularity full", "--recompute-method uniform",
                                                         "--recompute-num-layers 1"};
  if (checkpointed == 0) {
    if (p.layers.front().SelectiveRecompute()) return std::vector<std::string>{"--recompute-granularity selective"};
    return std::vector<std::string>{};
  }
  for (const plan::LayerStrategy& s : p.layers)
    if (!s.checkpoint && s.SelectiveRecompute())
      return BadInput("selective recomputation beside checkpointed layers, which Megatron-LM cannot express (one "
                      "--recompute-granularity)");
  const std::vector<int> stages = plan::LayerStages(p);
  const size_t per_stage = n / static_cast<size_t>(p.pp_degree);
  const size_t block = checkpointed / static_cast<size_t>(p.pp_degree);
  for (size_t i = 0; i < n && p.virtual_stages == 1; ++i) {
    const size_t within = i - static_cast<size_t>(stages[i]) * per_stage;
    if (p.layers[i].checkpoint != (within < block)) break;
    if (i + 1 == n)
      return std::vector<std::string>{"--recompute-granularity full", "--recompute-method block",
                                      fmt::format("--recompute-num-layers {}", block)};
  }
  return BadInput(
      "checkpointing some layers: Megatron-LM's --recompute-method block checkpoints the first N layers of every "
      "stage, and this plan checkpoints others");
}

}  // namespace

Result<std::string> WriteMegatronArgs(const plan::LayerPlan& p) {
  constexpr std::string_view kMegatron = "Megatron-LM";
  KIWI_RETURN_IF_ERROR(CheckOneStrategy(p, kMegatron));
  const plan::LayerStrategy& s = p.layers.front();
  if (s.Shards(plan::Zero::kGradients))  // every layer's data parallelism is layer 0's (CheckOneStrategy)
    return Unexpressible(0, fmt::format("{} (the distributed optimizer shards the optimizer states only, ZeRO-1)",
                                        plan::DataParallelName(s.ZeroStage())), kMegatron);
  if (p.pipeline == plan::PipelineSchedule::kGPipe) return BadInput("the GPipe schedule, which Megatron-LM cannot express");
  const int64_t layers = static_cast<int64_t>(p.layers.size());
  if (layers % p.NumChunks() != 0) return BadInput("stages of unequal layers, which Megatron-LM cannot express");
  for (int part : p.pp_partition)
    if (part != layers / p.NumChunks()) return BadInput("stages of unequal layers, which Megatron-LM cannot express");
  const int64_t replicas = s.Replicas();
  if (p.micro_batches < 1 || p.global_batch % (p.micro_batches * replicas) != 0)
    return BadInput(fmt::format("a batch of {} that does not split into {} micro-batches over {} data-parallel ranks",
                                p.global_batch, p.micro_batches, replicas));
  Result<std::vector<std::string>> recompute = RecomputeFlags(p);
  if (!recompute) return recompute.error();

  std::vector<std::string> flags = {
      fmt::format("--num-layers {}", layers),
      fmt::format("--tensor-model-parallel-size {}", s.tp),
      fmt::format("--pipeline-model-parallel-size {}", p.pp_degree),
      fmt::format("--context-parallel-size {}", s.cp),
      fmt::format("--expert-model-parallel-size {}", s.ep),
  };
  if (s.SequenceParallel()) flags.push_back("--sequence-parallel");
  if (s.ZeroStage() == plan::Zero::kOptimizerStates) flags.push_back("--use-distributed-optimizer");
  flags.push_back(fmt::format("--micro-batch-size {}", p.global_batch / p.micro_batches / replicas));
  flags.push_back(fmt::format("--global-batch-size {}", p.global_batch));
  if (p.virtual_stages > 1)
    flags.push_back(fmt::format("--num-layers-per-virtual-pipeline-stage {}", layers / p.NumChunks()));
  flags.insert(flags.end(), recompute->begin(), recompute->end());
  std::string out;
  for (const std::string& f : flags) out += f + "\n";
  return out;
}

namespace {

// The flags that take a value, and the switches, this reader understands.
const std::vector<std::string> kValueFlags = {
    "num-layers", "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
    "expert-model-parallel-size", "micro-batch-size", "global-batch-size", "num-layers-per-virtual-pipeline-stage",
    "num-virtual-stages-per-pipeline-rank", "virtual-pipeline-model-parallel-size", "recompute-granularity",
    "recompute-method", "recompute-num-layers"};
const std::vector<std::string> kSwitches = {"sequence-parallel", "use-distributed-optimizer"};

// A refusal quoting the arguments: one line of printable text whatever they hold (util/one_line.h).
Error Refuse(const std::string& message) { return BadInput(OneLine(message)); }

bool Among(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Whitespace-separated tokens, `#` comments and shell line continuations dropped.
std::vector<std::string> Tokens(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  bool comment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (comment) {
      comment = c != '\n';
      continue;
    }
    if (c == '#' && current.empty()) {
      comment = true;
      continue;
    }
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) continue;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!current.empty()) out.push_back(std::move(current));
      current.clear();
      continue;
    }
    current += c;
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

}  // namespace

Result<plan::LayerPlan> ParseMegatronArgs(std::string_view text, const std::string& source, int num_devices,
                                          int num_layers) {
  std::map<std::string, std::string> values;  // the last occurrence wins, as in argparse
  std::map<std::string, bool> switches;
  const std::vector<std::string> tokens = Tokens(text);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].rfind("--", 0) != 0) continue;  // the launcher, the script, values of flags we skip
    std::string name = tokens[i].substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (Among(kSwitches, name)) {
      if (value) return Refuse(fmt::format("{}: --{}: takes no value, got '{}'", source, name, *value));
      switches[name] = true;
    } else if (Among(kValueFlags, name)) {
      if (!value) {
        if (i + 1 >= tokens.size() || tokens[i + 1].rfind("--", 0) == 0)
          return Refuse(fmt::format("{}: --{}: needs a value", source, name));
        value = tokens[++i];
      }
      values[name] = *value;
    }
  }
  const auto integer = [&](const std::string& name, std::optional<int64_t> fallback) -> Result<int64_t> {
    auto it = values.find(name);
    if (it == values.end()) {
      if (fallback) return *fallback;
      return Refuse(fmt::format("{}: --{}: missing; kiwi needs it to plan the batch", source, name));
    }
    int64_t v = 0;
    const std::string& t = it->second;
    const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || ptr != t.data() + t.size() || v < 1 || v > (int64_t{1} << 40))
      return Refuse(fmt::format("{}: --{}: must be a positive integer, got '{}'", source, name, t));
    return v;
  };
  Result<int64_t> tp = integer("tensor-model-parallel-size", 1), pp = integer("pipeline-model-parallel-size", 1),
                  cp = integer("context-parallel-size", 1), ep = integer("expert-model-parallel-size", 1),
                  mbs = integer("micro-batch-size", std::nullopt), gbs = integer("global-batch-size", std::nullopt),
                  layers = integer("num-layers", num_layers);
  for (const Result<int64_t>* r : {&tp, &pp, &cp, &ep, &mbs, &gbs, &layers})
    if (!*r) return r->error();
  if (*layers != num_layers)
    return Refuse(fmt::format("{}: --num-layers: {}, but the model has {} layers", source, *layers, num_layers));
  const int64_t model_parallel = *tp * *pp * *cp;
  if (model_parallel > num_devices || num_devices % model_parallel != 0)
    return Refuse(fmt::format("{}: --tensor-model-parallel-size x --pipeline-model-parallel-size x "
                                "--context-parallel-size = {} does not divide the {} devices",
                                source, model_parallel, num_devices));
  const int64_t dp = num_devices / model_parallel;  // Megatron-LM's data-parallel ranks
  if ((dp * *cp) % *ep != 0)
    return Refuse(fmt::format("{}: --expert-model-parallel-size: {} does not divide the {} data x context parallel "
                                "ranks", source, *ep, dp * *cp));
  if (*layers % *pp != 0)
    return Refuse(fmt::format("{}: --pipeline-model-parallel-size: {} does not divide the {} layers (Megatron-LM "
                                "splits them evenly)", source, *pp, *layers));
  int64_t chunks = 1;  // model chunks per stage
  if (values.count("num-layers-per-virtual-pipeline-stage")) {
    Result<int64_t> per = integer("num-layers-per-virtual-pipeline-stage", std::nullopt);
    if (!per) return per.error();
    if ((*layers / *pp) % *per != 0)
      return Refuse(fmt::format("{}: --num-layers-per-virtual-pipeline-stage: {} does not divide a stage's {} layers",
                                  source, *per, *layers / *pp));
    chunks = *layers / *pp / *per;
  }
  for (const char* name : {"num-virtual-stages-per-pipeline-rank", "virtual-pipeline-model-parallel-size"}) {
    if (!values.count(name)) continue;
    Result<int64_t> v = integer(name, std::nullopt);
    if (!v) return v.error();
    if ((*layers / *pp) % *v != 0)
      return Refuse(fmt::format("{}: --{}: {} does not divide a stage's {} layers", source, name, *v, *layers / *pp));
    chunks = *v;
  }
  if (chunks > 1 && *pp == 1)
    return Refuse(fmt::format("{}: virtual pipeline stages need --pipeline-model-parallel-size above 1", source));
  if (*gbs % (*mbs * dp) != 0)
    return Refuse(fmt::format("{}: --global-batch-size: {} is not a multiple of --micro-batch-size {} x {} "
                                "data-parallel ranks", source, *gbs, *mbs, dp));

  plan::LayerStrategy s;
  s.tp = static_cast<int>(*tp);
  s.cp = static_cast<int>(*cp);
  s.ep = static_cast<int>(*ep);
  s.dp = static_cast<int>(dp * *cp);
  s.zero = switches["use-distributed-optimizer"] ? plan::Zero::kOptimizerStates : plan::Zero::kNone;
  s.sequence_parallel = switches["sequence-parallel"];
  plan::LayerPlan p;
  p.pp_degree = static_cast<int>(*pp);
  p.virtual_stages = static_cast<int>(chunks);
  p.global_batch = *gbs;
  p.micro_batches = static_cast<int>(*gbs / (*mbs * dp));
  p.layers.assign(static_cast<size_t>(*layers), s);
  if (*pp > 1) p.pp_partition.assign(static_cast<size_t>(*pp * chunks), static_cast<int>(*layers / (*pp * chunks)));

  const std::string granularity = values.count("recompute-granularity") ? values["recompute-granularity"] : "";
  if (granularity == "selective") {
    for (plan::LayerStrategy& l : p.layers) l.selective_recompute = true;
  } else if (granularity == "full") {
    const std::string method = values.count("recompute-method") ? values["recompute-method"] : "";
    Result<int64_t> n = integer("recompute-num-layers", std::nullopt);
    if (!n) return n.error();
    if (method == "uniform") {
      if (*n != 1)
        return Refuse(fmt::format("{}: --recompute-num-layers: uniform recomputation of {} layers at a time keeps "
                                    "one input per group, which kiwi does not model; use 1", source, *n));
      for (plan::LayerStrategy& l : p.layers) l.checkpoint = true;
    } else if (method == "block") {
      if (chunks > 1)
        return Refuse(fmt::format("{}: --recompute-method: block with virtual pipeline stages, which kiwi does not "
                                    "model", source));
      const int64_t per_stage = *layers / *pp;
      if (*n > per_stage)
        return Refuse(fmt::format("{}: --recompute-num-layers: {} is more than a stage's {} layers", source, *n, per_stage));
      for (int64_t i = 0; i < *layers; ++i) p.layers[static_cast<size_t>(i)].checkpoint = i % per_stage < *n;
    } else {
      return Refuse(fmt::format("{}: --recompute-method: must be uniform or block with --recompute-granularity full, "
                                  "got '{}'", source, method));
    }
  } else if (!granularity.empty()) {
    return Refuse(fmt::format("{}: --recompute-granularity: must be full or selective, got '{}'", source, granularity));
  }
  return p;
}

Result<plan::LayerPlan> ReadMegatronArgsFile(const std::string& path, int num_devices, int num_layers) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return text.error();
  return ParseMegatronArgs(*text, path, num_devices, num_layers);
}

}  // namespace kiwi::io
