"""Process layout of a plan (kiwi's layer mesh {pp, dp, tp}: stages outermost, TP innermost) and the
pool of process groups every layer and Slice-Gather needs, created up front in one order on all ranks
(Galvatron-BMW §VI keeps such a pool; torch.distributed.new_group must be called by every rank)."""
from typing import Dict, List, Tuple

import torch.distributed as dist

from kiwi.torch.distributed.plan import HybridPlan, LayerStrategy


class Layout:
    def __init__(self, plan: HybridPlan, world: int, rank: int):
        self.plan, self.world, self.rank = plan, world, rank
        self.per_stage = world // plan.pp_degree
        self.stage = rank // self.per_stage
        self.local = rank % self.per_stage

    def base(self, stage: int) -> int:
        return stage * self.per_stage

    def tp_rank(self, s: LayerStrategy) -> int:
        return self.local % s.tp

    def dp_rank(self, s: LayerStrategy) -> int:
        return self.local // s.tp

    def tp_ranks(self, s: LayerStrategy, stage: int, local: int) -> Tuple[int, ...]:
        first = self.base(stage) + (local // s.tp) * s.tp
        return tuple(range(first, first + s.tp))

    def dp_ranks(self, s: LayerStrategy, stage: int, local: int) -> Tuple[int, ...]:
        return tuple(self.base(stage) + local % s.tp + s.tp * j for j in range(s.dp))

    def gather_ranks(self, prev: LayerStrategy, nxt: LayerStrategy, stage: int, local: int) -> Tuple[int, ...]:
        """Slice-Gather's group between a layer of larger DP degree `prev` and one of smaller `nxt`
        (cost/layer_cost.cpp: mesh {pp, dp_next, dp_prev / dp_next, tp_prev}, axis 2): local indices
        a * tp_next + k * tp_prev + t for k = 0 .. dp_prev / dp_next - 1, in sample order."""
        a, t = local // nxt.tp, local % prev.tp
        return tuple(self.base(stage) + a * nxt.tp + k * prev.tp + t for k in range(prev.dp // nxt.dp))


class GroupPool:
    """All groups of more than one rank the plan uses; `get(ranks)` returns this rank's handle."""

    def __init__(self, layout: Layout, strategies_by_stage: Dict[int, List[LayerStrategy]],
                 transitions_by_stage: Dict[int, List[Tuple[LayerStrategy, LayerStrategy]]]):
        wanted = set()
        for stage, strategies in strategies_by_stage.items():
            for s in strategies:
                for local in range(layout.per_stage):
                    wanted.add(layout.tp_ranks(s, stage, local))
                    wanted.add(layout.dp_ranks(s, stage, local))
        for stage, pairs in transitions_by_stage.items():
            for prev, nxt in pairs:
                small, large = (nxt, prev) if nxt.dp < prev.dp else (prev, nxt)
                for local in range(layout.per_stage):
                    wanted.add(layout.gather_ranks(large, small, stage, local))
                    for s in (prev, nxt):  # sequence gathers over either side's TP group (slice_gather.py)
                        if s.sequence_split:
                            wanted.add(layout.tp_ranks(s, stage, local))
        self.groups: Dict[Tuple[int, ...], object] = {}
        for ranks in sorted(r for r in wanted if len(r) > 1):  # one order on every rank
            group = dist.new_group(list(ranks))
            if layout.rank in ranks:
                self.groups[ranks] = group

    def get(self, ranks: Tuple[int, ...]):
        return self.groups[tuple(ranks)] if len(ranks) > 1 else None
