"""Per-layer activation checkpointing (Chen et al. 2016; Galvatron-BMW's CKPT): the forward runs
without keeping intermediates, the backward re-runs it (TP all-reduces included, §III-A.3) and
differentiates. For a ZeRO-3 layer the one all-gather before the backward serves both the
recomputation and the backward (cost/layer_cost.cpp kSdpAllGathers = 2)."""
from typing import Callable, Optional

import torch

from kiwi.torch.distributed.data_parallel import Params, ShardedParams


class _CheckpointFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, names, sp: Optional[ShardedParams], x, *tensors):
        ctx.fn, ctx.names, ctx.sp = fn, names, sp
        ctx.save_for_backward(x, *tensors)
        with torch.no_grad():
            params = sp.views(sp.gather()) if sp is not None else dict(zip(names, tensors))
            return fn(params, x)

    @staticmethod
    def backward(ctx, grad):
        x, *tensors = ctx.saved_tensors
        x = x.detach().requires_grad_(x.requires_grad)
        with torch.enable_grad():
            if ctx.sp is not None:
                full = ctx.sp.gather().requires_grad_(True)
                leaves = [full]
                params = ctx.sp.views(full)
            else:
                leaves = [t.detach().requires_grad_(True) for t in tensors]
                params = dict(zip(ctx.names, leaves))
            y = ctx.fn(params, x)
        inputs = ([x] if x.requires_grad else []) + leaves
        grads = torch.autograd.grad(y, inputs, grad)
        dx = grads[0] if x.requires_grad else None
        pgrads = list(grads[1:] if x.requires_grad else grads)
        if ctx.sp is not None:
            pgrads = [ctx.sp.reduce_scatter(pgrads[0])]
        return (None, None, None, dx, *pgrads)


def run_checkpointed(fn: Callable[[Params, torch.Tensor], torch.Tensor], x: torch.Tensor,
                     params: Optional[Params] = None, sp: Optional[ShardedParams] = None) -> torch.Tensor:
    """fn(params, x) checkpointed; parameters either as a dict of leaves or ZeRO-3 shards."""
    if sp is not None:
        return _CheckpointFn.apply(fn, None, sp, x, sp.shard)
    names = list(params)
    return _CheckpointFn.apply(fn, names, None, x, *[params[n] for n in names])
