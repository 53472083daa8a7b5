// The backward builder and the layer view on every model of the zoo (models/presets.h): real op
// patterns (GQA, SwiGLU, rotary, windowed attention, patch convs, cross-attention, dropout).
#include <gtest/gtest.h>

#include <numeric>

#include "kiwi/ir/backward.h"
#include "kiwi/ir/layers.h"
#include "kiwi/ir/verify.h"
#include "kiwi/models/presets.h"

namespace kiwi::ir {
namespace {

double SumFlops(const Graph& g, Pass pass) {
  double f = 0.0;
  for (const Node& n : g.nodes())
    if (n.pass == pass && n.kind != OpKind::kOptimizer) f += n.flops;
  return f;
}

TEST(ModelZoo, EveryModelDifferentiatesAndGroupsIntoLayers) {
  for (const std::string& name : models::ModelNames()) {
    SCOPED_TRACE(name);
    Result<models::ModelSpec> spec = models::LoadModel(name);
    ASSERT_TRUE(spec.ok()) << spec.error().message;
    Result<Graph> forward = models::BuildForwardGraph(*spec);
    ASSERT_TRUE(forward.ok()) << forward.error().message;
    Result<Graph> t = BuildTrainingGraph(*forward, spec->training);
    ASSERT_TRUE(t.ok()) << t.error().message;
    ASSERT_TRUE(VerifyGraph(*t).ok());
    int64_t params = 0, states = 0, param_bytes = 0;
    for (const Node& n : t->nodes()) {
      params += n.kind == OpKind::kParameter;
      states += n.kind == OpKind::kOptimizerState;
      if (n.kind == OpKind::kParameter) param_bytes += n.output.Bytes();
      if (n.is_backward() && n.kind != OpKind::kOptimizer && n.kind != OpKind::kOptimizerState) {
        EXPECT_NE(n.grad_of, kNoNode) << n.name;
      }
    }
    const int64_t per_param = (spec->training.optimizer == Optimizer::kAdam ? 2 : 0) + spec->training.master_weights;
    EXPECT_EQ(states, params * per_param);
    const Node& opt = t->node(t->size() - 1);
    EXPECT_EQ(opt.kind, OpKind::kOptimizer);
    EXPECT_EQ(static_cast<int64_t>(opt.inputs.size()), params * (2 + per_param));
    // Matmul-dominated: the backward pass costs about twice the forward (less the input gradients
    // nobody needs, plus cheap elementwise gradients and, in a mixture of experts, the scatter-adds
    // that undo its gathers).
    const double ratio = SumFlops(*t, Pass::kBackward) / SumFlops(*t, Pass::kForward);
    EXPECT_GT(ratio, 1.8);
    EXPECT_LT(ratio, 2.15);
    Result<LayerView> view = BuildLayerView(*t);
    ASSERT_TRUE(view.ok()) << view.error().message;
    int64_t layered = 0;
    for (const Layer& l : view->layers) {
      layered += l.parameter_bytes;
      EXPECT_GT(l.saved_activation_bytes, 0) << l.name;
      EXPECT_GT(l.boundary_activation_bytes, 0) << l.name;
      EXPECT_FALSE(l.backward.empty()) << l.name;
    }
    EXPECT_LE(layered, param_bytes);
    EXPECT_GT(layered, 0);
  }
}

}  // namespace
}  // namespace kiwi::ir
