// Galvatron's strategy-config JSON: kiwi's plans written in it read back unchanged, a Galvatron-written
// config reads as the plan it describes, and what kiwi cannot model is rejected with the field named.
#include "kiwi/io/galvatron_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "io_test_util.h"

namespace kiwi::io {
namespace {

const std::string kData = std::string(KIWI_TEST_DATA_DIR) + "/galvatron/";

plan::LayerPlan MixedPlan() {
  plan::LayerPlan p;
  p.layers = {{1, 4, plan::Zero::kNone, false}, {1, 4, plan::Zero::kParameters, true}, {2, 2, plan::Zero::kParameters, false}, {4, 1, plan::Zero::kNone, true}, {2, 2, plan::Zero::kNone, false}};
  p.pp_degree = 2;
  p.pp_partition = {3, 2};
  p.global_batch = 64;
  p.micro_batches = 8;
  return p;
}

TEST(GalvatronConfig, RoundTripsKiwiPlans) {
  const plan::LayerPlan p = MixedPlan();
  const std::string text = *WriteGalvatronConfig(p);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["tp_sizes_enc"], "1,1,2,4,2");
  EXPECT_EQ(j["dp_types_enc"], "0,1,1,0,0");
  EXPECT_EQ(j["checkpoint"], "0,1,0,1,0");
  EXPECT_EQ(j["pp_division"], "3,2");
  EXPECT_EQ(j["pipeline_type"], "pipedream_flush");
  EXPECT_EQ(j["chunks"], 8);
  Result<plan::LayerPlan> back = ParseGalvatronConfig(text, "c.json", {.num_devices = 8});
  ASSERT_TRUE(back.ok()) << back.error().message;
  testing::ExpectSameLayerPlan(*back, p);
  plan::LayerPlan gpipe = p;
  gpipe.pipeline = plan::PipelineSchedule::kGPipe;
  testing::ExpectSameLayerPlan(*ParseGalvatronConfig(*WriteGalvatronConfig(gpipe), "c.json", {.num_devices = 8}), gpipe);
}

// Galvatron's zero2 is kiwi's ZeRO-1 under gradient accumulation (whole gradients until the last
// backward, its default) and ZeRO-2 with one micro-batch; the other stage, and DP beside zero2, it
// cannot express.
TEST(GalvatronConfig, WritesZero2AndRefusesWhatGalvatronCannotExpress) {
  for (const auto& [micro_batches, zero2, other] :
       {std::tuple{8, plan::Zero::kOptimizerStates, plan::Zero::kGradients},
        std::tuple{1, plan::Zero::kGradients, plan::Zero::kOptimizerStates}}) {
    plan::LayerPlan p = MixedPlan();
    p.micro_batches = micro_batches;
    for (plan::LayerStrategy& s : p.layers)
      if (s.zero == plan::Zero::kNone) s.zero = zero2;
    Result<std::string> text = WriteGalvatronConfig(p);
    ASSERT_TRUE(text.ok()) << text.error().message;
    EXPECT_EQ(nlohmann::json::parse(*text)["default_dp_type"], "zero2");
    Result<plan::LayerPlan> back = ParseGalvatronConfig(*text, "c.json", {.num_devices = 8});
    ASSERT_TRUE(back.ok()) << back.error().message;
    for (size_t i = 0; i < p.layers.size(); ++i) EXPECT_EQ(back->layers[i].ZeroStage(), p.layers[i].ZeroStage()) << i;

    p.layers[4].zero = other;
    Result<std::string> refused = WriteGalvatronConfig(p);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find(fmt::format("layer 4 uses {}, which Galvatron cannot express with {} micro-batches",
                                                       plan::DataParallelName(other), micro_batches)),
              std::string::npos)
        << refused.error().message;
  }
  plan::LayerPlan mixed = MixedPlan();  // 8 micro-batches: zero2 is ZeRO-1; layer 0 is plain DP
  mixed.layers[4].zero = plan::Zero::kOptimizerStates;
  Result<std::string> refused = WriteGalvatronConfig(mixed);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("layer 4 uses ZeRO1 where an earlier layer uses DP"), std::string::npos)
      << refused.error().message;
  // Galvatron's use_sp is Ulysses' sequence parallelism, not Megatron's: a plan with the latter is refused.
  plan::LayerPlan sp = MixedPlan();
  sp.layers[3].sequence_parallel = true;
  refused = WriteGalvatronConfig(sp);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("layer 3 uses Megatron sequence parallelism (SP-TP4+CKPT)"), std::string::npos)
      << refused.error().message;
  // Galvatron's checkpoint recomputes the whole layer: selective recomputation is refused, CKPT over it is not.
  plan::LayerPlan selective = MixedPlan();
  selective.layers[2].selective_recompute = true;
  selective.layers[3].selective_recompute = true;
  refused = WriteGalvatronConfig(selective);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("layer 2 uses selective recomputation (TP2xSDP2+SEL)"), std::string::npos)
      << refused.error().message;
  // Ring attention is its cp_sizes_enc; its configs have no offloading of the optimizer.
  plan::LayerPlan context = MixedPlan();
  context.layers[2].cp = 2;
  Result<std::string> ring = WriteGalvatronConfig(context);
  ASSERT_TRUE(ring.ok()) << ring.error().message;
  EXPECT_EQ(nlohmann::json::parse(*ring)["cp_sizes_enc"], "1,1,2,1,1");
  plan::LayerPlan offload = MixedPlan();
  offload.layers[2].offload = true;
  refused = WriteGalvatronConfig(offload);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("layer 2 offloads its optimizer (TP2xSDP2+OFFLOAD)"), std::string::npos)
      << refused.error().message;
  // Its pipelines run one chunk per stage: interleaved 1F1B is refused.
  plan::LayerPlan interleaved = MixedPlan();
  interleaved.virtual_stages = 2;
  refused = WriteGalvatronConfig(interleaved);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("interleaves 2 model chunks per stage"), std::string::npos)
      << refused.error().message;
}

TEST(GalvatronConfig, ReadsGalvatronsOwnFormat) {
  Result<plan::LayerPlan> p = ReadGalvatronConfigFile(kData + "galvatron_config_bert_example.json", {.num_devices = 8});
  ASSERT_TRUE(p.ok()) << p.error().message;
  const std::vector<plan::LayerStrategy> expected = {
      {1, 4, plan::Zero::kOptimizerStates, false}, {1, 4, plan::Zero::kParameters, true},
      {2, 2, plan::Zero::kOptimizerStates, true}, {2, 2, plan::Zero::kParameters, false}};
  EXPECT_EQ(p->layers, expected);  // zero2 default over 4 chunks: ZeRO-1 where dp_types_enc is 0
  EXPECT_EQ(p->pp_partition, (std::vector<int>{2, 2}));
  EXPECT_EQ(p->pipeline, plan::PipelineSchedule::kGPipe);
  EXPECT_EQ(p->global_batch, 32);
  EXPECT_EQ(p->micro_batches, 4);
  Result<plan::LayerPlan> zero3 = ParseGalvatronConfig(
      R"({"pp_deg": 1, "tp_sizes_enc": "1,8", "global_bsz": 8, "default_dp_type": "zero3"})", "z.json", {.num_devices = 8});
  ASSERT_TRUE(zero3.ok()) << zero3.error().message;
  EXPECT_EQ(zero3->layers, (std::vector<plan::LayerStrategy>{{1, 8, plan::Zero::kParameters, false}, {8, 1, plan::Zero::kNone, false}}));
  EXPECT_EQ(zero3->pp_partition, (std::vector<int>{2}));
}

TEST(GalvatronConfig, RejectsWhatKiwiCannotModelNamingTheField) {
  const std::string base = R"("pp_deg": 1, "tp_sizes_enc": "1,2", "global_bsz": 8)";
  auto error = [&](const std::string& extra) {
    Result<plan::LayerPlan> r = ParseGalvatronConfig("{" + base + extra + "}", "g.json", {.num_devices = 8});
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_EQ(error(""), "ok");
  EXPECT_NE(error(R"(, "cp_sizes_enc": "1,8")").find("g.json: cp_sizes_enc[1]"), std::string::npos);
  EXPECT_NE(error(R"(, "tp_consecutive_flags": "1,0")").find("tp_consecutive_flags[1]"), std::string::npos);
  EXPECT_NE(error(R"(, "checkpoint": "0,1,1")").find("checkpoint: has 3 entries"), std::string::npos);
  EXPECT_NE(error(R"(, "checkpoint": "0,x")").find("checkpoint[1]"), std::string::npos);
  EXPECT_NE(error(R"(, "pipeline_type": "chimera")").find("pipeline_type"), std::string::npos);
  EXPECT_NE(error(R"(, "pp_division": "1,1")").find("pp_division"), std::string::npos);
  EXPECT_NE(error(R"(, "default_dp_type": "zero9")").find("default_dp_type"), std::string::npos);
  Result<plan::LayerPlan> bad_tp = ParseGalvatronConfig(R"({"pp_deg": 2, "tp_sizes_enc": "8", "global_bsz": 8,
      "pp_division": "1"})", "g.json", {.num_devices = 8});
  ASSERT_FALSE(bad_tp.ok());
  EXPECT_NE(bad_tp.error().message.find("tp_sizes_enc"), std::string::npos);
  EXPECT_FALSE(ParseGalvatronConfig("[1, 2]", "g.json", {.num_devices = 8}).ok());
  EXPECT_FALSE(ParseGalvatronConfig("{", "g.json", {.num_devices = 8}).ok());
  EXPECT_FALSE(ParseGalvatronConfig(R"({"pp_deg": 3, "tp_sizes_enc": "1", "global_bsz": 8})", "g.json", {.num_devices = 8}).ok());
  EXPECT_FALSE(ReadGalvatronConfigFile(kData + "missing.json", {.num_devices = 8}).ok());
}

// The fields Galvatron's search writes and its runtime reads (core/search_engine/search_engine.py
// save_results; utils/config_utils.py config2strategy, core/runtime/hybrid_parallel_config.py), its
// shipped Llama-2-7B config (embeddings at Ulysses 2: vtp 2, vsp 1) among them.
TEST(GalvatronConfig, ReadsTheEmbeddingsFieldsAndSaysWhatKiwiPricesOtherwise) {
  const std::string layers = R"("pp_deg": 1, "tp_sizes_enc": "1,1", "dp_types_enc": "1,1", "global_bsz": 16,
      "chunks": 1, "pp_division": "2", "pipeline_type": "pipedream_flush", "default_dp_type": "zero2")";
  std::vector<std::string> notes;
  Result<plan::LayerPlan> p =
      ParseGalvatronConfig("{" + layers + R"(, "vtp": 2, "vsp": 0, "embed_sdp": 1})", "g.json", {.num_devices = 8}, &notes);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->layers[0], (plan::LayerStrategy{1, 8, plan::Zero::kParameters, false}));
  ASSERT_EQ(notes.size(), 1u);  // embed_sdp 1 is the first layer's ZeRO-3: only vtp is priced otherwise
  EXPECT_NE(notes[0].find("g.json: vtp 2 is priced as the first layer's TP 1"), std::string::npos) << notes[0];
  notes.clear();
  ASSERT_TRUE(ParseGalvatronConfig("{" + layers + R"(, "vtp": 1, "vocab_sdp": 0})", "g.json", {.num_devices = 8}, &notes).ok());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("embed_sdp 0 is priced as the first layer's SDP"), std::string::npos) << notes[0];
  const auto error = [&](const std::string& extra) {
    Result<plan::LayerPlan> r = ParseGalvatronConfig("{" + layers + extra + "}", "g.json", {.num_devices = 8});
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_NE(error(R"(, "vtp": 3)").find("g.json: vtp"), std::string::npos);
  EXPECT_NE(error(R"(, "vsp": 2)").find("g.json: vsp"), std::string::npos);
  // Galvatron's shipped Llama-2-7B config: embeddings at Ulysses 2 beside ZeRO-3 layers, read with notes
  notes.clear();
  Result<plan::LayerPlan> shipped = ParseGalvatronConfig(
      "{" + layers + R"(, "vtp": 2, "vsp": 1, "embed_sdp": 1})", "g.json", {.num_devices = 8}, &notes);
  ASSERT_TRUE(shipped.ok()) << shipped.error().message;
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[1].find("vsp 1 / vcp 1"), std::string::npos) << notes[1];
  EXPECT_NE(error(R"(, "cp_sizes_enc": "1,3")").find("g.json: cp_sizes_enc[1]"), std::string::npos);
  EXPECT_NE(error(R"(, "embed_sdp": 1, "vocab_sdp": 0)").find("g.json: vocab_sdp"), std::string::npos);
  // Galvatron's run-wide sequence_parallel makes its TP layers Megatron TP + SP.
  Result<plan::LayerPlan> sp = ParseGalvatronConfig(
      R"({"pp_deg": 1, "tp_sizes_enc": "1,4", "global_bsz": 16})", "g.json", {.num_devices = 8, .sequence_parallel = true});
  ASSERT_TRUE(sp.ok()) << sp.error().message;
  EXPECT_FALSE(sp->layers[0].SequenceParallel());
  EXPECT_TRUE(sp->layers[1].SequenceParallel());
}

// What kiwi writes is what Galvatron's runtime reads: every field of its config reader, with the
// embeddings' strategy as kiwi runs it (the first layer's TP and ZeRO-3).
TEST(GalvatronConfig, WritesEveryFieldGalvatronReads) {
  plan::LayerPlan plan;
  plan.layers = {{2, 4, plan::Zero::kParameters, true}, {2, 4, plan::Zero::kNone, false}};
  plan.pp_degree = 1;
  plan.pp_partition = {2};
  plan.global_batch = 16;
  plan.micro_batches = 2;
  Result<std::string> text = WriteGalvatronConfig(plan);
  ASSERT_TRUE(text.ok()) << text.error().message;
  const nlohmann::json j = nlohmann::json::parse(*text);
  // utils/config_utils.py config2strategy and core/runtime/hybrid_parallel_config.py, Galvatron v3
  for (const char* field : {"pp_deg", "tp_sizes_enc", "tp_consecutive_flags", "dp_types_enc", "use_sp", "checkpoint",
                            "global_bsz", "chunks", "pp_division", "pipeline_type", "default_dp_type", "vtp", "vsp",
                            "vcp", "vocab_sdp", "embed_sdp"})
    EXPECT_TRUE(j.contains(field)) << field;
  EXPECT_EQ(j["vtp"], 2);
  EXPECT_EQ(j["embed_sdp"], 1);
  EXPECT_EQ(j["vocab_sdp"], 1);
  std::vector<std::string> notes;
  Result<plan::LayerPlan> back = ParseGalvatronConfig(*text, "k.json", {.num_devices = 8}, &notes);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layers, plan.layers);
  EXPECT_TRUE(notes.empty());  // its own embeddings' strategy reads back without a note
}

// A Galvatron run with sequence_parallel on gives every TP layer Megatron SP: such a plan is written
// (and reads back the same under that flag); a TP layer without SP is refused, as SP is without it.
TEST(GalvatronConfig, SequenceParallelRunsWriteTpLayersWithSp) {
  plan::LayerPlan plan;
  plan.layers = {{1, 8, plan::Zero::kParameters, true}, {2, 4, plan::Zero::kParameters, false}};
  plan.layers[1].sequence_parallel = true;
  plan.pp_degree = 1;
  plan.pp_partition = {2};
  plan.global_batch = 16;
  Result<std::string> text = WriteGalvatronConfig(plan, /*sequence_parallel=*/true);
  ASSERT_TRUE(text.ok()) << text.error().message;
  Result<plan::LayerPlan> back = ParseGalvatronConfig(*text, "k.json", {.num_devices = 8, .sequence_parallel = true});
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layers, plan.layers);
  Result<std::string> off = WriteGalvatronConfig(plan);
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.error().message.find("layer 1 uses Megatron sequence parallelism"), std::string::npos);
  plan.layers[1].sequence_parallel = false;
  Result<std::string> without = WriteGalvatronConfig(plan, /*sequence_parallel=*/true);
  ASSERT_FALSE(without.ok());
  EXPECT_NE(without.error().message.find("layer 1 uses TP without sequence parallelism"), std::string::npos)
      << without.error().message;
}

// use_sp 1 is Ulysses of the layer's tp_sizes_enc degree (Galvatron's sp_size, tp 1): kiwi's CP with
// ulysses over dp = the stage, its replicas Galvatron's dp; written back the same way.
TEST(GalvatronConfig, UseSpIsUlysses) {
  Result<plan::LayerPlan> p = ParseGalvatronConfig(
      R"({"pp_deg": 1, "tp_sizes_enc": "2,4,2", "use_sp": "1,1,0", "dp_types_enc": "1,0,0", "global_bsz": 16,
          "default_dp_type": "zero2"})", "u.json", {.num_devices = 8});
  ASSERT_TRUE(p.ok()) << p.error().message;
  plan::LayerStrategy first{1, 8, plan::Zero::kParameters, false};
  first.cp = 2;
  first.ulysses = 2;
  plan::LayerStrategy second{1, 8, plan::Zero::kGradients, false};
  second.cp = 4;
  second.ulysses = 4;
  EXPECT_EQ(p->layers[0], first);
  EXPECT_EQ(p->layers[1], second);
  EXPECT_EQ(p->layers[2], (plan::LayerStrategy{2, 4, plan::Zero::kGradients, false}));
  EXPECT_EQ(p->layers[0].Replicas(), 4);  // Galvatron's dp: 8 / (pp 1 x sp 2)
  EXPECT_EQ(plan::StrategyName(p->layers[0]), "SDP8xULYSSES2");
  Result<std::string> text = WriteGalvatronConfig(*p);
  ASSERT_TRUE(text.ok()) << text.error().message;
  const nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["tp_sizes_enc"], "2,4,2");
  EXPECT_EQ(j["use_sp"], "1,1,0");
  Result<plan::LayerPlan> back = ParseGalvatronConfig(*text, "u.json", {.num_devices = 8});
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layers, p->layers);
  EXPECT_EQ(j["cp_sizes_enc"], "1,1,1");
}

// cp_sizes_enc is Galvatron's ring attention (zigzag) beside TP or Ulysses: kiwi's cp = sp x ring, its
// Ulysses degree the use_sp layer's tp_sizes_enc (USP); written back as it was read.
TEST(GalvatronConfig, CpSizesAreARingBesideTpOrUlysses) {
  Result<plan::LayerPlan> p = ParseGalvatronConfig(
      R"({"pp_deg": 1, "tp_sizes_enc": "2,2,1,8", "use_sp": "1,0,0,1", "cp_sizes_enc": "2,2,8,1", "global_bsz": 16,
          "world_size": 8})", "c.json", {.num_devices = 8});
  ASSERT_TRUE(p.ok()) << p.error().message;
  plan::LayerStrategy usp{.tp = 1, .dp = 8, .cp = 4};
  usp.ulysses = 2;
  EXPECT_EQ(p->layers[0], usp);
  EXPECT_EQ(p->layers[0].Replicas(), 2);  // Galvatron's dp: 8 / (sp 2 x cp 2)
  EXPECT_EQ(plan::StrategyName(p->layers[0]), "DP8xULYSSES2xCP2");
  EXPECT_EQ(p->layers[1], (plan::LayerStrategy{.tp = 2, .dp = 4, .cp = 2}));
  EXPECT_EQ(p->layers[2], (plan::LayerStrategy{.tp = 1, .dp = 8, .cp = 8}));
  plan::LayerStrategy ulysses{.tp = 1, .dp = 8, .cp = 8};
  ulysses.ulysses = 8;
  EXPECT_EQ(p->layers[3], ulysses);
  Result<std::string> text = WriteGalvatronConfig(*p);
  ASSERT_TRUE(text.ok()) << text.error().message;
  const nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["tp_sizes_enc"], "2,2,1,8");
  EXPECT_EQ(j["use_sp"], "1,0,0,1");
  EXPECT_EQ(j["cp_sizes_enc"], "2,2,8,1");
  Result<plan::LayerPlan> back = ParseGalvatronConfig(*text, "c.json", {.num_devices = 8});
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layers, p->layers);

  const auto read = [](const std::string& fields) {
    return ParseGalvatronConfig(R"({"pp_deg": 1, "tp_sizes_enc": "4,4", "global_bsz": 16, )" + fields + "}", "c.json",
                                {.num_devices = 8});
  };
  testing::ExpectBadInput(read(R"("cp_sizes_enc": "1,4")"), {"c.json: cp_sizes_enc[1]:", "4 does not divide the 8 devices"});
  testing::ExpectBadInput(read(R"("cp_sizes_enc": "1")"), {"c.json: cp_sizes_enc:", "has 1 entries, tp_sizes_enc has 2"});
  testing::ExpectBadInput(read(R"("cp_sizes_enc": "1,3")"), {"c.json: cp_sizes_enc[1]:"});
  testing::ExpectBadInput(read(R"("world_size": 16)"), {"c.json: world_size:", "16 devices, but the cluster has 8"});
}

// The example in docs/hybrid.md is a valid config describing what the text says.
TEST(GalvatronConfig, DocsExampleReads) {
  std::ifstream in(std::string(KIWI_TEST_DATA_DIR) + "/../../docs/hybrid.md");
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const size_t start = text.find("```json\n");
  ASSERT_NE(start, std::string::npos);
  const std::string example = text.substr(start + 8, text.find("```", start + 8) - start - 8);
  Result<plan::LayerPlan> p = ParseGalvatronConfig(example, "docs/hybrid.md", {.num_devices = 8});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->layers, (std::vector<plan::LayerStrategy>{
                           {1, 4, plan::Zero::kNone, false}, {1, 4, plan::Zero::kParameters, true},
                           {2, 2, plan::Zero::kNone, false}, {2, 2, plan::Zero::kNone, false}}));
  EXPECT_EQ(*WriteGalvatronConfig(*p), example);
}

}  // namespace
}  // namespace kiwi::io
