// Megatron-LM's arguments: kiwi's plans written as them read back unchanged, every flag written is one
// Megatron-LM documents, a launch script reads as the plan it describes, and what either side cannot
// express is refused with the layer or the flag named.
#include "kiwi/io/megatron_args.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "io_test_util.h"

namespace kiwi::io {
namespace {

const std::string kData = std::string(KIWI_TEST_DATA_DIR) + "/megatron/";

// Every uniform plan Megatron-LM can run on 16 devices and 8 layers, each recomputation, round-trips.
TEST(MegatronArgs, EveryExpressiblePlanRoundTrips) {
  int plans = 0;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      for (int cp : {1, 2})
        for (int v : {1, 2})
          for (int recompute = 0; recompute < 4; ++recompute)
            for (bool zero1 : {false, true})
              for (bool sp : {false, true}) {
                if (v > 1 && (pp == 1 || recompute == 3)) continue;
                plan::LayerPlan p;
                plan::LayerStrategy s;
                s.tp = tp;
                s.dp = 16 / (tp * pp);
                s.cp = cp;
                if (s.dp % cp != 0 || (zero1 && s.dp == 1)) continue;  // ZeRO over one rank: moot, written as none
                s.zero = zero1 ? plan::Zero::kOptimizerStates : plan::Zero::kNone;
                s.sequence_parallel = sp && tp > 1;
                s.selective_recompute = recompute == 1;
                s.checkpoint = recompute == 2;
                p.layers.assign(8, s);
                if (recompute == 3)  // block: the first layer of every stage
                  for (int i = 0; i < 8; ++i) p.layers[static_cast<size_t>(i)].checkpoint = i % (8 / pp) == 0;
                p.pp_degree = pp;
                p.virtual_stages = v;
                if (pp > 1) p.pp_partition.assign(static_cast<size_t>(pp * v), 8 / (pp * v));
                p.global_batch = 64;
                p.micro_batches = 64 / s.Replicas() / 2;  // micro-batches of 2 samples
                SCOPED_TRACE(fmt::format("{} pp{} v{} recompute {}", plan::StrategyName(s), pp, v, recompute));
                testing::ExpectRoundTrip(p, WriteMegatronArgs,
                                         [](const std::string& args) { return ParseMegatronArgs(args, "args", 16, 8); });
                ++plans;
              }
  EXPECT_GT(plans, 200);
}

TEST(MegatronArgs, WritesOnlyFlagsMegatronLmDocuments) {
  const std::set<std::string> documented = testing::DocumentedNames(kData + "documented_flags.txt", "--");
  ASSERT_GE(documented.size(), 10u);
  plan::LayerPlan p;
  plan::LayerStrategy s{.tp = 2, .dp = 8, .zero = plan::Zero::kOptimizerStates, .sequence_parallel = true, .ep = 2, .cp = 2};
  p.layers.assign(8, s);
  for (int i = 0; i < 8; i += 2) p.layers[static_cast<size_t>(i)].checkpoint = true;  // block of 1 per 2-layer stage
  p.pp_degree = 4;
  p.pp_partition = {2, 2, 2, 2};
  p.global_batch = 32;
  p.micro_batches = 8;
  for (const plan::LayerPlan& plan : {p}) {
    Result<std::string> args = WriteMegatronArgs(plan);
    ASSERT_TRUE(args.ok()) << args.error().message;
    std::istringstream lines(*args);
    int flags = 0;
    for (std::string line; std::getline(lines, line); ++flags) {
      const std::string flag = line.substr(0, line.find(' '));
      EXPECT_TRUE(documented.count(flag)) << flag;
    }
    EXPECT_GE(flags, 10);
  }
}

TEST(MegatronArgs, ReadsALaunchScript) {
  Result<plan::LayerPlan> p = ReadMegatronArgsFile(kData + "pretrain_llama2_7b.sh", 16, 32);
  ASSERT_TRUE(p.ok()) << p.error().message;
  plan::LayerStrategy s;
  s.tp = 4;
  s.dp = 2;
  s.zero = plan::Zero::kOptimizerStates;
  s.sequence_parallel = true;
  s.selective_recompute = true;
  EXPECT_EQ(p->layers, std::vector<plan::LayerStrategy>(32, s));
  EXPECT_EQ(p->pp_degree, 2);
  EXPECT_EQ(p->virtual_stages, 4);
  EXPECT_EQ(p->pp_partition, std::vector<int>(8, 4));
  EXPECT_EQ(p->global_batch, 64);
  EXPECT_EQ(p->micro_batches, 32);  // 64 samples, 1 per micro-batch, over 2 data-parallel ranks
}

TEST(MegatronArgs, RefusesWhatMegatronLmCannotRun) {
  plan::LayerPlan p;
  p.layers.assign(4, plan::LayerStrategy{.tp = 2, .dp = 4});
  p.global_batch = 8;
  const auto refused = [](const plan::LayerPlan& q, const std::string& fragment) {
    testing::ExpectBadInput(WriteMegatronArgs(q), {fragment});
  };
  plan::LayerPlan mixed = p;
  mixed.layers[2].tp = 4;
  mixed.layers[2].dp = 2;
  refused(mixed, "layer 2: strategy TP4xDP2 beside layer 0's TP2xDP4");
  plan::LayerPlan zero3 = p;
  for (plan::LayerStrategy& s : zero3.layers) s.zero = plan::Zero::kParameters;
  refused(zero3, "layer 0: SDP");
  plan::LayerPlan set = p;
  for (plan::LayerStrategy& s : set.layers) s.recompute = {"mlp.act"};
  refused(set, "a recompute set");
  plan::LayerPlan set_after_checkpoint = set;  // moot in layer 0, which is checkpointed; not in layer 1
  set_after_checkpoint.layers[0].checkpoint = true;
  refused(set_after_checkpoint, "layer 1: a recompute set");
  plan::LayerPlan offload = p;
  for (plan::LayerStrategy& s : offload.layers) s.offload = true;
  refused(offload, "optimizer offloading");
  plan::LayerPlan gpipe = p;
  gpipe.pipeline = plan::PipelineSchedule::kGPipe;
  refused(gpipe, "GPipe");
  plan::LayerPlan uneven = p;
  uneven.pp_degree = 2;
  uneven.pp_partition = {3, 1};
  for (plan::LayerStrategy& s : uneven.layers) s.dp = 2;
  refused(uneven, "unequal layers");
  plan::LayerPlan odd = p;
  odd.layers[3].checkpoint = true;  // not the first layers of the stage
  refused(odd, "--recompute-method block");
}

TEST(MegatronArgs, RefusesArgumentsNamingTheFlag) {
  const std::string base = "--micro-batch-size 1 --global-batch-size 16 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--global-batch-size 16", "--micro-batch-size: missing"},
      {"--micro-batch-size 1", "--global-batch-size: missing"},
      {base + "--tensor-model-parallel-size two", "--tensor-model-parallel-size: must be a positive integer, got 'two'"},
      {base + "--tensor-model-parallel-size 0", "--tensor-model-parallel-size: must be a positive integer"},
      {base + "--tensor-model-parallel-size 3", "does not divide the 8 devices"},
      {base + "--pipeline-model-parallel-size 8", "--pipeline-model-parallel-size: 8 does not divide the 4 layers"},
      {base + "--num-layers 6", "--num-layers: 6, but the model has 4 layers"},
      {"--micro-batch-size 3 --global-batch-size 16", "--global-batch-size: 16 is not a multiple"},
      {base + "--recompute-granularity some", "--recompute-granularity: must be full or selective"},
      {base + "--recompute-granularity full --recompute-method uniform", "--recompute-num-layers: missing"},
      {base + "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2", "use 1"},
      {base + "--recompute-granularity full --recompute-num-layers 1", "--recompute-method: must be uniform or block"},
      {base + "--sequence-parallel=yes", "--sequence-parallel: takes no value"},
      {base + "--context-parallel-size", "--context-parallel-size: needs a value"},
      {base + "--num-layers-per-virtual-pipeline-stage 1", "virtual pipeline stages need"},
      {base + "--expert-model-parallel-size 16", "--expert-model-parallel-size: 16 does not divide"},
  };
  for (const auto& [args, fragment] : cases) {
    Result<plan::LayerPlan> r = ParseMegatronArgs(args, "launch.sh", 8, 4);
    ASSERT_FALSE(r.ok()) << args;
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput) << args;
    EXPECT_EQ(r.error().message.rfind("launch.sh: ", 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find(fragment), std::string::npos) << args << ": " << r.error().message;
  }
  EXPECT_FALSE(ReadMegatronArgsFile(kData + "no_such_file.sh", 8, 4).ok());
}

}  // namespace
}  // namespace kiwi::io
