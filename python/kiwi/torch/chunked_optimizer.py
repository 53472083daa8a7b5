"""An optimizer step that updates large parameters a chunk at a time: the same update as
`optimizer.step()`, by the optimizer's own code, on flat views of each parameter, its gradient and its
state. Adam's step holds two parameter-sized temporaries (`denom`) for each parameter in turn; in
chunks it holds two chunk-sized ones. Only optimizers whose update is elementwise qualify."""
import inspect
from typing import Any, Dict

import torch

from kiwi.torch.errors import PlanError

ELEMENTWISE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)

# The chunk a chunked optimizer step updates at a time: at most 16 MiB (small next to any budget), an
# eighth of the largest parameter on small models, and not so small that Python's per-chunk work shows.
MAX_CHUNK_BYTES, MIN_CHUNK_BYTES = 16 << 20, 64 << 10


def _largest_parameter_bytes(model: torch.nn.Module) -> int:
    return max((p.numel() * p.element_size() for p in model.parameters() if p.requires_grad), default=0)


def default_chunk_bytes(model: torch.nn.Module) -> int:
    return max(MIN_CHUNK_BYTES, min(MAX_CHUNK_BYTES, _largest_parameter_bytes(model) // 8))


def chunked_workspace(model: torch.nn.Module, chunk_bytes: int) -> int:
    """Adam's step in chunks: two chunk-sized temporaries (costs.optimizer_workspace's rule on a chunk)."""
    return 2 * min(_largest_parameter_bytes(model), chunk_bytes)


def chunked_step(optimizer: torch.optim.Optimizer, chunk_bytes: int) -> None:
    """optimizer.step() with every parameter larger than `chunk_bytes` updated in chunks of that size."""
    if not isinstance(optimizer, ELEMENTWISE):
        raise PlanError(f"the plan updates the optimizer in chunks, which kiwi does for Adam, AdamW and SGD; "
                        f"got {type(optimizer).__name__} (plan again with optimizer_chunks=False)")
    cls = type(optimizer)
    # torch 2's AdamW keeps Adam's `decoupled_weight_decay` in its defaults but its constructor refuses it.
    accepted = inspect.signature(cls.__init__).parameters
    with torch.no_grad():
        for group in optimizer.param_groups:
            hyper = {k: group[k] for k in optimizer.defaults if k in group and k in accepted}
            for key in ("foreach", "fused"):  # one tensor at a time: the multi-tensor paths allocate more
                if key in hyper:
                    hyper[key] = False if key == "foreach" else None
            for p in group["params"]:
                if p.grad is not None:
                    _step_parameter(cls, hyper, optimizer.state, p, chunk_bytes)


def _step_parameter(cls, hyper: Dict[str, Any], states: Dict[Any, Dict[str, Any]], p: torch.Tensor,
                    chunk_bytes: int) -> None:
    state = states[p]
    per_chunk = max(1, chunk_bytes // p.element_size())
    tensors = [p, p.grad] + [v for v in state.values() if torch.is_tensor(v) and v.shape == p.shape]
    if not state or p.numel() <= per_chunk or not all(t.is_contiguous() for t in tensors):
        new = _sub_step(cls, hyper, p.detach(), p.grad, dict(state))  # whole (and a first step makes state)
        if not state:
            states[p] = new
        else:
            _copy_counters(state, new)
        return
    flat = {k: v.view(-1) for k, v in state.items() if torch.is_tensor(v) and v.shape == p.shape}
    last: Dict[str, Any] = {}
    for start in range(0, p.numel(), per_chunk):
        part = slice(start, min(start + per_chunk, p.numel()))
        views = {k: (flat[k][part] if k in flat else _fresh(v)) for k, v in state.items()}
        last = _sub_step(cls, hyper, p.detach().view(-1)[part], p.grad.view(-1)[part], views)
    _copy_counters(state, last)


def _fresh(value: Any) -> Any:
    """A per-chunk copy of a scalar state (Adam's step counter): every chunk counts the same step once."""
    return value.clone() if torch.is_tensor(value) else value


def _copy_counters(state: Dict[str, Any], new: Dict[str, Any]) -> None:
    for k, v in new.items():
        old = state.get(k)
        if torch.is_tensor(old) and torch.is_tensor(v) and old.shape == v.shape and old.data_ptr() != v.data_ptr():
            if old.dim() == 0:
                old.copy_(v)
        elif not torch.is_tensor(v):
            state[k] = v


def _sub_step(cls, hyper: Dict[str, Any], param: torch.Tensor, grad: torch.Tensor,
              state: Dict[str, Any]) -> Dict[str, Any]:
    """One step of `cls` on `param` (a leaf view sharing storage with the real parameter)."""
    sub = cls([param], **hyper)
    param.grad = grad
    if state:
        sub.state[param] = state
    sub.step()
    param.grad = None
    return sub.state[param]

