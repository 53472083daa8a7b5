#include "kiwi/io/plan_json.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "io_test_util.h"

namespace kiwi::io {
namespace {

using testing::ExpectBadInput;
using testing::FixturePath;

void ExpectSamePlan(const plan::Plan& a, const plan::Plan& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.graph, b.graph);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.hf_config, b.hf_config);
  EXPECT_EQ(a.model_flags, b.model_flags);
  EXPECT_EQ(a.galvatron, b.galvatron);
  EXPECT_EQ(a.cluster, b.cluster);
  EXPECT_EQ(a.solver, b.solver);
  ASSERT_EQ(a.op.has_value(), b.op.has_value());
  if (a.op) {
    EXPECT_EQ(a.op->mesh_shape, b.op->mesh_shape);
    EXPECT_EQ(a.op->schedule, b.op->schedule);
    ASSERT_EQ(a.op->shardings.size(), b.op->shardings.size());
    for (const auto& [node, s] : a.op->shardings) {
      ASSERT_EQ(b.op->shardings.count(node), 1u) << node;
      const plan::OpSharding& t = b.op->shardings.at(node);
      EXPECT_EQ(s.output.ToString(), t.output.ToString());
      EXPECT_TRUE(s.output == t.output);
      ASSERT_EQ(s.operands.size(), t.operands.size());
      for (size_t i = 0; i < s.operands.size(); ++i) EXPECT_EQ(s.operands[i].ToString(), t.operands[i].ToString());
      EXPECT_EQ(s.reduce_axes, t.reduce_axes);
      EXPECT_EQ(s.strategy, t.strategy);
    }
  }
  ASSERT_EQ(a.layer.has_value(), b.layer.has_value());
  if (a.layer) {
    EXPECT_EQ(a.layer->layers, b.layer->layers);
    EXPECT_EQ(a.layer->pp_degree, b.layer->pp_degree);
    EXPECT_EQ(a.layer->pp_partition, b.layer->pp_partition);
    EXPECT_EQ(a.layer->global_batch, b.layer->global_batch);
    EXPECT_EQ(a.layer->micro_batches, b.layer->micro_batches);
    EXPECT_EQ(a.layer->pipeline, b.layer->pipeline);
    EXPECT_EQ(a.layer->virtual_stages, b.layer->virtual_stages);
  }
  EXPECT_EQ(a.claims.peak_memory_bytes, b.claims.peak_memory_bytes);
  EXPECT_EQ(a.claims.iteration_seconds, b.claims.iteration_seconds);
}

TEST(PlanJson, ReadsTheFixture) {
  Result<plan::Plan> p = ReadPlanFile(FixturePath("plan_example.json"));
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->graph, "tiny-mlp");
  EXPECT_EQ(p->cluster, "v100-nvlink-8");
  ASSERT_TRUE(p->op.has_value());
  EXPECT_EQ(p->op->mesh_shape, (std::vector<int>{2, 4}));
  ASSERT_EQ(p->op->shardings.size(), 2u);
  const plan::OpSharding& s2 = p->op->shardings.at(2);
  EXPECT_EQ(s2.output.dim_axes, (std::vector<ir::AxisMask>{1, 0}));  // "S0R": dim 0 over axis 0
  ASSERT_EQ(s2.operands.size(), 2u);
  EXPECT_EQ(s2.operands[1].dim_axes, (std::vector<ir::AxisMask>{0, 0}));
  EXPECT_EQ(s2.reduce_axes, 0u);
  EXPECT_EQ(s2.strategy, "S0R = S0R x RR");
  const plan::OpSharding& s3 = p->op->shardings.at(3);
  EXPECT_EQ(s3.output.dim_axes, (std::vector<ir::AxisMask>{1, 2}));
  EXPECT_EQ(s3.reduce_axes, ir::AxisBit(1));
  ASSERT_EQ(p->op->schedule.size(), 5u);
  EXPECT_EQ(p->op->schedule[3], (plan::Step{plan::StepKind::kFree, 0}));
  EXPECT_EQ(p->op->schedule[4], (plan::Step{plan::StepKind::kCompute, 3}));
  ASSERT_TRUE(p->layer.has_value());
  EXPECT_EQ(p->layer->layers[0], (plan::LayerStrategy{2, 4, plan::Zero::kNone, true}));
  EXPECT_EQ(p->layer->layers[1], (plan::LayerStrategy{1, 8, plan::Zero::kParameters, false}));
  EXPECT_EQ(p->layer->pp_degree, 2);
  EXPECT_EQ(p->layer->global_batch, 64);
  EXPECT_EQ(p->layer->micro_batches, 4);
  EXPECT_EQ(p->layer->pipeline, plan::PipelineSchedule::kGPipe);
  EXPECT_EQ(p->claims.peak_memory_bytes, 123456789);
  EXPECT_EQ(p->claims.iteration_seconds, 0.25);
}

TEST(PlanJson, RoundTripsExactly) {
  Result<plan::Plan> p = ReadPlanFile(FixturePath("plan_example.json"));
  ASSERT_TRUE(p.ok()) << p.error().message;
  p->claims.iteration_seconds = 0.1 + 0.2;  // every digit must survive
  p->model_flags.layers = 8;
  p->model_flags.batch = 32;
  p->model_flags.vocab = 50304;
  p->model_flags.dropout = 0.0;
  p->model_flags.capacity_factor = 1.25;
  p->model_flags.dtype = "bf16";
  p->hf_config = "/models/llama/config.json";
  p->op->shardings[7] = {ir::ShardingSpec{}, {}, ir::AxisBit(0) | ir::AxisBit(1), ""};  // replicated scalar
  const std::string text = WritePlanJson(*p);
  Result<plan::Plan> back = ParsePlanJson(text, "rt.json");
  ASSERT_TRUE(back.ok()) << back.error().message << "\n" << text;
  ExpectSamePlan(*p, *back);
  EXPECT_EQ(WritePlanJson(*back), text);
}

// A plan made from Galvatron's profiles records them, and their reading options, so it replays on them.
TEST(PlanJson, GalvatronSourceRoundTripsAndIsCheckedByName) {
  plan::Plan p;
  p.solver = "hybrid:bmw";
  p.galvatron = plan::GalvatronSource{{"/p/computation_profiling_bf16_x.json", "/p/memory_profiling_bf16_x.json"},
                                      {"/h/allreduce.json", "", "/h/overlap.json", "/h/sp_time.json"},
                                      {24, 8},
                                      2048,
                                      "bf16",
                                      true,
                                      4096,
                                      int64_t{36} << 30,
                                      "sequence",
                                      "sequence"};
  const std::string text = WritePlanJson(p);
  Result<plan::Plan> back = ParsePlanJson(text, "g.json");
  ASSERT_TRUE(back.ok()) << back.error().message << "\n" << text;
  ExpectSamePlan(p, *back);
  EXPECT_EQ(WritePlanJson(*back), text);
  const auto with = [](const std::string& galvatron) {
    return ParsePlanJson(R"({"kiwi_plan_version": 1, "galvatron": )" + galvatron + "}", "g.json");
  };
  ExpectBadInput(with(R"({"profiles": ["c.json"], "layers": [2]})"), {"g.json: galvatron.profiles:"});
  ExpectBadInput(with(R"({"profiles": ["c.json", "m.json"], "layers": []})"), {"g.json: galvatron.layers:"});
  ExpectBadInput(with(R"({"profiles": ["c.json", "m.json"], "layers": [0]})"), {"g.json: galvatron.layers[0]"});
  ExpectBadInput(with(R"({"profiles": ["c.json", "m.json"], "layers": [2], "hiden": 8})"), {"g.json: galvatron", "hiden"});
  ExpectBadInput(with(R"({"profiles": ["c.json", "m.json"], "layers": [2], "seq": -1})"), {"g.json: galvatron.seq"});
  ExpectBadInput(with(R"({"profiles": ["c.json", "m.json"], "layers": [2], "time_mode": "hybrid"})"),
                 {"g.json: galvatron.time_mode:", "'hybrid'"});
  ExpectBadInput(with(R"({"profiles": ["c.json", "m.json"], "layers": [2], "memory_mode": "batch"})"),
                 {"g.json: galvatron.memory_mode:"});
  ExpectBadInput(with(R"({"profiles": ["c.json", "m.json"], "layers": [2], "precision": "fp8"})"),
                 {"g.json: galvatron.precision:"});
}

// Ulysses (plan::LayerStrategy::ulysses) is written as its degree where above 1 (all of cp, or part of
// it under USP), read back ("true": all of cp, the first spelling), and needs cp above 1, tp 1 and a
// degree dividing cp.
TEST(PlanJson, UlyssesRoundTripsAndNeedsAContextGroupWithoutTp) {
  for (int degree : {4, 2}) {
    plan::Plan p;
    p.layer = plan::LayerPlan{};
    plan::LayerStrategy s{.tp = 1, .dp = 8, .cp = 4};
    s.ulysses = degree;
    p.layer->layers = {s};
    p.layer->pp_partition = {1};
    const std::string text = WritePlanJson(p);
    EXPECT_NE(text.find(fmt::format("\"ulysses\":{}", degree)), std::string::npos) << text;
    Result<plan::Plan> back = ParsePlanJson(text, "u.json");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->layer->layers, p.layer->layers);
  }
  const auto with = [](const std::string& layer) {
    return ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [)" + layer + R"(], "pp_partition": [1]}})",
                         "u.json");
  };
  Result<plan::Plan> spelled = with(R"({"tp": 1, "dp": 8, "cp": 4, "ulysses": true})");
  ASSERT_TRUE(spelled.ok()) << spelled.error().message;
  EXPECT_EQ(spelled->layer->layers[0].UlyssesDegree(), 4);
  EXPECT_EQ(spelled->layer->layers[0].RingDegree(), 1);
  Result<plan::Plan> none = with(R"({"tp": 1, "dp": 8, "cp": 2, "ulysses": 1})");
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_FALSE(none->layer->layers[0].Ulysses());
  ExpectBadInput(with(R"({"tp": 1, "dp": 8, "ulysses": true})"), {"u.json: layer.layers[0].ulysses:", "cp above 1"});
  ExpectBadInput(with(R"({"tp": 2, "dp": 4, "cp": 2, "ulysses": true})"), {"u.json: layer.layers[0].ulysses:", "tp 1"});
  ExpectBadInput(with(R"({"tp": 1, "dp": 8, "cp": 4, "ulysses": 3})"), {"u.json: layer.layers[0].ulysses:", "divide cp 4"});
  ExpectBadInput(with(R"({"tp": 1, "dp": 8, "cp": 4, "ulysses": "2"})"), {"u.json: layer.layers[0].ulysses:"});
}

TEST(PlanJson, CapacityFactorMustBePositive) {
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "model_flags": {"capacity_factor": 0}})", "p.json"),
                 {"p.json: model_flags.capacity_factor:", "must be positive"});
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "model_flags": {"capacity_factor": "1.5"}})", "p.json"),
                 {"p.json: model_flags.capacity_factor:"});
}

TEST(PlanJson, ModelFlagsAreCheckedByName) {
  auto zero = ParsePlanJson(R"({"kiwi_plan_version": 1, "model_flags": {"layers": 0}})", "p.json");
  ExpectBadInput(zero, {"p.json", "model_flags.layers"});
  auto typo = ParsePlanJson(R"({"kiwi_plan_version": 1, "model_flags": {"hiden": 64}})", "p.json");
  ExpectBadInput(typo, {"p.json", "model_flags", "hiden"});
  auto ok = ParsePlanJson(R"({"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"seq": 128, "optimizer": "sgd"}})", "p.json");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->model_flags.seq, 128);
  EXPECT_EQ(ok->model_flags.optimizer, "sgd");
  EXPECT_FALSE(ok->model_flags.layers.has_value());
}

TEST(PlanJson, MinimalPlanRoundTrips) {
  plan::Plan p;
  p.solver = "checkpoint-all";
  const std::string text = WritePlanJson(p);
  EXPECT_EQ(text,
            "{\n  \"kiwi_plan_version\": 1,\n  \"graph\": \"\",\n  \"model\": \"\",\n  \"cluster\": \"\",\n"
            "  \"solver\": \"checkpoint-all\",\n  \"claims\": {}\n}\n");
  Result<plan::Plan> back = ParsePlanJson(text, "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  ExpectSamePlan(p, *back);
}

TEST(PlanJson, ScheduleStepsArePrintedOnePerLine) {
  plan::OperatorPlan op;
  op.schedule = {{plan::StepKind::kCompute, 0}, {plan::StepKind::kFree, 0}};
  plan::Plan p;
  p.op = std::move(op);
  const std::string text = WritePlanJson(p);
  EXPECT_NE(text.find("    \"schedule\": [\n      {\"op\":\"compute\",\"node\":0},\n      {\"op\":\"free\",\"node\":0}\n"),
            std::string::npos)
      << text;
}

TEST(PlanJson, BadScheduleOp) {
  const std::string text = R"({"kiwi_plan_version": 1, "operator": {"schedule": [
      {"op": "compute", "node": 0}, {"op": "compute", "node": 1}, {"op": "free", "node": 0},
      {"op": "compute", "node": 2}, {"op": "free", "node": 1}, {"op": "recompute", "node": 0}]}})";
  ExpectBadInput(ParsePlanJson(text, "plan.json"), {"plan.json: operator.schedule[5].op: must be \"compute\" or \"free\""});
}

TEST(PlanJson, NegativeNodeInAStep) {
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "operator": {"schedule": [{"op": "free", "node": -3}]}})",
                               "plan.json"),
                 {"plan.json: operator.schedule[0].node: must be an integer in [0, 2147483647] (got -3)"});
}

TEST(PlanJson, ShardingOnAMissingMeshAxis) {
  const std::string text = R"({"kiwi_plan_version": 1, "operator": {"mesh": [2, 4],
      "shardings": [{"node": 1, "output": "S2R"}]}})";
  ExpectBadInput(ParsePlanJson(text, "plan.json"),
                 {"plan.json: operator.shardings[0].output: sharding 'S2R': mesh axis 2 does not exist"});
}

TEST(PlanJson, ShardingSyntaxError) {
  const std::string text = R"({"kiwi_plan_version": 1, "operator": {"mesh": [2],
      "shardings": [{"node": 1, "output": "R", "operands": ["RX"]}]}})";
  ExpectBadInput(ParsePlanJson(text, "plan.json"), {"plan.json: operator.shardings[0].operands[0]: sharding 'RX'"});
}

TEST(PlanJson, DuplicateShardingAndReduceAxes) {
  const std::string dup = R"({"kiwi_plan_version": 1, "operator": {"mesh": [2],
      "shardings": [{"node": 1, "output": "S0"}, {"node": 1, "output": "R"}]}})";
  ExpectBadInput(ParsePlanJson(dup, "plan.json"),
                 {"plan.json: operator.shardings[1].node: node 1 has a sharding already"});
  const std::string axes = R"({"kiwi_plan_version": 1, "operator": {"mesh": [2, 2],
      "shardings": [{"node": 1, "output": "RR", "reduce_axes": [1, 1]}]}})";
  ExpectBadInput(ParsePlanJson(axes, "plan.json"),
                 {"plan.json: operator.shardings[0].reduce_axes[1]: mesh axis 1 listed twice"});
}

TEST(PlanJson, PipelinePartitionMustMatch) {
  const std::string text = R"({"kiwi_plan_version": 1, "layer": {"layers": [{}, {}, {}], "pp_degree": 2,
      "pp_partition": [1, 1]}})";
  ExpectBadInput(ParsePlanJson(text, "plan.json"), {"plan.json: layer.pp_partition: sums to 2 layers, the plan has 3"});
  const std::string stages = R"({"kiwi_plan_version": 1, "layer": {"layers": [{}, {}], "pp_degree": 2,
      "pp_partition": [2]}})";
  ExpectBadInput(ParsePlanJson(stages, "plan.json"), {"plan.json: layer.pp_partition: has 1 stages, pp_degree is 2"});
}

TEST(PlanJson, LayerDefaultsAndBadDegree) {
  Result<plan::Plan> p = ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{}]}})", "plan.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->layer->layers[0], (plan::LayerStrategy{1, 1, plan::Zero::kNone, false}));
  EXPECT_EQ(p->layer->pipeline, plan::PipelineSchedule::k1F1B);
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"tp": "2"}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].tp: must be an integer in [1, 2147483647] (got a string \"2\")"});
}

// A layer's ZeRO stage: "zero" 0-3; the first spelling "sdp": true still reads as 3 and, beside "zero"
// (as kiwi hybrid --json writes both), must agree with it. Written back as "zero".
TEST(PlanJson, ZeroStagesAndTheSdpSpelling) {
  auto layer = [](const std::string& entry) {
    return ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [)" + entry + "]}}", "plan.json");
  };
  Result<plan::Plan> zero2 = layer(R"({"dp": 1, "zero": 2})");
  ASSERT_TRUE(zero2.ok()) << zero2.error().message;
  EXPECT_EQ(zero2->layer->layers[0].zero, plan::Zero::kGradients);
  const std::string written = WritePlanJson(*zero2);
  EXPECT_NE(written.find(R"("zero")"), std::string::npos);
  EXPECT_EQ(written.find(R"("sdp")"), std::string::npos);
  EXPECT_EQ(ParsePlanJson(written, "plan.json")->layer->layers[0].zero, plan::Zero::kGradients);
  EXPECT_EQ(layer(R"({"sdp": true})")->layer->layers[0].zero, plan::Zero::kParameters);
  EXPECT_EQ(layer(R"({"sdp": true, "zero": 3})")->layer->layers[0].zero, plan::Zero::kParameters);
  EXPECT_EQ(layer(R"({"sdp": false, "zero": 1})")->layer->layers[0].zero, plan::Zero::kOptimizerStates);
  ExpectBadInput(layer(R"({"sdp": true, "zero": 1})"), {"plan.json: layer.layers[0].sdp: true contradicts zero 1"});
  ExpectBadInput(layer(R"({"zero": 4})"), {"plan.json: layer.layers[0].zero: must be an integer in [0, 3]"});
}

// Megatron sequence parallelism per layer: "sequence_parallel", false when absent, written back.
TEST(PlanJson, SequenceParallelPerLayer) {
  Result<plan::Plan> p = ParsePlanJson(
      R"({"kiwi_plan_version": 1, "layer": {"layers": [{"tp": 2, "sequence_parallel": true}, {"tp": 2}]}})", "plan.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->layer->layers[0].sequence_parallel);
  EXPECT_FALSE(p->layer->layers[1].sequence_parallel);
  Result<plan::Plan> back = ParsePlanJson(WritePlanJson(*p), "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layer->layers, p->layer->layers);
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"sequence_parallel": 1}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].sequence_parallel:"});
}

// Selective recomputation per layer: "selective_recompute", false when absent, written back.
TEST(PlanJson, SelectiveRecomputationPerLayer) {
  Result<plan::Plan> p = ParsePlanJson(
      R"({"kiwi_plan_version": 1, "layer": {"layers": [{"tp": 2, "selective_recompute": true}, {"tp": 2}]}})", "plan.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->layer->layers[0].SelectiveRecompute());
  EXPECT_FALSE(p->layer->layers[1].selective_recompute);
  EXPECT_NE(WritePlanJson(*p).find("selective_recompute"), std::string::npos);
  Result<plan::Plan> back = ParsePlanJson(WritePlanJson(*p), "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layer->layers, p->layer->layers);
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"selective_recompute": "yes"}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].selective_recompute:"});
}

// Expert parallelism: "ep" (1 when absent, written only above 1), dividing dp, not beside ZeRO-3.
TEST(PlanJson, ExpertParallelPerLayer) {
  Result<plan::Plan> p = ParsePlanJson(
      R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 8, "zero": 1, "ep": 4}, {"dp": 8}]}})", "plan.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->layer->layers[0].ep, 4);
  EXPECT_EQ(p->layer->layers[0].ExpertDataParallel(), 2);
  EXPECT_EQ(p->layer->layers[1].ep, 1);
  EXPECT_EQ(plan::StrategyName(p->layer->layers[0]), "ZeRO1-DP8xEP4");
  const std::string written = WritePlanJson(*p);
  EXPECT_EQ(written.find("\"ep\""), written.rfind("\"ep\""));  // once: the second layer's 1 is left out
  Result<plan::Plan> back = ParsePlanJson(written, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layer->layers, p->layer->layers);
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 4, "ep": 3}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].ep: 3 does not divide dp 4"});
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 4, "zero": 3, "ep": 2}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].ep: expert parallelism with ZeRO-3"});
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 4, "ep": 0}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].ep:"});
}

// Context parallelism: "cp" (1 when absent, written only above 1), dividing dp, not beside EP.
TEST(PlanJson, ContextParallelPerLayer) {
  Result<plan::Plan> p = ParsePlanJson(
      R"({"kiwi_plan_version": 1, "layer": {"layers": [{"tp": 8, "dp": 16, "zero": 3, "sequence_parallel": true, "cp": 4}, {"dp": 8}]}})",
      "plan.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->layer->layers[0].cp, 4);
  EXPECT_EQ(p->layer->layers[0].Replicas(), 4);
  EXPECT_EQ(p->layer->layers[1].cp, 1);
  EXPECT_EQ(plan::StrategyName(p->layer->layers[0]), "SP-TP8xSDP16xCP4");
  const std::string written = WritePlanJson(*p);
  EXPECT_EQ(written.find("\"cp\""), written.rfind("\"cp\""));  // once: the second layer's 1 is left out
  Result<plan::Plan> back = ParsePlanJson(written, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layer->layers, p->layer->layers);
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 4, "cp": 8}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].cp: 8 does not divide dp 4"});
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 4, "ep": 2, "cp": 2}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].cp: context parallelism beside expert parallelism"});
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 4, "cp": 0}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].cp:"});
}

// ZeRO-Offload: "offload" (false when absent, written only when true).
TEST(PlanJson, OffloadPerLayer) {
  Result<plan::Plan> p = ParsePlanJson(
      R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 8, "zero": 2, "offload": true}, {"dp": 8}]}})", "plan.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->layer->layers[0].offload);
  EXPECT_FALSE(p->layer->layers[1].offload);
  EXPECT_EQ(plan::StrategyName(p->layer->layers[0]), "ZeRO2-DP8+OFFLOAD");
  const std::string written = WritePlanJson(*p);
  EXPECT_EQ(written.find("\"offload\""), written.rfind("\"offload\""));
  Result<plan::Plan> back = ParsePlanJson(written, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layer->layers, p->layer->layers);
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{"dp": 4, "offload": 1}]}})", "plan.json"),
                 {"plan.json: layer.layers[0].offload:"});
}

// Recompute sets: "recompute", a list of the layer's op names (empty when absent, written only when not).
TEST(PlanJson, RecomputeSetPerLayer) {
  Result<plan::Plan> p = ParsePlanJson(
      R"({"kiwi_plan_version": 1, "layer": {"layers": [{"tp": 2, "dp": 4, "recompute": ["attn.norm", "mlp.act"]}, {"dp": 8}]}})",
      "plan.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->layer->layers[0].recompute, (std::vector<std::string>{"attn.norm", "mlp.act"}));
  EXPECT_TRUE(p->layer->layers[1].recompute.empty());
  EXPECT_EQ(plan::StrategyName(p->layer->layers[0]), "TP2xDP4+RC[attn.norm,mlp.act]");
  const std::string written = WritePlanJson(*p);
  EXPECT_EQ(written.find("\"recompute\""), written.rfind("\"recompute\""));
  Result<plan::Plan> back = ParsePlanJson(written, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layer->layers, p->layer->layers);
  const auto bad = [](const std::string& entry) {
    return ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [)" + entry + "]}}", "plan.json");
  };
  ExpectBadInput(bad(R"({"dp": 4, "recompute": "mlp.act"})"), {"plan.json: layer.layers[0].recompute:", "list"});
  ExpectBadInput(bad(R"({"dp": 4, "recompute": [1]})"), {"plan.json: layer.layers[0].recompute[0]:"});
  ExpectBadInput(bad(R"({"dp": 4, "recompute": [""]})"), {"plan.json: layer.layers[0].recompute[0]:", "must name an op"});
  ExpectBadInput(bad(R"({"dp": 4, "recompute": ["a", "a"]})"), {"layer.layers[0].recompute[1]:", "named twice"});
  ExpectBadInput(bad(R"({"dp": 4, "selective_recompute": true, "recompute": ["a"]})"),
                 {"layer.layers[0].recompute:", "selective_recompute"});
}

// Interleaved 1F1B: "virtual_stages" (1 when absent, written only above 1) and a partition of
// pp_degree x virtual_stages chunks; only on the 1F1B schedule, with more than one stage.
TEST(PlanJson, InterleavedPipelineChunks) {
  auto layer = [](const std::string& fields) {
    return ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{}, {}, {}, {}], "pp_degree": 2, )" + fields +
                             "}}",
                         "plan.json");
  };
  Result<plan::Plan> p = layer(R"("virtual_stages": 2, "pp_partition": [1, 1, 1, 1], "micro_batches": 2)");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->layer->virtual_stages, 2);
  EXPECT_EQ(p->layer->StageOfChunk(3), 1);
  const std::string written = WritePlanJson(*p);
  EXPECT_NE(written.find(R"("virtual_stages": 2)"), std::string::npos);
  Result<plan::Plan> back = ParsePlanJson(written, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  ExpectSamePlan(*p, *back);
  Result<plan::Plan> plain = layer(R"("pp_partition": [2, 2])");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(plain->layer->virtual_stages, 1);
  EXPECT_EQ(WritePlanJson(*plain).find("virtual_stages"), std::string::npos);
  ExpectBadInput(layer(R"("virtual_stages": 2, "pp_partition": [2, 2])"),
                 {"plan.json: layer.pp_partition: has 2 chunks, pp_degree 2 x virtual_stages 2 is 4"});
  ExpectBadInput(layer(R"("virtual_stages": 0, "pp_partition": [2, 2])"),
                 {"plan.json: layer.virtual_stages: must be an integer in [1, 2147483647]"});
  ExpectBadInput(layer(R"("virtual_stages": 2, "pp_partition": [1, 1, 1, 1], "pipeline": "gpipe")"),
                 {"plan.json: layer.virtual_stages: 2 model chunks per stage (interleaved 1F1B) need pipeline \"1f1b\""});
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "layer": {"layers": [{}, {}], "virtual_stages": 2}})", "plan.json"),
                 {"plan.json: layer.virtual_stages: 2 model chunks per stage need pp_degree >= 2"});
}

TEST(PlanJson, VersionAndUnknownFields) {
  ExpectBadInput(ParsePlanJson(R"({"graph": "g"})", "plan.json"), {"plan.json: kiwi_plan_version: missing"});
  ExpectBadInput(ParsePlanJson(R"({"kiwi_plan_version": 1, "claims": {"peak_bytes": 3}})", "plan.json"),
                 {"plan.json: claims.peak_bytes: unknown field"});
  ExpectBadInput(ParsePlanJson("{\"kiwi_plan_version\": 1,", "plan.json"), {"plan.json: invalid JSON at byte"});
}

}  // namespace
}  // namespace kiwi::io
