#include "kiwi/ir/op_kind.h"

#include <array>

namespace kiwi::ir {
namespace {

constexpr std::array<std::string_view, kNumOpKinds> kNames = {
    "input",     "parameter", "optimizer_state", "matmul",  "batch_matmul", "conv",
    "pool",      "elementwise", "reduce",        "softmax", "layernorm",    "embedding",
    "reshape",   "transpose", "random",          "loss",    "collective",   "optimizer",
    "attention", "opaque"};

}  // namespace

std::string_view OpKindName(OpKind kind) { return kNames[static_cast<size_t>(kind)]; }

std::optional<OpKind> ParseOpKind(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<OpKind>(i);
  return std::nullopt;
}

}  // namespace kiwi::ir
