#include <gtest/gtest.h>

#include "io_test_util.h"
#include "kiwi/io/cluster_json.h"

namespace kiwi::io {
namespace {

using testing::ExpectBadInput;

TEST(ProfileJson, ReadsTheFixtureInSeconds) {
  Result<cost::Profile> p = ReadProfileFile(testing::FixturePath("profile_example.json"));
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->op_seconds.size(), 3u);
  EXPECT_DOUBLE_EQ(*p->Find("layer0.attn.qkv"), 1.5e-3);
  EXPECT_DOUBLE_EQ(*p->Find("layer0.mlp.fc1"), 2e-3);
  EXPECT_EQ(*p->Find("loss"), 0.0);
  EXPECT_FALSE(p->Find("missing").has_value());
}

TEST(ProfileJson, UnitsConvertToSeconds) {
  for (const auto& [unit, seconds] : {std::pair{"s", 3.0}, std::pair{"ms", 3e-3}, std::pair{"us", 3e-6}}) {
    const std::string text =
        std::string(R"({"kiwi_profile_version": 1, "unit": ")") + unit + R"(", "ops": {"op": 3}})";
    Result<cost::Profile> p = ParseProfileJson(text, "p.json");
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_DOUBLE_EQ(*p->Find("op"), seconds) << unit;
  }
}

TEST(ProfileJson, UnitIsRequiredAndChecked) {
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "ops": {}})", "p.json"), {"p.json: unit: missing"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "ns", "ops": {}})", "p.json"),
                 {"p.json: unit: must be \"s\", \"ms\" or \"us\" (got \"ns\")"});
}

TEST(ProfileJson, TimesMustBeNonNegativeNumbers) {
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s", "ops": {"a": -1}})", "p.json"),
                 {"p.json: ops.a: must be a non-negative finite number (got -1)"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s", "ops": {"a": "fast"}})", "p.json"),
                 {"p.json: ops.a: must be a non-negative finite number (got a string \"fast\")"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s", "ops": [1]})", "p.json"),
                 {"p.json: ops: must be a JSON object (got an array)"});
}

TEST(ProfileJson, VersionAndUnknownFields) {
  ExpectBadInput(ParseProfileJson(R"({"unit": "s", "ops": {}})", "p.json"), {"p.json: kiwi_profile_version: missing"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s", "ops": {}, "op": {}})", "p.json"),
                 {"p.json: op: unknown field (expected kiwi_profile_version, unit, ops, device, collectives)"});
}

constexpr const char* kDeviceProfile = R"({"kiwi_profile_version": 1, "unit": "us",
  "device": {"name": "cpu", "kernel_time": 2, "memory_bandwidth_gbps": 20, "overhead": "additive",
             "op_bandwidth_gbps": {"relu": 12.5, "adam": 4},
             "reference_step": {"model": "gpt", "layers": 2, "hidden": 8, "heads": 2, "seq": 4, "batch": 2,
                                "vocab": 64, "time": 900},
             "op_time": 6, "runner_op_time": 15,
             "gemm": [{"op": "matmul_grad_a", "m": 64, "n": 32, "k": 16, "dtype": "f32", "time": 10},
                      {"m": 8, "n": 8, "k": 8, "dtype": "bf16", "time": 1}],
             "conv": [{"op": "conv2d", "m": 512, "n": 16, "k": 27, "dtype": "f32", "time": 40}],
             "attention": [{"op": "attention_grad", "batch_heads": 32, "seq": 512, "head_dim": 64, "causal": true,
                            "dropout": 0.1, "dtype": "bf16", "time": 100}]},
  "collectives": [{"op": "all_reduce", "devices": 4, "bytes": 4096, "time": 300},
                  {"op": "send_recv", "devices": 2, "bytes": 64, "time": 50}]})";

TEST(ProfileJson, ReadsADeviceProfile) {
  Result<cost::Profile> p = ParseProfileJson(kDeviceProfile, "p.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->op_seconds.empty());
  const cost::DeviceProfile& d = p->device;
  EXPECT_EQ(d.name, "cpu");
  EXPECT_DOUBLE_EQ(*d.kernel_seconds, 2e-6);
  EXPECT_DOUBLE_EQ(*d.memory_bandwidth, 2e10);
  EXPECT_EQ(d.overhead, cost::OverheadKind::kAdditive);
  EXPECT_DOUBLE_EQ(d.op_bandwidth.at("relu"), 12.5e9);
  EXPECT_DOUBLE_EQ(d.op_bandwidth.at("adam"), 4e9);
  ASSERT_TRUE(d.reference_step.has_value());
  EXPECT_EQ(d.reference_step->model, "gpt");
  EXPECT_EQ(d.reference_step->layers, 2);
  EXPECT_EQ(d.reference_step->hidden, 8);
  EXPECT_EQ(d.reference_step->heads, 2);
  EXPECT_EQ(d.reference_step->seq, 4);
  EXPECT_EQ(d.reference_step->batch, 2);
  EXPECT_EQ(d.reference_step->vocab, 64);
  EXPECT_DOUBLE_EQ(d.reference_step->seconds, 9e-4);
  EXPECT_FALSE(d.step_op_seconds.has_value());  // the loader calibrates it (cli/cost_model_loader.h)
  EXPECT_DOUBLE_EQ(*d.op_seconds, 6e-6);
  EXPECT_DOUBLE_EQ(*d.runner_op_seconds, 1.5e-5);
  ASSERT_EQ(d.gemm.size(), 2u);
  EXPECT_EQ(d.gemm[0].op, "matmul_grad_a");
  EXPECT_EQ(d.gemm[0].m, 64);
  EXPECT_EQ(d.gemm[0].n, 32);
  EXPECT_EQ(d.gemm[0].k, 16);
  EXPECT_DOUBLE_EQ(d.gemm[0].seconds, 1e-5);
  EXPECT_EQ(d.gemm[1].op, "");
  EXPECT_EQ(d.gemm[1].dtype, ir::DType::kBF16);
  ASSERT_EQ(d.conv.size(), 1u);
  EXPECT_DOUBLE_EQ(d.conv[0].seconds, 4e-5);
  ASSERT_EQ(d.attention.size(), 1u);
  EXPECT_TRUE(d.attention[0].backward());
  EXPECT_EQ(d.attention[0].batch_heads, 32);
  EXPECT_EQ(d.attention[0].seq, 512);
  EXPECT_EQ(d.attention[0].head_dim, 64);
  EXPECT_TRUE(d.attention[0].causal);
  EXPECT_DOUBLE_EQ(d.attention[0].dropout, 0.1);
  EXPECT_EQ(d.attention[0].dtype, ir::DType::kBF16);
  EXPECT_DOUBLE_EQ(d.attention[0].seconds, 1e-4);
  ASSERT_EQ(d.collectives.size(), 2u);
  EXPECT_EQ(d.collectives[0].op, cost::Collective::kAllReduce);
  EXPECT_EQ(d.collectives[0].devices, 4);
  EXPECT_EQ(d.collectives[0].bytes, 4096);
  EXPECT_DOUBLE_EQ(d.collectives[0].seconds, 3e-4);
  EXPECT_EQ(d.collectives[1].op, cost::Collective::kPointToPoint);
}

TEST(ProfileJson, DeviceProfileErrorsNameTheField) {
  const auto doc = [](const std::string& device, const std::string& collectives = "[]") {
    return R"({"kiwi_profile_version": 1, "unit": "s", "device": )" + device + R"(, "collectives": )" + collectives + "}";
  };
  ExpectBadInput(ParseProfileJson(doc(R"({"gemm": [{"m": 0, "n": 1, "k": 1, "dtype": "f32", "time": 1}]})"), "p.json"),
                 {"p.json: device.gemm[0].m:"});
  ExpectBadInput(ParseProfileJson(doc(R"({"gemm": [{"m": 1, "n": 1, "k": 1, "dtype": "f8", "time": 1}]})"), "p.json"),
                 {"p.json: device.gemm[0].dtype: unknown dtype \"f8\""});
  ExpectBadInput(ParseProfileJson(doc(R"({"conv": [{"m": 1, "n": 1, "k": 1, "dtype": "f32", "time": 0}]})"), "p.json"),
                 {"p.json: device.conv[0].time: must be positive"});
  ExpectBadInput(ParseProfileJson(doc(R"({"gemm": [{"m": 1, "n": 1, "k": 1, "dtype": "f32", "time": 1, "x": 1}]})"),
                                  "p.json"),
                 {"p.json: device.gemm[0].x: unknown field"});
  const std::string attention = R"({"attention": [{"op": "attention", "batch_heads": 1, "seq": 8, "head_dim": 8, )";
  ExpectBadInput(ParseProfileJson(doc(attention + R"("dtype": "bf16", "time": 1, "causal": 1}]})"), "p.json"),
                 {"p.json: device.attention[0].causal:"});
  ExpectBadInput(ParseProfileJson(doc(attention + R"("dtype": "bf16", "time": 1, "dropout": 1}]})"), "p.json"),
                 {"p.json: device.attention[0].dropout: must be in [0, 1)"});
  ExpectBadInput(ParseProfileJson(doc(attention + R"("dtype": "bf16"}]})"), "p.json"),
                 {"p.json: device.attention[0].time"});
  const std::string step = R"({"reference_step": {"model": "gpt", "layers": 2, "hidden": 8, "heads": 2, "seq": 4, )";
  ExpectBadInput(ParseProfileJson(doc(step + R"("batch": 2, "vocab": 64, "time": 0}})"), "p.json"),
                 {"p.json: device.reference_step.time: must be positive"});
  ExpectBadInput(ParseProfileJson(doc(step + R"("batch": 0, "vocab": 64, "time": 1}})"), "p.json"),
                 {"p.json: device.reference_step.batch:"});
  ExpectBadInput(ParseProfileJson(doc(step + R"("vocab": 64, "time": 1}})"), "p.json"),
                 {"p.json: device.reference_step.batch: missing"});
  ExpectBadInput(ParseProfileJson(doc(step + R"("batch": 2, "vocab": 64, "time": 1, "dropout": 0}})"), "p.json"),
                 {"p.json: device.reference_step.dropout: unknown field"});
  ExpectBadInput(ParseProfileJson(doc(R"({"reference_step": {"model": "bert", "layers": 1, "hidden": 8, "heads": 2, )"
                                      R"("seq": 4, "batch": 2, "vocab": 64, "time": 1}})"), "p.json"),
                 {"p.json: device.reference_step.model: must be \"gpt\" (got \"bert\")"});
  ExpectBadInput(ParseProfileJson(doc(R"({"reference_step": {"model": "gpt", "layers": 65, "hidden": 8, "heads": 2, )"
                                      R"("seq": 4, "batch": 2, "vocab": 64, "time": 1}})"), "p.json"),
                 {"p.json: device.reference_step.layers:"});
  ExpectBadInput(ParseProfileJson(doc(R"({"reference_step": [1]})"), "p.json"),
                 {"p.json: device.reference_step: must be a JSON object (got an array)"});
  ExpectBadInput(
      ParseProfileJson(doc(R"({"attention": [{"op": "softmax", "batch_heads": 1, "seq": 8, "head_dim": 8}]})"), "p.json"),
      {"p.json: device.attention[0].op: must be \"attention\" or \"attention_grad\""});
  ExpectBadInput(ParseProfileJson(doc(R"({"attention": [{"op": "attention", "seq": 8, "head_dim": 8}]})"), "p.json"),
                 {"p.json: device.attention[0].batch_heads"});
  ExpectBadInput(ParseProfileJson(doc(R"({"memory_bandwidth_gbps": 0})"), "p.json"),
                 {"p.json: device.memory_bandwidth_gbps: must be positive"});
  ExpectBadInput(ParseProfileJson(doc(R"({"op_bandwidth_gbps": {"relu": -1}})"), "p.json"),
                 {"p.json: device.op_bandwidth_gbps.relu:"});
  ExpectBadInput(ParseProfileJson(doc(R"({"op_time": -1})"), "p.json"), {"p.json: device.op_time:"});
  ExpectBadInput(ParseProfileJson(doc(R"({"runner_op_time": "fast"})"), "p.json"), {"p.json: device.runner_op_time:"});
  ExpectBadInput(ParseProfileJson(doc(R"({"overhead": "sometimes"})"), "p.json"),
                 {"p.json: device.overhead: must be \"additive\" or \"launch_bound\""});
  ExpectBadInput(ParseProfileJson(doc("{}", R"([{"op": "broadcast", "devices": 2, "bytes": 1, "time": 1}])"), "p.json"),
                 {"p.json: collectives[0].op: must be all_reduce"});
  ExpectBadInput(ParseProfileJson(doc("{}", R"([{"op": "all_reduce", "devices": 1, "bytes": 1, "time": 1}])"), "p.json"),
                 {"p.json: collectives[0].devices:"});
  ExpectBadInput(ParseProfileJson(doc("{}", R"({"op": "all_reduce"})"), "p.json"), {"p.json: collectives: must be"});
  ExpectBadInput(ParseProfileJson(R"({"kiwi_profile_version": 1, "unit": "s"})", "p.json"),
                 {"p.json: ops: missing (a profile has ops, device or collectives)"});
}

}  // namespace
}  // namespace kiwi::io
