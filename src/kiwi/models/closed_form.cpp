// Closed-form parameter and activation counts, written independently of the builders so that tests
// can check the builders against them (Narayanan et al. 2021 §5.1; Korthikanti et al. 2022 eq. 1).
#include <algorithm>
#include <array>

#include "kiwi/models/builder.h"
#include "kiwi/models/presets.h"

namespace kiwi::models {
namespace {

using detail::FfnSize;
using detail::KvHeads;

// One pre/post-LN layer with biases: q,k,v,out (4h^2 + 4h), fc1/fc2 (2hf + f + h), two layernorms
// (4h): 12h^2 + 13h when f = 4h (Narayanan et al. 2021).
int64_t BiasedLayer(int64_t h, int64_t f) { return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h; }

int64_t Gpt(const TransformerConfig& c) {
  const int64_t h = c.hidden;
  const int64_t layers = c.layers * BiasedLayer(h, FfnSize(c));
  if (!c.embeddings) return layers;
  // token + position embeddings, final layernorm, the LM head untied (Megatron's presets) or the word
  // embedding (HuggingFace's GPT-2).
  return layers + c.vocab * h + std::max(c.max_positions, c.seq) * h + 2 * h + (c.tied_embeddings ? 0 : h * c.vocab);
}

int64_t Bert(const TransformerConfig& c) {
  const int64_t h = c.hidden;
  const int64_t layers = c.layers * BiasedLayer(h, FfnSize(c));
  if (!c.embeddings) return layers;
  const int64_t embeddings = c.vocab * h + std::max(c.max_positions, c.seq) * h + 2 * h + 2 * h;  // word, position, 2 types, layernorm
  const int64_t mlm_head = h * h + h + 2 * h + c.vocab;               // transform, layernorm, decoder bias (tied)
  return layers + embeddings + mlm_head;
}

// T5: no biases, RMS norms, ReLU MLP; decoder layers add cross-attention and a third norm.
int64_t T5(const TransformerConfig& c) {
  const int64_t h = c.hidden, f = FfnSize(c), kv = KvHeads(c) * (h / c.heads);
  const int64_t attention = 2 * h * h + 2 * h * kv;
  const int64_t encoder = c.layers * (attention + 2 * h * f + 2 * h);
  const int64_t decoder = c.decoder_layers * (2 * attention + 2 * h * f + 3 * h);
  if (!c.embeddings) return encoder + decoder;
  // shared embedding (tied LM head), two final norms, a relative bias table per stack.
  return encoder + decoder + c.vocab * h + 2 * h + 2 * detail::kT5Buckets * c.heads;
}

int64_t Vit(const TransformerConfig& c) {
  const int64_t h = c.hidden, grid = c.image / c.patch;
  const int64_t layers = c.layers * BiasedLayer(h, FfnSize(c));
  if (!c.embeddings) return layers;
  // conv patch embedding + bias, positions, final layernorm, classifier.
  return layers + detail::kImageChannels * c.patch * c.patch * h + h + grid * grid * h + 2 * h + h * c.vocab + c.vocab;
}

// Latent attention (DeepSeek-V2 §2.1.2): the query latent, its norm and up-projection (or one query
// projection), the key/value latent with the shared rotary key head, its norm, the keys' and values'
// up-projections, the output projection.
int64_t LatentAttentionParameters(const TransformerConfig& c) {
  const LatentAttention& m = c.mla;
  const int64_t h = c.hidden, a = c.heads, qk = m.nope + m.rope;
  const int64_t query = m.q_rank > 0 ? h * m.q_rank + m.q_rank + m.q_rank * a * qk : h * a * qk;
  return query + h * (m.kv_rank + m.rope) + m.kv_rank + m.kv_rank * a * (m.nope + m.v) + a * m.v * h;
}

// Llama: q, out (2h * heads * d), k, v (2h * kv_heads * d), QK norms (2d), q/k/v biases, SwiGLU (3hf)
// or E SwiGLU experts and the router (3hfE + hE) and a shared expert (gated or not), two RMS norms;
// DeepSeek's dense first layers a SwiGLU of their own width; the head untied or the word embedding.
int64_t Llama(const TransformerConfig& c) {
  const int64_t h = c.hidden, f = FfnSize(c), d = c.head_dim > 0 ? c.head_dim : h / c.heads;
  const int64_t attention = c.mla.enabled() ? LatentAttentionParameters(c)
                                            : 2 * h * c.heads * d + 2 * h * KvHeads(c) * d + (c.qk_norm ? 2 * d : 0) +
                                                  (c.qkv_bias ? c.heads * d + 2 * KvHeads(c) * d : 0);
  const int64_t shared = c.shared_expert_ffn > 0 ? 3 * h * c.shared_expert_ffn + (c.shared_expert_gate ? h : 0) : 0;
  const int64_t mlp = c.experts > 0 ? c.experts * (3 * h * f + h) + shared : 3 * h * f;
  const int64_t dense = c.dense_layers * (attention + 3 * h * c.dense_ffn + 2 * h);
  const int64_t layers = dense + (c.layers - c.dense_layers) * (attention + mlp + 2 * h);
  if (!c.embeddings) return layers;
  return layers + c.vocab * h + h + (c.tied_embeddings ? 0 : h * c.vocab);
}

using Counter = int64_t (*)(const TransformerConfig&);
constexpr std::array<Counter, 6> kCounters = {Gpt, Bert, T5, Vit, detail::SwinParameterCount, Llama};

}  // namespace

int64_t ClosedFormParameterCount(const TransformerConfig& config) {
  return kCounters[static_cast<size_t>(config.family)](config);
}

int64_t ClosedFormLayerActivationBytes16(int64_t seq, int64_t batch, int64_t hidden, int64_t heads) {
  return 34 * seq * batch * hidden + 5 * heads * seq * seq * batch;
}

}  // namespace kiwi::models
