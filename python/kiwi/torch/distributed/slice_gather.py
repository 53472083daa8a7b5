"""Galvatron-BMW's Slice-Gather (§VI) between neighbouring layers whose strategies differ, and the TP
gathers around it where a side is sequence-parallel. Under Megatron TP a layer's activation is
replicated in its TP group and split over DP, so two layouts differ only in the DP degree: going to a
larger DP degree each rank keeps its slice (forward) and all-gathers the gradient (backward); going to
a smaller one it all-gathers its new, larger sample range (forward) and keeps its slice of the
gradient (backward). The gather group is kiwi's
(cost/layer_cost.cpp SliceGatherSeconds): groups.Layout.gather_ranks."""
import torch

from kiwi.torch.distributed.comm_counter import (SEQUENCE_GATHER, SEQUENCE_GATHER_BACKWARD, SLICE_GATHER,
                                                 SLICE_GATHER_BACKWARD, CommCounter)
from kiwi.torch.distributed.conjugate import conjugate
from kiwi.torch.distributed.groups import GroupPool, Layout
from kiwi.torch.distributed.plan import LayerStrategy


class _Gather:
    """Gathers / slices along `dim`: 0 the samples (Slice-Gather), 1 the sequence (sequence parallelism)."""

    def __init__(self, group, size: int, index: int, counter: CommCounter, unit, purpose: str, dim: int = 0):
        self.group, self.size, self.index, self.counter, self.unit, self.purpose = group, size, index, counter, unit, purpose
        self.dim = dim

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.counter.all_gather(t.contiguous(), self.group, self.size, self.purpose, self.unit), dim=self.dim)

    def slice(self, t: torch.Tensor) -> torch.Tensor:
        return t.chunk(self.size, dim=self.dim)[self.index].contiguous()


def reshard(x: torch.Tensor, prev: LayerStrategy, nxt: LayerStrategy, layout: Layout, pool: GroupPool,
            counter: CommCounter, unit) -> torch.Tensor:
    """x in `prev`'s layout (this rank's DP shard of the micro-batch, under sequence parallelism its
    sequence block) into `nxt`'s; `unit` is the layer the activation goes into (the cost model charges
    the resharding to it). A sequence-parallel side gathers over its TP group first (prev: forward;
    nxt: its input gradient, backward), as cost/layer_cost.cpp SequenceGatherBytes."""
    if prev.dp == nxt.dp and prev.sequence_split == nxt.sequence_split:
        return x
    if prev.sequence_split:
        ranks = layout.tp_ranks(prev, layout.stage, layout.local)
        g = _Gather(pool.get(ranks), prev.tp, layout.tp_rank(prev), counter, unit, SEQUENCE_GATHER, dim=1)
        x = conjugate(x, g.gather, g.slice)
    if prev.dp != nxt.dp:
        large, small = (prev, nxt) if prev.dp > nxt.dp else (nxt, prev)
        ranks = layout.gather_ranks(large, small, layout.stage, layout.local)
        size = large.dp // small.dp
        index = ranks.index(layout.rank)
        if nxt.dp < prev.dp:
            g = _Gather(pool.get(ranks), size, index, counter, unit, SLICE_GATHER)
            x = conjugate(x, g.gather, g.slice)
        else:
            g = _Gather(pool.get(ranks), size, index, counter, unit, SLICE_GATHER_BACKWARD)
            x = conjugate(x, g.slice, g.gather)
    if nxt.sequence_split:
        ranks = layout.tp_ranks(nxt, layout.stage, layout.local)
        g = _Gather(pool.get(ranks), nxt.tp, layout.tp_rank(nxt), counter, unit, SEQUENCE_GATHER_BACKWARD, dim=1)
        x = conjugate(x, g.slice, g.gather)
    return x
