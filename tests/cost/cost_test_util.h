#pragma once
// Shared by the cost model's tests: a device and a node with round figures and a relative time check.
#include <gtest/gtest.h>

#include "kiwi/cost/cluster.h"

namespace kiwi::cost::testing {

inline void ExpectSeconds(double got, double want) { EXPECT_NEAR(got, want, 1e-9 * want) << "want " << want; }

// 1 TFLOP/s in f32, no f16/bf16 units, 100 GB/s of memory (80 GB/s at the default efficiency 0.8).
inline DeviceSpec TestDevice() {
  DeviceSpec d;
  d.name = "test";
  d.SetPeakFlops(ir::DType::kF32, 1e12);
  d.memory_bytes = int64_t{1} << 30;
  d.memory_bandwidth = 1e11;
  return d;
}

// One node of `devices` accelerators (1 PFLOP/s bf16, 80 GiB) on NVLink (100 GB/s, 3 us), and the
// inter-node link (25 GB/s, 5 us) a wider mesh would use.
inline Cluster OneNode(int devices) {
  Cluster c;
  c.name = "node";
  c.device.name = "dev";
  c.device.memory_bytes = int64_t{80} << 30;
  c.device.memory_bandwidth = 2e12;
  c.device.SetPeakFlops(ir::DType::kBF16, 1e15);
  c.num_nodes = 1;
  c.devices_per_node = devices;
  c.intra_node = {"nvlink", 1e11, 3e-6};
  c.inter_node = {"ib", 2.5e10, 5e-6};
  return c;
}

}  // namespace kiwi::cost::testing
