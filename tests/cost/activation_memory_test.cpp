// Korthikanti et al. 2023: per-layer activation bytes of a GPT layer on one TP rank, 16-bit activations.
#include "kiwi/cost/activation_memory.h"

#include <gtest/gtest.h>

namespace kiwi::cost {
namespace {

struct Layer {
  int64_t s, b, h, a;
  int64_t Sbh() const { return s * b * h; }
  int64_t Attention() const { return 5 * a * s * s * b; }  // 5as^2b: scores, softmax, dropout mask and output
};

TEST(TpRankActivationBytes, KorthikantiWithoutSequenceParallelism) {
  for (const Layer& l : {Layer{2048, 1, 12288, 96}, Layer{1024, 4, 2048, 16}, Layer{64, 2, 64, 8}}) {
    for (int t : {1, 2, 4, 8}) {
      // eq. 2: sbh(10 + 24/t + 5as/(ht)); every term here divides exactly.
      const int64_t want = 10 * l.Sbh() + 24 * l.Sbh() / t + l.Attention() / t;
      EXPECT_EQ(TpRankActivationBytes(24 * l.Sbh() + l.Attention(), 10 * l.Sbh(), t), want) << "t " << t;
    }
  }
}

TEST(TpRankActivationBytes, KorthikantiWithSequenceParallelism) {
  const Layer l{2048, 1, 12288, 96};
  for (int t : {1, 2, 4, 8})  // eq. 4: sbh(34/t + 5as/(ht))
    EXPECT_EQ(TpRankActivationBytes(24 * l.Sbh() + l.Attention(), 10 * l.Sbh(), t, true),
              (34 * l.Sbh() + l.Attention()) / t);
}

TEST(TpRankActivationBytes, RoundsUpPerRankAndClampsNegatives) {
  EXPECT_EQ(TpRankActivationBytes(10, 3, 4), 3 + 3);
  EXPECT_EQ(TpRankActivationBytes(10, 3, 4, true), 4);
  EXPECT_EQ(TpRankActivationBytes(10, 3, 0), 13);  // a degree below 1 is no split
  EXPECT_EQ(TpRankActivationBytes(-5, -1, 2), 0);
}

}  // namespace
}  // namespace kiwi::cost
