#include "kiwi/solve/remat/chain_dp.h"
#include "kiwi/util/elapsed.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace kiwi::solve::remat {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kNever = std::numeric_limits<int64_t>::max() / 4;   // no budget suffices
constexpr int64_t kLowest = std::numeric_limits<int64_t>::min() / 4;  // "needs nothing"

// A DP value at one budget X, exact on the budget interval [need, hi): for every X' in it the least
// cost is `cost`, and the schedule `choice` leads to peaks at most need (<= X' ).
struct Value {
  double cost = kInf;
  int64_t need = kLowest;
  int64_t hi = kNever;
  uint32_t choice = 0;
  bool feasible() const { return cost < kInf; }
};

int64_t Shift(int64_t hi, int64_t offset) { return hi >= kNever - offset ? kNever : hi + offset; }

// One option of a state at budget X: direct memory requirements plus sub-values at X - offset.
class Option {
 public:
  Option(int64_t budget, double cost) : budget_(budget), cost_(cost) {}
  void Require(int64_t bytes) {
    if (bytes > budget_) feasible_ = false, threshold_ = std::max(threshold_, bytes);
    need_ = std::max(need_, bytes);
  }
  void Add(const Value& sub, int64_t offset) {
    if (!sub.feasible()) {
      feasible_ = false;
      threshold_ = std::max(threshold_, Shift(sub.hi, offset));
      return;
    }
    cost_ += sub.cost;
    need_ = std::max(need_, sub.need + offset);
    hi_ = std::min(hi_, Shift(sub.hi, offset));
  }
  bool ok() const { return feasible_; }
  double cost() const { return cost_; }
  Value Get(uint32_t choice) const {
    if (!feasible_) return {kInf, kLowest, threshold_, choice};
    return {cost_, need_, hi_, choice};
  }
  // The option is not evaluated further because it cannot beat the best while its parts so far stay
  // constant; it still bounds the interval on which the state's value is known.
  Value Pruned() const { return {kInf, kLowest, hi_, 0}; }

 private:
  int64_t budget_;
  double cost_;
  bool feasible_ = true;
  int64_t need_ = kLowest;
  int64_t hi_ = kNever;
  int64_t threshold_ = kLowest;
};

// The least of a state's options; the state's value is exact until any option could improve.
class Best {
 public:
  void Offer(const Value& v) {
    hi_ = std::min(hi_, v.hi);
    if (v.cost < best_.cost) best_ = v;
  }
  double cost() const { return best_.cost; }
  Value Finish() const {
    Value v = best_;
    v.hi = hi_;
    if (!v.feasible()) v.need = kLowest;
    return v;
  }

 private:
  Value best_;
  int64_t hi_ = kNever;
};

// Per-state lists of budget intervals with known values, sorted and merged: two intervals of equal
// cost that touch are one, decided by the schedule of the lower (its peak fits the whole union).
class Memo {
 public:
  explicit Memo(size_t slots) : slots_(slots) {}
  bool Find(size_t slot, int64_t x, Value& out) {
    Slot& s = slots_[slot];
    if (s.last >= 0 && Hit(s.last, x, out)) return true;  // budgets repeat: try the last hit first
    for (int32_t i = s.head; i >= 0; i = pool_[static_cast<size_t>(i)].next) {
      if (x < pool_[static_cast<size_t>(i)].lo) return false;
      if (Hit(i, x, out)) return s.last = i, true;
    }
    return false;
  }
  Value Store(size_t slot, const Value& v) {
    int32_t prev = -1;
    int32_t at = slots_[slot].head;
    while (at >= 0 && pool_[static_cast<size_t>(at)].hi < v.need) prev = at, at = pool_[static_cast<size_t>(at)].next;
    if (at >= 0) {
      Interval& in = pool_[static_cast<size_t>(at)];
      if (in.cost == v.cost && in.lo <= v.hi) {  // touches: merge
        if (v.need < in.lo) in.lo = v.need, in.choice = v.choice;
        in.hi = std::max(in.hi, v.hi);
        return v;
      }
    }
    pool_.push_back({v.need, v.hi, v.cost, v.choice, at});
    const auto added = static_cast<int32_t>(pool_.size() - 1);
    if (prev < 0) {
      slots_[slot].head = added;
    } else {
      pool_[static_cast<size_t>(prev)].next = added;
    }
    slots_[slot].last = added;
    return v;
  }

 private:
  bool Hit(int32_t i, int64_t x, Value& out) const {
    const Interval& in = pool_[static_cast<size_t>(i)];
    if (x < in.lo || x >= in.hi) return false;
    out = {in.cost, in.lo, in.hi, in.choice};
    return true;
  }
  struct Slot {
    int32_t head = -1, last = -1;  // sorted list of intervals; the last one that answered
  };
  struct Interval {
    int64_t lo, hi;
    double cost;
    uint32_t choice;
    int32_t next;
  };
  std::vector<Slot> slots_;
  std::vector<Interval> pool_;
};

enum ExitMove : uint32_t { kComputeBackward = 0, kSweepToTop = 1, kPushChild = 2, kHandOver = 3 };
uint32_t Encode(ExitMove move, bool top, int32_t y) {
  return static_cast<uint32_t>(move) | (top ? 4u : 0u) | static_cast<uint32_t>(y) << 3;
}
ExitMove MoveOf(uint32_t choice) { return static_cast<ExitMove>(choice & 3u); }
bool TopOf(uint32_t choice) { return (choice & 4u) != 0; }
int32_t StageOf(uint32_t choice) { return static_cast<int32_t>(choice >> 3); }

int32_t EndOf(int32_t c, int32_t l) { return std::max(c, l - 1); }

// Dense triangular slot numbering for (c, t, z) with c < t and z in [EndOf(c, l), t].
class Triangle {
 public:
  Triangle(int32_t c_max, int32_t t_max, int32_t flags, int32_t l)
      : t_max_(t_max), flags_(flags), offset_(static_cast<size_t>(c_max + 1) * static_cast<size_t>(t_max + 1), -1),
        first_(static_cast<size_t>(c_max + 1), 0) {
    for (int32_t c = 0; c <= c_max; ++c) {
      first_[static_cast<size_t>(c)] = EndOf(c, l);
      for (int32_t t = c + 1; t <= t_max; ++t) {
        offset_[Key(c, t)] = size_;
        size_ += std::max<int64_t>(0, t - first_[static_cast<size_t>(c)] + 1);
      }
    }
  }
  size_t Slots() const { return static_cast<size_t>(size_ * flags_); }
  size_t Slot(int32_t c, int32_t t, int32_t z, int32_t flag) const {
    return static_cast<size_t>((offset_[Key(c, t)] + z - first_[static_cast<size_t>(c)]) * flags_ + flag);
  }

 private:
  size_t Key(int32_t c, int32_t t) const { return static_cast<size_t>(c) * static_cast<size_t>(t_max_ + 1) + static_cast<size_t>(t); }
  int32_t t_max_, flags_;
  std::vector<int64_t> offset_;
  std::vector<int32_t> first_;
  int64_t size_ = 0;
};

// The dynamic program of chain_dp.h over one chain; values are memoized across budgets.
class ChainDp {
 public:
  ChainDp(const Chain& ch, std::chrono::steady_clock::time_point deadline)
      : ch_(ch),
        deadline_(deadline),
        exit_slots_(ch.n, ch.h, 3, ch.l),
        exit_memo_(exit_slots_.Slots()),
        cp_memo_(static_cast<size_t>(ch.n + 2) * static_cast<size_t>(ch.h + 2)),
        floor_(exit_slots_.Slots(), kUnknown) {
    PrefixSums();
    SweepTables();
  }

  const Chain& chain() const { return ch_; }
  // Past the deadline every new evaluation gives up (the caller discards the answer).
  bool Expired() {
    if (!expired_ && (++ticks_ & 1023u) == 0) expired_ = std::chrono::steady_clock::now() > deadline_;
    return expired_;
  }
  bool expired() const { return expired_; }
  int32_t End(int32_t c) const { return EndOf(c, ch_.l); }
  bool NeedsTop(int32_t t) const { return t <= ch_.n && (ch_.reads[static_cast<size_t>(t)] & kReadsSame); }

  Value Exit(int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget);
  Value Cp(int32_t c, int32_t t, bool top, bool fresh, int32_t y, int64_t budget);
  Value HandOver(int32_t c, int32_t t, bool top, int32_t z, int64_t budget);
  // The least budget at which Exit / Cp is feasible (kNever: none), budget-independent: the same
  // options with (max, min) in place of (+, min). Lets infeasible states answer without search.
  int64_t Floor(int32_t c, int32_t t, bool top, bool fresh, int32_t z);
  int64_t FloorCp(int32_t c, int32_t t, bool top, bool fresh, int32_t y);

 private:
  Value EvalExit(int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget);
  void OfferBackward(Best& best, int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget);
  void OfferChildren(Best& best, int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget);
  Value EvalCp(int32_t c, int32_t t, bool top, bool fresh, int32_t y, int64_t budget);
  void PrefixSums();
  void SweepTables();
  // Shared by the cost and floor recursions: whether a move exists, and its own memory requirement.
  bool BackwardMove(int32_t c, int32_t t, bool top, bool fresh, int32_t z) const;
  int64_t BackwardPeak(int32_t c, int32_t t, bool top) const {
    return A(c) + ch_.DeltaBytes(t) + (top ? A(t) : 0) + ch_.d[static_cast<size_t>(t)] + Pb(t);
  }
  bool HandOverMove(int32_t c, int32_t t, bool top, int32_t z) const;
  int64_t HandOverPeak(int32_t c, int32_t t, bool top) const {
    return ch_.DeltaBytes(t) + (top ? A(t) : 0) + Pb(t) + A(c) + A(c + 1);
  }
  int64_t ChildPeak(int32_t c, int32_t t, bool top, bool fresh) const {  // computing f_{c+1} from c
    return ch_.DeltaBytes(t) + (top ? A(t) : 0) + A(c + 1) + (fresh ? Pf(c + 1) : Pb(t));
  }
  int64_t A(int32_t i) const { return ch_.a[static_cast<size_t>(i)]; }
  int64_t Pf(int32_t i) const { return ch_.persistent_at_forward[static_cast<size_t>(i)]; }
  int64_t Pb(int32_t t) const { return ch_.persistent_at_backward[static_cast<size_t>(t)]; }
  double SweepCost(int32_t c, int32_t j) const { return fwd_sum_[static_cast<size_t>(j)] - fwd_sum_[static_cast<size_t>(c)]; }
  int64_t SweepPeak(int32_t c, int32_t j, bool fresh, int32_t t) const;
  double ContinuationBound(int32_t c, int32_t y, int32_t z) const;
  double BackwardCost(int32_t lo, int32_t hi) const {  // w of b_{lo+1}..b_hi
    return bwd_sum_[static_cast<size_t>(hi)] - bwd_sum_[static_cast<size_t>(lo)];
  }

  const Chain& ch_;
  std::chrono::steady_clock::time_point deadline_;
  uint32_t ticks_ = 0;
  bool expired_ = false;
  Triangle exit_slots_;
  Memo exit_memo_, cp_memo_;
  static constexpr int64_t kUnknown = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> floor_;  // Floor per Exit slot
  std::vector<double> fwd_sum_, bwd_sum_;          // prefix sums of u and w
  std::vector<std::vector<int64_t>> pair_max_;     // [i][j]: max over k in [i, j] of a_{k-1} + a_k
  std::vector<std::vector<int64_t>> pair_pf_max_;  // the same plus the first-computation persistent bytes
};

void ChainDp::PrefixSums() {
  fwd_sum_.assign(static_cast<size_t>(ch_.n) + 1, 0.0);
  for (int32_t i = 1; i <= ch_.n; ++i)
    fwd_sum_[static_cast<size_t>(i)] = fwd_sum_[static_cast<size_t>(i) - 1] + ch_.u[static_cast<size_t>(i)];
  bwd_sum_.assign(static_cast<size_t>(ch_.h) + 1, 0.0);
  for (int32_t t = 1; t <= ch_.h; ++t)
    bwd_sum_[static_cast<size_t>(t)] = bwd_sum_[static_cast<size_t>(t) - 1] + ch_.w[static_cast<size_t>(t)];
}

void ChainDp::SweepTables() {
  const auto size = static_cast<size_t>(ch_.n) + 2;
  pair_max_.assign(size, std::vector<int64_t>(size, kLowest));
  pair_pf_max_.assign(size, std::vector<int64_t>(size, kLowest));
  for (int32_t i = 2; i <= ch_.n; ++i) {
    int64_t m = kLowest, mp = kLowest;
    for (int32_t j = i; j <= ch_.n; ++j) {
      m = std::max(m, A(j - 1) + A(j));
      mp = std::max(mp, A(j - 1) + A(j) + Pf(j));
      pair_max_[static_cast<size_t>(i)][static_cast<size_t>(j)] = m;
      pair_pf_max_[static_cast<size_t>(i)][static_cast<size_t>(j)] = mp;
    }
  }
}

// Peak of computing f_{c+1}..f_j from base c (held outside) in stage t, each freed once its
// successor exists.
int64_t ChainDp::SweepPeak(int32_t c, int32_t j, bool fresh, int32_t t) const {
  const auto lo = static_cast<size_t>(c) + 2;
  const auto hi = static_cast<size_t>(j);
  if (fresh) {
    const int64_t first = A(c + 1) + Pf(c + 1);
    return lo <= hi ? std::max(first, pair_pf_max_[lo][hi]) : first;
  }
  const int64_t first = A(c + 1);
  return (lo <= hi ? std::max(first, pair_max_[lo][hi]) : first) + Pb(t);
}

// A lower bound, independent of the budget, on Exit(c, y, 1, z): b_y..b_{z+1} run once; the level
// shifts its base from c to z (computing f_{c+1}..f_z) when z is not c's own end; f_{y-1}, when b_y or
// b_{y-1} reads it, can only come from computations starting at c.
double ChainDp::ContinuationBound(int32_t c, int32_t y, int32_t z) const {
  const uint8_t r = ch_.reads[static_cast<size_t>(y)];
  const bool needs_prev = (r & kReadsPrevious) || (z < y - 1 && (ch_.reads[static_cast<size_t>(y) - 1] & kReadsSame));
  const double shifts = z > End(c) ? SweepCost(c, z) : 0.0;
  const double sweep = needs_prev && y - 1 > c ? SweepCost(c, y - 1) : 0.0;
  return BackwardCost(z, y) + std::max(shifts, sweep);
}

Value ChainDp::Exit(int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget) {
  const int32_t e = End(c);
  if (z < e || z > t) return Value{};  // never
  if (t == e) return z == t ? Value{0.0, kLowest, kNever, 0} : Value{};
  if (top && !NeedsTop(t)) top = false;
  fresh = fresh && !top && t == ch_.h;
  // Floor is exact: below it nothing fits, at or above it the evaluation finds a schedule.
  const int64_t floor = Floor(c, t, top, fresh, z);
  if (floor > budget) return Value{kInf, kLowest, floor, 0};
  const size_t slot = exit_slots_.Slot(c, t, z, top ? 1 : fresh ? 2 : 0);
  Value v;
  if (exit_memo_.Find(slot, budget, v)) return v;
  return exit_memo_.Store(slot, EvalExit(c, t, top, fresh, z, budget));
}

Value ChainDp::EvalExit(int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget) {
  Best best;
  if (Expired()) return best.Finish();
  OfferBackward(best, c, t, top, fresh, z, budget);
  // Sweep from the base to f_t and keep it on top; or, before b_h, finish the forward pass (every op
  // runs once: Checkmate's stages compute f_1..f_n first) keeping nothing when b_h does not read f_n.
  const bool keep = !top && NeedsTop(t);
  if (keep || (fresh && c < ch_.n)) {
    const int32_t j = keep ? t : ch_.n;
    Option o(budget, SweepCost(c, j));
    o.Require(A(c) + ch_.DeltaBytes(t) + SweepPeak(c, j, fresh, t));
    if (o.ok()) o.Add(Exit(c, t, keep, false, z, budget), 0);
    best.Offer(o.Get(Encode(kSweepToTop, false, j)));
  }
  OfferChildren(best, c, t, top, fresh, z, budget);
  if (c >= 1 && !fresh) {  // hand-over: c's last use, the level continues from f_{c+1}
    for (bool keep_top : {top, false}) {
      if (HandOverMove(c, t, keep_top, z)) {
        Value v = HandOver(c, t, keep_top, z, budget);
        v.choice = Encode(kHandOver, keep_top, 0);
        best.Offer(v);
      }
      if (!top) break;
    }
  }
  return best.Finish();
}

// Compute b_t now: its reads must be resident (f_{t-1} only as the base, f_t only as the top), and
// b_h only once the forward pass is done (every node runs; Checkmate's stages put f_1..f_n first).
bool ChainDp::BackwardMove(int32_t c, int32_t t, bool top, bool fresh, int32_t z) const {
  if (t == ch_.h && fresh && c < ch_.n) return false;
  const uint8_t r = ch_.reads[static_cast<size_t>(t)];
  if ((r & kReadsPrevious) && !(c >= 1 && c == t - 1)) return false;
  if ((r & kReadsSame) && !top) return false;
  return t - 1 != End(c) || z == t - 1;
}

void ChainDp::OfferBackward(Best& best, int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget) {
  if (!BackwardMove(c, t, top, fresh, z)) return;
  Option o(budget, ch_.w[static_cast<size_t>(t)]);
  o.Require(BackwardPeak(c, t, top));
  if (o.ok() && t - 1 != End(c)) o.Add(Exit(c, t - 1, false, false, z, budget), 0);
  best.Offer(o.Get(Encode(kComputeBackward, false, 0)));
}

// Push a child checkpoint above c; its level returns at stage y with f_y on top.
void ChainDp::OfferChildren(Best& best, int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget) {
  if (c + 1 > std::min(t - 1, ch_.n)) return;
  const int32_t e = End(c);
  for (bool keep_top : {top, false}) {
    for (int32_t y = std::max(c + 1, z); y <= t - 1; ++y) {
      // The child's level computes f_{c+1}..f_y and b_t..b_{y+1} at least: skip what cannot win.
      const double bound = SweepCost(c, y) + BackwardCost(y, t) + (y != e ? ContinuationBound(c, y, z) : 0.0);
      if (bound >= best.cost()) continue;
      Option o(budget, 0.0);
      o.Add(Cp(c, t, keep_top, fresh && !keep_top, y, budget - A(c)), A(c));
      if (o.ok() && y != e) {
        if (o.cost() + ContinuationBound(c, y, z) >= best.cost()) {
          best.Offer(o.Pruned());
          continue;
        }
        o.Add(Exit(c, y, true, false, z, budget), 0);
      }
      best.Offer(o.Get(Encode(kPushChild, keep_top, y)));
    }
    if (!top) break;
  }
}

Value ChainDp::Cp(int32_t c, int32_t t, bool top, bool fresh, int32_t y, int64_t budget) {
  if (c + 1 > std::min({t - 1, ch_.n, y})) return Value{};
  if (!fresh) {  // a longer sweep is f_{c+1}'s level handing over at once (same steps, same peaks)
    Option one(budget, ch_.u[static_cast<size_t>(c) + 1]);
    one.Require(ChildPeak(c, t, top, false));
    if (one.ok()) one.Add(Exit(c + 1, t, top, false, y, budget), 0);
    return one.Get(0);
  }
  const size_t slot = static_cast<size_t>(c) * static_cast<size_t>(ch_.h + 2) + static_cast<size_t>(y);  // t = h
  Value v;
  if (cp_memo_.Find(slot, budget, v)) return v;
  return cp_memo_.Store(slot, EvalCp(c, t, top, fresh, y, budget));
}

// Fresh sweeps (first computations, where hand-overs do not apply): the child is f_{c+1} (choice 0),
// or f_{c+1} is an intermediate of a longer sweep (choice 1).
Value ChainDp::EvalCp(int32_t c, int32_t t, bool top, bool fresh, int32_t y, int64_t budget) {
  const int64_t ctx = ch_.DeltaBytes(t) + (top ? A(t) : 0);
  const double step = ch_.u[static_cast<size_t>(c) + 1];
  Best best;
  Option one(budget, step);
  one.Require(ChildPeak(c, t, top, fresh));
  if (one.ok()) one.Add(Exit(c + 1, t, top, fresh, y, budget), 0);
  best.Offer(one.Get(0));
  if (c + 2 <= std::min({t - 1, ch_.n, y})) {
    Option more(budget, step);
    more.Require(ctx + A(c + 1) + A(c + 2) + Pf(c + 2));
    if (more.ok()) more.Add(Cp(c + 1, t, top, fresh, y, budget), 0);
    best.Offer(more.Get(1));
  }
  return best.Finish();
}

// Hand-over: f_{c+1} is computed while f_c is still resident, then f_c is freed and the level goes on
// from f_{c+1} (on top, ending the level, when c + 1 = t). A longer hand-over sweep is a sequence.
bool ChainDp::HandOverMove(int32_t c, int32_t t, bool top, int32_t z) const {
  const int32_t x_max = top ? std::min(t - 1, ch_.n) : std::min(t, ch_.n);
  return c >= 1 && c + 1 <= x_max && z >= End(c + 1) && (c + 1 < t || z == t);
}

Value ChainDp::HandOver(int32_t c, int32_t t, bool top, int32_t z, int64_t budget) {
  if (!HandOverMove(c, t, top, z)) return Value{};
  Option o(budget, ch_.u[static_cast<size_t>(c) + 1]);
  o.Require(HandOverPeak(c, t, top));
  if (o.ok() && c + 1 < t) o.Add(Exit(c + 1, t, top, false, z, budget), 0);
  return o.Get(0);
}

int64_t ChainDp::Floor(int32_t c, int32_t t, bool top, bool fresh, int32_t z) {
  const int32_t e = End(c);
  if (z < e || z > t) return kNever;
  if (t == e) return z == t ? kLowest : kNever;
  if (top && !NeedsTop(t)) top = false;
  fresh = fresh && !top && t == ch_.h;
  const size_t slot = exit_slots_.Slot(c, t, z, top ? 1 : fresh ? 2 : 0);
  if (floor_[slot] != kUnknown) return floor_[slot];
  int64_t best = kNever;
  if (Expired()) return best;
  auto offer = [&](int64_t own, int64_t rest) { best = std::min(best, std::max(own, rest)); };
  if (BackwardMove(c, t, top, fresh, z))
    offer(BackwardPeak(c, t, top), t - 1 == e ? kLowest : Floor(c, t - 1, false, false, z));
  const bool keep = !top && NeedsTop(t);
  if (keep || (fresh && c < ch_.n)) {
    const int32_t j = keep ? t : ch_.n;
    offer(A(c) + ch_.DeltaBytes(t) + SweepPeak(c, j, fresh, t), Floor(c, t, keep, false, z));
  }
  for (bool keep_top : {top, false}) {
    for (int32_t y = std::max(c + 1, z); y <= t - 1 && c + 1 <= std::min(t - 1, ch_.n); ++y) {
      const int64_t child = FloorCp(c, t, keep_top, fresh && !keep_top, y);
      if (child >= kNever) continue;
      offer(child + A(c), y == e ? kLowest : Floor(c, y, true, false, z));
    }
    if (!fresh && HandOverMove(c, t, keep_top, z))
      offer(HandOverPeak(c, t, keep_top), c + 1 < t ? Floor(c + 1, t, keep_top, false, z) : kLowest);
    if (!top) break;
  }
  floor_[slot] = best;
  return best;
}

int64_t ChainDp::FloorCp(int32_t c, int32_t t, bool top, bool fresh, int32_t y) {
  if (c + 1 > std::min({t - 1, ch_.n, y})) return kNever;
  int64_t best = std::max(ChildPeak(c, t, top, fresh), Floor(c + 1, t, top, fresh, y));
  if (fresh && c + 2 <= std::min({t - 1, ch_.n, y})) {
    const int64_t pair = ch_.DeltaBytes(t) + (top ? A(t) : 0) + A(c + 1) + A(c + 2) + Pf(c + 2);
    best = std::min(best, std::max(pair, FloorCp(c + 1, t, top, fresh, y)));
  }
  return best;
}

// Turns the DP's choices into compute/free steps, tracking resident bytes for the peak.
class Emitter {
 public:
  Emitter(const Chain& ch, ChainDp& dp) : ch_(ch), dp_(dp) {}

  void Run(int64_t budget) {
    WalkExit(0, ch_.h, false, true, dp_.End(0), budget);
    std::vector<ir::NodeId> left;
    for (const auto& [node, bytes] : resident_) left.push_back(node);
    for (ir::NodeId node : left) Free(node);
    EmitPersistentBefore(std::numeric_limits<int32_t>::max());
  }
  std::vector<plan::Step> steps;
  int64_t peak = 0;
  double cost = 0.0;

 private:
  void Compute(ir::NodeId v, int64_t bytes, double c, int32_t stage) {
    EmitPersistentBefore(stage);
    steps.push_back({plan::StepKind::kCompute, v});
    resident_.emplace_back(v, bytes);
    live_ += bytes;
    peak = std::max(peak, live_);
    cost += c;
  }
  void EmitPersistentBefore(int32_t stage) {
    while (next_persistent_ < ch_.persistent.size() && ch_.persistent_position[next_persistent_] < stage) {
      const ir::NodeId v = ch_.persistent[next_persistent_];
      steps.push_back({plan::StepKind::kCompute, v});
      live_ += ch_.persistent_bytes[next_persistent_];
      peak = std::max(peak, live_);
      ++next_persistent_;
    }
  }
  void Free(ir::NodeId v) {
    auto it = std::find_if(resident_.begin(), resident_.end(), [&](const auto& r) { return r.first == v; });
    if (it == resident_.end()) return;  // only after the deadline, whose answer is discarded
    live_ -= it->second;
    resident_.erase(it);
    steps.push_back({plan::StepKind::kFree, v});
  }
  void ComputeForward(int32_t i, int32_t stage) {
    const auto k = static_cast<size_t>(i);
    Compute(ch_.forward[k], ch_.a[k], ch_.u[k], stage);
  }
  int32_t Stage(int32_t t) const { return ch_.backward_position[static_cast<size_t>(t)]; }
  ir::NodeId F(int32_t i) const { return ch_.forward[static_cast<size_t>(i)]; }

  void WalkExit(int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget);
  void WalkCp(int32_t c, int32_t t, bool top, bool fresh, int32_t y, int64_t budget, bool free_base);
  void WalkHandOver(int32_t c, int32_t t, bool top, int32_t z, int64_t budget);

  const Chain& ch_;
  ChainDp& dp_;
  std::vector<std::pair<ir::NodeId, int64_t>> resident_;
  int64_t live_ = 0;
  size_t next_persistent_ = 0;
};

void Emitter::WalkExit(int32_t c, int32_t t, bool top, bool fresh, int32_t z, int64_t budget) {
  if (t == dp_.End(c)) return;
  if (top && !dp_.NeedsTop(t)) Free(F(t)), top = false;
  fresh = fresh && !top && t == ch_.h;
  const Value v = dp_.Exit(c, t, top, fresh, z, budget);
  const bool keep_top = TopOf(v.choice);
  switch (MoveOf(v.choice)) {
    case kComputeBackward: {
      const auto k = static_cast<size_t>(t);
      Compute(ch_.backward[k], ch_.d[k], ch_.w[k], Stage(t));
      if (t < ch_.h) Free(ch_.backward[k + 1]);
      if (top) Free(F(t));
      WalkExit(c, t - 1, false, false, z, budget);
      return;
    }
    case kSweepToTop: {
      const int32_t j = StageOf(v.choice);
      for (int32_t i = c + 1; i <= j; ++i) {
        ComputeForward(i, fresh ? ch_.forward_position[static_cast<size_t>(i)] : Stage(t));
        if (i > c + 1) Free(F(i - 1));
      }
      const bool keep = j == t && dp_.NeedsTop(t);
      if (!keep) Free(F(j));
      WalkExit(c, t, keep, false, z, budget);
      return;
    }
    case kPushChild: {
      if (top && !keep_top) Free(F(t));
      const int32_t y = StageOf(v.choice);
      WalkCp(c, t, keep_top, fresh && !keep_top, y, budget - ch_.a[static_cast<size_t>(c)], false);
      WalkExit(c, y, true, false, z, budget);
      return;
    }
    case kHandOver:
      if (top && !keep_top) Free(F(t));
      WalkHandOver(c, t, keep_top, z, budget);
      return;
  }
}

void Emitter::WalkCp(int32_t c, int32_t t, bool top, bool fresh, int32_t y, int64_t budget, bool free_base) {
  const Value v = dp_.Cp(c, t, top, fresh, y, budget);
  ComputeForward(c + 1, fresh ? ch_.forward_position[static_cast<size_t>(c) + 1] : Stage(t));
  if (free_base) Free(F(c));
  if (v.choice == 0) {
    WalkExit(c + 1, t, top, fresh, y, budget);
  } else {
    WalkCp(c + 1, t, top, fresh, y, budget, true);
  }
}

void Emitter::WalkHandOver(int32_t c, int32_t t, bool top, int32_t z, int64_t budget) {
  ComputeForward(c + 1, Stage(t));
  Free(F(c));
  WalkExit(c + 1, t, top, false, z, budget);
}

int64_t TotalBytes(const Chain& ch) {
  int64_t total = ch.persistent_total;
  for (int64_t b : ch.a) total = std::min(kNever / 4, total + b);
  for (int64_t b : ch.d) total = std::min(kNever / 4, total + b);
  return total;
}

}  // namespace

ChainDpSolution SolveChain(const Chain& chain, int64_t budget, double time_limit_seconds) {
  ChainDpSolution out;
  const auto now = std::chrono::steady_clock::now();
  ChainDp dp(chain, DeadlineAfter(now, time_limit_seconds));
  const int32_t end = dp.End(0);
  // Any budget above every byte of the chain behaves like that total (and keeps sums in range).
  const int64_t capped = std::min(budget, TotalBytes(chain));
  const Value v = dp.Exit(0, chain.h, false, true, end, capped);
  if (!v.feasible() || budget < chain.persistent_total) {  // (an infeasible Exit is answered by Floor)
    // The least budget of the class; trailing persistent nodes need all persistent bytes at once.
    out.min_budget = std::max(dp.Floor(0, chain.h, false, true, end), chain.persistent_total);
    out.min_budget_exact = out.min_budget < kNever;
  } else {
    Emitter emitter(chain, dp);
    emitter.Run(capped);
    out.feasible = true;
    out.cost = emitter.cost + chain.persistent_cost;
    out.peak = emitter.peak;
    out.schedule = std::move(emitter.steps);
  }
  if (dp.expired()) {
    out = ChainDpSolution{};
    out.timed_out = true;
  }
  return out;
}

Result<RematResult> SolveChainDp(const RematProblem& problem, const cost::CostModel& cost_model,
                                 const RematOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::string why;
  std::optional<Chain> chain = ExtractChain(problem, &why);
  if (!chain) return BadInput("chain-dp: the graph is not a linear chain: " + why);
  if (chain->n > kMaxChainDpLength)
    return BadInput(fmt::format("chain-dp: the chain has {} forward ops; at most {} are supported", chain->n,
                                kMaxChainDpLength));
  ChainDpSolution sol = SolveChain(*chain, problem.budget, options.time_limit_seconds);
  if (sol.timed_out)
    return Error{ErrorCode::kTimeLimit,
                 fmt::format("chain-dp: no answer within the time limit of {} s (n = {}; the exact DP grows as n^4)",
                             options.time_limit_seconds, chain->n)};
  RematResult partial;
  partial.solver = "chain-dp";
  if (!sol.feasible) {
    partial.solve_seconds = SecondsSince(start);
    partial.note = fmt::format("no chain schedule fits {} bytes; the least budget that fits is {}{} bytes",
                               problem.budget, sol.min_budget_exact ? "" : "at least ", sol.min_budget);
    if (options.progress) options.progress(partial.note);
    return partial;
  }
  partial.optimal = true;
  partial.lower_bound = sol.cost;
  partial.note = fmt::format("exact chain DP: n = {}, {} backward ops", chain->n, chain->h - chain->l + 1);
  Result<RematResult> r = FinishResult(problem, cost_model, std::move(sol.schedule), std::move(partial));
  if (!r) return r;
  r->solve_seconds = SecondsSince(start);
  if (!r->feasible || r->peak_memory != sol.peak ||
      std::fabs(r->cost - sol.cost) > 1e-6 * std::max(1.0, std::fabs(sol.cost)))
    return Internal(fmt::format("chain-dp: the simulator measures cost {} and peak {}, the DP claims {} and {}",
                                r->cost, r->peak_memory, sol.cost, sol.peak));
  if (options.progress) options.progress(fmt::format("chain-dp: cost {} in {:.3f} s", r->cost, r->solve_seconds));
  return r;
}

}  // namespace kiwi::solve::remat
