#pragma once
// Hardware descriptions: one accelerator type and how devices are linked. Presets carry published
// vendor figures (peak FLOP/s per dtype, memory size and bandwidth, link bandwidths); cluster JSON
// files (io/cluster_json.h) describe others.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiwi/ir/dtype.h"
#include "kiwi/ir/mesh.h"
#include "kiwi/util/result.h"

namespace kiwi::cost {

struct DeviceSpec {
  std::string name;                    // "V100-SXM2-16GB"
  std::array<double, 7> peak_flops{};  // dense FLOP/s indexed by ir::DType (0 = unsupported)
  int64_t memory_bytes = 0;            // device memory capacity
  double memory_bandwidth = 0.0;       // bytes/s
  // Host time to issue one kernel (the framework's eager dispatch + the CUDA launch). The host runs
  // ahead of the device, so a pass of k kernels takes at least k times this (0: never launch-bound).
  double kernel_launch_seconds = 0.0;
  // Memory a training process holds beyond its tensors, per device: the CUDA context, cuBLAS/cuDNN
  // workspaces, NCCL's communication buffers, the caching allocator's fragmentation. The layer-level
  // simulator counts it in every stage's peak (0: none).
  int64_t reserved_bytes = 0;
  // Streaming multiprocessors: a GEMM's output tiles run in waves of this many, and a last wave that
  // fills only part of them wastes the rest (wave quantization). 0: no wave model.
  int multiprocessors = 0;
  // The device's way to its host (ZeRO-Offload, plan::LayerStrategy::offload): the device-host link's
  // bytes/s per direction (PCIe), and the device's share of its host's memory bandwidth, which a CPU
  // optimizer step streams its states through. 0: unknown (no offloading).
  double host_link_bandwidth = 0.0;
  double host_memory_bandwidth = 0.0;

  bool HasHost() const { return host_link_bandwidth > 0.0 && host_memory_bandwidth > 0.0; }
  double PeakFlops(ir::DType dtype) const { return peak_flops[static_cast<size_t>(dtype)]; }
  void SetPeakFlops(ir::DType dtype, double flops) { peak_flops[static_cast<size_t>(dtype)] = flops; }
};

struct Link {
  std::string name;        // "nvlink2", "pcie3", "ib-100g"
  double bandwidth = 0.0;  // bytes/s per device, one direction
  double latency = 0.0;    // seconds
};

struct Cluster {
  std::string name;
  DeviceSpec device;
  int num_nodes = 1;
  int devices_per_node = 1;
  Link intra_node;  // between devices of one node
  Link inter_node;  // between nodes: one network adapter (NIC) of a node
  // Network adapters per node ("rails": DGX A100/H100 have one per GPU). Rings crossing a node's
  // boundary at once share its adapters: each gets inter_node.bandwidth * min(1, adapters / rings), so
  // a single flat ring is limited by one adapter, however many the node has.
  int adapters_per_node = 1;

  int NumDevices() const { return num_nodes * devices_per_node; }

  // Lays a logical mesh over the cluster: axes are filled from the innermost (last) axis outwards
  // with devices of one node, so the inner axes use intra-node links and an axis that spans nodes
  // uses the inter-node link. Fails if the mesh needs more devices than the cluster has, or if an
  // axis would straddle a node boundary without tiling it.
  Result<ir::DeviceMesh> MakeMesh(const std::vector<int>& shape) const;
  // The 1-D mesh over all devices.
  ir::DeviceMesh FlatMesh() const;
};

// Presets named in CONTRACT.md: v100-nvlink-8, rtx-titan-pcie-8, a100-nvlink-ib-16,
// a100-nvlink-ib-64, h100-nvlink-8; and systems sold as nodes, with the node count as a suffix:
// dgx-a100-80gb[:N], dgx-h100[:N] (N nodes of 8 GPUs, 1 without a suffix).
Result<Cluster> ClusterPreset(const std::string& name);
std::vector<std::string> ClusterPresetNames();

}  // namespace kiwi::cost
