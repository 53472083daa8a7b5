#include "kiwi/solve/remat/keep_set_schedule.h"

#include <algorithm>

#include "kiwi/ir/backward.h"

namespace kiwi::solve::remat {

// One execution of a keep-set schedule (see the header): at each step, recompute the missing inputs
// of order[t] (their non-resident ancestors, found depth-first, computed in ascending position),
// compute order[t], and free every tensor whose residency interval ends at t as soon as its last use
// within the step is done.
class KeepSetRun {
 public:
  KeepSetRun(KeepSetScheduler& ks, const KeepPolicy& policy, int64_t budget, std::vector<plan::Step>* steps,
             int64_t stop_after)
      : ks_(ks), p_(ks.problem_), policy_(policy), budget_(budget), steps_(steps), stop_after_(stop_after) {}
  void TraceRecomputations(std::vector<Recomputation>* out) { recomputations_ = out; }

  // Runs every step (or up to the compute with index stop_after); returns the measurements.
  KeepSetEvaluation Run();
  int32_t position() const { return position_; }
  ir::NodeId last_computed() const { return last_computed_; }

 private:
  void Step(int32_t t);
  void Visit(ir::NodeId root);
  void Compute(ir::NodeId v, int32_t t, bool recompute);
  void Release(ir::NodeId user, int32_t t);
  void Free(ir::NodeId v);
  std::span<const ir::NodeId> Inputs(ir::NodeId v) const {
    const auto i = static_cast<size_t>(v);
    return {ks_.input_ids_.data() + ks_.input_begin_[i], ks_.input_ids_.data() + ks_.input_begin_[i + 1]};
  }

  KeepSetScheduler& ks_;
  const RematProblem& p_;
  const KeepPolicy& policy_;
  int64_t budget_;
  std::vector<plan::Step>* steps_;
  std::vector<Recomputation>* recomputations_ = nullptr;
  int64_t stop_after_;
  bool stopped_ = false;
  int32_t position_ = -1;
  ir::NodeId last_computed_ = ir::kNoNode;
  int64_t live_ = 0;
  double first_cost_ = 0.0;  // the simulator's `compute`: first executions, in schedule order
  double re_cost_ = 0.0;     // the simulator's `recompute`
  KeepSetEvaluation e_;
};

KeepSetEvaluation KeepSetRun::Run() {
  const auto n = static_cast<size_t>(p_.graph->size());
  ++ks_.runs_;
  ks_.resident_.assign(n, 0);
  ks_.planned_.assign(n, 0);
  ks_.uses_.assign(n, 0);
  ks_.free_at_.assign(n, KeepSetScheduler::kNever);
  ks_.expire_.resize(n);
  for (auto& e : ks_.expire_) e.clear();
  for (int32_t t = 0; t < p_.size() && !stopped_; ++t) {
    position_ = t;
    Step(t);
  }
  // Same association as sim::TimeBreakdown::total(): compute + recompute (+ 0 + 0).
  e_.cost = first_cost_ + re_cost_;
  return e_;
}

void KeepSetRun::Step(int32_t t) {
  const ir::NodeId u = p_.order[static_cast<size_t>(t)];
  ks_.plan_.clear();
  for (ir::NodeId in : Inputs(u))
    if (!ks_.resident_[static_cast<size_t>(in)] && !ks_.planned_[static_cast<size_t>(in)]) Visit(in);
  // Ascending positions, as Checkmate's stages compute: every keep-set schedule is a frontier-advancing
  // stage schedule, hence a valid warm start for the MILP (checkmate_ilp.h).
  std::sort(ks_.plan_.begin(), ks_.plan_.end(), [&](ir::NodeId a, ir::NodeId b) {
    return p_.position[static_cast<size_t>(a)] < p_.position[static_cast<size_t>(b)];
  });
  for (ir::NodeId x : ks_.plan_)
    for (ir::NodeId y : Inputs(x)) ++ks_.uses_[static_cast<size_t>(y)];
  for (ir::NodeId y : Inputs(u)) ++ks_.uses_[static_cast<size_t>(y)];
  for (ir::NodeId x : ks_.plan_) {
    ks_.planned_[static_cast<size_t>(x)] = 0;
    Compute(x, t, /*recompute=*/true);
    if (stopped_) return;
    Release(x, t);
  }
  Compute(u, t, /*recompute=*/false);
  if (stopped_) return;
  Release(u, t);
  if (ks_.free_at_[static_cast<size_t>(u)] == t) Free(u);  // nothing reads it within its first interval
  for (ir::NodeId v : ks_.expire_[static_cast<size_t>(t)]) {  // holds ending here
    const auto i = static_cast<size_t>(v);
    if (ks_.resident_[i] && ks_.free_at_[i] == t && ks_.uses_[i] == 0) Free(v);
  }
}

// Appends the non-resident ancestors needed to compute root (root included), depth-first.
void KeepSetRun::Visit(ir::NodeId root) {
  auto& stack = ks_.stack_;
  auto& next = ks_.stack_next_;
  stack.assign(1, root);
  next.assign(1, 0);
  ks_.planned_[static_cast<size_t>(root)] = 1;
  while (!stack.empty()) {
    const ir::NodeId x = stack.back();
    const std::span<const ir::NodeId> ins = Inputs(x);
    if (next.back() < ins.size()) {
      const ir::NodeId y = ins[next.back()++];
      const auto yi = static_cast<size_t>(y);
      if (!ks_.resident_[yi] && !ks_.planned_[yi]) {
        ks_.planned_[yi] = 1;
        stack.push_back(y);
        next.push_back(0);
      }
    } else {
      ks_.plan_.push_back(x);
      stack.pop_back();
      next.pop_back();
    }
  }
}

void KeepSetRun::Compute(ir::NodeId v, int32_t t, bool recompute) {
  const auto i = static_cast<size_t>(v);
  ks_.resident_[i] = 1;
  last_computed_ = v;
  live_ += p_.memory[i];
  (recompute ? re_cost_ : first_cost_) += p_.cost[i];
  if (steps_ != nullptr) steps_->push_back({plan::StepKind::kCompute, v});
  // CONTRACT.md: the peak is read right after each compute.
  if (live_ > e_.peak || e_.peak_compute < 0) {
    e_.peak = live_;
    e_.peak_compute = e_.computes;
    e_.peak_position = t;
  }
  if (live_ > budget_) e_.overflow += static_cast<double>(live_ - budget_);
  if (e_.computes == stop_after_) stopped_ = true;
  ++e_.computes;
  if (recompute && recomputations_ != nullptr) recomputations_->push_back({v, t});
  const int32_t free_at = ks_.FreeTime(v, t, policy_);
  ks_.free_at_[i] = free_at;
  if (free_at > t && free_at == policy_.hold[i]) ks_.expire_[static_cast<size_t>(free_at)].push_back(v);
}

void KeepSetRun::Release(ir::NodeId user, int32_t t) {
  for (ir::NodeId y : Inputs(user)) {
    const auto yi = static_cast<size_t>(y);
    if (--ks_.uses_[yi] == 0 && ks_.free_at_[yi] == t) Free(y);
  }
}

void KeepSetRun::Free(ir::NodeId v) {
  const auto i = static_cast<size_t>(v);
  ks_.resident_[i] = 0;
  live_ -= p_.memory[i];
  if (steps_ != nullptr) steps_->push_back({plan::StepKind::kFree, v});
}

KeepSetScheduler::KeepSetScheduler(const RematProblem& problem) : problem_(problem) {
  const ir::Graph& g = *problem.graph;
  boundary_ = ir::FirstBackwardPosition(g, problem.order);
  input_begin_.assign(1, 0);
  for (const ir::Node& n : g.nodes()) {
    input_ids_.insert(input_ids_.end(), n.inputs.begin(), n.inputs.end());
    input_begin_.push_back(static_cast<int32_t>(input_ids_.size()));
  }
  BuildConsumers();
  BuildCuts();
}

void KeepSetScheduler::BuildConsumers() {
  const ir::Graph& g = *problem_.graph;
  consumer_begin_.assign(1, 0);
  cuttable_.assign(static_cast<size_t>(g.size()), 0);
  for (const ir::Node& n : g.nodes()) {
    const auto i = static_cast<size_t>(n.id);
    std::vector<int32_t> pos;
    for (ir::NodeId c : problem_.consumers[i]) pos.push_back(problem_.position[static_cast<size_t>(c)]);
    std::sort(pos.begin(), pos.end());
    pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
    consumer_pos_.insert(consumer_pos_.end(), pos.begin(), pos.end());
    consumer_begin_.push_back(static_cast<int32_t>(consumer_pos_.size()));
    // Graph inputs are given data (ir/op_kind.h): never dropped and reloaded.
    cuttable_[i] = !problem_.persistent[i] && n.kind != ir::OpKind::kInput && !pos.empty();
  }
}

void KeepSetScheduler::BuildCuts() {
  const auto n = static_cast<size_t>(problem_.graph->size());
  cut_begin_.assign(1, 0);
  boundary_cut_.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (cuttable_[i]) {
      const int32_t p = problem_.position[i];
      bool before_boundary = p < boundary_;
      int32_t prev = p;
      for (int32_t k = consumer_begin_[i]; k < consumer_begin_[i + 1]; ++k) {
        const int32_t c = consumer_pos_[static_cast<size_t>(k)];
        // Chen et al.: forward tensors are recomputed for the backward pass, from the boundary on; a
        // cut only where at least one other op runs between two uses (else there is nothing to save).
        const bool boundary = before_boundary && c >= boundary_;
        if (boundary) before_boundary = false;
        if (c - prev >= 2) {
          if (boundary) boundary_cut_[i] = static_cast<int32_t>(cuts_.size());
          cuts_.push_back({static_cast<ir::NodeId>(i), boundary ? boundary_ : c});
        }
        prev = c;
      }
    }
    cut_begin_.push_back(static_cast<int32_t>(cuts_.size()));
  }
  cut_ids_.resize(cuts_.size());
  for (size_t k = 0; k < cuts_.size(); ++k) cut_ids_[k] = static_cast<int32_t>(k);
}

std::span<const int32_t> KeepSetScheduler::CutsOf(ir::NodeId v) const {
  const auto i = static_cast<size_t>(v);
  return {cut_ids_.data() + cut_begin_[i], cut_ids_.data() + cut_begin_[i + 1]};
}

std::span<const int32_t> KeepSetScheduler::ConsumerPositions(ir::NodeId v) const {
  const auto i = static_cast<size_t>(v);
  return {consumer_pos_.data() + consumer_begin_[i], consumer_pos_.data() + consumer_begin_[i + 1]};
}

KeepPolicy KeepSetScheduler::KeepAll() const {
  const auto n = static_cast<size_t>(problem_.graph->size());
  return {CutSet(cuts_.size(), 0), std::vector<int32_t>(n, KeepPolicy::kNoHold)};
}

KeepPolicy KeepSetScheduler::FromKeep(const std::vector<bool>& keep) const {
  KeepPolicy policy = KeepAll();
  CutSet& active = policy.cuts;
  for (size_t i = 0; i < keep.size() && i < cuttable_.size(); ++i) {
    if (keep[i] || !cuttable_[i]) continue;
    if (boundary_cut_[i] >= 0) {
      active[static_cast<size_t>(boundary_cut_[i])] = 1;
    } else if (boundary_ >= problem_.size()) {  // a forward-only graph: freed between any two distant uses
      for (int32_t id : CutsOf(static_cast<ir::NodeId>(i))) active[static_cast<size_t>(id)] = 1;
    }
    // A training graph's forward tensor read right before and right after the boundary (the loss's
    // input, when the first backward op reads it) has nothing to free between: it stays, as Chen et
    // al.'s family never recomputes inside the forward pass (its forward cuts would recompute the tensor
    // and its dropped ancestors for the last forward op, then again for the backward).
  }
  return policy;
}

int32_t KeepSetScheduler::FreeTime(ir::NodeId v, int32_t t, const KeepPolicy& policy) const {
  const auto i = static_cast<size_t>(v);
  if (problem_.persistent[i]) return kNever;
  int32_t end = kNever;
  for (int32_t k = cut_begin_[i]; k < cut_begin_[i + 1]; ++k) {
    const Cut& c = cuts_[static_cast<size_t>(k)];
    if (policy.cuts[static_cast<size_t>(k)] && c.at > t) {
      end = c.at;
      break;
    }
  }
  // The last consumer inside (t, end): the tensor serves it and is freed right after.
  const int32_t* first = consumer_pos_.data() + consumer_begin_[i];
  const int32_t* last = consumer_pos_.data() + consumer_begin_[i + 1];
  const int32_t* it = std::lower_bound(first, last, end);
  const int32_t use = it != first && *(it - 1) > t ? *(it - 1) : t;
  const int32_t hold = policy.hold[i];
  return hold > use && hold < end ? hold : use;
}

KeepSetEvaluation KeepSetScheduler::Evaluate(const KeepPolicy& policy, int64_t budget) {
  return KeepSetRun(*this, policy, budget, nullptr, -1).Run();
}

std::vector<plan::Step> KeepSetScheduler::Schedule(const KeepPolicy& policy) {
  std::vector<plan::Step> steps;
  steps.reserve(static_cast<size_t>(problem_.size()) * 2);
  KeepSetRun(*this, policy, std::numeric_limits<int64_t>::max(), &steps, -1).Run();
  return steps;
}

std::vector<Recomputation> KeepSetScheduler::Recomputations(const KeepPolicy& policy) {
  std::vector<Recomputation> out;
  KeepSetRun run(*this, policy, std::numeric_limits<int64_t>::max(), nullptr, -1);
  run.TraceRecomputations(&out);
  run.Run();
  return out;
}

ResidentSnapshot KeepSetScheduler::Snapshot(const KeepPolicy& policy, int64_t compute_index) {
  KeepSetRun run(*this, policy, std::numeric_limits<int64_t>::max(), nullptr, compute_index);
  run.Run();
  ResidentSnapshot s;
  s.position = run.position();
  s.computed = run.last_computed();
  for (size_t i = 0; i < resident_.size(); ++i)
    if (resident_[i] && cuttable_[i] && uses_[i] == 0 && static_cast<ir::NodeId>(i) != s.computed)
      s.idle.push_back(static_cast<ir::NodeId>(i));
  return s;
}

std::vector<plan::Step> KeepSetSchedule(const RematProblem& problem, const std::vector<bool>& keep) {
  KeepSetScheduler ks(problem);
  return ks.Schedule(ks.FromKeep(keep));
}

KeepSetEvaluation EvaluateKeepSet(const RematProblem& problem, const std::vector<bool>& keep) {
  KeepSetScheduler ks(problem);
  return ks.Evaluate(ks.FromKeep(keep));
}

}  // namespace kiwi::solve::remat
