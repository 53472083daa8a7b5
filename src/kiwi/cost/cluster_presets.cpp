// The clusters named in CONTRACT.md, built from published vendor figures. Every number cites the
// datasheet it comes from; figures that no datasheet gives (latencies, sharing of a NIC) are marked
// as assumptions. Conventions: FLOP/s are dense (no structured sparsity), bandwidths are bytes/s in
// one direction, "GB" of device memory is GiB (HBM/GDDR capacities are powers of two: nvidia-smi
// shows an A100-40GB as 40960 MiB).
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiwi/cost/cluster.h"

namespace kiwi::cost {
namespace {

using ir::DType;

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;
constexpr double kMicro = 1e-6;
constexpr int64_t kGiB = int64_t{1} << 30;

// NVIDIA Tesla V100 datasheet ("NVIDIA V100 Tensor Core GPU", V100 SXM2 column).
DeviceSpec V100Sxm2_16GB() {
  DeviceSpec d;
  d.name = "V100-SXM2-16GB";
  d.SetPeakFlops(DType::kF64, 7.8 * kTera);    // datasheet: double-precision 7.8 TFLOPS
  d.SetPeakFlops(DType::kF32, 15.7 * kTera);   // datasheet: single-precision 15.7 TFLOPS
  d.SetPeakFlops(DType::kF16, 125.0 * kTera);  // datasheet: tensor performance 125 TFLOPS (fp16 inputs)
  // bf16: Volta has no bf16 units, left 0 (the cost model then uses the f32 peak).
  d.memory_bytes = 16 * kGiB;                  // datasheet: 16 GB HBM2 (16 GiB)
  d.memory_bandwidth = 900.0 * kGiga;          // datasheet: 900 GB/s
  return d;
}

// NVIDIA TITAN RTX product page / datasheet ("NVIDIA TITAN RTX", Turing TU102).
DeviceSpec TitanRtx24GB() {
  DeviceSpec d;
  d.name = "TITAN-RTX-24GB";
  // Turing GPU architecture whitepaper: TU102 runs FP64 at 1/32 of the FP32 rate (16.3 / 32).
  d.SetPeakFlops(DType::kF64, 16.3 / 32.0 * kTera);
  d.SetPeakFlops(DType::kF32, 16.3 * kTera);   // TITAN RTX datasheet: 16.3 TFLOPS single precision
  d.SetPeakFlops(DType::kF16, 130.0 * kTera);  // TITAN RTX datasheet: 130 TFLOPS tensor performance
  // bf16: Turing has no bf16 units, left 0 (the cost model then uses the f32 peak).
  d.memory_bytes = 24 * kGiB;                  // TITAN RTX datasheet: 24 GB GDDR6 (12 x 2 GiB chips)
  d.memory_bandwidth = 672.0 * kGiga;          // TITAN RTX datasheet: 672 GB/s
  return d;
}

// NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM column). The Galvatron-BMW paper (§VI-E)
// does not say 40 or 80 GB; its 2020-era cluster is taken to be the 40 GB part.
DeviceSpec A100Sxm4_40GB() {
  DeviceSpec d;
  d.name = "A100-SXM4-40GB";
  d.SetPeakFlops(DType::kF64, 19.5 * kTera);   // datasheet: FP64 Tensor Core 19.5 TFLOPS (what DGEMM uses)
  d.SetPeakFlops(DType::kF32, 19.5 * kTera);   // datasheet: FP32 19.5 TFLOPS (TF32 156 is not a dtype here)
  d.SetPeakFlops(DType::kBF16, 312.0 * kTera); // datasheet: BFLOAT16 Tensor Core 312 TFLOPS (dense)
  d.SetPeakFlops(DType::kF16, 312.0 * kTera);  // datasheet: FP16 Tensor Core 312 TFLOPS (dense)
  d.memory_bytes = 40 * kGiB;                  // datasheet: 40 GB HBM2 (40 GiB)
  d.memory_bandwidth = 1555.0 * kGiga;         // datasheet: 1,555 GB/s
  return d;
}

// NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column).
DeviceSpec H100Sxm5_80GB() {
  DeviceSpec d;
  d.name = "H100-SXM5-80GB";
  d.SetPeakFlops(DType::kF64, 67.0 * kTera);   // datasheet: FP64 Tensor Core 67 TFLOPS
  d.SetPeakFlops(DType::kF32, 67.0 * kTera);   // datasheet: FP32 67 TFLOPS
  d.SetPeakFlops(DType::kBF16, 989.0 * kTera); // datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity = 989 dense
  d.SetPeakFlops(DType::kF16, 989.0 * kTera);  // datasheet: FP16 Tensor Core 1,979 TFLOPS with sparsity = 989 dense
  d.memory_bytes = 80 * kGiB;                  // datasheet: 80 GB HBM3 (80 GiB)
  d.memory_bandwidth = 3350.0 * kGiga;         // datasheet: 3.35 TB/s
  return d;
}

// NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: the DGX A100 640GB's GPU.
DeviceSpec A100Sxm4_80GB() {
  DeviceSpec d = A100Sxm4_40GB();
  d.name = "A100-SXM4-80GB";
  d.memory_bytes = 80 * kGiB;                  // datasheet: 80 GB HBM2e (80 GiB)
  d.memory_bandwidth = 2039.0 * kGiga;         // datasheet: 2,039 GB/s
  return d;
}

// V100 datasheet: NVLink 300 GB/s per GPU = 6 NVLink2 links x 25 GB/s each way = 150 GB/s per
// direction, wired as the hybrid cube-mesh of DGX-1 / GCP n1 8-GPU hosts. Latency: assumption.
Link NvLink2() { return {"nvlink2", 150.0 * kGiga, 5.0 * kMicro}; }

// A100 datasheet: NVLink 600 GB/s per GPU through NVSwitch = 300 GB/s per direction. Latency: assumption.
Link NvLink3() { return {"nvlink3", 300.0 * kGiga, 5.0 * kMicro}; }

// H100 SXM datasheet: NVLink 900 GB/s per GPU = 450 GB/s per direction. Latency: assumption.
Link NvLink4() { return {"nvlink4", 450.0 * kGiga, 5.0 * kMicro}; }

// PCI-SIG PCIe 3.0 x16: 8 GT/s x 16 lanes x 128/130 encoding = 15.75 GB/s per direction. Every GPU
// has one x16 link, and a ring sends one flow each way through it, so a ring runs at the link rate.
// Peer traffic that crosses the host bridge (PCIe switch uplinks, the CPU root complex, the socket
// interconnect) shares those links: several rings crossing it at once get less, which is not modelled
// (the topology under the bridge is not known); give a cluster JSON with a lower figure if needed.
// Latency ~10 us through the host: assumption.
Link Pcie3x16() { return {"pcie3", 15.75 * kGiga, 10.0 * kMicro}; }

// Galvatron-BMW §VI-E: "100 Gb InfiniBand network" between servers = 12.5 GB/s per node and
// direction, one NIC shared by the node's 8 GPUs. The Link holds the NIC's full rate: a single ring
// crossing nodes sends one flow through each NIC, so it runs at the NIC rate; Cluster::MakeMesh
// divides the rate among the rings of an axis that cross the NIC at once. Latency: assumption.
Link InfiniBand100G() { return {"ib-100g", 12.5 * kGiga, 10.0 * kMicro}; }

// DGX A100 user guide: 8 single-port ConnectX-6 adapters for the compute fabric, one per GPU, each
// 200 Gb/s HDR InfiniBand = 25 GB/s per direction. Latency ~5 us GPU to GPU across one switch level
// (GPUDirect RDMA): assumption.
Link InfiniBandHdr() { return {"ib-hdr-200g", 25.0 * kGiga, 5.0 * kMicro}; }

// DGX H100 user guide: 8 ConnectX-7 compute-fabric ports, one per GPU, each 400 Gb/s NDR InfiniBand
// = 50 GB/s per direction. Latency: assumption, as HDR's.
Link InfiniBandNdr() { return {"ib-ndr-400g", 50.0 * kGiga, 5.0 * kMicro}; }

Cluster SingleNode(std::string name, DeviceSpec device, int devices, Link link) {
  Cluster c;
  c.name = std::move(name);
  c.device = std::move(device);
  c.num_nodes = 1;
  c.devices_per_node = devices;
  c.intra_node = link;
  c.inter_node = link;  // unused with one node; kept equal so no axis can get a zero bandwidth
  return c;
}

Cluster A100Cluster(std::string name, int nodes) {
  Cluster c = SingleNode(std::move(name), A100Sxm4_40GB(), 8, NvLink3());
  c.num_nodes = nodes;
  c.inter_node = InfiniBand100G();
  return c;
}

// Host time per kernel of Megatron-LM (PyTorch eager) on a DGX A100: set from the fidelity file
// ../shared/fidelity/vtrain_single_node.csv (docs/fidelity.md). Its micro-batch-1 rows run 3.3-3.7 ms
// per checkpointed layer and micro-batch whatever the TP degree (1-4) and hidden size (1024 or 2048),
// far above the device's work: launch-bound. kiwi's GPT layer launches 28 forward + 44 backward
// kernels, 100 with the recomputed forward: 3.5 ms / 100 = 35 us, within the 10-40 us per op that
// PyTorch's eager dispatch is reported to cost. DGX H100: the same figure (assumption: no measurement).
constexpr double kMegatronLaunchSeconds = 35.0 * kMicro;

// What a Megatron-LM process holds on each GPU beyond its tensors: the CUDA context with PyTorch's
// kernels (~0.5-1 GiB), cuBLAS workspaces, NCCL buffers of its TP, DP and PP communicators (~1 GiB)
// and the caching allocator's fragmentation: 3 GiB. Measured on an H200 with PyTorch 2.11
// (docs/fidelity.md, "One GPU"): 751 MiB of context and libraries outside the allocator, 574 MiB per
// NCCL communicator, 0.2-3.1 GiB of fragmentation, so about 2.5 GiB before fragmentation with TP, DP
// and PP communicators. Galvatron keeps 1 GiB of context per stage plus 20% of memory for the same reasons.
constexpr int64_t kMegatronReservedBytes = 3 * kGiB;

// A DGX node's way from each GPU to host memory (ZeRO-Offload): its PCIe x16 link (PCI-SIG: Gen4 16
// GT/s, Gen5 32 GT/s per lane, 128/130 encoding: 31.5 and 63.0 GB/s per direction) and an eighth of
// its two CPUs' memory bandwidth, DDR channels x transfers/s x 8 bytes x 2 sockets (DGX A100 user
// guide: 2 AMD EPYC 7742, 8 channels of DDR4-3200 each; DGX H100 user guide: 2 Intel Xeon Platinum
// 8480C, 8 channels of DDR5-4800 each). Datasheet peaks: the cost model applies its memory efficiency.
struct DgxHost {
  double link_bandwidth = 0.0;
  double memory_bandwidth = 0.0;
};
constexpr int kDgxGpus = 8;
DgxHost DgxA100Host() { return {31.5 * kGiga, 2 * 8 * 3200e6 * 8 / kDgxGpus}; }
DgxHost DgxH100Host() { return {63.0 * kGiga, 2 * 8 * 4800e6 * 8 / kDgxGpus}; }

// A DGX system of `nodes` nodes of 8 GPUs on NVSwitch, one network adapter per GPU (rails).
// The DGX presets price GEMMs with wave quantization over the GPU's SMs (docs/fidelity.md); the
// older presets keep the flat efficiency their papers' tables were reproduced with.
Cluster Dgx(std::string name, DeviceSpec device, int multiprocessors, Link nvlink, Link adapter, DgxHost host,
            int nodes) {
  device.kernel_launch_seconds = kMegatronLaunchSeconds;
  device.host_link_bandwidth = host.link_bandwidth;
  device.host_memory_bandwidth = host.memory_bandwidth;
  device.reserved_bytes = kMegatronReservedBytes;
  device.multiprocessors = multiprocessors;
  Cluster c = SingleNode(std::move(name), std::move(device), 8, nvlink);
  c.num_nodes = nodes;
  c.inter_node = adapter;
  c.adapters_per_node = 8;
  return c;
}

struct NodePresetEntry {
  const char* name;
  Cluster (*make)(std::string name, int nodes);
};

constexpr std::array<NodePresetEntry, 2> kNodePresets = {{
    // NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs; H100 whitepaper: 132 SMs (SXM5).
    {"dgx-a100-80gb", [](std::string n, int nodes) { return Dgx(std::move(n), A100Sxm4_80GB(), 108, NvLink3(), InfiniBandHdr(), DgxA100Host(), nodes); }},
    {"dgx-h100", [](std::string n, int nodes) { return Dgx(std::move(n), H100Sxm5_80GB(), 132, NvLink4(), InfiniBandNdr(), DgxH100Host(), nodes); }},
}};
constexpr int kMaxPresetNodes = 4096;  // 32,768 GPUs: beyond the largest published training runs

struct PresetEntry {
  const char* name;
  Cluster (*make)();
};

// KIWI §4.1: GCP n1 host with 8 V100 and NVLink; Galvatron-BMW §VI-A: 8 TITAN RTX on PCIe 3.0;
// Galvatron-BMW §VI-E: 2 servers x 8 A100 with NVLink and 100 Gb InfiniBand.
constexpr std::array<PresetEntry, 5> kPresets = {{
    {"v100-nvlink-8", [] { return SingleNode("v100-nvlink-8", V100Sxm2_16GB(), 8, NvLink2()); }},
    {"rtx-titan-pcie-8", [] { return SingleNode("rtx-titan-pcie-8", TitanRtx24GB(), 8, Pcie3x16()); }},
    {"a100-nvlink-ib-16", [] { return A100Cluster("a100-nvlink-ib-16", 2); }},
    {"a100-nvlink-ib-64", [] { return A100Cluster("a100-nvlink-ib-64", 8); }},
    {"h100-nvlink-8", [] { return SingleNode("h100-nvlink-8", H100Sxm5_80GB(), 8, NvLink4()); }},
}};

}  // namespace

Result<Cluster> ClusterPreset(const std::string& name) {
  for (const PresetEntry& entry : kPresets)
    if (name == entry.name) return entry.make();
  const std::string base = name.substr(0, name.find(':'));
  for (const NodePresetEntry& entry : kNodePresets) {
    if (base != entry.name) continue;
    int nodes = 1;
    if (base.size() < name.size()) {
      const std::string count = name.substr(base.size() + 1);
      const bool digits = !count.empty() && count.size() <= 5 &&
                          count.find_first_not_of("0123456789") == std::string::npos;
      nodes = digits ? std::stoi(count) : 0;
      if (nodes < 1 || nodes > kMaxPresetNodes)
        return BadInput(fmt::format("'{}': the node count after ':' must be an integer in [1, {}]",
                                    name, kMaxPresetNodes));
    }
    return entry.make(name, nodes);
  }
  return BadInput(fmt::format("unknown cluster '{}': not a preset ({}, the dgx ones with ':NODES' for more than one "
                              "node) nor an existing cluster JSON file", name, fmt::join(ClusterPresetNames(), ", ")));
}

std::vector<std::string> ClusterPresetNames() {
  std::vector<std::string> names;
  for (const PresetEntry& entry : kPresets) names.emplace_back(entry.name);
  for (const NodePresetEntry& entry : kNodePresets) names.emplace_back(entry.name);
  return names;
}

}  // namespace kiwi::cost
