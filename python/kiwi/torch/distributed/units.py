"""A unit of the model (the embeddings, one transformer layer, the head with the loss) placed on this
rank under its strategy: TP shard of its parameters, DP, ZeRO-1/2 or ZeRO-3 storage, checkpointing."""
from typing import Dict, List, Optional

import torch
import torch.nn as nn

from kiwi.torch.distributed import model as gpt
from kiwi.torch.distributed.checkpoint import run_checkpointed
from kiwi.torch.distributed.comm_counter import CommCounter
from kiwi.torch.distributed.data_parallel import DpGroup, GradSync, Params, ShardedParams, ZeroShard, run_sharded
from kiwi.torch.distributed.groups import GroupPool, Layout
from kiwi.torch.distributed.plan import LayerStrategy
from kiwi.torch.distributed.tensor_parallel import TpContext


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
        """ZeRO-1: the gradients accumulated over the micro-batches, reduce-scattered to the shard."""
        if self.zero is not None:
            self.zero.reduce_scatter()

    def after_step(self) -> None:
        """ZeRO-1/2: the updated shards, all-gathered into the parameters."""
        if self.zero is not None:
            self.zero.gather()

    def _fn(self, labels: Optional[torch.Tensor], tokens: int):
        heads, tp, vocab = self.config.heads, self.tp, self.config.vocab
        if self.key == "embed":
            return lambda p, ids: gpt.embed_forward(p, ids, tp, vocab)
        if self.key == "head":
            return lambda p, x: gpt.head_forward(p, x, labels, tokens, tp, vocab)
        return lambda p, x: gpt.layer_forward(p, x, heads, tp)

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
