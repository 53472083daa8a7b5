#pragma once
// HuggingFace `config.json` files as kiwi models: GPT-2 (model_type "gpt2"), BERT/RoBERTa ("bert",
// "roberta"), T5 ("t5", "mt5"), ViT ("vit"), Swin ("swin") and Llama-style decoders ("llama",
// "mistral", "qwen2", "qwen3"), mixtures of experts ("mixtral", "qwen2_moe", "qwen3_moe") and DeepSeek's
// latent attention ("deepseek_v2", "deepseek_v3"). The sizes come from the config's own fields (n_layer / num_hidden_layers, n_embd /
// hidden_size / d_model, heads, intermediate size, num_key_value_heads, max positions, vocabulary,
// image and patch size); torch_dtype picks the training precision (float16/bfloat16: mixed precision
// with fp32 master weights and Adam; float32: fp32 Adam). Overrides (batch, seq, dtype, optimizer)
// apply on top.
//
//   Result<ModelSpec> spec = ParseHfConfig(text, "Llama-2-7b-hf/config.json", {.batch = 8});
// (the file is read by io::ReadFileText, which refuses directories and caps what it reads)
#include <string>
#include <string_view>

#include "kiwi/models/presets.h"

namespace kiwi::models {

// Errors (kBadInput) name the file and the field: unknown model_type, missing or non-positive sizes,
// and architectures kiwi's builders do not have (T5's gated feed-forward, d_kv x heads != d_model,
// Swin heads other than dim / 32).
Result<ModelSpec> ParseHfConfig(std::string_view text, const std::string& source, const ModelOverrides& overrides = {});

}  // namespace kiwi::models
