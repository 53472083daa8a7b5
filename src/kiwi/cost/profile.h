#pragma once
// Measurements the cost model uses in place of datasheet constants (docs/cluster-format.md, "Profile
// files"), read by io/profile_json.h and written by `kiwi profile` (python/kiwi/profile.py):
//  - per-operator times by operator name (e.g. from torch.profiler);
//  - a device profile: GEMM and convolution times over a grid of shapes, the memory bandwidth a copy
//    reaches, the time of an empty kernel, and collective times over message and group sizes.
// Lookups between measured points interpolate (profile.cpp); a kind with no samples falls back to the
// roofline and the alpha-beta collectives.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiwi/cost/collectives.h"
#include "kiwi/ir/dtype.h"

namespace kiwi::cost {

// One timed GEMM-like kernel: an [m x k] by [k x n] product (a convolution as its implicit GEMM: m =
// batch x output pixels, n = output channels, k = input channels x kernel area), in the shape
// CostModel::GemmShapeOf gives the IR op it stands for. `op`: the IR op ("matmul", "matmul_grad_a",
// "conv2d_grad_w", ...; empty: the forward op): backward kernels run other layouts at other rates.
struct GemmSample {
  std::string op;
  int64_t m = 0, n = 0, k = 0;
  ir::DType dtype = ir::DType::kF32;
  double seconds = 0.0;

  double Flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// One timed fused attention (F.scaled_dot_product_attention: FlashAttention or cuDNN's on a GPU in 16-bit):
// q, k and v of [batch_heads, seq, head_dim]; `op` "attention" (the forward) or "attention_grad" (the
// backward: one kernel writes dq, dk and dv, the IR's three attention_grad_* ops).
struct AttentionSample {
  std::string op = "attention";
  int64_t batch_heads = 1, seq = 1, head_dim = 1;
  bool causal = false;
  double dropout = 0.0;
  ir::DType dtype = ir::DType::kBF16;
  double seconds = 0.0;

  bool backward() const { return op == "attention_grad"; }
  // The FLOPs the IR gives the op (ir/annotate.cpp, FlashAttention-2's count with dv = d): forward
  // 4 b s^2 d, the three gradients together 10 b s^2 d; half of each under a causal mask.
  double Flops() const;
};

// One timed collective: `bytes` as CollectiveTime takes them (the per-device buffer) among `devices`.
struct CollectiveSample {
  Collective op = Collective::kAllReduce;
  int devices = 2;
  int64_t bytes = 0;
  double seconds = 0.0;
};

// Where the per-kernel cost goes: a CPU runs each op after the last, so its dispatch time adds to
// every op; a GPU's host issues kernels ahead of the device, so it bounds a pass from below
// (CostModel::LaunchBoundTime) instead.
enum class OverheadKind : uint8_t { kAdditive, kLaunchBound };

// A small model's eager training pass (forward and backward, no optimizer step, no dropout) as
// `kiwi profile` timed it on a CPU: kiwi's `gpt` at these sizes, run by the distributed runtime's
// model functions (python/kiwi/torch/distributed/model.py). The loader prices the same model's IR and
// calibrates the per-op time of eager training from it (CalibratedStepOpSeconds).
struct ReferenceStep {
  std::string model = "gpt";
  int layers = 1;
  int64_t hidden = 8, heads = 2, seq = 4, batch = 2, vocab = 64;
  double seconds = 0.0;
};

struct DeviceProfile {
  std::string name;                             // what measured it: "cpu (1 thread)", "NVIDIA H100 80GB HBM3"
  std::vector<GemmSample> gemm;                 // matmul / batched matmul
  std::vector<GemmSample> conv;                 // convolutions (implicit-GEMM shapes)
  std::vector<AttentionSample> attention;       // fused attention, forward and backward
  std::optional<double> memory_bandwidth;       // bytes/s a large copy reaches (read + write)
  // Bytes/s an op reaches as the IR counts its bytes (inputs + output), by IR op name ("relu",
  // "max_pool_grad", ...): ops that compute more per byte than a copy run slower than its bandwidth.
  std::map<std::string, double> op_bandwidth;
  // Seconds an optimizer step ("adam", "fused_adam", "sgd") spends per tensor it reads (each parameter, gradient and
  // state: the IR step's inputs) beyond its traffic: PyTorch's per-parameter loop of small kernels.
  std::map<std::string, double> optimizer_tensor_seconds;
  std::optional<double> kernel_seconds;         // time of an op that does (almost) nothing
  std::optional<ReferenceStep> reference_step;  // a CPU's timed training pass of a small model
  // The per-op time of an eager training step beyond the op's work, calibrated from reference_step by
  // the loader (cli::MakeCostModel); on an additive device it replaces kernel_seconds as the per-op
  // cost of every priced op, while kernel_seconds still strips the profile's own samples.
  std::optional<double> step_op_seconds;
  // "op_time": the per-op time of whatever runs the plan, given outright: on an additive device the
  // loader takes it as step_op_seconds instead of calibrating one from reference_step; on a launch-bound
  // one the cost model takes it as the host's time to issue an op, instead of kernel_seconds.
  std::optional<double> op_seconds;
  // "runner_op_time": the per-op time of kiwi.torch's runner (the step of a generic capture), calibrated
  // by `kiwi profile` on a small captured model; kiwi.torch hands it to the loader as op_time.
  std::optional<double> runner_op_seconds;
  OverheadKind overhead = OverheadKind::kAdditive;
  std::vector<CollectiveSample> collectives;

  bool empty() const {
    return gemm.empty() && conv.empty() && attention.empty() && !memory_bandwidth && op_bandwidth.empty() &&
           optimizer_tensor_seconds.empty() && !kernel_seconds && !reference_step && !op_seconds &&
           !runner_op_seconds && collectives.empty();
  }
};

// cuBLAS runs a 16-bit GEMM on its tensor-core kernels only when the matrices' leading dimensions are
// multiples of this many elements (16 bytes; NVIDIA's "Matrix Multiplication Background" guide, "Tensor
// Core Requirements"); CostModel::MisalignedForTensorCores and the profile's alignment classes use it.
inline constexpr int64_t kTensorCoreAlignment = 8;

// Achieved FLOP/s of an m x n x k GEMM of IR op `op` in `dtype` from the samples of that op (the
// forward op's when none was measured: "batch_matmul_grad_a" uses "matmul_grad_a", then "matmul") and
// dtype: a sample's rate
// excludes the per-kernel time (`kernel_seconds`), so rate + overhead reproduces it exactly; between
// samples, inverse-distance weighting of the rates over the nearest ones in log2(m, n, k) space.
// When the dtype's samples hold shapes both meeting and missing the tensor cores' alignment (columns
// and depth in multiples of 8; `kiwi profile` measures both on a GPU in 16-bit), only those of the
// query's class count. nullopt when no sample has the dtype.
std::optional<double> InterpolatedGemmRate(const std::vector<GemmSample>& samples, const std::string& op, int64_t m,
                                           int64_t n, int64_t k, ir::DType dtype, double kernel_seconds);

// Achieved FLOP/s (as AttentionSample::Flops counts them) of a fused attention's forward or backward on
// q of [batch_heads, seq, head_dim] in `dtype`, from the samples of that direction and dtype, causal
// or not and with dropout or not as asked where such samples exist; `kernel_seconds` and the
// inverse-distance weighting in log2(batch_heads, seq, head_dim) as InterpolatedGemmRate's. nullopt
// when no sample has the direction and dtype.
std::optional<double> InterpolatedAttentionRate(const std::vector<AttentionSample>& samples, bool backward,
                                                int64_t batch_heads, int64_t seq, int64_t head_dim, bool causal,
                                                bool dropout, ir::DType dtype, double kernel_seconds);

// The least-squares non-decreasing fit of `values` (isotonic regression by pool adjacent violators:
// a run that decreases is replaced by its mean).
std::vector<double> NonDecreasingFit(const std::vector<double>& values);

// Seconds of `op` on `bytes` among `devices` from the samples of that op and group size, their times
// made non-decreasing in bytes (NonDecreasingFit: a collective takes no less time on more bytes):
// piecewise linear in bytes between measured sizes, the slope of the last two beyond the largest, the
// smallest's time below it. nullopt when the op was not measured at that group size.
std::optional<double> InterpolatedCollectiveSeconds(const std::vector<CollectiveSample>& samples, Collective op,
                                                    int devices, int64_t bytes);

struct Profile {
  std::map<std::string, double> op_seconds;
  DeviceProfile device;

  std::optional<double> Find(const std::string& op_name) const {
    auto it = op_seconds.find(op_name);
    if (it == op_seconds.end()) return std::nullopt;
    return it->second;
  }
};

}  // namespace kiwi::cost
