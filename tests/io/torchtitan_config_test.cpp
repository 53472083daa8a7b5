// torchtitan's job config (TOML): kiwi's plans written in it read back unchanged, every field written is
// one torchtitan documents, a train config reads as the plan it describes, and what either side cannot
// express is refused with the layer or the field named.
#include "kiwi/io/torchtitan_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "io_test_util.h"

namespace kiwi::io {
namespace {

const std::string kData = std::string(KIWI_TEST_DATA_DIR) + "/torchtitan/";

// The plans torchtitan can run on 16 devices and 8 layers: DDP or FSDP, TP with SP, CP, pipelines with
// 1F1B / GPipe / interleaving and even or torchtitan-shaped splits, each checkpointing.
TEST(TorchtitanConfig, EveryExpressiblePlanRoundTrips) {
  int plans = 0;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      for (int cp : {1, 2})
        for (int schedule = 0; schedule < 3; ++schedule)  // 1F1B, GPipe, interleaved
          for (int ac = 0; ac < 4; ++ac)                   // none, op-selective, full, every 2nd layer
            for (bool fsdp : {false, true})
              for (bool shaped : {false, true}) {
                if ((schedule > 0 && pp == 1) || (schedule == 2 && ac == 3) || (shaped && (pp == 1 || schedule == 2)))
                  continue;
                plan::LayerStrategy s;
                s.tp = tp;
                s.dp = 16 / (tp * pp);
                s.cp = cp;
                if (s.dp % cp != 0 || (fsdp && s.dp == 1) || (!fsdp && cp > 1)) continue;
                s.zero = fsdp ? plan::Zero::kParameters : plan::Zero::kNone;
                s.sequence_parallel = tp > 1;
                s.selective_recompute = ac == 1;
                s.checkpoint = ac == 2;
                plan::LayerPlan p;
                p.layers.assign(8, s);
                p.pp_degree = pp;
                p.virtual_stages = schedule == 2 ? 2 : 1;
                p.pipeline = schedule == 1 ? plan::PipelineSchedule::kGPipe : plan::PipelineSchedule::k1F1B;
                if (pp > 1) p.pp_partition.assign(static_cast<size_t>(pp * p.virtual_stages), 8 / (pp * p.virtual_stages));
                if (shaped) {  // one layer fewer on the first stage, one more on the second
                  p.pp_partition.front() -= 1;
                  p.pp_partition[1] += 1;
                  if (pp > 2) continue;  // the middle stages would differ: not torchtitan's shape
                }
                if (ac == 3) {
                  const std::vector<int> stages = plan::LayerStages(p);
                  for (size_t i = 0, within = 0; i < 8; ++i, ++within) {
                    if (i > 0 && stages[i] != stages[i - 1]) within = 0;
                    p.layers[i].checkpoint = within % 2 == 1;
                  }
                }
                p.global_batch = 64;
                p.micro_batches = 64 / s.Replicas() / 2;  // micro-batches of 2 samples
                SCOPED_TRACE(fmt::format("{} pp{} schedule {} ac {} shaped {}", plan::StrategyName(s), pp, schedule, ac, shaped));
                testing::ExpectRoundTrip(p, WriteTorchtitanConfig, [](const std::string& toml) {
                  return ParseTorchtitanConfig(toml, "job.toml", 16, 8);
                });
                ++plans;
              }
  EXPECT_GT(plans, 150);
}

TEST(TorchtitanConfig, WritesOnlyFieldsTorchtitanDocuments) {
  const std::set<std::string> documented = testing::DocumentedNames(kData + "documented_fields.txt", "[");
  ASSERT_GE(documented.size(), 12u);
  plan::LayerPlan p;
  p.layers.assign(8, plan::LayerStrategy{.tp = 2, .dp = 4, .zero = plan::Zero::kParameters, .sequence_parallel = true, .cp = 2});
  for (size_t i = 1; i < 8; i += 2) p.layers[i].checkpoint = true;
  p.pp_degree = 2;
  p.pp_partition = {4, 4};
  p.global_batch = 32;
  p.micro_batches = 8;
  Result<std::string> toml = WriteTorchtitanConfig(p);
  ASSERT_TRUE(toml.ok()) << toml.error().message;
  std::istringstream lines(*toml);
  std::string section;
  int fields = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line;
      continue;
    }
    const std::string field = section + " " + line.substr(0, line.find(' '));
    EXPECT_TRUE(documented.count(field)) << field;
    ++fields;
  }
  EXPECT_GE(fields, 12);
}

TEST(TorchtitanConfig, ReadsATrainConfig) {
  Result<plan::LayerPlan> p = ReadTorchtitanConfigFile(kData + "llama3_8b_fsdp_tp.toml", 16, 32);
  ASSERT_TRUE(p.ok()) << p.error().message;
  plan::LayerStrategy s;
  s.tp = 2;
  s.dp = 8;
  s.zero = plan::Zero::kParameters;
  s.sequence_parallel = true;
  s.selective_recompute = true;
  EXPECT_EQ(p->layers, std::vector<plan::LayerStrategy>(32, s));
  EXPECT_EQ(p->pp_degree, 1);
  EXPECT_EQ(p->global_batch, 16);
  EXPECT_EQ(p->micro_batches, 2);  // 16 samples, 1 per rank per local batch, 8 ranks: 2 accumulated
  // torchtitan's default pipeline split: the embeddings and the output weigh a layer each.
  Result<plan::LayerPlan> pp = ParseTorchtitanConfig(
      "[training]\nlocal_batch_size = 8\n[parallelism]\npipeline_parallel_degree = 2\n", "job.toml", 2, 6);
  ASSERT_TRUE(pp.ok()) << pp.error().message;
  EXPECT_EQ(pp->pp_partition, (std::vector<int>{3, 3}));  // (6 + 1 + 1) / 2 = 4, less one each end
  EXPECT_EQ(pp->micro_batches, 8);
}

TEST(TorchtitanConfig, RefusesWhatTorchtitanCannotRun) {
  plan::LayerPlan p;
  p.layers.assign(4, plan::LayerStrategy{.tp = 2, .dp = 4, .zero = plan::Zero::kParameters, .sequence_parallel = true});
  p.global_batch = 8;
  const auto refused = [](const plan::LayerPlan& q, const std::string& fragment) {
    testing::ExpectBadInput(WriteTorchtitanConfig(q), {fragment});
  };
  plan::LayerPlan mixed = p;
  mixed.layers[1].tp = 4;
  mixed.layers[1].dp = 2;
  refused(mixed, "layer 1: strategy");
  plan::LayerPlan zero1 = p;
  for (plan::LayerStrategy& s : zero1.layers) s.zero = plan::Zero::kOptimizerStates;
  refused(zero1, "ZeRO1");
  plan::LayerPlan no_sp = p;
  for (plan::LayerStrategy& s : no_sp.layers) s.sequence_parallel = false;
  refused(no_sp, "without sequence parallelism");
  plan::LayerPlan ddp_cp = p;
  for (plan::LayerStrategy& s : ddp_cp.layers) {
    s.zero = plan::Zero::kNone;
    s.cp = 2;
  }
  refused(ddp_cp, "beside context parallelism");
  plan::LayerPlan set = p;
  for (plan::LayerStrategy& s : set.layers) s.recompute = {"mlp.act"};
  refused(set, "a recompute set");
  plan::LayerPlan set_after_checkpoint = set;  // moot in layer 0, which is checkpointed; not in layer 1
  set_after_checkpoint.layers[0].checkpoint = true;
  refused(set_after_checkpoint, "layer 1: a recompute set");
  plan::LayerPlan odd = p;
  odd.layers[0].checkpoint = true;
  refused(odd, "every k-th layer");
}

TEST(TorchtitanConfig, RefusesConfigsNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[parallelism\n", "job.toml: line 1:"},
      {"[parallelism]\ntensor_parallel_degree = \"two\"\n", "[parallelism] tensor_parallel_degree: must be an integer"},
      {"[parallelism]\ntensor_parallel_degree = 0\n", "[parallelism] tensor_parallel_degree: must be an integer of at least 1"},
      {"[parallelism]\ntensor_parallel_degree = 3\n", "does not divide the 8 devices"},
      {"[parallelism]\ndata_parallel_shard_degree = 2\n", "not the 8 devices"},
      {"[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 4\n", "HSDP"},
      {"[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = \"ZBVZeroBubble\"\n",
       "[parallelism] pipeline_parallel_schedule: 'ZBVZeroBubble' is not one kiwi models"},
      {"[parallelism]\npipeline_parallel_degree = 8\n", "[parallelism] pipeline_parallel_layers_per_stage"},
      {"[training]\nlocal_batch_size = 1\nglobal_batch_size = 12\n", "[training] global_batch_size: 12 is not a multiple"},
      {"[activation_checkpoint]\nmode = \"some\"\n", "[activation_checkpoint] mode: must be none, selective or full"},
      {"[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"x\"\n", "selective_ac_option: must be 'op'"},
      {"[parallelism]\nexpert_parallel_degree = 16\n", "[parallelism] expert_parallel_degree: 16 does not divide"},
  };
  for (const auto& [text, fragment] : cases) {
    Result<plan::LayerPlan> r = ParseTorchtitanConfig(text, "job.toml", 8, 4);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput) << text;
    EXPECT_EQ(r.error().message.rfind("job.toml: ", 0), 0u) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(fragment), std::string::npos) << text << ": " << r.error().message;
  }
}

}  // namespace
}  // namespace kiwi::io
