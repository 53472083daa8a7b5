// Graphs captured from PyTorch (Operands::kStorages): the verifier checks their structure, not kiwi's
// per-kind operand shapes, and the passes that need kiwi's operators refuse them with one clear line.
#include <gtest/gtest.h>

#include "ir_test_util.h"
#include "kiwi/ir/annotate.h"
#include "kiwi/ir/backward.h"
#include "kiwi/ir/layers.h"
#include "kiwi/ir/verify.h"

namespace kiwi::ir {
namespace {

using testing::AddInput;
using testing::AddOp;
using testing::AddParam;
using testing::ExpectBadInput;

// aten.mm(x.view(16, 8), w.t()): the view and the transpose are folded into the storages of x [2, 8, 8]
// and w [4, 8], so the matmul's operands do not have the shapes kiwi's matmul rule asks for.
Graph CapturedMatmul(Operands operands) {
  Graph g("captured");
  g.set_operands(operands);
  const NodeId x = AddInput(g, "x", {2, 8, 8});
  const NodeId w = AddParam(g, "w", {4, 8});
  const NodeId y = AddOp(g, "mm", OpKind::kMatmul, "aten.mm.default", {16, 4}, {x, w});
  g.mutable_node(y).flops = 2.0 * 16 * 8 * 4;
  g.mutable_node(y).bytes_accessed = 4 * (128 + 32 + 64);
  const NodeId labels = AddInput(g, "labels", {16}, DType::kI64);
  AddOp(g, "loss", OpKind::kLoss, "aten.nll_loss_forward.default", {}, {y, labels});
  return g;
}

TEST(StorageOperands, TheVerifierLeavesOperandShapesToTorch) {
  const Status tensors = VerifyGraph(CapturedMatmul(Operands::kTensors));
  ASSERT_FALSE(tensors.ok());  // kiwi's matmul rule: [2, 8, 8] x [4, 8] is not [16, 4]
  EXPECT_NE(tensors.error().message.find("mm"), std::string::npos) << tensors.error().message;
  const Graph storages = CapturedMatmul(Operands::kStorages);
  EXPECT_TRUE(VerifyGraph(storages).ok()) << testing::ErrorOf(VerifyGraph(storages));
}

TEST(StorageOperands, TheVerifierStillChecksTheStructure) {
  Graph dangling = CapturedMatmul(Operands::kStorages);
  dangling.mutable_node(2).inputs[1] = 42;
  ExpectBadInput(VerifyGraph(dangling, "cap.json"), {"cap.json", "mm", "inputs"});
  Graph cycle = CapturedMatmul(Operands::kStorages);
  cycle.mutable_node(2).inputs.push_back(4);  // mm reads the loss, which reads mm
  ASSERT_FALSE(VerifyGraph(cycle).ok());
  Graph empty_name = CapturedMatmul(Operands::kStorages);
  empty_name.mutable_node(2).name = "";
  ASSERT_FALSE(VerifyGraph(empty_name).ok());
}

TEST(StorageOperands, AnnotationKeepsTheCapturedFlopsAndBytes) {
  Graph g = CapturedMatmul(Operands::kStorages);
  AnnotateFlopsAndBytes(g);
  EXPECT_EQ(g.node(2).flops, 2.0 * 16 * 8 * 4);
  EXPECT_EQ(g.node(2).bytes_accessed, 4 * (128 + 32 + 64));
  EXPECT_EQ(g.node(4).flops, 0.0);  // kiwi's cross-entropy rule would have given the loss flops
  EXPECT_EQ(g.node(4).bytes_accessed, 0);
}

TEST(StorageOperands, PassesThatNeedKiwisOperatorsRefuseThem) {
  const Graph g = CapturedMatmul(Operands::kStorages);
  ExpectBadInput(BuildTrainingGraph(g, {}), {"captured", "backward graph builder", "storages"});
  ExpectBadInput(BuildLayerView(g), {"captured", "layer view", "storages"});
  EXPECT_TRUE(RequireTensorOperands(CapturedMatmul(Operands::kTensors), "x").ok());
}

}  // namespace
}  // namespace kiwi::ir
