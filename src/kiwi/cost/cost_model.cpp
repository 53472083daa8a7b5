// Compute time (measured, else roofline), collectives and overlap (cost_model.h).
#include "kiwi/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <tuple>
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
    // FlashAttention-2 (Dao 2023, arXiv 2307.08691): 50-73% of an A100's peak forward and backward at
    // head dims 64-128; its middle.
    {OpKind::kAttention, 0.6},
};

// The output tile of a tensor-core GEMM: 128 x 128, the tile cuBLAS and CUTLASS use for large fp16/bf16
// GEMMs on Volta to Hopper (CUTLASS's default threadblock shape; NVIDIA's "Matrix Multiplication
// Background" guide discusses wave quantization with it).
constexpr int64_t kGemmTile = 128;

// A 16-bit GEMM off the tensor cores' alignment (kTensorCoreAlignment, profile.h) runs in cuBLAS's
// slower fallback kernels. Measured on an H200 with PyTorch 2.11
// (docs/fidelity.md, "One GPU"): the LM-head GEMMs of a 50,257-word vocabulary, forward and both
// gradients, ran at 95-147 TFLOP/s, median 139 = 0.14 of the 989 TFLOP/s bf16 peak, where the model's
// aligned GEMMs ran at 0.6-0.75 of it.
constexpr double kMisalignedTensorCoreEfficiency = 0.14;

// Memory traffic of an optimizer step over the bytes of reading its inputs once (the graph's
// bytes_accessed: parameters, gradients, states). PyTorch's Adam (single-tensor and foreach,
// torch/optim/adam.py) runs lerp_ (3 element passes), mul_ (2), addcmul_ (3), sqrt (2), div (2), add_ (2),
// addcdiv_ (4): 18 passes over the 4 tensors it reads, 4.5x; SGD's add_ reads 2 tensors and writes 1,
// 1.5x. On this project's CPU, 18 passes at the measured copy bandwidth came within 5% of
// torch.optim.Adam's step on 4.2M parameters (docs/fidelity.md, closed loop). A fused Adam (PyTorch's
// fused=True kernels, Apex's FusedAdam) reads the 4 tensors once and writes 3 of them: 7 passes, 1.75x.
double OptimizerTrafficFactor(std::string_view optimizer) {
  if (optimizer == "adam") return 18.0 / 4.0;
  if (optimizer == "fused_adam") return 7.0 / 4.0;
  if (optimizer == "sgd") return 3.0 / 2.0;
  return 1.0;
}

// A matmul's output as a GEMM's: leading dims flattened into rows, the last dim the columns.
std::pair<double, double> MatmulRowsCols(const ir::Shape& shape) {
  double rows = 1.0;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= static_cast<double>(shape[i]);
  return {rows, static_cast<double>(shape.back())};
}

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
    : device_(std::move(device)), options_(std::move(options)), profile_(std::move(profile)) {
  const DeviceProfile& measured = profile_.device;
  // A measured launch time replaces the preset's (a GPU's host issuing ahead of the device); a per-op
  // time given for whatever runs the plan (op_time: kiwi.torch's runner issues from Python) replaces that.
  if (measured.overhead == OverheadKind::kLaunchBound) {
    if (measured.op_seconds) device_.kernel_launch_seconds = *measured.op_seconds;
    else if (measured.kernel_seconds) device_.kernel_launch_seconds = *measured.kernel_seconds;
  }
}

double CostModel::SampleOverhead() const {
  const DeviceProfile& measured = profile_.device;
  if (measured.kernel_seconds && measured.overhead == OverheadKind::kAdditive) return *measured.kernel_seconds;
  return options_.kernel_overhead;
}

double CostModel::KernelOverhead() const {
  const DeviceProfile& measured = profile_.device;
  if (measured.step_op_seconds && measured.overhead == OverheadKind::kAdditive) return *measured.step_op_seconds;
  return SampleOverhead();
}

bool CostModel::PaysOpOverhead(const ir::Node& node) const {
  if (IsNotComputed(node.kind) || MeasuredByName(node)) return false;
  return node.flops > 0.0 || node.bytes_accessed > 0;
}

double CostModel::OverheadIn(const ir::Node& node) const { return PaysOpOverhead(node) ? KernelOverhead() : 0.0; }

std::optional<double> CostModel::MeasuredByName(const ir::Node& node) const {
  if (!options_.use_measured_costs) return std::nullopt;
  if (std::optional<double> seconds = profile_.Find(node.name)) return seconds;
  return node.measured_cost;
}

std::optional<GemmShape> CostModel::GemmShapeOf(const ir::Node& node, double work_fraction) {
  const ir::Shape& shape = node.output.shape;
  if (node.flops <= 0.0 || shape.size() < 2) return std::nullopt;
  double rows = 1.0, cols = 1.0;
  if (node.kind == OpKind::kMatmul || node.kind == OpKind::kBatchMatmul) {
    std::tie(rows, cols) = MatmulRowsCols(shape);
  } else if (node.kind == OpKind::kConv) {  // NCHW output: rows = N x H x W, cols = C
    rows = static_cast<double>(shape[0]);
    for (size_t i = 2; i < shape.size(); ++i) rows *= static_cast<double>(shape[i]);
    cols = static_cast<double>(shape[1]);
  } else {
    return std::nullopt;
  }
  if (rows <= 0.0 || cols <= 0.0) return std::nullopt;
  const double depth = node.flops / (2.0 * rows * cols);
  // A split op runs a part of the rows (the batch, the usual split) on each device.
  const auto round = [](double v) { return std::max<int64_t>(1, static_cast<int64_t>(std::llround(v))); };
  return GemmShape{round(rows * work_fraction), round(cols), round(depth)};
}

double CostModel::ComputeTime(const ir::Node& node, double work_fraction) const {
  if (IsNotComputed(node.kind)) return 0.0;
  if (std::optional<double> seconds = MeasuredByName(node)) return *seconds * work_fraction;
  if (node.flops <= 0.0 && node.bytes_accessed <= 0) return 0.0;  // nothing executes, no launch
  if (std::optional<double> measured = MeasuredGemmTime(node, work_fraction)) return *measured;
  if (std::optional<double> measured = MeasuredAttentionTime(node, work_fraction)) return *measured;
  // Adam's 12 flops per element never bind next to its traffic: the step is a memory-bound pass.
  if (node.kind == OpKind::kOptimizer)
    return OptimizerStepTime(node.op, static_cast<double>(node.bytes_accessed) * work_fraction,
                             static_cast<double>(node.inputs.size()) * work_fraction);
  // A dtype the device has no units for (bf16 on V100, integers) runs at the f32 rate.
  double peak = device_.PeakFlops(node.output.dtype);
  if (peak <= 0.0) peak = device_.PeakFlops(ir::DType::kF32);
  const double efficiency = MisalignedForTensorCores(node)
                                ? kMisalignedTensorCoreEfficiency
                                : options_.compute_efficiency[static_cast<size_t>(node.kind)] * WaveUtilization(node);
  const double compute_rate = peak * efficiency;
  const double memory_rate = MemoryRate(node.op);
  // A roof with no figure (a device file without it) does not bound the time.
  const double compute = compute_rate > 0.0 ? node.flops * work_fraction / compute_rate : 0.0;
  const double memory =
      memory_rate > 0.0 ? static_cast<double>(node.bytes_accessed) * work_fraction / memory_rate : 0.0;
  return std::max(compute, memory) + KernelOverhead();  // roofline (Williams et al. 2009)
}

double CostModel::OptimizerStepTime(std::string_view optimizer, double input_bytes, double input_tensors) const {
  if (optimizer.empty() || input_bytes <= 0.0) return 0.0;
  const DeviceProfile& measured = profile_.device;
  const std::string op(optimizer);
  double seconds = MemoryBoundTime(op, input_bytes, OptimizerTrafficFactor(optimizer));
  if (auto it = measured.optimizer_tensor_seconds.find(op); it != measured.optimizer_tensor_seconds.end())
    seconds += it->second * input_tensors;
  return seconds + KernelOverhead();
}

CostModel::PassTime CostModel::VocabParallelCrossEntropyTime(int64_t logits_bytes, bool backward) const {
  if (logits_bytes <= 0) return {};
  const double counted = 2.0 * static_cast<double>(logits_bytes);  // logits read, softmax written
  const int kernels = backward ? 5 : 14;
  const double seconds = backward ? MemoryBoundTime("vocab_parallel_cross_entropy_grad", counted, 1.0)
                                  : MemoryBoundTime("vocab_parallel_cross_entropy", counted, 4.0);
  const double overhead = kernels * KernelOverhead();
  return {seconds + overhead, kernels, overhead};
}

double CostModel::HostOptimizerStepTime(std::string_view optimizer, double input_bytes) const {
  const double rate = device_.host_memory_bandwidth * options_.memory_efficiency;
  if (optimizer.empty() || input_bytes <= 0.0 || rate <= 0.0) return 0.0;
  const bool adam = optimizer == "adam" || optimizer == "fused_adam";
  return input_bytes * OptimizerTrafficFactor(adam ? "fused_adam" : optimizer) / rate;
}

double CostModel::HostTransferTime(double bytes) const {
  return bytes > 0.0 && device_.host_link_bandwidth > 0.0 ? bytes / device_.host_link_bandwidth : 0.0;
}

double CostModel::MemoryBoundTime(const std::string& op, double counted_bytes, double traffic) const {
  // A measured rate already includes the op's traffic; the profile's copy or the datasheet's bandwidth does not.
  if (profile_.device.op_bandwidth.count(op) == 0) counted_bytes *= traffic;
  const double rate = MemoryRate(op);
  return rate > 0.0 ? counted_bytes / rate : 0.0;
}

double CostModel::MemoryRate(const std::string& op) const {
  const DeviceProfile& measured = profile_.device;
  if (auto it = measured.op_bandwidth.find(op); it != measured.op_bandwidth.end()) return it->second;
  if (measured.memory_bandwidth) return *measured.memory_bandwidth;
  return device_.memory_bandwidth * options_.memory_efficiency;
}

std::optional<double> CostModel::MeasuredGemmTime(const ir::Node& node, double work_fraction) const {
  const std::vector<GemmSample>& table = node.kind == OpKind::kConv ? profile_.device.conv : profile_.device.gemm;
  if (table.empty()) return std::nullopt;
  const std::optional<GemmShape> shape = GemmShapeOf(node, work_fraction);
  if (!shape) return std::nullopt;
  if (node.kind == OpKind::kConv && node.op.ends_with(kConvBothGradients)) {
    // Two kernels in one call, half the flops each: the input's gradient (the output's shape: rows =
    // N x H x W, cols = C_in, depth = C_out x kernel area) and the weight's (C_out x area rows, C_in
    // cols, N x H x W deep, as GemmShapeOf reads [C_out, C_in, kh, kw]), each at its own measured rate.
    const std::string prefix = node.op.substr(0, node.op.size() - kConvBothGradients.size());
    const double half = node.flops * work_fraction / 2.0;
    const int64_t depth = std::max<int64_t>(1, std::llround(shape->k / 2.0));
    const GemmShape weight = prefix == kDepthwiseConv ? GemmShape{shape->n * depth, 1, shape->m}
                                                      : GemmShape{depth, shape->n, shape->m};
    const std::optional<double> input_rate = InterpolatedGemmRate(table, prefix + "_grad_x", shape->m, shape->n,
                                                                  depth, node.output.dtype, SampleOverhead());
    const std::optional<double> weight_rate = InterpolatedGemmRate(table, prefix + "_grad_w", weight.m, weight.n,
                                                                   weight.k, node.output.dtype, SampleOverhead());
    if (!input_rate || !weight_rate || *input_rate <= 0.0 || *weight_rate <= 0.0) return std::nullopt;
    return half / *input_rate + half / *weight_rate + KernelOverhead();
  }
  const std::optional<double> rate =
      InterpolatedGemmRate(table, node.op, shape->m, shape->n, shape->k, node.output.dtype, SampleOverhead());
  if (!rate || *rate <= 0.0) return std::nullopt;
  return node.flops * work_fraction / *rate + KernelOverhead();
}

std::optional<double> CostModel::MeasuredAttentionTime(const ir::Node& node, double work_fraction) const {
  const std::vector<AttentionSample>& table = profile_.device.attention;
  const ir::Shape& shape = node.output.shape;
  if (node.kind != OpKind::kAttention || table.empty() || shape.size() < 2 || node.flops <= 0.0) return std::nullopt;
  const int64_t seq = shape[shape.size() - 2], head_dim = shape.back();
  if (seq <= 0 || head_dim <= 0) return std::nullopt;
  const double rows = static_cast<double>(node.output.NumElements()) / static_cast<double>(seq * head_dim) * work_fraction;
  const int64_t batch_heads = std::max<int64_t>(1, std::llround(rows));
  const bool backward = node.op != "attention" && !node.op.empty();  // attention_grad_{q,k,v}
  const std::optional<double> rate =
      InterpolatedAttentionRate(table, backward, batch_heads, seq, head_dim, node.attrs.causal,
                                node.attrs.dropout_p > 0.0, node.output.dtype, SampleOverhead());
  if (!rate || *rate <= 0.0) return std::nullopt;
  return node.flops * work_fraction / *rate + KernelOverhead();
}

// tiles = ceil(rows / 128) x ceil(cols / 128) over the output (leading dims flattened into rows);
// waves = ceil(tiles / SMs); utilization = tiles / (waves x SMs).
double CostModel::WaveUtilization(const ir::Node& node) const {
  const int64_t sms = device_.multiprocessors;
  const ir::Shape& shape = node.output.shape;
  if (sms <= 0 || (node.kind != OpKind::kMatmul && node.kind != OpKind::kBatchMatmul) || shape.size() < 2) return 1.0;
  const auto [rows, cols] = MatmulRowsCols(shape);
  const auto tiles_along = [](double extent) { return static_cast<int64_t>(std::ceil(extent / kGemmTile)); };
  const int64_t tiles = tiles_along(rows) * tiles_along(cols);
  if (tiles <= 0) return 1.0;
  const int64_t waves = (tiles + sms - 1) / sms;
  return static_cast<double>(tiles) / static_cast<double>(waves * sms);
}

// The output's last two dims and the contraction depth are the GEMM's leading dimensions, whichever
// operand is transposed (the flattened leading rows of a matmul's output never are).
bool CostModel::MisalignedForTensorCores(const ir::Node& node) const {
  const ir::DType dtype = node.output.dtype;
  if (device_.multiprocessors <= 0 || (dtype != ir::DType::kF16 && dtype != ir::DType::kBF16)) return false;
  if (device_.PeakFlops(dtype) <= device_.PeakFlops(ir::DType::kF32)) return false;  // no tensor cores for it
  if (node.kind != OpKind::kMatmul && node.kind != OpKind::kBatchMatmul) return false;
  const std::optional<GemmShape> gemm = GemmShapeOf(node);  // nullopt below 2 output dims
  if (!gemm) return false;
  const ir::Shape& shape = node.output.shape;
  const auto misaligned = [](int64_t extent) { return extent % kTensorCoreAlignment != 0; };
  return misaligned(shape[shape.size() - 1]) || misaligned(shape[shape.size() - 2]) || misaligned(gemm->k);
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
  const int group = mesh.GroupSize(axes);
  if (group > 1 && !profile_.device.collectives.empty()) {
    if (std::optional<double> measured =
            InterpolatedCollectiveSeconds(profile_.device.collectives, c, group, bytes))
      return *measured;
  }
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
