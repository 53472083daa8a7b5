#include "kiwi/solve/hybrid/pipeline_solver.h"

#include <algorithm>
#include <limits>

namespace kiwi::solve::hybrid {
namespace {

constexpr double kRelativeTolerance = 1e-9;  // the DP and the estimate add the same terms in other orders

std::vector<DpStage> Stages(const PartitionProblem& p) {
  std::vector<DpStage> stages;
  int first = 0;
  for (int s = 0; s < static_cast<int>(p.partition.size()); ++s) {
    const int count = p.partition[static_cast<size_t>(s)];
    stages.push_back({first, count, InFlight(p.config, s), 1.0});
    first += count;
  }
  return stages;
}

// The stage with the most compute if every layer ran its fastest allowed strategy: the first guess
// of the slowest stage.
int LikelySlowest(const PartitionProblem& p, const std::vector<DpStage>& stages) {
  const CostTables& t = *p.tables;
  int slowest = 0;
  double most = -1.0;
  for (size_t s = 0; s < stages.size(); ++s) {
    double seconds = 0.0;
    for (int i = stages[s].first; i < stages[s].first + stages[s].count; ++i) {
      double fastest = std::numeric_limits<double>::infinity();
      for (int j = 0; j < t.num_strategies(); ++j)
        if (p.allowed.empty() || p.allowed[static_cast<size_t>(j)])
          fastest = std::min(fastest, t.Cost(t.types().type_of[static_cast<size_t>(i)], j).microbatch_seconds);
      seconds += fastest;
    }
    if (seconds > most) {
      most = seconds;
      slowest = static_cast<int>(s);
    }
  }
  return slowest;
}

// The DP with weight 1 + (m - 1) lambda_s on stage s's C_s and mu_s on its optimizer step O_s
// (lambda and mu each on the simplex: the objective is then at most Eq. 8 + max_s O_s for every
// assignment), or that itself in exact mode. Interleaved (v chunks per stage): 1/v + (m - 1/v)
// lambda_s, as cost::InterleavedIterationSeconds weighs C_s.
LayerDpResult RunWeighted(const PartitionProblem& p, std::vector<DpStage> stages, const std::vector<double>& lambda,
                          const std::vector<double>& mu, double cutoff, bool exact = false) {
  const double m = p.config.micro_batches, v = p.config.virtual_stages;
  for (size_t s = 0; s < stages.size(); ++s) {
    stages[s].weight = exact ? 1.0 : 1.0 / v + (m - 1.0 / v) * lambda[s];
    stages[s].optimizer_weight = exact ? 0.0 : mu[s];  // sum_s mu_s O_s <= max_s O_s
  }
  LayerDpProblem problem{p.tables, std::move(stages), p.budget, p.allowed, p.max_labels, cutoff};
  problem.exact = exact;
  problem.micro_batches = p.config.micro_batches;
  problem.deadline = p.deadline;
  return SolveLayerDp(problem);
}

// Search state shared by the weighted runs and the exact run.
struct Progress {
  PartitionSolution best;
  bool found = false;          // an assignment was found (it may not beat the caller's cutoff)
  bool thinned = false;
  double Cutoff(const PartitionProblem& p) const {
    return found ? std::min(p.cutoff, best.estimate.iteration_seconds) : p.cutoff;
  }
  bool Proven() const {
    return found && best.estimate.iteration_seconds <= best.lower_bound * (1.0 + kRelativeTolerance);
  }
  int last_slowest = 0;        // slowest stage of the plan the last run found
  int last_slowest_optimizer = 0;  // and the stage with its slowest optimizer step
  // Records a DP result; false when it found nothing.
  bool Record(const PartitionProblem& p, const LayerDpResult& r, double cutoff) {
    ++best.dp_runs;
    thinned = thinned || r.thinned;
    if (r.timed_out) {
      best.timed_out = true;
      return false;
    }
    if (!r.feasible) {
      // Memory does not depend on the weights, so a run finds nothing because nothing fits (then the
      // first run already did) or because every assignment is >= cutoff (V_b <= Eq. 8).
      best.cut_off = r.cut_off;
      if (r.cut_off) best.lower_bound = std::max(best.lower_bound, cutoff);
      return false;
    }
    best.lower_bound = std::max(best.lower_bound, r.objective);
    PipelineEstimate e = EstimatePipeline(*p.tables, p.config, p.partition, r.strategies);
    last_slowest = e.SlowestStage();
    last_slowest_optimizer = e.SlowestOptimizerStage();
    if (!found || e.iteration_seconds < best.estimate.iteration_seconds) {
      found = true;
      best.strategies = r.strategies;
      best.estimate = std::move(e);
    }
    return true;
  }
};

// Weighted runs (Lagrangian dual of Eq. 8's two maxima, by fictitious play): lambda (on C_s) and mu
// (on O_s) put all weight on the stage expected to be the slowest, then each spreads over the stages
// that had the largest C_s, respectively O_s, in the plans found so far. Apart, because one stage's
// slow optimizer step (offloaded to the host) would otherwise pull weight off the pipeline's
// bottleneck, and a stage without weight on O_s offloads for free. Every run bounds Eq. 8 from below;
// it stops when a plan meets the bound.
void WeightedRuns(const PartitionProblem& p, const std::vector<DpStage>& stages, Progress& g) {
  const size_t num_stages = stages.size();
  // One stage: Eq. 8 + O is m C + G + O, a sum over layers (exact). One micro-batch: sum_s (C_s + G_s)
  // + mu_s O_s, exact when mu sits on the stage with the largest O.
  const bool separable = num_stages == 1 || p.config.micro_batches == 1;
  std::vector<double> hits(num_stages, 0.0);
  hits[static_cast<size_t>(separable ? 0 : LikelySlowest(p, stages))] = 1.0;
  std::vector<double> optimizer_hits = hits;
  const int max_runs = separable ? 1 : 2 * static_cast<int>(num_stages) + 4;
  auto simplex = [](const std::vector<double>& h) {
    double total = 0.0;
    for (double x : h) total += x;
    std::vector<double> out(h.size());
    for (size_t s = 0; s < h.size(); ++s) out[s] = h[s] / total;
    return out;
  };
  for (int run = 0; run < max_runs; ++run) {
    const double cutoff = g.Cutoff(p);
    if (!g.Record(p, RunWeighted(p, stages, simplex(hits), simplex(optimizer_hits), cutoff), cutoff) || g.Proven()) return;
    hits[static_cast<size_t>(g.last_slowest)] += 1.0;
    optimizer_hits[static_cast<size_t>(g.last_slowest_optimizer)] += 1.0;
  }
}

PartitionSolution SolveOnce(const PartitionProblem& p) {
  const std::vector<DpStage> stages = Stages(p);
  Progress g;
  WeightedRuns(p, stages, g);
  const bool nothing_fits = !g.found && !g.best.cut_off;
  // The exact DP evaluates Eq. 8 itself, not its interleaved form: interleaved plans rest on the bounds.
  const bool exact_applies = p.config.virtual_stages == 1;
  if (exact_applies && !nothing_fits && !g.best.timed_out && !g.Proven() && !g.thinned && g.best.lower_bound < p.cutoff) {
    const double cutoff = g.Cutoff(p);  // the exact optimum, if it beats the plans found so far
    g.Record(p, RunWeighted(p, stages, {}, {}, cutoff, /*exact=*/true), cutoff);
  }
  PartitionSolution best = std::move(g.best);
  best.feasible = g.found && best.estimate.iteration_seconds < p.cutoff;
  best.cut_off = !best.feasible && !best.timed_out && (g.found || best.cut_off);
  // Proven: optimal on this partition, or no assignment of it beats the caller's cutoff.
  const bool unbounded = g.thinned || best.timed_out;  // a thinned or stopped DP's objective bounds nothing
  best.thinned = g.thinned;
  best.proven = !unbounded && ((g.found && best.estimate.iteration_seconds <= best.lower_bound * (1.0 + kRelativeTolerance)) ||
                               best.lower_bound >= p.cutoff);
  if (unbounded) best.lower_bound = 0.0;
  return best;
}

}  // namespace

// A cheap probe first (few labels per state: a good plan, not a proof), then the full DP with the
// probe's time as cutoff, which prunes most labels: it either finds a faster plan or proves that
// none exists.
PartitionSolution SolvePartition(const PartitionProblem& p) {
  constexpr size_t kProbeLabels = 64;
  if (p.max_labels <= kProbeLabels) return SolveOnce(p);
  PartitionProblem probe = p;
  probe.max_labels = kProbeLabels;
  PartitionSolution first = SolveOnce(probe);
  if (first.timed_out || (!first.feasible && !first.cut_off)) {  // thinning keeps feasibility: nothing fits
    first.thinned = false;
    return first;
  }
  if (!first.feasible) return SolveOnce(p);
  PartitionProblem full = p;
  full.cutoff = first.estimate.iteration_seconds;
  PartitionSolution second = SolveOnce(full);
  second.dp_runs += first.dp_runs;
  if (second.feasible) return second;
  // Nothing beats the probe's plan: it is optimal when the full run proved that.
  first.proven = second.proven;
  first.thinned = second.thinned;
  first.lower_bound = second.lower_bound;
  first.dp_runs = second.dp_runs;
  return first;
}

}  // namespace kiwi::solve::hybrid
