// cost/pipeline.h's closed forms against an event simulation of the schedule they price: Megatron-LM's
// 1F1B and interleaved 1F1B (Narayanan et al. 2021 §2.2) op order per device, each op starting when its
// device is free and its input is ready (the forward of the previous virtual stage, the backward of the
// next), with no communication time. The simulation is the reference: it knows nothing of the formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "kiwi/cost/pipeline.h"

namespace kiwi::cost {
namespace {

using plan::PipelineSchedule;

struct Op {
  bool forward = true;
  int chunk = 0;  // on its device
  int microbatch = 0;
};

// Device d's ops in Megatron-LM's order: warm-up forwards, then one forward and one backward, then the
// remaining backwards. Forward k runs chunk (k mod pv) / p of micro-batch (k / pv) p + k mod p; the
// backwards take the chunks in reverse.
std::vector<Op> DeviceOrder(int p, int v, int m, int d) {
  const int total = v * m;
  const int warmup = std::min(v == 1 ? p - d - 1 : 2 * (p - d - 1) + (v - 1) * p, total);
  auto op = [&](bool forward, int k) {
    const int group = (k % (p * v)) / p;
    return Op{forward, forward ? group : v - 1 - group, (k / (p * v)) * p + k % p};
  };
  std::vector<Op> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(op(true, k));
  for (int i = 0; i < total - warmup; ++i) {
    ops.push_back(op(true, warmup + i));
    ops.push_back(op(false, i));
  }
  for (int i = total - warmup; i < total; ++i) ops.push_back(op(false, i));
  return ops;
}

// The iteration's makespan with device d's chunks taking forward[d] and backward[d] seconds each.
double Makespan(int p, int v, int m, const std::vector<double>& forward, const std::vector<double>& backward) {
  std::vector<std::vector<Op>> orders;
  for (int d = 0; d < p; ++d) orders.push_back(DeviceOrder(p, v, m, d));
  std::map<std::tuple<bool, int, int>, double> done;  // (forward, virtual stage, micro-batch) -> end
  std::vector<double> free(static_cast<size_t>(p), 0.0);
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < p; ++d) {
      const std::vector<Op>& ops = orders[static_cast<size_t>(d)];
      for (size_t& n = next[static_cast<size_t>(d)]; n < ops.size(); ++n) {
        const Op& o = ops[n];
        const int stage = o.chunk * p + d;  // virtual stage: chunk c of device d is model chunk c p + d
        const bool first = stage == 0, last = stage == p * v - 1;
        std::tuple<bool, int, int> input =
            o.forward ? std::make_tuple(true, stage - 1, o.microbatch)
                      : (last ? std::make_tuple(true, stage, o.microbatch) : std::make_tuple(false, stage + 1, o.microbatch));
        double ready = 0.0;
        if (!(o.forward && first)) {
          auto it = done.find(input);
          if (it == done.end()) break;  // waits for another device
          ready = it->second;
        }
        const double end = std::max(free[static_cast<size_t>(d)], ready) +
                           (o.forward ? forward[static_cast<size_t>(d)] : backward[static_cast<size_t>(d)]);
        done[{o.forward, stage, o.microbatch}] = end;
        free[static_cast<size_t>(d)] = end;
        progress = true;
      }
    }
  }
  for (int d = 0; d < p; ++d) EXPECT_EQ(next[static_cast<size_t>(d)], orders[static_cast<size_t>(d)].size()) << "deadlock";
  return *std::max_element(free.begin(), free.end());
}

double Formula(int p, int v, int m, const std::vector<double>& forward, const std::vector<double>& backward) {
  double slowest = 0.0, sum = 0.0;
  for (int d = 0; d < p; ++d) {
    const double c = v * (forward[static_cast<size_t>(d)] + backward[static_cast<size_t>(d)]);  // C_d: all chunks
    slowest = std::max(slowest, c);
    sum += c;
  }
  return InterleavedIterationSeconds(m, v, slowest, sum, 0.0, 0.0);
}

// Equal stages: (m - 1/v) C + p C / v is the schedule's makespan exactly, for 1F1B (v = 1, Eq. 8) and
// interleaved, whatever the backward's share.
TEST(PipelineSchedule, EqualStagesTakeTheClosedFormExactly) {
  for (int p : {2, 4, 8})
    for (int v : {1, 2, 3, 4})
      for (int m : {p, 2 * p, 4 * p})
        for (double backward : {1.0, 2.0, 3.0}) {
          const std::vector<double> f(static_cast<size_t>(p), 1.0), b(static_cast<size_t>(p), backward);
          EXPECT_NEAR(Makespan(p, v, m, f, b), Formula(p, v, m, f, b), 1e-9) << p << " " << v << " " << m << " " << backward;
        }
}

// Unequal stages: the closed form takes the slowest stage's pace for the whole steady state, never
// less than the schedule needs.
TEST(PipelineSchedule, UnequalStagesAreNeverUnderestimated) {
  uint32_t state = 12345;
  auto uniform = [&state](double lo, double hi) {  // a fixed LCG: the same stages on every run
    state = state * 1664525u + 1013904223u;
    return lo + (hi - lo) * (state >> 8) / static_cast<double>(1u << 24);
  };
  for (int trial = 0; trial < 120; ++trial) {
    const int p = 2 << (trial % 3), v = 1 + trial % 4, m = p * (1 << (trial % 2));
    std::vector<double> f, b;
    for (int d = 0; d < p; ++d) {
      f.push_back(uniform(0.5, 1.5));
      b.push_back(2.0 * f.back());
    }
    const double schedule = Makespan(p, v, m, f, b), formula = Formula(p, v, m, f, b);
    EXPECT_GE(formula, schedule * (1.0 - 1e-12)) << "trial " << trial;
    EXPECT_LE(formula, schedule * 1.25) << "trial " << trial;  // measured: at most 1.18x
  }
}

// The most activations a device holds in that order, its chunks keeping different bytes, is
// InterleavedStagePeakBytes' term.
TEST(PipelineSchedule, HeldActivationsAreInterleavedStagePeakBytes) {
  uint32_t state = 777;
  for (int trial = 0; trial < 60; ++trial) {
    const int p = 2 << (trial % 3), v = 2 + trial % 3, m = p * (1 + trial % 2);
    for (int d = 0; d < p; ++d) {
      std::vector<StageMemory> chunks;
      for (int k = 0; k < v; ++k) {
        state = state * 1664525u + 1013904223u;
        chunks.push_back({0, static_cast<int64_t>(1 + (state >> 20)), 0, 0});
      }
      int64_t held = 0, most = 0;
      for (const Op& o : DeviceOrder(p, v, m, d)) {
        held += (o.forward ? 1 : -1) * chunks[static_cast<size_t>(o.chunk)].activations;
        most = std::max(most, held);
      }
      EXPECT_EQ(InterleavedStagePeakBytes(chunks, p, m, d), most) << "trial " << trial << " device " << d;
    }
  }
}

// The most chunk-micro-batches a device holds (forwarded, not yet backwarded) in that order is
// MicrobatchesInFlight.
TEST(PipelineSchedule, HeldMicrobatchesAreMicrobatchesInFlight) {
  for (int p : {2, 4, 8})
    for (int v : {1, 2, 3, 4})
      for (int m : {p, 2 * p, 4 * p})
        for (int d = 0; d < p; ++d) {
          int held = 0, most = 0;
          for (const Op& o : DeviceOrder(p, v, m, d)) most = std::max(most, held += o.forward ? 1 : -1);
          EXPECT_EQ(most, MicrobatchesInFlight(PipelineSchedule::k1F1B, p, m, d, v)) << p << " " << v << " " << m << " " << d;
        }
}

}  // namespace
}  // namespace kiwi::cost
