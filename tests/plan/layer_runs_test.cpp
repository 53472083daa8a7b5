#include <gtest/gtest.h>

#include "kiwi/plan/plan.h"

namespace kiwi::plan {
namespace {

// Interleaved 1F1B: chunk c on stage c % pp, so a strategy's run breaks at every chunk boundary.
TEST(LayerRuns, BreakAtStagesAndStrategies) {
  LayerPlan p;
  p.layers.assign(8, LayerStrategy{.dp = 2});
  p.layers[1].checkpoint = true;
  p.pp_degree = 2;
  p.virtual_stages = 2;
  p.pp_partition = {2, 2, 2, 2};
  EXPECT_EQ(LayerStages(p), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  const std::vector<LayerRun> runs = LayerRuns(p);
  ASSERT_EQ(runs.size(), 5u);
  EXPECT_EQ(runs[0].first, 0);
  EXPECT_EQ(runs[0].last, 0);
  EXPECT_EQ(runs[1].first, 1);  // the checkpointed layer alone
  EXPECT_EQ(runs[1].last, 1);
  EXPECT_EQ(runs[2].first, 2);
  EXPECT_EQ(runs[2].last, 3);
  EXPECT_EQ(runs[2].stage, 1);
  EXPECT_EQ(runs[4].first, 6);
  EXPECT_EQ(runs[4].last, 7);
  // no partition: one stage, one run
  LayerPlan one;
  one.layers.assign(3, LayerStrategy{});
  EXPECT_EQ(LayerStages(one), (std::vector<int>{0, 0, 0}));
  ASSERT_EQ(LayerRuns(one).size(), 1u);
  EXPECT_EQ(LayerRuns(one)[0].last, 2);
}

}  // namespace
}  // namespace kiwi::plan
