// Compute time (measured, else roofline), collectives and overlap (cost_model.h).
#include "kiwi/cost/cost_model.h"

#include <algorithm>
#include <utility>

namespace kiwi::cost {
namespace {

using ir::OpKind;

// Dense GEMM-like kinds reach only part of the tensor-core peak; the values are assumptions in the
// range cuBLAS/cuDNN reach at transformer and CNN sizes (about 60-80% of peak), lower for the small
// batched GEMMs of attention and for convolutions (im2col/implicit-GEMM overheads).
struct KindEfficiency {
  OpKind kind;
  double efficiency;
};
constexpr KindEfficiency kGemmLikeEfficiency[] = {
    {OpKind::kMatmul, 0.75},
    {OpKind::kBatchMatmul, 0.65},
    {OpKind::kConv, 0.6},
};

// The output tile of a tensor-core GEMM: 128 x 128, the tile cuBLAS and CUTLASS use for large fp16/bf16
// GEMMs on Volta to Hopper (CUTLASS's default threadblock shape; NVIDIA's "Matrix Multiplication
// Background" guide discusses wave quantization with it).
constexpr int64_t kGemmTile = 128;

bool IsNotComputed(OpKind kind) {
  return kind == OpKind::kInput || kind == OpKind::kParameter || kind == OpKind::kOptimizerState;
}

}  // namespace

std::array<double, ir::kNumOpKinds> CostModelOptions::DefaultComputeEfficiency() {
  // Every other kind is memory-bound (few flops per byte): efficiency 1 on the compute roof lets the
  // memory roof decide its time, as the roofline model prescribes.
  std::array<double, ir::kNumOpKinds> eff{};
  eff.fill(1.0);
  for (const KindEfficiency& k : kGemmLikeEfficiency) eff[static_cast<size_t>(k.kind)] = k.efficiency;
  return eff;
}

CostModel::CostModel(DeviceSpec device, CostModelOptions options, Profile profile)
    : device_(std::move(device)), options_(std::move(options)), profile_(std::move(profile)) {}

double CostModel::ComputeTime(const ir::Node& node, double work_fraction) const {
  if (IsNotComputed(node.kind)) return 0.0;
  if (options_.use_measured_costs) {
    if (std::optional<double> seconds = profile_.Find(node.name)) return *seconds * work_fraction;
    if (node.measured_cost) return *node.measured_cost * work_fraction;
  }
  if (node.flops <= 0.0 && node.bytes_accessed <= 0) return 0.0;  // nothing executes, no launch
  // A dtype the device has no units for (bf16 on V100, integers) runs at the f32 rate.
  double peak = device_.PeakFlops(node.output.dtype);
  if (peak <= 0.0) peak = device_.PeakFlops(ir::DType::kF32);
  const double compute_rate =
      peak * options_.compute_efficiency[static_cast<size_t>(node.kind)] * WaveUtilization(node);
  const double memory_rate = device_.memory_bandwidth * options_.memory_efficiency;
  // A roof with no figure (a device file without it) does not bound the time.
  const double compute = compute_rate > 0.0 ? node.flops * work_fraction / compute_rate : 0.0;
  const double memory =
      memory_rate > 0.0 ? static_cast<double>(node.bytes_accessed) * work_fraction / memory_rate : 0.0;
  return std::max(compute, memory) + options_.kernel_overhead;  // roofline (Williams et al. 2009)
}

// tiles = ceil(rows / 128) x ceil(cols / 128) over the output (leading dims flattened into rows);
// waves = ceil(tiles / SMs); utilization = tiles / (waves x SMs).
double CostModel::WaveUtilization(const ir::Node& node) const {
  const int64_t sms = device_.multiprocessors;
  const ir::Shape& shape = node.output.shape;
  if (sms <= 0 || (node.kind != OpKind::kMatmul && node.kind != OpKind::kBatchMatmul) || shape.size() < 2) return 1.0;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  const int64_t tiles = ((rows + kGemmTile - 1) / kGemmTile) * ((shape.back() + kGemmTile - 1) / kGemmTile);
  if (tiles <= 0) return 1.0;
  const int64_t waves = (tiles + sms - 1) / sms;
  return static_cast<double>(tiles) / static_cast<double>(waves * sms);
}

bool CostModel::LaunchesKernel(const ir::Node& node) const {
  if (IsNotComputed(node.kind)) return false;
  return node.flops > 0.0 || node.bytes_accessed > 0 || node.measured_cost.has_value() ||
         profile_.Find(node.name).has_value();
}

double CostModel::LaunchBoundTime(double device_seconds, int64_t kernels) const {
  return std::max(device_seconds, static_cast<double>(kernels) * device_.kernel_launch_seconds);
}

double CostModel::CollectiveTime(Collective c, int64_t bytes, const ir::DeviceMesh& mesh, ir::AxisMask axes) const {
  return cost::CollectiveTime(c, bytes, mesh, axes);
}

double CostModel::OverlappedTime(double compute_seconds, double comm_seconds) const {
  const double longer = std::max(compute_seconds, comm_seconds);
  const double shorter = std::min(compute_seconds, comm_seconds);
  // Galvatron-BMW §V: both slow down by k while overlapped: max + (k - 1) * min, within [max, sum].
  const double overlapped = longer + (options_.overlap_slowdown - 1.0) * shorter;
  return std::min(std::max(overlapped, longer), longer + shorter);
}

}  // namespace kiwi::cost
