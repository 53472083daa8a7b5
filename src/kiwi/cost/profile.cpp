// Interpolation in measured device profiles (profile.h).
#include "kiwi/cost/profile.h"

#include <algorithm>
#include <cmath>

namespace kiwi::cost {
namespace {

// Rates of the nearest samples are averaged: 4 neighbours cover the corners a shape sits between
// along the axis it differs most on without pulling in far-away shapes.
constexpr size_t kNeighbours = 4;

double Log2(int64_t v) { return std::log2(static_cast<double>(std::max<int64_t>(v, 1))); }

// The backward variant an op name ends with ("batch_matmul_grad_a" -> "_grad_a"), empty for a forward op.
std::string_view GradSuffix(std::string_view op) {
  const size_t at = op.rfind("_grad_");
  return at == std::string_view::npos ? std::string_view() : op.substr(at);
}

// Which samples stand for `op`: its own, else those of the same backward variant, else forward ones.
bool SameVariant(const GemmSample& s, std::string_view op) { return GradSuffix(s.op) == GradSuffix(op); }

// Whether a GEMM meets the tensor cores' alignment (leading dimensions in multiples of 8 elements, as
// CostModel::MisalignedForTensorCores reads an op): the output's columns and, but for a weight's
// gradient (whose depth is the tokens), the depth.
bool TensorCoreAligned(std::string_view op, int64_t n, int64_t k) {
  return n % kTensorCoreAlignment == 0 && (GradSuffix(op) == "_grad_b" || k % kTensorCoreAlignment == 0);
}

// A sample's distance (squared, in log2 space) from the query and its rate.
struct Near {
  double distance2;
  double rate;
};

// The rate of a measured point, else Shepard's inverse-distance weighting (power 2) of the nearest
// kNeighbours; nullopt without points.
std::optional<double> InverseDistanceRate(std::vector<Near> near) {
  if (near.empty()) return std::nullopt;
  std::sort(near.begin(), near.end(), [](const Near& a, const Near& b) { return a.distance2 < b.distance2; });
  if (near.front().distance2 < 1e-12) return near.front().rate;  // a measured shape
  double weights = 0.0, weighted = 0.0;
  for (size_t i = 0; i < std::min(kNeighbours, near.size()); ++i) {
    const double w = 1.0 / near[i].distance2;
    weights += w;
    weighted += w * near[i].rate;
  }
  return weighted / weights;
}

// The kernel's own cost is charged apart (CostModel adds it per op); at least a tenth of the sample
// stays compute so a sample at the overhead's size does not give an infinite rate.
double ComputeSeconds(double seconds, double kernel_seconds) {
  return std::max(seconds - kernel_seconds, 0.1 * seconds);
}

}  // namespace

double AttentionSample::Flops() const {
  const double work = static_cast<double>(batch_heads) * static_cast<double>(seq) * static_cast<double>(seq) *
                      static_cast<double>(head_dim);
  return (causal ? 0.5 : 1.0) * (backward() ? 10.0 : 4.0) * work;
}

std::optional<double> InterpolatedAttentionRate(const std::vector<AttentionSample>& samples, bool backward,
                                                int64_t batch_heads, int64_t seq, int64_t head_dim, bool causal,
                                                bool dropout, ir::DType dtype, double kernel_seconds) {
  const auto usable = [&](const AttentionSample& s) {
    return s.backward() == backward && s.dtype == dtype && s.seconds > 0.0;
  };
  // Causal masking and dropout change the kernel's rate (blocks skipped, a random mask drawn): samples
  // like the query where the profile has them.
  const auto has = [&](auto&& pred) { return std::any_of(samples.begin(), samples.end(), [&](const AttentionSample& s) {
    return usable(s) && pred(s);
  }); };
  const bool by_causal = has([&](const AttentionSample& s) { return s.causal == causal; });
  const bool by_dropout = has([&](const AttentionSample& s) {
    return (s.dropout > 0.0) == dropout && (!by_causal || s.causal == causal);
  });
  std::vector<Near> near;
  for (const AttentionSample& s : samples) {
    if (!usable(s) || (by_causal && s.causal != causal) || (by_dropout && (s.dropout > 0.0) != dropout)) continue;
    const double db = Log2(batch_heads) - Log2(s.batch_heads), ds = Log2(seq) - Log2(s.seq),
                 dd = Log2(head_dim) - Log2(s.head_dim);
    near.push_back({db * db + ds * ds + dd * dd, s.Flops() / ComputeSeconds(s.seconds, kernel_seconds)});
  }
  return InverseDistanceRate(std::move(near));
}

std::optional<double> InterpolatedGemmRate(const std::vector<GemmSample>& samples, const std::string& op, int64_t m,
                                           int64_t n, int64_t k, ir::DType dtype, double kernel_seconds) {
  const bool exact = std::any_of(samples.begin(), samples.end(),
                                 [&](const GemmSample& s) { return s.op == op && s.dtype == dtype; });
  const bool variant = std::any_of(samples.begin(), samples.end(),
                                   [&](const GemmSample& s) { return SameVariant(s, op) && s.dtype == dtype; });
  // A profile with both aligned and misaligned shapes (a GPU's, 16-bit) interpolates within the class.
  const bool aligned = TensorCoreAligned(op, n, k);
  const auto of_class = [&](bool cls) {
    return std::any_of(samples.begin(), samples.end(), [&](const GemmSample& s) {
      return s.dtype == dtype && TensorCoreAligned(s.op, s.n, s.k) == cls;
    });
  };
  const bool by_class = of_class(true) && of_class(false);
  std::vector<Near> near;
  for (const GemmSample& s : samples) {
    if (s.dtype != dtype || s.seconds <= 0.0) continue;
    if (by_class && TensorCoreAligned(s.op, s.n, s.k) != aligned) continue;
    if (exact ? s.op != op : variant ? !SameVariant(s, op) : !GradSuffix(s.op).empty()) continue;
    const double dm = Log2(m) - Log2(s.m), dn = Log2(n) - Log2(s.n), dk = Log2(k) - Log2(s.k);
    near.push_back({dm * dm + dn * dn + dk * dk, s.Flops() / ComputeSeconds(s.seconds, kernel_seconds)});
  }
  return InverseDistanceRate(std::move(near));
}

std::vector<double> NonDecreasingFit(const std::vector<double>& values) {
  // Pool adjacent violators: blocks of (mean, count), merged while a block's mean exceeds the next's.
  std::vector<std::pair<double, int>> blocks;
  for (double v : values) {
    blocks.push_back({v, 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].first > blocks.back().first) {
      const auto [mean, count] = blocks.back();
      blocks.pop_back();
      auto& [prev_mean, prev_count] = blocks.back();
      prev_mean = (prev_mean * prev_count + mean * count) / (prev_count + count);
      prev_count += count;
    }
  }
  std::vector<double> fit;
  for (const auto& [mean, count] : blocks) fit.insert(fit.end(), static_cast<size_t>(count), mean);
  return fit;
}

std::optional<double> InterpolatedCollectiveSeconds(const std::vector<CollectiveSample>& samples, Collective op,
                                                    int devices, int64_t bytes) {
  std::vector<const CollectiveSample*> points;
  for (const CollectiveSample& s : samples)
    if (s.op == op && s.devices == devices) points.push_back(&s);
  if (points.empty()) return std::nullopt;
  std::sort(points.begin(), points.end(),
            [](const CollectiveSample* a, const CollectiveSample* b) { return a->bytes < b->bytes; });
  // A collective takes no less time on more bytes: a sample below a smaller message's time is noise
  // (gloo's small messages on a loaded machine), and the two are averaged (isotonic regression).
  std::vector<double> measured;
  for (const CollectiveSample* p : points) measured.push_back(p->seconds);
  const std::vector<double> seconds = NonDecreasingFit(measured);
  const double x = static_cast<double>(bytes);
  if (points.size() == 1 || bytes <= points.front()->bytes)
    return points.size() == 1 ? seconds.front() * std::max(1.0, x / std::max<double>(points.front()->bytes, 1.0))
                              : seconds.front();
  size_t hi = 1;
  while (hi + 1 < points.size() && points[hi]->bytes < bytes) ++hi;
  const double a_bytes = static_cast<double>(points[hi - 1]->bytes), b_bytes = static_cast<double>(points[hi]->bytes);
  const double span = b_bytes - a_bytes;
  if (span <= 0.0) return seconds[hi];
  const double slope = (seconds[hi] - seconds[hi - 1]) / span;
  // Beyond the largest size the line through the last two continues (bandwidth-bound).
  return seconds[hi - 1] + slope * (x - a_bytes);
}

}  // namespace kiwi::cost
