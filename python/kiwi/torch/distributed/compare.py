"""kiwi's predictions for a plan (the layer simulator and its per-collective byte counts, through
kiwi._kiwi.layer_plan_report: sim/layer_simulator.h LayerPlanTraffic) laid beside what a run measured."""
import json
from typing import Any, Dict, List, Optional

import kiwi
from kiwi.torch.distributed import comm_counter as cc
from kiwi.torch.distributed.plan import HybridPlan
from kiwi.torch.distributed.trainer import median_after_first

# LayerPlanTraffic's fields -> the runtime's purposes.
FIELDS = {"tp_all_reduce_bytes": cc.TP_ALL_REDUCE, "sdp_all_gather_bytes": cc.SDP_ALL_GATHER,
          "dp_all_reduce_bytes": cc.DP_ALL_REDUCE, "sdp_reduce_scatter_bytes": cc.SDP_REDUCE_SCATTER,
          "slice_gather_bytes": cc.SLICE_GATHER, "slice_gather_backward_bytes": cc.SLICE_GATHER_BACKWARD,
          "step_all_gather_bytes": cc.STEP_ALL_GATHER, "sp_all_gather_bytes": cc.SP_ALL_GATHER,
          "sp_reduce_scatter_bytes": cc.SP_REDUCE_SCATTER, "sp_gradient_all_reduce_bytes": cc.SP_GRAD_ALL_REDUCE,
          "sequence_gather_bytes": cc.SEQUENCE_GATHER, "sequence_gather_backward_bytes": cc.SEQUENCE_GATHER_BACKWARD}
PURPOSES = [cc.TP_ALL_REDUCE, cc.SP_ALL_GATHER, cc.SP_REDUCE_SCATTER, cc.SP_GRAD_ALL_REDUCE, cc.SDP_ALL_GATHER,
            cc.SDP_REDUCE_SCATTER, cc.DP_ALL_REDUCE, cc.STEP_ALL_GATHER, cc.SLICE_GATHER, cc.SLICE_GATHER_BACKWARD,
            cc.SEQUENCE_GATHER, cc.SEQUENCE_GATHER_BACKWARD, cc.SEND_FORWARD, cc.SEND_BACKWARD]


def plan_report(plan: HybridPlan, cluster: Optional[str] = None, profile: Optional[str] = None) -> Dict[str, Any]:
    """The C++ layer simulator's verdict and traffic for `plan` (needs plan.model: a kiwi preset), priced
    with `profile` (a `kiwi profile` file) when given."""
    from kiwi import _kiwi
    return json.loads(_kiwi.layer_plan_report(json.dumps(plan.to_kiwi_plan()), cluster or "", profile or ""))


def predicted_unit_bytes(report: Dict[str, Any], plan: HybridPlan) -> Dict[str, Dict[str, int]]:
    """{purpose: {unit: bytes per device per iteration}}: layers by index, the embeddings as "embed" (first
    stage), the head + loss as "head" (last stage), sends by stage ("stage0")."""
    out: Dict[str, Dict[str, int]] = {p: {} for p in PURPOSES}
    traffic = report["traffic"]
    for i, layer in enumerate(traffic["layers"]):
        for field, purpose in FIELDS.items():
            if layer.get(field):
                out[purpose][str(i)] = layer[field]
    for key, unit in (("embedding", "embed"), ("head", "head")):
        for field, purpose in FIELDS.items():
            if traffic[key].get(field):
                out[purpose][unit] = traffic[key][field]
    for s in range(plan.pp_degree):  # point-to-point traffic is keyed by the sending stage
        if traffic["send_forward_bytes"][s]:
            out[cc.SEND_FORWARD][f"stage{s}"] = traffic["send_forward_bytes"][s]
        if traffic["send_backward_bytes"][s]:
            out[cc.SEND_BACKWARD][f"stage{s}"] = traffic["send_backward_bytes"][s]
    return out


def measured_unit_bytes(snapshot: Dict[str, Any]) -> Dict[str, Dict[str, int]]:
    """One rank's {purpose: {unit: bytes}} (units as in predicted_unit_bytes)."""
    out: Dict[str, Dict[str, int]] = {p: {} for p in PURPOSES}
    for purpose, units in snapshot["bytes"].items():
        out.setdefault(purpose, {}).update(units)
    return out


def stage_units(plan: HybridPlan, stage: int) -> set:
    """The units one device of `stage` runs: its layers, its sends, the embeddings on the first stage
    and the head on the last (as kiwi's simulator places them)."""
    units = {str(i) for i in plan.stage_layers(stage)} | {f"stage{stage}"}
    if stage == 0:
        units.add("embed")
    if stage == plan.pp_degree - 1:
        units.add("head")
    return units


def stage_totals(per_unit: Dict[str, Dict[str, int]], plan: HybridPlan, stage: int) -> Dict[str, int]:
    """Bytes per purpose of one device of `stage`."""
    units = stage_units(plan, stage)
    return {p: sum(b for u, b in per_unit.get(p, {}).items() if u in units) for p in PURPOSES}


def rank_totals(snapshot: Dict[str, Any]) -> Dict[str, int]:
    return {p: sum(snapshot["bytes"].get(p, {}).values()) for p in PURPOSES}


def time_split_table(results: List[Dict[str, Any]], report: Dict[str, Any]) -> str:
    """Per rank, medians over the timed iterations (the first left out): the time blocked in collectives
    and point-to-point waits, the optimizer step, and the rest (forward, backward, the runtime's own
    work), beside kiwi's split of the critical path (communication + resharding; compute, the
    optimizer step included)."""
    sim = report["simulated"]
    lines = ["| rank | iteration | blocked in communication | optimizer step | the rest |", "|---|---|---|---|---|"]
    if "communication_seconds" in sim:
        comm = sim["communication_seconds"] + sim.get("resharding_seconds", 0.0)
        lines.append(f"| kiwi | {sim['iteration_seconds'] * 1e3:.1f} ms | {comm * 1e3:.1f} ms | "
                     f"(in compute) | {sim['compute_seconds'] * 1e3:.1f} ms compute |")
    for r in results:
        timed = len(r.get("seconds", []))
        if not timed:
            continue
        blocked = [sum(s.values()) for s in r.get("comm_seconds", [])[:timed]]
        step = r.get("optimizer_seconds", [])[:timed]
        total = r["seconds"]
        rest = [t - b - o for t, b, o in zip(total, blocked, step)]
        lines.append(f"| {r['rank']} | {median_after_first(total) * 1e3:.1f} ms | "
                     f"{median_after_first(blocked) * 1e3:.1f} ms | {median_after_first(step) * 1e3:.1f} ms | "
                     f"{median_after_first(rest) * 1e3:.1f} ms |")
    return "\n".join(lines)


def summary_table(plan: HybridPlan, results: List[Dict[str, Any]], report: Optional[Dict[str, Any]]) -> str:
    """Markdown tables: per-iteration time and loss, per-rank peak memory, per-rank bytes by purpose."""
    lines = ["| iteration | measured seconds (slowest rank) | loss |", "|---|---|---|"]
    iters = len(results[0]["losses"])
    loss = [sum(r["losses"][i] for r in results if r["reports_loss"]) for i in range(iters)]
    for i in range(iters):
        secs = [r["seconds"][i] for r in results if i < len(r["seconds"])]
        lines.append(f"| {i} | {max(secs):.4f} |" if secs else f"| {i} | (profiled) |")
        lines[-1] += f" {loss[i]:.6f} |"
    if report:
        lines.append(f"\nkiwi predicts {report['simulated']['iteration_seconds']:.6f} s per iteration on "
                     f"{report['cluster']} (measured median {max(r['iteration_seconds'] or 0 for r in results):.4f} s)")
        lines += ["", time_split_table(results, report)]
    lines += ["", "| rank | stage | measured peak memory | predicted (stage) |", "|---|---|---|---|"]
    for r in results:
        pred = report["simulated"]["stage_peak_memory_bytes"][r["stage"]] if report else None
        meas = r.get("peak_memory_bytes")
        lines.append(f"| {r['rank']} | {r['stage']} | {kiwi.format_bytes(meas) if meas else '-'} | "
                     f"{kiwi.format_bytes(pred) if pred else '-'} |")
    lines += ["", "| rank | collective | measured bytes/iteration | predicted |", "|---|---|---|---|"]
    predicted = predicted_unit_bytes(report, plan) if report else None
    for r in results:
        measured = rank_totals(r["comm"][-1])
        pred = stage_totals(predicted, plan, r["stage"]) if predicted else {}
        for p in PURPOSES:
            if measured[p] or pred.get(p):
                lines.append(f"| {r['rank']} | {p} | {measured[p]} | {pred.get(p, '-')} |")
    return "\n".join(lines)
