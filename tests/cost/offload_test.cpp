// ZeRO-Offload's terms of a layer against closed forms: an offloaded layer keeps its parameters and
// gradients on the device and its optimizer states (fp32 master weights, Adam's moments) in host
// memory; its optimizer step is the stepped parameters' gradients copied down the host link, the CPU's
// fused pass over the same states at the device's share of the host's memory bandwidth, and the
// parameters copied back.
#include <gtest/gtest.h>

#include "cost_test_util.h"
#include "kiwi/cost/layer_cost.h"

namespace kiwi::cost {
namespace {

using testing::OneNode;

Cluster WithHost() {
  Cluster c = OneNode(8);
  c.device.host_link_bandwidth = 50e9;
  c.device.host_memory_bandwidth = 80e9;
  return c;
}

LayerProfile Layer() {
  LayerProfile p;
  p.name = "layer";
  p.parameter_bytes = 1'000'000;
  p.parameter_tensors = 4;
  p.activation_bytes_per_sample = 3'000'000;
  p.boundary_bytes_per_sample = 100'000;
  p.forward_seconds_per_sample = 1e-3;
  p.backward_seconds_per_sample = 2e-3;
  return p;
}

LayerModel MixedAdam() {  // bf16 parameters and gradients, fp32 master weights + Adam's moments: 6 + 1
  LayerModel m;
  m.state_bytes_per_parameter_byte = 7.0;
  m.gradient_bytes_per_parameter_byte = 1.0;
  m.optimizer_tensors_per_parameter = 4.0;
  m.optimizer = "adam";
  return m;
}

PlacedLayer Place(const plan::LayerStrategy& s) {
  Result<StageMesh> mesh = MakeLayerMesh(WithHost(), 1, s);
  EXPECT_TRUE(mesh.ok()) << mesh.error().message;
  return {Layer(), s, *mesh, 2};
}

TEST(Offload, OptimizerStatesLeaveTheDevice) {
  const plan::LayerStrategy s{.tp = 1, .dp = 4, .zero = plan::Zero::kGradients, .offload = true};
  plan::LayerStrategy kept = s;
  kept.offload = false;
  // ZeRO-2 over 4: parameters whole, gradients and states / 4; offloaded, no states on the device.
  EXPECT_EQ(LayerMemory(Place(kept), MixedAdam()).model_states, 1'000'000 + 1'000'000 / 4 + 6'000'000 / 4);
  EXPECT_EQ(LayerMemory(Place(s), MixedAdam()).model_states, 1'000'000 + 1'000'000 / 4);
  EXPECT_EQ(LayerMemory(Place(s), MixedAdam()).activations, LayerMemory(Place(kept), MixedAdam()).activations);
}

TEST(Offload, TheStepIsACopyDownTheCpusPassAndACopyUp) {
  const Cluster cluster = WithHost();
  const CostModel cm(cluster.device);
  const plan::LayerStrategy s{.tp = 2, .dp = 4, .zero = plan::Zero::kOptimizerStates, .offload = true};
  // The rank steps 1/4 of its TP shard: 1,000,000 / 2 / 4 bytes of parameters.
  const double parameters = 1'000'000.0 / 2 / 4;
  const double host_rate = 80e9 * cm.options().memory_efficiency;
  const double cpu_step = parameters * (1 + 7.0) * (7.0 / 4.0) / host_rate;  // one fused pass (fused Adam's traffic)
  const double copies = parameters / 50e9 + parameters / 50e9;              // bf16 gradients down, parameters up
  EXPECT_NEAR(OptimizerSeconds(Place(s), MixedAdam(), cm), cpu_step + copies, 1e-15);
  EXPECT_NEAR(cm.HostOptimizerStepTime("adam", 8e6), 8e6 * 1.75 / host_rate, 1e-15);
  EXPECT_NEAR(cm.HostTransferTime(1e6), 1e6 / 50e9, 1e-18);
  // Without a host figure nothing is priced (the simulator refuses such a plan first).
  const CostModel no_host(OneNode(8).device);
  EXPECT_EQ(no_host.HostOptimizerStepTime("adam", 8e6), 0.0);
  EXPECT_EQ(no_host.HostTransferTime(1e6), 0.0);
}

}  // namespace
}  // namespace kiwi::cost
