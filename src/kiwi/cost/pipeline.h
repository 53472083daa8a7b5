#pragma once
// A pipeline's memory and time from its stages' terms (Galvatron-BMW Eq. 1 and Eq. 8), for the layer
// simulator (sim/layer_simulator.cpp) and the hybrid search's estimates (solve/hybrid/), so both
// combine a stage's terms the same way.
//
//   StageMemory m;  m += layer_terms...;  (in model order)  int64_t peak = m.PeakBytes(MicrobatchesInFlight(k1F1B, 4, 8, s));
//   double t = PipelineIterationSeconds(8, slowest_microbatch, sum_of_stages, slowest_optimizer_step);
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiwi/cost/cluster.h"
#include "kiwi/plan/plan.h"

namespace kiwi::cost {

// Micro-batches whose activations stage `stage` of `pp` holds at once: 1F1B-flush starts a stage's
// first backward after pp - stage forwards (Narayanan et al. 2021); GPipe runs every forward first.
// Interleaved 1F1B (virtual_stages v > 1: the stage runs v model chunks) counts chunk-micro-batches
// (one chunk's activations of one micro-batch): Megatron-LM's schedule runs 2 (pp - stage - 1) +
// (v - 1) pp warm-up forwards, then holds one more before its first backward, at most the v m there
// are (Narayanan et al. 2021 §2.2; Korthikanti et al. 2023 §4.2.3: the first stage holds
// pp (1 + (pp - 1) / (pp v)) micro-batches of its layers).
int MicrobatchesInFlight(plan::PipelineSchedule schedule, int pp, int micro_batches, int stage, int virtual_stages = 1);

// A stage's memory on one device, kept as terms so layers add one at a time in model order. Model
// states and the activations of each micro-batch in flight add up (Galvatron-BMW Eq. 1). The backward
// pass runs the layers in reverse, and layer i's backward holds its transient (recomputed
// intermediates, gradients in flight) and its gathered ZeRO-2/3 parameters or gradient beside the
// activations of layers <= i only: the later layers' are freed by then. So the stage peaks at
//   states + (in_flight - 1) activations + max_i (activations_<=i + transient_i + gathered_i),
// which is what HuggingFace Llama / GPT-2 stages measure on 4 gloo ranks (docs/distributed.md, "What the
// peak holds"); Eq. 1's states + in_flight activations + max transient + max gathered bounds it from above.
struct StageMemory {
  int64_t model_states = 0;   // parameters, gradients, optimizer states
  int64_t activations = 0;    // kept activations of one micro-batch
  int64_t transient = 0;      // the largest backward transient: recomputed intermediates, gradients in flight
  int64_t gathered = 0;       // the largest whole (TP-shard) parameters or gradient a ZeRO-3 / ZeRO-2 layer holds
  int64_t backward_peak = 0;  // max_i activations_<=i + transient_i + gathered_i over the layers so far
  int64_t layer_headroom = 0; // max_i transient_i + gathered_i: what one layer's backward holds beyond activations

  // Appends `layer` (the next in model order) to the stage.
  StageMemory& operator+=(const StageMemory& layer);
  // What grows with every layer: model states + `in_flight` micro-batches' activations.
  int64_t AdditiveBytes(int in_flight) const { return model_states + static_cast<int64_t>(in_flight) * activations; }
  // What the backward pass holds at its peak beyond one micro-batch's activations (>= 0).
  int64_t Headroom() const { return std::max<int64_t>(backward_peak - activations, 0); }
  int64_t PeakBytes(int in_flight) const { return AdditiveBytes(in_flight) + Headroom(); }
};

// A stage's Headroom once a next layer follows with `next_activations` and a headroom of its own: that
// layer's backward pass runs first and frees its activations before the earlier layers' run.
// (StageMemory::operator+= in terms of backward_peak.)
inline int64_t AppendedHeadroom(int64_t headroom, int64_t next_activations, int64_t next_headroom) {
  return std::max(headroom - next_activations, next_headroom);
}

// One layer's terms: its backward pass peaks with all its activations, its transient and its gather.
StageMemory LayerTerms(int64_t model_states, int64_t activations, int64_t transient, int64_t gathered);

// The peak of stage `stage` of an interleaved 1F1B pipeline running `chunks` (its model chunks' terms, in
// model order): their model states, the most activations the schedule holds at once (Megatron-LM's op
// order replayed: forward k runs chunk (k mod pp v) / pp, the backwards the chunks in reverse; at most
// MicrobatchesInFlight chunk-micro-batches, each of its own chunk), and the most one layer's backward
// holds beyond them (layer_headroom: which chunk's backward runs at that moment, and which of its
// layers' activations are freed by then, is not followed: an upper bound).
int64_t InterleavedStagePeakBytes(const std::vector<StageMemory>& chunks, int pp, int micro_batches, int stage);

// Memory a process holds per device beyond its tensors (DeviceSpec::reserved_bytes; negative: none),
// counted in every peak the layer simulator reports.
int64_t ReservedBytes(const DeviceSpec& device);

// What Galvatron keeps free beside its tensors on every device of a budget `budget_bytes`: 20% of a
// budget over 20 GiB for PyTorch's caching allocator (Hetu-Galvatron core/search_engine/
// dynamic_programming.py, mem_cache) and 1 GiB of CUDA context per stage (core/cost_model/components/
// embedding_lmhead_cost.py, pytorch_context_mem = 1024 MB). kiwi's reserve for Galvatron's profiles.
int64_t GalvatronReservedBytes(int64_t budget_bytes);

// Galvatron-BMW Eq. 8: C = (m - 1) max_s C_s + sum_s (C_s + G_s), with C_s a stage's micro-batch and
// G_s the gradient sync left unhidden in its last one; then the optimizer step every stage runs at once
// after the flush (+ max_s O_s). Linear in its terms, so time buckets can each be passed through it.
double PipelineIterationSeconds(int micro_batches, double slowest_microbatch_seconds, double sum_of_stages_seconds,
                                double slowest_optimizer_seconds);

// Eq. 8 for interleaved 1F1B with v chunks per stage: the fill and drain pass through chunks of 1/v of
// a stage's work, so the bubble (sum_s C_s - max_s C_s) shrinks v-fold (Narayanan et al. 2021 §2.2:
// bubble fraction (pp - 1) / (v m) with equal stages):
// (m - 1/v) max_s C_s + sum_s C_s / v + sum_s G_s + max_s O_s. With v = 1 it is Eq. 8.
double InterleavedIterationSeconds(int micro_batches, int virtual_stages, double slowest_microbatch_seconds,
                                   double sum_of_stages_seconds, double sum_of_syncs_seconds,
                                   double slowest_optimizer_seconds);

// The part of InterleavedIterationSeconds the slowest stage spends waiting while the pipeline fills
// and drains: (sum_s C_s - max_s C_s) / v (0 with one stage).
double PipelineBubbleSeconds(int virtual_stages, double slowest_microbatch_seconds, double sum_of_stages_seconds);

}  // namespace kiwi::cost
