"""A unit of the model (the embeddings, one transformer layer, the head with the loss) placed on this
rank under its strategy: TP shard of its parameters, DP, ZeRO-1/2 or ZeRO-3 storage, checkpointing."""
from typing import Dict, List, Optional

import torch
import torch.nn as nn

from kiwi.torch.distributed import model as gpt
from kiwi.torch.distributed.checkpoint import run_checkpointed
from kiwi.torch.distributed.comm_counter import SP_GRAD_ALL_REDUCE, CommCounter
from kiwi.torch.distributed.data_parallel import DpGroup, GradSync, Params, ShardedParams, ZeroShard, run_sharded
from kiwi.torch.distributed.groups import GroupPool, Layout
from kiwi.torch.distributed.plan import LayerStrategy
from kiwi.torch.distributed.tensor_parallel import TpContext, sum_grad_over_tp


def local_parameters(key: str, full: Params, config: gpt.GptConfig, s: LayerStrategy, tp_rank: int) -> Params:
    """The unit's parameters on a rank of TP rank `tp_rank` (Megatron: layers split by heads and MLP
    columns, the embeddings and the head by vocabulary; see docs/distributed.md)."""
    return gpt.shard_layer(full, config, s.tp, tp_rank, key)


class Unit:
    def __init__(self, key: str, strategy: LayerStrategy, full: Params, config: gpt.GptConfig, layout: Layout,
                 pool: GroupPool, counter: CommCounter, grad_sync: GradSync):
        self.key, self.strategy, self.config = key, strategy, config
        self.tp_rank = layout.tp_rank(strategy)
        local = local_parameters(key, full, config, strategy, self.tp_rank)
        dp_ranks = layout.dp_ranks(strategy, layout.stage, layout.local)
        self.dp = DpGroup(pool.get(dp_ranks), strategy.dp, layout.dp_rank(strategy))
        self.tp: Optional[TpContext] = None
        if strategy.tp > 1:
            tp_ranks = layout.tp_ranks(strategy, layout.stage, layout.local)
            self.tp = TpContext(pool.get(tp_ranks), strategy.tp, self.tp_rank, counter, self.unit_id)
        self.sharded: Optional[ShardedParams] = None
        self.zero: Optional[ZeroShard] = None
        self.params: Dict[str, nn.Parameter] = {}
        if strategy.zero_stage == 3:
            self.sharded = ShardedParams(local, self.dp, counter, self.unit_id)
        else:
            self.params = {n: nn.Parameter(t) for n, t in local.items()}
            if strategy.zero_stage in (1, 2):
                self.zero = ZeroShard(list(self.params.values()), self.dp, counter, self.unit_id,
                                      every_microbatch=strategy.zero_stage == 2)
            else:
                grad_sync.register(list(self.params.values()), self.dp, self.unit_id)
        self.checkpoint = strategy.checkpoint and key not in ("embed", "head")
        self.selective = strategy.recomputes_core and key not in ("embed", "head")
        # Megatron sequence parallelism: the replicated parameters' gradients are summed over TP, after
        # the last micro-batch (DP, ZeRO-1) or in every micro-batch's backward, before ZeRO-2/3's
        # reduce-scatter takes the gradients whole (cost/layer_cost.cpp sp_gradient_all_reduce_bytes)
        self.sp = strategy.sequence_split
        self.replicated = set(gpt.replicated_names(key, config)) if self.sp else set()
        self.sum_replicated_in_backward = self.sp and strategy.zero_stage >= 2

    @property
    def unit_id(self):
        return int(self.key) if self.key.isdigit() else self.key

    def parameters(self) -> List[nn.Parameter]:
        """What the optimizer steps: a flat shard under ZeRO, else the (TP-shard) parameters."""
        if self.sharded is not None:
            return [self.sharded.shard]
        return [self.zero.shard] if self.zero is not None else list(self.params.values())

    def resident(self) -> List[torch.Tensor]:
        """Every tensor the unit keeps between iterations (ZeRO-1/2: the whole parameters and the shard)."""
        return self.parameters() + (list(self.params.values()) if self.zero is not None else [])

    def before_step(self) -> None:
        """Sequence parallelism (DP, ZeRO-1): the replicated parameters' gradients summed over TP; ZeRO-1:
        then the gradients accumulated over the micro-batches, reduce-scattered to the shard."""
        if self.replicated and not self.sum_replicated_in_backward:
            for name in sorted(self.replicated):
                grad = self.params[name].grad
                if grad is not None:
                    self.tp.counter.all_reduce(grad, self.tp.group, SP_GRAD_ALL_REDUCE, self.unit_id)
        if self.zero is not None:
            self.zero.reduce_scatter()

    def after_step(self) -> None:
        """ZeRO-1/2: the updated shards, all-gathered into the parameters."""
        if self.zero is not None:
            self.zero.gather()

    def _summed(self, p: Params) -> Params:
        if not self.sum_replicated_in_backward:
            return p
        return {n: sum_grad_over_tp(t, self.tp) if n in self.replicated else t for n, t in p.items()}

    def _fn(self, labels: Optional[torch.Tensor], tokens: int):
        heads, tp, vocab, sp, summed, selective = (self.config.heads, self.tp, self.config.vocab, self.sp, self._summed,
                                                   self.selective)
        if self.key == "embed":
            return lambda p, ids: gpt.embed_forward(summed(p), ids, tp, vocab, sp)
        if self.key == "head":
            return lambda p, x: gpt.head_forward(summed(p), x, labels, tokens, tp, vocab, sp)
        return lambda p, x: gpt.layer_forward(summed(p), x, heads, tp, sp, selective)

    def forward(self, x: torch.Tensor, labels: Optional[torch.Tensor] = None, tokens: int = 1) -> torch.Tensor:
        fn = self._fn(labels, tokens)
        if self.checkpoint:
            return run_checkpointed(fn, x, params=self.params or None, sp=self.sharded)
        if self.sharded is not None:
            return run_sharded(self.sharded, lambda p: fn(p, x))
        return fn(self.params, x)

    def max_difference(self, full: Params) -> float:
        """Largest |this rank's parameter - the same part of `full`| (the reference's parameters)."""
        local = local_parameters(self.key, full, self.config, self.strategy, self.tp_rank)
        if self.sharded is not None:
            return float((self.sharded.shard.detach() - self.sharded.expected_shard(local)).abs().max())
        return max(float((p.detach() - local[n]).abs().max()) for n, p in self.params.items())
