"""Megatron-LM tensor parallelism (Shoeybi et al. 2019, Fig. 3): the f operator (identity forward,
all-reduce backward) before a column-parallel linear and the g operator (all-reduce forward, identity
backward) after a row-parallel linear; attention heads split across the TP group."""
from typing import Optional

import torch

from kiwi.torch.distributed.comm_counter import TP_ALL_REDUCE, CommCounter
from kiwi.torch.distributed.vocab_parallel_loss import vocab_parallel_loss_backward, vocab_parallel_loss_forward


class TpContext:
    """The TP group a layer runs in (size 1: no communication)."""

    def __init__(self, group, size: int, rank: int, counter: CommCounter, unit):
        self.group, self.size, self.rank, self.counter, self.unit = group, size, rank, counter, unit

    def all_reduce(self, t: torch.Tensor, op=None) -> torch.Tensor:
        t = t.contiguous().clone()
        self.counter.all_reduce(t, self.group, TP_ALL_REDUCE, self.unit, op=op)
        return t


class _CopyToTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp: TpContext):
        ctx.tp = tp
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.all_reduce(grad), None


class _ReduceFromTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp: TpContext):
        return tp.all_reduce(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x: torch.Tensor, tp: Optional[TpContext]) -> torch.Tensor:
    """Megatron's f: the input of column-parallel linears; its gradient is summed over the TP group."""
    return x if tp is None or tp.size == 1 else _CopyToTp.apply(x, tp)


def reduce_from_tp(x: torch.Tensor, tp: Optional[TpContext]) -> torch.Tensor:
    """Megatron's g: sums the row-parallel linear's partial outputs over the TP group."""
    return x if tp is None or tp.size == 1 else _ReduceFromTp.apply(x, tp)


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
