#pragma once
// The one place that answers "how long" and "how many bytes" (DESIGN.md). Solvers and the simulator
// ask it; nothing else invents costs.
//
//   CostModel cm(cluster.device);
//   double t = cm.ComputeTime(graph.node(i));                  // one device runs the whole op
//   double c = cm.CollectiveTime(Collective::kAllReduce, bytes, mesh, ir::AxisBit(1));
//   double r = cm.ReshardTime(type, from, to, mesh);
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/collectives.h"
#include "kiwi/cost/profile.h"
#include "kiwi/ir/graph.h"
#include "kiwi/ir/sharding.h"

namespace kiwi::cost {

// The op-name suffix of a convolution's backward that computes the input's and the weight's gradients
// in one call (aten.convolution_backward with both in its output mask, as kiwi.torch's capture names
// it: "conv2d_grad_xw", "conv2d_depthwise_grad_xw"): two kernels, priced as the profile's <prefix>_grad_x
// and <prefix>_grad_w.
inline constexpr std::string_view kConvBothGradients = "_grad_xw";
// A convolution of one input channel per group, which devices run at rates of their own; its weight's
// gradient is [C, 1, kh, kw] (CostModel::GemmShapeOf: C x kernel area rows, 1 column).
inline constexpr std::string_view kDepthwiseConv = "conv2d_depthwise";

// A GEMM-like op as the kernel sees it: [m x k] by [k x n] (a convolution's implicit GEMM).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
};

struct CostModelOptions {
  // Fraction of peak FLOP/s each kind reaches (roofline compute roof), indexed by ir::OpKind.
  std::array<double, ir::kNumOpKinds> compute_efficiency = DefaultComputeEfficiency();
  double memory_efficiency = 0.8;      // fraction of peak memory bandwidth reached
  double kernel_overhead = 0.0;        // seconds added per executed op with flops or bytes (launch cost)
  double overlap_slowdown = 1.3;       // Galvatron-BMW §V: compute and communication overlapped run 1.3x slower
  bool use_measured_costs = true;      // prefer Node::measured_cost / the profile over the roofline

  static std::array<double, ir::kNumOpKinds> DefaultComputeEfficiency();
};

class CostModel {
 public:
  explicit CostModel(DeviceSpec device, CostModelOptions options = {}, Profile profile = {});

  const DeviceSpec& device() const { return device_; }
  const CostModelOptions& options() const { return options_; }

  // Time for one device to run `work_fraction` of the op (1/k when the op is split k ways).
  // Measured first (profile by name, then Node::measured_cost, both scaled by work_fraction); then a
  // GEMM-like op with samples in the profile's device tables: flops / interpolated rate + overhead;
  // else roofline: max(flops / (peak(dtype) * eff(kind)), bytes / bandwidth) + overhead, where the
  // bandwidth is the profile's measured one, else mem_bw * mem_eff, and the overhead KernelOverhead()
  // (a CPU profile's calibrated per-op time or kernel time, else options.kernel_overhead). An
  // optimizer node: OptimizerStepTime of its bytes and inputs.
  // Persistent nodes (parameters, optimizer state) and inputs cost 0: they are not computed.
  double ComputeTime(const ir::Node& node, double work_fraction = 1.0) const;

  // The profile's measured times for the op and group size when it has them, else the algorithms of
  // collectives.h on the mesh's links.
  double CollectiveTime(Collective c, int64_t bytes, const ir::DeviceMesh& mesh, ir::AxisMask axes) const;

  // An op split over its output's sharded axes and its reduce axes: each device does 1 / |group| of
  // the work (what ComputeTime's work_fraction takes).
  static double WorkFraction(const ir::ShardingSpec& output, ir::AxisMask reduce_axes, const ir::DeviceMesh& mesh);

  // Completing an op's partial sums (plan.h OpSharding): a reduce-scatter over the reduce axes the
  // output is sharded on, applied to the partial per-device buffer (the output shard without those
  // axes), then an all-reduce over the remaining reduce axes on the final output shard.
  double PartialSumTime(const ir::TensorType& type, const ir::ShardingSpec& output, ir::AxisMask reduce_axes,
                        const ir::DeviceMesh& mesh) const;

  // One execution of `node` split as `output` with partial sums over `reduce_axes`, per device: its
  // share of the work (ComputeTime at WorkFraction) and the collectives completing its partial sums.
  // What the operator-level simulator charges and the sharding solvers price, so replays agree exactly.
  struct ShardedOpTime {
    double compute = 0.0;
    double communication = 0.0;
  };
  ShardedOpTime ShardedTime(const ir::Node& node, const ir::ShardingSpec& output, ir::AxisMask reduce_axes,
                            const ir::DeviceMesh& mesh) const;

  // Converting a tensor from one layout to another: an all-to-all per mesh axis that moves between
  // dims, an all-gather per axis dropped, free local slicing per axis added.
  double ReshardTime(const ir::TensorType& type, const ir::ShardingSpec& from, const ir::ShardingSpec& to,
                     const ir::DeviceMesh& mesh) const;

  // Wall time of compute and communication run concurrently, both slowed by the factor k while they
  // overlap (Galvatron-BMW §V): the shorter one finishes at k*min, the longer then runs alone, so
  // time = max + (k - 1) * min, never more than the serial sum.
  double OverlappedTime(double compute_seconds, double comm_seconds) const;

  // Fraction of the device's multiprocessors a GEMM-like op keeps busy over its waves of output tiles
  // (1 without DeviceSpec::multiprocessors, and for other kinds).
  double WaveUtilization(const ir::Node& node) const;

  // Whether a 16-bit matmul misses the tensor cores' alignment (a leading dimension not a multiple of 8
  // elements) on a device priced kernel by kernel (DeviceSpec::multiprocessors) with tensor cores for
  // its dtype; ComputeTime then prices it at the measured fallback rate, not the wave-quantized one.
  bool MisalignedForTensorCores(const ir::Node& node) const;

  // Whether the op runs a kernel: ComputeTime's ops with flops or bytes (or a measured time).
  bool LaunchesKernel(const ir::Node& node) const;

  // Wall time of a pass of `kernels` kernels whose device time is `device_seconds`: the host issues
  // them ahead of the device, so the pass takes the longer of the device's work and the host's
  // issuing (DeviceSpec::kernel_launch_seconds each); small models on fast devices are launch-bound.
  double LaunchBoundTime(double device_seconds, int64_t kernels) const;

  // The op's GEMM shape with its rows scaled by work_fraction; nullopt for other kinds.
  static std::optional<GemmShape> GemmShapeOf(const ir::Node& node, double work_fraction = 1.0);

  // One optimizer step ("adam", "fused_adam", "sgd"; empty: none, 0 s) reading `input_bytes` of parameters,
  // gradients and states in `input_tensors` tensors: a memory-bound pass moving the implementation's
  // traffic (PyTorch's Adam: 4.5x the bytes read once; SGD 1.5x) at the op's measured rate, else the
  // profile's or the device's bandwidth; plus the profile's time per tensor and the kernel overhead.
  double OptimizerStepTime(std::string_view optimizer, double input_bytes, double input_tensors) const;
  // The same step on the host's CPUs (ZeRO-Offload's CPU Adam, Ren et al. 2021 §5.1: one fused,
  // vectorized pass, so fused Adam's traffic for either Adam) at the device's share of the host's
  // memory bandwidth (DeviceSpec::host_memory_bandwidth) and the memory efficiency; 0 without a host.
  double HostOptimizerStepTime(std::string_view optimizer, double input_bytes) const;
  // Copying `bytes` between the device and its host's memory, one direction: bytes over the host link
  // (DeviceSpec::host_link_bandwidth, PCIe); 0 without a host link.
  double HostTransferTime(double bytes) const;

  // Seconds added to every executed op when ops run one after another (an additive profile): the
  // per-op time of eager training calibrated from the profile's reference step where the loader set
  // it (DeviceProfile::step_op_seconds), else the profile's kernel time; else options.kernel_overhead.
  double KernelOverhead() const;

  // Whether ComputeTime adds KernelOverhead() to the op: an op that computes or moves bytes and is not
  // measured by name (a measured time carries its own).
  bool PaysOpOverhead(const ir::Node& node) const;

  // The part of ComputeTime(node, f) that is per execution and does not scale with f: KernelOverhead()
  // where the op pays it (PaysOpOverhead). A pass of an op split k ways, or run on a micro-batch, still
  // pays it whole.
  double OverheadIn(const ir::Node& node) const;

  // Megatron-LM's vocabulary-parallel cross-entropy (Shoeybi et al. 2019, §3) on one device's
  // `logits_bytes` of fp32 logits [tokens, vocabulary shard], its three all-reduces apart, one pass:
  // the seconds and the kernels it launches. Its bytes are counted as the logits read and the softmax
  // written (2x logits_bytes); the forward pass moves 4x that (max, subtract, exp, sum and divide read
  // the logits 5 times and write them 3 times) in 14 kernels (the target's masks and gather among
  // them), the backward pass 1x (the saved softmax minus the target's one-hot, times the loss's
  // gradient, in place) in 5. At the profile's rate of "vocab_parallel_cross_entropy" ("..._grad"
  // backward) for the counted bytes, else the bandwidth for all the traffic; each kernel adds the
  // kernel overhead.
  struct PassTime {
    double seconds = 0.0;
    int kernels = 0;
    double overhead = 0.0;  // the part of seconds its kernels pay whatever the logits (kernels x KernelOverhead())
  };
  PassTime VocabParallelCrossEntropyTime(int64_t logits_bytes, bool backward) const;

  const Profile& profile() const { return profile_; }

  static int64_t BytesPerDevice(const ir::TensorType& type, const ir::ShardingSpec& spec,
                                const ir::DeviceMesh& mesh) {
    return ir::BytesPerDevice(type, spec, mesh);
  }

 private:
  // The op's whole time measured by its name (the profile's "ops", then Node::measured_cost) when
  // options.use_measured_costs: ComputeTime scales it, OverheadIn adds nothing to it.
  std::optional<double> MeasuredByName(const ir::Node& node) const;
  // A GEMM-like op at the profile's interpolated rate for its shape (cost/profile.h); a convolution's
  // backward that computes both gradients in one call (op suffix kConvBothGradients) as its two kernels.
  std::optional<double> MeasuredGemmTime(const ir::Node& node, double work_fraction) const;
  // The per-call time inside the profile's own GEMM and attention samples (its kernel time on an
  // additive device, timed by the same loop), stripped from them to get their rates.
  double SampleOverhead() const;
  // A fused attention op at the profile's rate for its direction and shape: the op's output is
  // [batch and heads..., seq, head_dim] (for every attention op and gradient of a self-attention),
  // its batch and heads scaled by work_fraction; nullopt without attention samples.
  std::optional<double> MeasuredAttentionTime(const ir::Node& node, double work_fraction) const;
  // Bytes/s of a memory-bound op: the profile's for its op name, else its copy bandwidth, else the
  // device's bandwidth x memory_efficiency.
  double MemoryRate(const std::string& op) const;
  // A memory-bound op of `counted_bytes`: at its measured rate (which includes its traffic), else at
  // MemoryRate for `traffic` x the counted bytes.
  double MemoryBoundTime(const std::string& op, double counted_bytes, double traffic) const;

  DeviceSpec device_;
  CostModelOptions options_;
  Profile profile_;
};

}  // namespace kiwi::cost
