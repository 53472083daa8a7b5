"""Galvatron-BMW's Slice-Gather (§VI) between neighbouring layers whose strategies differ. Under
Megatron TP a layer's activation is replicated in its TP group and split over DP, so two layouts
differ only in the DP degree: going to a larger DP degree each rank keeps its slice (forward) and
all-gathers the gradient (backward); going to a smaller one it all-gathers its new, larger sample range
(forward) and keeps its slice of the gradient (backward). The gather group is kiwi's
(cost/layer_cost.cpp SliceGatherSeconds): groups.Layout.gather_ranks."""
import torch

from kiwi.torch.distributed.comm_counter import SLICE_GATHER, SLICE_GATHER_BACKWARD, CommCounter
from kiwi.torch.distributed.groups import GroupPool, Layout
from kiwi.torch.distributed.plan import LayerStrategy


class _Gather:
    def __init__(self, group, size: int, index: int, counter: CommCounter, unit, purpose: str):
        self.group, self.size, self.index, self.counter, self.unit, self.purpose = group, size, index, counter, unit, purpose

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.counter.all_gather(t.contiguous(), self.group, self.size, self.purpose, self.unit))

    def slice(self, t: torch.Tensor) -> torch.Tensor:
        return t.chunk(self.size)[self.index].contiguous()


class _GatherForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g: _Gather):
        ctx.g = g
        return g.gather(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.g.slice(grad), None


class _SliceForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g: _Gather):
        ctx.g = g
        return g.slice(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.g.gather(grad), None


def reshard(x: torch.Tensor, prev: LayerStrategy, nxt: LayerStrategy, layout: Layout, pool: GroupPool,
            counter: CommCounter, unit) -> torch.Tensor:
    """x in `prev`'s layout (this rank's DP shard of the micro-batch) into `nxt`'s; `unit` is the layer
    the activation goes into (the cost model charges Slice-Gather to it)."""
    if prev.dp == nxt.dp:
        return x
    large, small = (prev, nxt) if prev.dp > nxt.dp else (nxt, prev)
    ranks = layout.gather_ranks(large, small, layout.stage, layout.local)
    size = large.dp // small.dp
    index = ranks.index(layout.rank)
    if nxt.dp < prev.dp:
        return _GatherForward.apply(x, _Gather(pool.get(ranks), size, index, counter, unit, SLICE_GATHER))
    return _SliceForward.apply(x, _Gather(pool.get(ranks), size, index, counter, unit, SLICE_GATHER_BACKWARD))
