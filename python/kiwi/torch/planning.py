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
from kiwi.torch.chunked_optimizer import default_chunk_bytes
from kiwi.torch.errors import InfeasibleError, PlanError
from kiwi.torch.runtime import RematModule
from kiwi.torch.schedule import droppable
from kiwi.torch.stepping import StepConfig, StepModel, lean_optimizer_possible, micro_batch_obstacle


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
    config: StepConfig = StepConfig()  # micro-batches (captured is then the micro-batch's) and optimizer chunks

    @property
    def micro_batches(self) -> int:
        return self.config.micro_batches

    def names(self) -> List[str]:
        nodes = self.captured.graph["nodes"]
        return [nodes[v]["name"] for v in self.dropped]

    def to_json(self) -> Dict[str, Any]:
        """The plan in kiwi's plan format (docs/plan-format.md); the dropped set is implied by the
        schedule (a tensor computed twice is recomputed)."""
        n = len(self.captured.graph["nodes"])  # a pass's own resident inputs are not in the captured graph
        steps = [s for s in self.schedule if s["node"] < n]
        return kiwi.make_plan(steps, graph=self.captured.name, solver="kiwi.torch:" + self.solver,
                              cluster=self.captured.cluster if isinstance(self.captured.cluster, str) else
                              self.captured.cluster.get("name", ""),
                              peak_memory_bytes=self.predicted_peak_bytes, iteration_seconds=self.predicted_seconds)

    def save(self, path: str) -> None:
        kiwi.write_plan(self.to_json(), path)


def predict(captured: Captured, dropped: List[int], config: Optional[StepConfig] = None) -> Dict[str, Any]:
    """The applied module's schedule for a dropped set and the simulator's account of the step
    (`config`: micro-batches and optimizer chunks; `captured` is then the micro-batch's capture)."""
    return StepModel(captured, config or StepConfig()).predict(dropped)


def dropped_of(captured: Captured, schedule: List[Dict[str, Any]]) -> List[int]:
    """Droppable tensors a schedule computes more than once."""
    counts: Dict[int, int] = {}
    for s in schedule:
        if s["op"] == "compute":
            counts[s["node"]] = counts.get(s["node"], 0) + 1
    return [t for t in droppable(captured.graph, captured.structure) if counts.get(t, 0) > 1]


_AUX_OPS = ("workspace", "workspace_end", "autograd_unpack", "autograd_release")


def planning_graph(captured: Captured, graph: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The graph the solvers search: the captured graph with explicit costs, where recomputations the
    applied module cannot make must not look cheap. Autograd never recomputes a gradient, workspaces
    exist while their op runs, unpack/release markers stand at autograd's boundaries: recomputing any
    of these costs ten times the forward pass. Re-making an op's saved buffers re-runs the op: its
    cost. Node ids are unchanged, so a schedule found on this graph replays on the captured one.
    `graph`: one of the step's passes (stepping.pass_graph) instead of the captured graph."""
    source = graph if graph is not None else captured.graph
    costs = kiwi.graph_summary(source, captured.cluster, captured.profile)["node_costs"]
    graph = json.loads(json.dumps(source))
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


def floor(captured: Captured, config: Optional[StepConfig] = None) -> Dict[str, Any]:
    """No plan's predicted peak is below `bytes`: what must be resident right after the backward group
    `at` whatever is dropped (schedule.memory_floor). Without `config`, the lowest over the step
    configurations plan_remat may choose (step_configs), and `config` says which."""
    configs = [config] if config is not None else step_configs(captured)
    best = None
    for cfg in configs:
        low, at = StepModel(captured.at_batch(captured.batch // cfg.micro_batches), cfg).floor()
        if best is None or low < best["bytes"]:
            best = {"bytes": low, "at": at, "config": cfg}
    return best


def step_configs(captured: Captured, micro_batches: Union[int, str] = "auto",
                 optimizer_chunks: Union[bool, int, str] = "auto") -> List[StepConfig]:
    """The step configurations plan_remat tries, fastest first: one pass with PyTorch's optimizer step,
    then the optimizer in chunks (Adam), then 2, 4, ... micro-batches (divisors of the batch) where
    splitting the batch computes the same step (stepping.micro_batch_obstacle)."""
    batch = captured.batch
    if micro_batches == "auto":
        ks = [1] + ([k for k in range(2, batch + 1) if batch % k == 0]
                    if micro_batch_obstacle(captured) is None else [])
    else:
        k = int(micro_batches)
        if k < 1 or batch % k:
            raise PlanError(f"micro_batches: {micro_batches} does not divide the batch ({batch})")
        reason = micro_batch_obstacle(captured) if k > 1 else None
        if reason:
            raise PlanError(f"micro_batches: {captured.name} cannot be split into micro-batches: {reason}")
        ks = [k]
    if optimizer_chunks == "auto":
        chunks = [0] + ([default_chunk_bytes(captured.model)] if lean_optimizer_possible(captured) else [])
    elif optimizer_chunks is False or optimizer_chunks == 0:
        chunks = [0]
    else:
        chunks = [default_chunk_bytes(captured.model) if optimizer_chunks is True else
                  kiwi.parse_bytes(optimizer_chunks, "optimizer_chunks")]
    return [StepConfig(k, c) for k in ks for c in chunks]


def droppable_tensors(captured: Captured) -> List[int]:
    """Kiwi ids of the saved tensors a plan may drop (and the applied module recompute)."""
    return droppable(captured.graph, captured.structure)


def plan_from_dropped(captured: Captured, dropped: List[int], solver: str = "manual",
                      config: Optional[StepConfig] = None) -> RematPlan:
    """A plan that drops exactly `dropped` (kiwi ids from droppable_tensors), with kiwi's prediction.
    With a `config` of k micro-batches, `captured` is the micro-batch's (Captured.at_batch)."""
    allowed = set(droppable_tensors(captured))
    bad = [t for t in dropped if t not in allowed]
    if bad:
        raise PlanError(f"node {bad[0]} is not a droppable saved tensor of {captured.name}")
    cfg = config or StepConfig()
    if cfg.micro_batches > 1:
        reason = micro_batch_obstacle(captured)
        if reason:
            raise PlanError(f"config: {captured.name} cannot be split into micro-batches: {reason}")
    base = predict(captured, [], cfg)
    p = predict(captured, list(dropped), cfg)
    return RematPlan(captured, None, sorted(dropped), p["schedule"], p["peak"], p["seconds"], base["peak"],
                     base["seconds"], solver, config=cfg)


def plan_remat(captured: Captured, budget: Union[int, str, None] = None, fraction: Optional[float] = None,
               solver: str = "heuristic", time_limit: float = 30.0, max_attempts: int = 8,
               micro_batches: Union[int, str] = "auto", optimizer_chunks: Union[bool, int, str] = "auto") -> RematPlan:
    """The cheapest plan kiwi finds whose predicted peak (the applied module's, simulated) fits the
    budget: bytes ("4GiB") or `fraction` of the no-rematerialization peak. `solver`: any of
    kiwi.remat_solvers(); the keep/cut heuristic (default) takes milliseconds, "auto" adds Checkmate's
    MILP within `time_limit`. When no plan of one pass fits, the step itself changes (step_configs):
    Adam's update in chunks, then the batch in micro-batches (`micro_batches`, `optimizer_chunks`: "auto"
    or fixed). Raises InfeasibleError naming the smallest budget kiwi can realise."""
    base = predict(captured, [])
    if (budget is None) == (fraction is None):
        raise PlanError("plan_remat: give exactly one of budget= and fraction=")
    limit = kiwi.parse_bytes(budget, "budget") if budget is not None else int(base["peak"] * float(fraction))
    lowest, bound = base["peak"], None
    for cfg in step_configs(captured, micro_batches, optimizer_chunks):
        cap = captured.at_batch(captured.batch // cfg.micro_batches)
        model = StepModel(cap, cfg)
        plan, realised, low = _plan_for(model, limit, solver, time_limit, max_attempts, base)
        if plan is not None:
            return plan
        lowest = min(lowest, realised)
        if bound is None or low[0] < bound[0]:
            bound = (low[0], low[1], cfg)
    assert bound is not None
    obstacle = micro_batch_obstacle(captured) if micro_batches == "auto" else None
    tried = f" (micro-batches not tried: {obstacle})" if obstacle else ""
    raise InfeasibleError(f"{captured.name}: no plan fits {kiwi.format_bytes(limit)} ({limit} bytes); the smallest "
                          f"budget kiwi can realise for this model is {kiwi.format_bytes(lowest)} ({lowest} bytes); "
                          f"no plan can go below {kiwi.format_bytes(bound[0])} ({bound[0]} bytes: "
                          f"{_floor_parts(bound[1])}, {bound[2].describe()}){tried}; without rematerialization "
                          f"{kiwi.format_bytes(base['peak'])}")


def _floor_parts(at: str) -> str:
    if at == "optimizer":
        return "parameters, optimizer state, gradients and the optimizer step's temporaries"
    return f"parameters, optimizer state, gradients, workspace and saved inputs of the backward of '{at}'"


def _plan_for(model: StepModel, limit: int, solver: str, time_limit: float, max_attempts: int,
              base: Dict[str, Any]):
    """The cheapest plan of one step configuration that fits `limit`, else None; also the lowest peak
    realised and the configuration's floor (bytes, op)."""
    cap, cfg = model.captured, model.config
    mine = model.predict([])
    if mine["peak"] <= limit:
        return RematPlan(cap, limit, [], mine["schedule"], mine["peak"], mine["seconds"], base["peak"],
                         base["seconds"], "checkpoint-all", config=cfg), mine["peak"], (0, "")
    low = model.floor(mine)
    lowest = mine["peak"]
    if limit < low[0]:
        return None, lowest, low
    spent, attempt = 0.0, 0
    search = planning_graph(cap, model.search_graph())
    # The keep/cut heuristic also runs when another solver finds nothing that fits: near the floor the
    # solvers' schedules and the applied module's realisation of them differ most, and it takes ms.
    for name in [solver] + (["heuristic"] if solver != "heuristic" else []):
        target = limit
        for _ in range(max_attempts):
            attempt += 1
            r = kiwi.solve_remat(search, max(target, 0), name, cap.cluster, time_limit, check=False,
                                 profile=cap.profile)
            spent += r.solve_seconds
            if not r.feasible:
                break
            dropped = dropped_of(cap, r.schedule)
            p = model.predict(dropped)
            lowest = min(lowest, p["peak"])
            if p["peak"] <= limit:
                return RematPlan(cap, limit, dropped, p["schedule"], p["peak"], p["seconds"], base["peak"],
                                 base["seconds"], r.solver, spent, attempt, cfg), lowest, low
            target -= max(p["peak"] - limit, 1 << 16)  # ask the solver for what the realisation overshot
    return None, lowest, low


def apply_remat(model: Union[torch.nn.Module, Captured], plan: Union[RematPlan, Dict[str, Any], str],
                captured: Optional[Captured] = None, config: Optional[StepConfig] = None) -> RematModule:
    """A module whose training step keeps exactly the activations `plan` keeps and recomputes the rest,
    with the original's parameters (shared) and gradients. `plan`: a RematPlan, or a kiwi plan (dict
    or file) made for `captured` (a tensor it computes twice is recomputed; a plan file does not record
    micro-batches or optimizer chunks: pass `config`, and the micro-batch's capture)."""
    if isinstance(plan, RematPlan):
        cap = plan.captured
        dropped = plan.dropped
        config = plan.config
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
    return RematModule(cap, dropped, config=config or StepConfig())
