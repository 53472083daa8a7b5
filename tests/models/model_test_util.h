#pragma once
// Shared helpers for the model-zoo tests.
#include "kiwi/models/presets.h"

namespace kiwi::models::test_util {

// Builds ModelOverrides fluently: Overrides().Layers(2).Hidden(64).
struct Overrides {
  ModelOverrides o;
  Overrides& Layers(int v) { o.layers = v; return *this; }
  Overrides& Hidden(int64_t v) { o.hidden = v; return *this; }
  Overrides& Heads(int64_t v) { o.heads = v; return *this; }
  Overrides& Seq(int64_t v) { o.seq = v; return *this; }
  Overrides& Batch(int64_t v) { o.batch = v; return *this; }
  Overrides& Ffn(int64_t v) { o.ffn = v; return *this; }
  Overrides& Vocab(int64_t v) { o.vocab = v; return *this; }
  Overrides& Dropout(double v) { o.dropout = v; return *this; }
  Overrides& DType(ir::DType v) { o.dtype = v; return *this; }
  Overrides& Optimizer(ir::Optimizer v) { o.optimizer = v; return *this; }
  Overrides& Attention(AttentionKernel v) { o.attention = v; return *this; }
  operator const ModelOverrides&() const { return o; }  // NOLINT(google-explicit-constructor)
};

}  // namespace kiwi::models::test_util
