"""kiwi.torch.plan_remat and apply_remat: a kiwi remat solver's schedule -> the keep set the applied
module realises -> that module's own schedule (schedule.py), replayed by the simulator for the
prediction. When the realised schedule peaks above the budget (it recomputes on demand, group by
group, where the solver's schedule may be cleverer), the solver is asked again for less."""
import dataclasses
import json
from typing import Any, Dict, List, Optional, Union

import torch

import kiwi
from kiwi.torch.capture import Captured
from kiwi.torch.errors import InfeasibleError, PlanError
from kiwi.torch.runtime import RematModule
from kiwi.torch.schedule import droppable, memory_floor, realize


@dataclasses.dataclass
class RematPlan:
    """A plan for a captured model: which saved tensors to drop, and what kiwi predicts of the step."""
    captured: Captured
    budget_bytes: Optional[int]
    dropped: List[int]                 # kiwi ids of the tensors recomputed in the backward pass
    schedule: List[Dict[str, Any]]     # the applied module's execution, as plan steps
    predicted_peak_bytes: int          # the simulator's peak of `schedule`
    predicted_seconds: float           # the simulator's time of `schedule` (kiwi's cost model)
    no_remat_peak_bytes: int
    no_remat_seconds: float
    solver: str
    solve_seconds: float = 0.0
    attempts: int = 0

    def names(self) -> List[str]:
        nodes = self.captured.graph["nodes"]
        return [nodes[v]["name"] for v in self.dropped]

    def to_json(self) -> Dict[str, Any]:
        """The plan in kiwi's plan format (docs/plan-format.md); the dropped set is implied by the
        schedule (a tensor computed twice is recomputed)."""
        return kiwi.make_plan(self.schedule, graph=self.captured.name, solver="kiwi.torch:" + self.solver,
                              cluster=self.captured.cluster if isinstance(self.captured.cluster, str) else
                              self.captured.cluster.get("name", ""),
                              peak_memory_bytes=self.predicted_peak_bytes, iteration_seconds=self.predicted_seconds)

    def save(self, path: str) -> None:
        kiwi.write_plan(self.to_json(), path)


def _simulate(captured: Captured, steps: List[Dict[str, Any]]) -> Dict[str, Any]:
    return kiwi.simulate(captured.graph, kiwi.make_plan(steps), captured.cluster)


def predict(captured: Captured, dropped: List[int]) -> Dict[str, Any]:
    """The applied module's schedule for a dropped set and the simulator's account of it."""
    keep = {t: t not in set(dropped) for t in droppable(captured.graph, captured.structure)}
    steps = realize(captured.graph, captured.structure, keep)
    sim = _simulate(captured, steps)
    return {"schedule": steps, "peak": sim["peak_memory_bytes"], "seconds": sim["iteration_seconds"], "sim": sim}


def dropped_of(captured: Captured, schedule: List[Dict[str, Any]]) -> List[int]:
    """Droppable tensors a schedule computes more than once."""
    counts: Dict[int, int] = {}
    for s in schedule:
        if s["op"] == "compute":
            counts[s["node"]] = counts.get(s["node"], 0) + 1
    return [t for t in droppable(captured.graph, captured.structure) if counts.get(t, 0) > 1]


_AUX_OPS = ("workspace", "workspace_end", "autograd_unpack", "autograd_release")


def planning_graph(captured: Captured) -> Dict[str, Any]:
    """The graph the solvers search: the captured graph with explicit costs, where recomputations the
    applied module cannot make must not look cheap. Autograd never recomputes a gradient, workspaces
    exist while their op runs, unpack/release markers stand at autograd's boundaries: recomputing any
    of these costs ten times the forward pass. Re-making an op's saved buffers re-runs the op: its
    cost. Node ids are unchanged, so a schedule found on this graph replays on the captured one."""
    costs = kiwi.graph_summary(captured.graph, captured.cluster)["node_costs"]
    graph = json.loads(json.dumps(captured.graph))
    forward = sum(c for n, c in zip(graph["nodes"], costs) if n.get("pass", "forward") == "forward")
    penalty = 10.0 * max(forward, 1e-9)
    saved_of = {b.saved: b.node for b in captured.structure.bundles.values() if b.saved is not None}
    for node, cost in zip(graph["nodes"], costs):
        node["cost"] = float(cost)
        fixed = node.get("pass") == "backward" or (node["kind"] == "opaque" and node["op"] in _AUX_OPS)
        if fixed and node["kind"] not in ("optimizer_state", "parameter", "input"):
            node["cost"] = float(cost) + penalty
        elif node["id"] in saved_of:
            node["cost"] = float(costs[saved_of[node["id"]]])
    return graph


def floor(captured: Captured) -> Dict[str, Any]:
    """No plan's predicted peak is below `bytes`: what must be resident right after the backward group
    of `at` whatever is dropped (schedule.memory_floor)."""
    base = predict(captured, [])
    low, node = memory_floor(captured.graph, captured.structure, base["schedule"], base["sim"]["timeline"])
    return {"bytes": low, "at": captured.graph["nodes"][node]["name"] if node >= 0 else ""}


def droppable_tensors(captured: Captured) -> List[int]:
    """Kiwi ids of the saved tensors a plan may drop (and the applied module recompute)."""
    return droppable(captured.graph, captured.structure)


def plan_from_dropped(captured: Captured, dropped: List[int], solver: str = "manual") -> RematPlan:
    """A plan that drops exactly `dropped` (kiwi ids from droppable_tensors), with kiwi's prediction."""
    allowed = set(droppable_tensors(captured))
    bad = [t for t in dropped if t not in allowed]
    if bad:
        raise PlanError(f"node {bad[0]} is not a droppable saved tensor of {captured.name}")
    base = predict(captured, [])
    p = predict(captured, list(dropped))
    return RematPlan(captured, None, sorted(dropped), p["schedule"], p["peak"], p["seconds"], base["peak"],
                     base["seconds"], solver)


def plan_remat(captured: Captured, budget: Union[int, str, None] = None, fraction: Optional[float] = None,
               solver: str = "heuristic", time_limit: float = 30.0, max_attempts: int = 8) -> RematPlan:
    """The cheapest plan kiwi finds whose predicted peak (the applied module's, simulated) fits the
    budget: bytes ("4GiB") or `fraction` of the no-rematerialization peak. `solver`: any of
    kiwi.remat_solvers(); the keep/cut heuristic (default) takes milliseconds, "auto" adds Checkmate's
    MILP within `time_limit`. Raises InfeasibleError naming the smallest budget kiwi can realise."""
    base = predict(captured, [])
    if (budget is None) == (fraction is None):
        raise PlanError("plan_remat: give exactly one of budget= and fraction=")
    limit = kiwi.parse_bytes(budget, "budget") if budget is not None else int(base["peak"] * float(fraction))
    plan = RematPlan(captured, limit, [], base["schedule"], base["peak"], base["seconds"], base["peak"],
                     base["seconds"], "checkpoint-all")
    if base["peak"] <= limit:
        return plan
    bound = floor(captured)
    target, spent, lowest = limit, 0.0, base["peak"]
    search = planning_graph(captured)
    for attempt in range(1, max_attempts + 1):
        if limit < bound["bytes"]:
            break
        r = kiwi.solve_remat(search, max(target, 0), solver, captured.cluster, time_limit, check=False)
        spent += r.solve_seconds
        if not r.feasible:
            break
        dropped = dropped_of(captured, r.schedule)
        p = predict(captured, dropped)
        lowest = min(lowest, p["peak"])
        if p["peak"] <= limit:
            return RematPlan(captured, limit, dropped, p["schedule"], p["peak"], p["seconds"], base["peak"],
                             base["seconds"], r.solver, spent, attempt)
        target -= max(p["peak"] - limit, 1 << 16)  # ask the solver for what the realisation overshot
    raise InfeasibleError(f"{captured.name}: no plan fits {kiwi.format_bytes(limit)} ({limit} bytes); the smallest "
                          f"budget kiwi can realise for this model is {kiwi.format_bytes(lowest)} ({lowest} bytes); "
                          f"no plan can go below {kiwi.format_bytes(bound['bytes'])} ({bound['bytes']} bytes: "
                          f"parameters, optimizer state, gradients, workspace and saved inputs of the backward of "
                          f"'{bound['at']}'); without rematerialization {kiwi.format_bytes(base['peak'])}")


def apply_remat(model: Union[torch.nn.Module, Captured], plan: Union[RematPlan, Dict[str, Any], str],
                captured: Optional[Captured] = None) -> RematModule:
    """A module whose training step keeps exactly the activations `plan` keeps and recomputes the rest,
    with the original's parameters (shared) and gradients. `plan`: a RematPlan, or a kiwi plan (dict
    or file) made for `captured` (a tensor it computes twice is recomputed)."""
    if isinstance(plan, RematPlan):
        cap = plan.captured
        dropped = plan.dropped
    else:
        cap = captured if captured is not None else (model if isinstance(model, Captured) else None)
        if cap is None:
            raise PlanError("apply_remat: a plan file needs the Captured model it was made for (captured=)")
        doc = kiwi.read_plan(plan) if isinstance(plan, str) else json.loads(kiwi.core._kiwi.normalize_plan(
            json.dumps(plan), "plan"))
        steps = (doc.get("operator") or {}).get("schedule", [])
        n = len(cap.graph["nodes"])
        bad = [s["node"] for s in steps if s["node"] >= n]
        if bad:
            raise PlanError(f"plan: node {bad[0]} does not exist in the captured graph ({n} nodes): "
                            f"the plan was made for another graph")
        dropped = dropped_of(cap, steps)
    if isinstance(model, torch.nn.Module) and not isinstance(model, RematModule) and model is not cap.model:
        if {id(p) for p in model.parameters()} != {id(p) for p in cap.model.parameters()}:
            raise PlanError(f"apply_remat: the plan was captured from another {type(cap.model).__name__} "
                            f"instance (its parameters differ)")
    return RematModule(cap, dropped)
