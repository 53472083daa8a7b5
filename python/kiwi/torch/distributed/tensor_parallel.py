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


class _SequenceParallelLinears(torch.autograd.Function):
    """Megatron's column-parallel linears under sequence parallelism (Korthikanti et al. 2023 §4.2.2):
    all-gather the input's sequence blocks, apply each (weight [in, out], bias or None) to the rows;
    keep only the block, all-gather it again backward for the weight gradients, reduce-scatter the
    input gradient."""

    @staticmethod
    def forward(ctx, x, tp: TpContext, *weights_and_biases):
        full = tp.gather_sequence(x)
        rows = full.reshape(-1, full.shape[-1])
        pairs = list(zip(weights_and_biases[0::2], weights_and_biases[1::2]))
        ctx.tp, ctx.full_shape, ctx.biased = tp, full.shape, [b is not None for _, b in pairs]
        ctx.save_for_backward(x, *(w for w, _ in pairs))
        return tuple(torch.addmm(b, rows, w) if b is not None else rows @ w for w, b in pairs)

    @staticmethod
    def backward(ctx, *grads):
        x, *weights = ctx.saved_tensors
        rows = ctx.tp.gather_sequence(x).reshape(-1, x.shape[-1])
        grad_rows, out = None, []
        for g, w, biased in zip(grads, weights, ctx.biased):
            part = g @ w.t()
            grad_rows = part if grad_rows is None else grad_rows + part
            out += [rows.t() @ g, g.sum(0) if biased else None]
        return (ctx.tp.scatter_sequence(grad_rows.view(ctx.full_shape)), None, *out)


def sequence_parallel_linears(x: torch.Tensor, tp: TpContext, layers) -> tuple:
    """Megatron's f and the column-parallel linears after it under sequence parallelism: x [b, s/t, h]
    (this rank's block), layers [(weight [h, out], bias or None)]; rows [b * s, out] per layer."""
    return _SequenceParallelLinears.apply(x, tp, *(t for w, b in layers for t in (w, b)))


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
