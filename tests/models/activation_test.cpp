// Activations a GPT/BERT layer saves for backward, against Korthikanti et al. 2022 eq. 1:
// 34 s b h + 5 a s^2 b bytes with 16-bit activations and 1-byte dropout masks.
#include <gtest/gtest.h>

#include "kiwi/ir/backward.h"
#include "kiwi/models/presets.h"

namespace kiwi::models {
namespace {

struct Dims {
  int64_t seq, batch, hidden, heads;
};

TransformerConfig Layered(Family family, const Dims& d, ir::DType dtype) {
  TransformerConfig c;
  c.family = family;
  c.layers = 3;
  c.seq = d.seq;
  c.batch = d.batch;
  c.hidden = d.hidden;
  c.heads = d.heads;
  c.vocab = 97;
  c.dtype = dtype;
  c.attention = AttentionKernel::kMaterialized;  // Korthikanti's count: the [s, s] scores kept
  return c;
}

int64_t MiddleLayerSavedBytes(const TransformerConfig& config) {
  Result<ir::Graph> forward = BuildTransformerForward(config);
  EXPECT_TRUE(forward.ok()) << forward.error().message;
  if (!forward.ok()) return -1;
  Result<ir::Graph> training = ir::BuildTrainingGraph(*forward, {.optimizer = ir::Optimizer::kAdam, .master_weights = true});
  EXPECT_TRUE(training.ok()) << training.error().message;
  return training.ok() ? ir::SavedActivationBytes(*training, 1) : -1;
}

TEST(ClosedFormActivations, HandComputed) {
  // s=2, b=1, h=4, a=1: 34*8 + 5*1*4*1.
  EXPECT_EQ(ClosedFormLayerActivationBytes16(2, 1, 4, 1), 292);
  // GPT-3 175B layer at s=2048, b=1, h=12288, a=96: 34*2048*12288 + 5*96*2048^2.
  EXPECT_EQ(ClosedFormLayerActivationBytes16(2048, 1, 12288, 96), int64_t{855'638'016} + int64_t{2'013'265'920});
}

// The layer's own input is saved by the previous layer; its output (read by the next layer's
// backward) counts here, so a middle layer saves exactly Korthikanti's 34sbh + 5as^2b.
TEST(SavedActivations, GptAndBertMiddleLayerMatchKorthikanti) {
  for (Family family : {Family::kGpt, Family::kBert}) {
    for (ir::DType dtype : {ir::DType::kF16, ir::DType::kBF16}) {
      for (const Dims& d : {Dims{16, 2, 32, 4}, Dims{8, 3, 48, 6}, Dims{32, 1, 16, 1}}) {
        SCOPED_TRACE(testing::Message() << "family " << static_cast<int>(family) << " dtype "
                                        << ir::DTypeName(dtype) << " s " << d.seq << " h " << d.hidden);
        EXPECT_EQ(MiddleLayerSavedBytes(Layered(family, d, dtype)),
                  ClosedFormLayerActivationBytes16(d.seq, d.batch, d.hidden, d.heads));
      }
    }
  }
}

TEST(SavedActivations, Fp32DoublesEverythingButTheMasks) {
  // Masks (sbh + sbh + as^2b) stay 1 byte: 2*(34sbh + 5as^2b) - 2sbh - as^2b = 66sbh + 9as^2b.
  const Dims d{16, 2, 32, 4};
  const int64_t sbh = d.seq * d.batch * d.hidden, as2b = d.heads * d.seq * d.seq * d.batch;
  EXPECT_EQ(MiddleLayerSavedBytes(Layered(Family::kGpt, d, ir::DType::kF32)), 66 * sbh + 9 * as2b);
}

TEST(SavedActivations, WithoutDropoutTheMasksAndDropoutOutputsDisappear) {
  // No masks (2sbh + as^2b) and the softmax output feeds the context matmul directly (2as^2b less).
  const Dims d{16, 2, 32, 4};
  TransformerConfig c = Layered(Family::kGpt, d, ir::DType::kBF16);
  c.dropout = false;
  const int64_t sbh = d.seq * d.batch * d.hidden, as2b = d.heads * d.seq * d.seq * d.batch;
  EXPECT_EQ(MiddleLayerSavedBytes(c), 32 * sbh + 2 * as2b);
}

// FlashAttention keeps no [s, s] tensor: the softmax output, its dropout mask and the dropped
// probabilities (5as^2b) go. Its own output, read by its backward beside q, k, v, is written in the order
// the output projection reads, so the heads merge by views: one tensor with the projection's saved input
// (the context Korthikanti et al. 2023 count). 34sbh, whatever the heads.
TEST(SavedActivations, FusedAttentionKeepsNoScores) {
  for (const Dims& d : {Dims{16, 2, 32, 4}, Dims{8, 3, 48, 6}, Dims{32, 1, 16, 1}}) {
    for (Family family : {Family::kGpt, Family::kBert}) {
      TransformerConfig c = Layered(family, d, ir::DType::kBF16);
      const int64_t materialized = MiddleLayerSavedBytes(c);
      c.attention = AttentionKernel::kFused;
      const int64_t sbh = d.seq * d.batch * d.hidden, as2b = d.heads * d.seq * d.seq * d.batch;
      EXPECT_EQ(MiddleLayerSavedBytes(c), 34 * sbh) << d.seq << " " << d.hidden;
      EXPECT_EQ(materialized - MiddleLayerSavedBytes(c), 5 * as2b);
      c.attention = AttentionKernel::kAuto;  // 16-bit GPT/BERT: fused by default
      EXPECT_EQ(MiddleLayerSavedBytes(c), 34 * sbh);
    }
  }
}

}  // namespace
}  // namespace kiwi::models
