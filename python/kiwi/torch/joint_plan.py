"""Plans a generically captured training step (kiwi.torch.joint_capture) for a memory budget with kiwi's
rematerialization solvers, and applies the plan in an ordinary training loop.

The plan is a kiwi schedule over the captured storage graph; JointRunner runs it op by op, so what is
resident at each moment is what the schedule says, and the simulator's peak is the prediction."""
import dataclasses
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.utils._pytree as pytree

import kiwi
from kiwi.torch.chunked_optimizer import default_chunk_bytes
from kiwi.torch.errors import InfeasibleError, PlanError
from kiwi.torch.joint_capture import OPTIMIZER_WORKSPACE, JointCapture
from kiwi.torch.joint_run import JointRunner, checkpoint_all, recomputed_nodes, rerun_transients

# Python numbers PyTorch wraps as 8-byte tensors for an instant (a scale, an epsilon) are in no node:
# plans leave this much of the budget free for them.
SCALAR_SLACK = 256


@dataclasses.dataclass
class JointPlan:
    """A schedule of one captured step and the simulator's account of it."""
    capture: JointCapture
    budget_bytes: int
    solver: str
    schedule: List[Dict[str, Any]]
    predicted_peak_bytes: int
    predicted_seconds: float
    baseline_peak_bytes: int        # checkpoint-all: every tensor kept until its last reader
    baseline_seconds: float
    solve_seconds: float = 0.0

    def recomputed(self) -> List[str]:
        """Names of the nodes the schedule computes more than once."""
        return [self.capture.graph["nodes"][v]["name"] for v in recomputed_nodes(self.schedule)]

    def to_json(self) -> Dict[str, Any]:
        """A kiwi plan file (docs/plan-format.md) for the captured graph."""
        return kiwi.make_plan(self.schedule, graph=self.capture.name, solver=self.solver,
                              peak_memory_bytes=self.predicted_peak_bytes, iteration_seconds=self.predicted_seconds)

    def save(self, path: str) -> None:
        kiwi.write_plan(self.to_json(), path)


def planning_graph(cap: JointCapture) -> Dict[str, Any]:
    """The graph the solvers search: the captured one with each node's cost made explicit, where
    computing an op's second or later output alone (layer norm's mean, a convolution's weight
    gradient) costs ten forward passes: it re-runs the whole op, whose other outputs and temporaries
    then exist for an instant that no node counts, so kiwi computes those outputs with the op or keeps
    them. Node ids are unchanged (a schedule found here replays on the captured graph)."""
    costs = kiwi.graph_summary(cap.graph, cap.cluster, cap.profile)["node_costs"]
    graph = json.loads(json.dumps(cap.graph))
    forward = sum(c for n, c in zip(graph["nodes"], costs) if n.get("pass", "forward") == "forward")
    for v, node in enumerate(graph["nodes"]):
        node["cost"] = float(costs[v])
    for made in cap.effects.values():
        first, *later = [v for v, p in made if p.what != "workspace"]
        for v in later:
            graph["nodes"][v]["cost"] = float(costs[first]) + 10.0 * max(forward, 1e-9)
    return graph


def _simulate(cap: JointCapture, schedule: List[Dict[str, Any]]) -> Dict[str, Any]:
    return kiwi.simulate(cap.graph, kiwi.make_plan(schedule), cap.cluster, cap.profile)


def check_fraction(fraction: Any) -> float:
    """A fraction of a peak, refused in one line unless it is a number in (0, 1]."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction <= 1.0:
        raise PlanError(f"fraction: must be in (0, 1], got {fraction!r}")
    return float(fraction)


def fraction_budget(cap: JointCapture, fraction: float, checkpoint_all_peak: Optional[int] = None) -> int:
    """`fraction` of what the step needs without recomputation (checkpoint-all), scalars included."""
    check_fraction(fraction)
    if checkpoint_all_peak is None:
        checkpoint_all_peak = int(_simulate(cap, checkpoint_all(cap))["peak_memory_bytes"])
    return int((checkpoint_all_peak + SCALAR_SLACK) * fraction)


def plan_joint(cap: JointCapture, budget: Union[int, str, None] = None, fraction: Optional[float] = None,
               solver: str = "heuristic", time_limit: float = 30.0,
               optimizer_chunks: Union[bool, int, str] = "auto") -> JointPlan:
    """The cheapest schedule kiwi finds whose simulated peak fits `budget` (bytes or "2GiB"), or
    `fraction` of the checkpoint-all peak (with SCALAR_SLACK). A budget no schedule fits raises InfeasibleError naming
    the smallest budget kiwi has a schedule for.

    Captured with Adam or AdamW, the step may also update the parameters a chunk at a time
    (JointCapture.with_optimizer_chunks): `optimizer_chunks` "auto" plans that step too where the
    plain one does not fit without recomputation, and takes the faster; True (a chunk of
    default_chunk_bytes), a size ("4MiB") or False fixes it."""
    if (budget is None) == (fraction is None):
        raise PlanError("plan_joint: give exactly one of budget= and fraction=")
    steps = _optimizer_variants(cap, optimizer_chunks)
    limit = fraction_budget(cap, fraction) if fraction is not None else kiwi.parse_bytes(budget, "budget")
    best: Optional[JointPlan] = None
    errors: List[InfeasibleError] = []
    for step in steps:
        try:
            plan = _plan_at(step, limit, solver, time_limit)
        except InfeasibleError as e:
            errors.append(e)
            continue
        if best is None or plan.predicted_seconds < best.predicted_seconds:
            best = plan
        if not recomputed_nodes(plan.schedule):   # nothing recomputed: no variant is faster
            break
    if best is not None:
        return best
    known = [e for e in errors if e.smallest_budget_bytes is not None]
    raise min(known, key=lambda e: e.smallest_budget_bytes) if known else errors[0]


def _optimizer_variants(cap: JointCapture, optimizer_chunks: Union[bool, int, str]) -> List[JointCapture]:
    """The steps plan_joint considers: as captured, and/or with the optimizer in chunks."""
    if optimizer_chunks is False or optimizer_chunks == 0:
        return [cap]
    chunkable = isinstance(cap.optimizer, (torch.optim.Adam, torch.optim.AdamW)) and \
        not cap.optimizer.defaults.get("fused") and \
        any(n["name"] == OPTIMIZER_WORKSPACE for n in cap.graph["nodes"])
    if optimizer_chunks == "auto":
        return [cap, cap.with_optimizer_chunks(default_chunk_bytes(cap.model))] if chunkable else [cap]
    if not chunkable:
        what = type(cap.optimizer).__name__ if cap.optimizer is not None else "no optimizer"
        raise PlanError(f"optimizer_chunks: the step's optimizer update runs in chunks for Adam and AdamW (not "
                        f"fused) captured in the step (capture_joint(..., optimizer=)); this step has {what}")
    chunk = default_chunk_bytes(cap.model) if optimizer_chunks is True else \
        kiwi.parse_bytes(optimizer_chunks, "optimizer_chunks")
    return [cap.with_optimizer_chunks(chunk)]


def _plan_at(cap: JointCapture, limit: int, solver: str, time_limit: float) -> JointPlan:
    """plan_joint for one step at `limit` bytes."""
    base = checkpoint_all(cap)
    sim0 = _simulate(cap, base)
    peak0, secs0 = int(sim0["peak_memory_bytes"]), float(sim0["iteration_seconds"])
    if peak0 <= limit - SCALAR_SLACK:
        return JointPlan(cap, limit, "checkpoint-all", base, peak0, secs0, peak0, secs0)
    search = planning_graph(cap)
    target, spent = limit - SCALAR_SLACK, 0.0
    for _ in range(3):   # ask again for less when an op re-run for one output overshoots
        r = kiwi.solve_remat(search, max(target, 0), solver, cap.cluster, time_limit, check=False,
                             profile=cap.profile)
        spent += r.solve_seconds
        if not r.feasible:
            break
        peak, seconds = _predicted(cap, r.schedule)
        cap.known_schedules.append((peak, seconds, r.solver, r.schedule))
        if peak <= limit - SCALAR_SLACK:
            return JointPlan(cap, limit, r.solver, r.schedule, peak, seconds, peak0, secs0, spent)
        target -= peak - (limit - SCALAR_SLACK)
    if r.smallest_known_budget_bytes > 0:   # the schedule behind the solver's smallest peak
        at = kiwi.solve_remat(search, r.smallest_known_budget_bytes, solver, cap.cluster, time_limit, check=False,
                              profile=cap.profile)
        if at.feasible:
            cap.known_schedules.append((*_predicted(cap, at.schedule), at.solver, at.schedule))
    # A heuristic asked for less may miss what it found when asked for more: every schedule found for
    # this capture is a plan, and the smallest of them is the smallest budget kiwi knows.
    fits = [k for k in cap.known_schedules if k[0] <= limit - SCALAR_SLACK]
    if fits:
        peak, seconds, name, schedule = min(fits, key=lambda k: (k[1], k[0]))
        return JointPlan(cap, limit, name, schedule, peak, seconds, peak0, secs0, spent)
    smallest = min(k[0] for k in cap.known_schedules) + SCALAR_SLACK if cap.known_schedules else None
    error = InfeasibleError(
        f"budget {kiwi.format_bytes(limit)} ({limit} bytes): no schedule of {cap.name} fits"
        + (f"; the smallest budget kiwi can satisfy is {kiwi.format_bytes(smallest)} ({smallest} bytes)"
           if smallest else "") + f" (memory lower bound {r.memory_lower_bound_bytes} bytes)")
    error.smallest_budget_bytes = smallest
    raise error


def plan_joint_or_smallest(cap: JointCapture, fraction: Optional[float] = None, solver: str = "heuristic",
                           time_limit: float = 30.0, budget: Union[int, str, None] = None,
                           optimizer_chunks: Union[bool, int, str] = "auto") -> Tuple[JointPlan, bool]:
    """plan_joint at `fraction` of the checkpoint-all peak (or at `budget`) or, where that is below what
    kiwi can reach, at the smallest budget it knows; and whether the fraction (budget) was reached."""
    try:
        return plan_joint(cap, budget=budget, fraction=fraction, solver=solver, time_limit=time_limit,
                          optimizer_chunks=optimizer_chunks), True
    except InfeasibleError as e:
        if e.smallest_budget_bytes is None:
            raise
        return plan_joint(cap, budget=e.smallest_budget_bytes, solver=solver, time_limit=time_limit,
                          optimizer_chunks=optimizer_chunks), False


def _predicted(cap: JointCapture, schedule: List[Dict[str, Any]]) -> Tuple[int, float]:
    """The simulator's peak and time of a schedule, with the instants where the runner re-runs an op
    for one of its later outputs (rerun_transients) added to the bytes resident then."""
    sim = _simulate(cap, schedule)
    peak = int(sim["peak_memory_bytes"])
    for step, extra in rerun_transients(cap, schedule).items():
        peak = max(peak, int(sim["timeline"][step]) + extra)
    return peak, float(sim["iteration_seconds"])


class JointStep:
    """A training step that runs `plan`: call it with the step's inputs (as captured: the positional
    arguments, or the keyword dict, and the labels) and it returns the loss. Captured without an
    optimizer, it fills each trainable parameter's `.grad` (adding to it, as backward() does): then
    call your optimizer. Captured with one, the step includes the optimizer's step."""

    def __init__(self, plan: Union[JointPlan, JointCapture], scale: float = 1.0):
        self.capture = plan.capture if isinstance(plan, JointPlan) else plan
        self.schedule = plan.schedule if isinstance(plan, JointPlan) else checkpoint_all(plan)
        self.runner = JointRunner(self.capture)
        self.scale = scale   # the gradients are multiplied by it (1 / micro-batches: their mean)
        self.runner.gradient_scale = scale   # a captured optimizer's step reads them so scaled

    def __call__(self, *args: Any, labels: Any = None, **kwargs: Any) -> torch.Tensor:
        cap = self.capture
        inputs: Optional[Sequence[Any]] = None
        if args or kwargs or labels is not None:
            a = args[0] if len(args) == 1 and isinstance(args[0], dict) else args
            a, kw = ((), dict(a)) if isinstance(a, dict) else (tuple(a), kwargs)
            leaves, spec = pytree.tree_flatten((a, kw, labels))
            if spec != cap.input_spec:
                raise PlanError(f"inputs: their structure {spec} differs from the captured step's {cap.input_spec}")
            inputs = [t for t in leaves if isinstance(t, torch.Tensor)]
            for t, c in zip(inputs, [c for c in cap.input_leaves if isinstance(c, torch.Tensor)]):
                if t.shape != c.shape or t.dtype != c.dtype:
                    raise PlanError(f"inputs: a tensor of shape {tuple(t.shape)} {t.dtype} where the step was "
                                    f"captured with {tuple(c.shape)} {c.dtype}: capture again for new shapes")
        loss, grads = self.runner.run(self.schedule, inputs)
        scaled: set = set()
        with torch.no_grad():
            for name, g in zip(cap.param_names, grads):
                if g is None:
                    continue
                p = self.runner.params[name]
                if p.grad is None:
                    if not g.is_contiguous():
                        g = g.contiguous()
                    elif id(g) in scaled:   # one tensor for two parameters: scaled once already
                        g = g.clone()
                    if self.scale != 1.0:   # in place: the step's own tensor, no second copy
                        g.mul_(self.scale)
                        scaled.add(id(g))
                    p.grad = g
                else:
                    p.grad.add_(g, alpha=self.scale)
        return loss


def apply_joint(plan: Union[JointPlan, JointCapture]) -> JointStep:
    """The training step of `plan` (a JointCapture alone: checkpoint-all, i.e. no rematerialization)."""
    return JointStep(plan)
