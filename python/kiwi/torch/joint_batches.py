"""Micro-batches on the generic path: when no schedule of the whole batch fits the budget (or one that
fits recomputes much), the step runs as k micro-batches, each a captured step of batch / k planned by
kiwi, with the gradients accumulated in the parameters' `.grad`.

Memory: the first micro-batch is its plan's peak; from the second on the accumulated gradients are
resident all step beside it (PyTorch keeps `.grad` between the micro-batches), and the whole batch's
inputs are resident throughout where a micro-batch's plan counts its own slice, so kiwi plans each
micro-batch at the budget less those bytes, and the prediction is exact as the plan's is. Time: k times
the micro-batch's predicted step. The gradients are the mean over the micro-batches of each one's
gradient (each micro-batch's loss is a mean over its own samples, as the whole batch's is over all of
them), equal to the whole batch's within float tolerance: the sums run in another order. Batch norm in
training mode computes its statistics over the micro-batch, not the batch, so a model with it is planned
as one batch only.

With an optimizer, its step runs once, inside the last micro-batch's plan (a capture with the
optimizer, its update chunked where that is faster at the budget), on the earlier micro-batches'
gradients plus the last one's; its state is resident throughout, so the earlier micro-batches are
planned at the budget less it too."""
import dataclasses
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch
import torch.utils._pytree as pytree

import kiwi
from kiwi.torch.errors import InfeasibleError, PlanError
from kiwi.torch.joint_capture import capture_joint
from kiwi.torch.joint_capture import JointCapture
from kiwi.torch.dtypes import node_bytes
from kiwi.torch.joint_plan import JointPlan, JointStep, fraction_budget, plan_joint
from kiwi.torch.measure import unique_bytes


@dataclasses.dataclass
class MicroBatchPlan:
    """The step as `micro_batches` captured steps of one micro-batch each, run by `plan`."""
    plan: JointPlan                 # of one micro-batch
    micro_batches: int
    budget_bytes: int
    gradient_bytes: int             # the accumulated gradients, resident from the second micro-batch on
    other_inputs_bytes: int         # the whole batch's inputs beyond the micro-batch's slice
    predicted_peak_bytes: int
    predicted_seconds: float
    considered: List[Tuple[int, Optional[int], Optional[float]]]   # (k, predicted peak, seconds); None: no fit
    last: Optional[JointPlan] = None   # with an optimizer and k > 1: the last micro-batch's, which steps it
    optimizer_state_bytes: int = 0     # the optimizer's state, resident beside the earlier micro-batches


def _batch_size(leaves: Sequence[Any]) -> int:
    """The batch: the first dimension of the inputs' first tensor."""
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.dim() >= 1:
            return int(leaf.shape[0])
    raise PlanError("micro_batches: the inputs hold no tensor with a batch dimension")


def split_batch(example: Any, batch: int, k: int) -> List[Any]:
    """`example` (any structure of tensors) cut into k micro-batches along dimension 0 of every tensor
    whose first dimension is the batch; other leaves are passed whole to each."""
    leaves, spec = pytree.tree_flatten(example)
    parts = [[leaf.chunk(k, dim=0)[i] if isinstance(leaf, torch.Tensor) and leaf.dim() >= 1
              and leaf.shape[0] == batch else leaf for leaf in leaves] for i in range(k)]
    return [pytree.tree_unflatten(p, spec) for p in parts]


def _gradient_bytes(cap: JointCapture) -> int:
    """Bytes of the `.grad` tensors the step fills (the parameters that get a gradient)."""
    grads = cap.output_node.args[0][1:]
    params = dict(cap.model.named_parameters())
    return sum(params[n].numel() * params[n].element_size() for n, g in zip(cap.param_names, grads) if g is not None)


def _optimizer_state_bytes(cap: JointCapture) -> int:
    return sum(node_bytes(n) for n in cap.graph["nodes"] if n["kind"] == "optimizer_state")


def _has_batch_norm(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training for m in model.modules())


def plan_joint_batches(model: torch.nn.Module, example_inputs: Any, labels: Any = None,
                       loss: Any = "cross_entropy", budget: Union[int, str, None] = None,
                       fraction: Optional[float] = None, micro_batches: Union[int, str] = "auto",
                       solver: str = "heuristic", time_limit: float = 30.0,
                       optimizer: Optional[torch.optim.Optimizer] = None,
                       optimizer_chunks: Union[bool, int, str] = "auto", **capture_kwargs: Any) -> MicroBatchPlan:
    """The fastest plan of the step at `budget` (bytes) or `fraction` (of the whole batch's
    checkpoint-all peak) over k micro-batches: k = `micro_batches`, or with "auto" k = 1, 2, 4, ...
    (dividing the batch) until one needs no recomputation. `optimizer` (a torch.optim optimizer over
    the model's parameters) steps once, in the last micro-batch's plan (`optimizer_chunks` as for
    plan_joint). capture_kwargs go to capture_joint."""
    if (budget is None) == (fraction is None):
        raise PlanError("plan_joint_batches: give exactly one of budget= and fraction=")
    example = (example_inputs, labels)
    batch = _batch_size(pytree.tree_leaves(example))
    if micro_batches == "auto":
        candidates = [k for k in (1 << i for i in range(16)) if k <= batch and batch % k == 0]
        if _has_batch_norm(model):
            candidates = [1]
    elif isinstance(micro_batches, int) and not isinstance(micro_batches, bool) and micro_batches >= 1:
        if batch % micro_batches:
            raise PlanError(f"micro_batches: {micro_batches} does not divide the batch of {batch}")
        if micro_batches > 1 and _has_batch_norm(model):
            raise PlanError(f"micro_batches: {type(model).__name__} has batch norm in training mode, whose "
                            f"statistics over a micro-batch differ from the batch's; use 1")
        candidates = [micro_batches]
    else:
        raise PlanError(f"micro_batches: expected a positive int or 'auto', got {micro_batches!r}")

    def capture(micro: Tuple[Any, Any], opt: Optional[torch.optim.Optimizer]) -> JointCapture:
        return capture_joint(model, micro[0], labels=micro[1], loss=loss, optimizer=opt, **capture_kwargs)

    def plan(cap: JointCapture, limit: int) -> JointPlan:
        chunks = {"optimizer_chunks": optimizer_chunks} if cap.optimizer is not None else {}
        return plan_joint(cap, budget=limit, solver=solver, time_limit=time_limit, **chunks)

    captures = {}
    if fraction is not None:   # of the whole batch's step
        captures[1] = capture(example, optimizer)
        limit = fraction_budget(captures[1], fraction)
    else:
        limit = kiwi.parse_bytes(budget, "budget")
    best: Optional[MicroBatchPlan] = None
    considered: List[Tuple[int, Optional[int], Optional[float]]] = []
    gradient_bytes = 0
    whole_inputs = unique_bytes(pytree.tree_leaves(example))
    for k in candidates:
        micro = split_batch(example, batch, k)[0]
        stepping = optimizer is not None and k > 1   # the last micro-batch steps the optimizer
        cap = captures.get(k) or capture(micro, None if stepping else optimizer)
        last_cap = capture(micro, optimizer) if stepping else None
        gradient_bytes = _gradient_bytes(cap) if k > 1 else 0
        state = _optimizer_state_bytes(last_cap) if last_cap is not None else 0
        others = max(whole_inputs - sum(t.numel() * t.element_size() for t in pytree.tree_leaves(micro)
                                        if isinstance(t, torch.Tensor)), 0)
        resident = gradient_bytes + others
        if limit - resident - state <= 0:
            considered.append((k, None, None))
            continue
        try:
            first = plan(cap, limit - resident - state)
            last = plan(last_cap, limit - resident) if last_cap is not None else None
        except InfeasibleError:
            considered.append((k, None, None))
            continue
        if last is None:
            peak, seconds = first.predicted_peak_bytes + resident, k * first.predicted_seconds
        else:
            peak = max(first.predicted_peak_bytes + state, last.predicted_peak_bytes) + resident
            seconds = (k - 1) * first.predicted_seconds + last.predicted_seconds
        considered.append((k, peak, seconds))
        if best is None or seconds < best.predicted_seconds:
            best = MicroBatchPlan(first, k, limit, gradient_bytes, others, peak, seconds, considered, last, state)
        if not first.recomputed() and (last is None or not last.recomputed()):   # more only add per-op time
            break
    if best is None:
        error = InfeasibleError(f"budget {kiwi.format_bytes(limit)} ({limit} bytes): no plan of "
                                f"{type(model).__name__} fits in {', '.join(str(k) for k in candidates)} "
                                f"micro-batches (the gradients alone take {gradient_bytes} bytes from the second on)")
        error.smallest_budget_bytes = None   # not searched across micro-batch counts
        raise error
    best.considered = considered
    return best


class MicroBatchStep:
    """The step of a MicroBatchPlan: call it with the whole batch (as planned) and it runs the
    micro-batches, accumulates the mean of their gradients into `.grad` and returns the mean loss."""

    def __init__(self, plan: MicroBatchPlan):
        self.plan = plan
        self.step = JointStep(plan.plan, scale=1.0 / plan.micro_batches)
        self.last = JointStep(plan.last, scale=1.0 / plan.micro_batches) if plan.last is not None else self.step

    def __call__(self, example_inputs: Any, labels: Any = None) -> torch.Tensor:
        k = self.plan.micro_batches
        example = (example_inputs, labels)
        losses = []
        for i, (inputs, labs) in enumerate(split_batch(example, _batch_size(pytree.tree_leaves(example)), k)):
            args = (inputs,) if isinstance(inputs, (dict, torch.Tensor)) else tuple(inputs)
            losses.append((self.last if i == k - 1 else self.step)(*args, labels=labs).detach())
        return torch.stack(losses).mean() if k > 1 else losses[0]


def apply_joint_batches(plan: MicroBatchPlan) -> MicroBatchStep:
    """The training step of a MicroBatchPlan (see MicroBatchStep)."""
    return MicroBatchStep(plan)


__all__ = ["MicroBatchPlan", "MicroBatchStep", "apply_joint_batches", "plan_joint_batches", "split_batch"]
