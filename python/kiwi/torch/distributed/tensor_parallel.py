"""Megatron-LM tensor parallelism (Shoeybi et al. 2019, Fig. 3): the f operator (identity forward,
all-reduce backward) before a column-parallel linear and the g operator (all-reduce forward, identity
backward) after a row-parallel linear; attention heads split across the TP group. With sequence
parallelism (Korthikanti et al. 2023 §4.2.2) activations between them are split over the sequence
(dimension 1 of [batch, seq, hidden]): f all-gathers the shards forward and reduce-scatters backward,
g reduce-scatters forward and all-gathers backward."""
from typing import Optional

import torch

from kiwi.torch.distributed.comm_counter import (SP_ALL_GATHER, SP_GRAD_ALL_REDUCE, SP_REDUCE_SCATTER, TP_ALL_REDUCE,
                                                 CommCounter)
from kiwi.torch.distributed.conjugate import conjugate, identity
from kiwi.torch.distributed.vocab_parallel_loss import vocab_parallel_loss_backward, vocab_parallel_loss_forward


class TpContext:
    """The TP group a layer runs in (size 1: no communication)."""

    def __init__(self, group, size: int, rank: int, counter: CommCounter, unit):
        self.group, self.size, self.rank, self.counter, self.unit = group, size, rank, counter, unit

    def all_reduce(self, t: torch.Tensor, op=None, purpose: str = TP_ALL_REDUCE) -> torch.Tensor:
        t = t.contiguous().clone()
        self.counter.all_reduce(t, self.group, purpose, self.unit, op=op)
        return t

    def gather_sequence(self, x: torch.Tensor) -> torch.Tensor:
        """[b, s/t, h] shards of the group -> [b, s, h], rank r's shard at sequence block r."""
        return torch.cat(self.counter.all_gather(x.contiguous(), self.group, self.size, SP_ALL_GATHER, self.unit), dim=1)

    def scatter_sequence(self, x: torch.Tensor) -> torch.Tensor:
        """[b, s, h] partial sums -> this rank's sequence block [b, s/t, h] of their sum over the group."""
        blocks = [c.contiguous() for c in x.chunk(self.size, dim=1)]
        flat = torch.cat([c.reshape(-1) for c in blocks])  # block r is rank r's chunk
        shard = self.counter.reduce_scatter(flat, self.group, self.size, self.rank, SP_REDUCE_SCATTER, self.unit)
        return shard.view_as(blocks[self.rank])


def gather_sequence(x: torch.Tensor, tp: TpContext) -> torch.Tensor:
    """Megatron's f under sequence parallelism: [b, s/t, h] -> [b, s, h] (its gradient reduce-scattered)."""
    return conjugate(x, tp.gather_sequence, tp.scatter_sequence)


def scatter_sequence(x: torch.Tensor, tp: TpContext) -> torch.Tensor:
    """Megatron's g under sequence parallelism: partial [b, s, h] -> the summed [b, s/t, h] shard."""
    return conjugate(x, tp.scatter_sequence, tp.gather_sequence)


def sum_grad_over_tp(w: torch.Tensor, tp: TpContext) -> torch.Tensor:
    """A replicated parameter used on a sequence shard: its gradient summed over the TP group."""
    return conjugate(w, identity, lambda g: tp.all_reduce(g, purpose=SP_GRAD_ALL_REDUCE))


def copy_to_tp(x: torch.Tensor, tp: Optional[TpContext]) -> torch.Tensor:
    """Megatron's f: the input of column-parallel linears; its gradient is summed over the TP group."""
    return x if tp is None or tp.size == 1 else conjugate(x, identity, tp.all_reduce)


def reduce_from_tp(x: torch.Tensor, tp: Optional[TpContext]) -> torch.Tensor:
    """Megatron's g: sums the row-parallel linear's partial outputs over the TP group."""
    return x if tp is None or tp.size == 1 else conjugate(x, tp.all_reduce, identity)


def column_shard(w: torch.Tensor, tp: int, rank: int, dim: int) -> torch.Tensor:
    """The rank's contiguous block of `w` along `dim` (heads and MLP columns stay together)."""
    if tp == 1:
        return w.clone()
    start, end = shard_range(w.shape[dim], tp, rank)
    return w.narrow(dim, start, end - start).clone()


def shard_range(n: int, tp: int, rank: int):
    """[start, end) of TP rank `rank`'s block of n rows: ceil(n / tp) each, the last rank the rest
    (torch.chunk's split; the vocabulary, 50257, does not divide by tp)."""
    per = -(-n // tp)
    return min(rank * per, n), min((rank + 1) * per, n)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, tp: TpContext, start: int):
        loss, saved = vocab_parallel_loss_forward(logits, target, start, lambda t, op: tp.all_reduce(t, op=op))
        ctx.save_for_backward(*saved)
        return loss

    @staticmethod
    def backward(ctx, grad):
        return vocab_parallel_loss_backward(ctx.saved_tensors, grad), None, None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor, tp: TpContext, start: int) -> torch.Tensor:
    """Per-token cross-entropy of logits split by vocabulary over the TP group (columns start ...)."""
    return _VocabParallelCrossEntropy.apply(logits, target, tp, start)
