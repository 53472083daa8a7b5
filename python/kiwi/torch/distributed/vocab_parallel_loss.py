"""Megatron-LM's vocabulary-parallel cross-entropy (Shoeybi et al. 2019, §3) as plain functions of a TP
rank's logits. torch alone: `kiwi profile` times them on a GPU machine where kiwi's extension is not built
(it loads this file by its path), and the distributed runtime runs them (tensor_parallel.py)."""
import torch


def vocab_parallel_loss_forward(logits: torch.Tensor, target: torch.Tensor, start: int, all_reduce):
    """Megatron's vocab_parallel_cross_entropy forward on a TP rank's logits of its vocabulary range
    (columns start ...): three all-reduces over the TP group (`all_reduce(t, op)`) of one fp32 value per
    token (max logit, the target's logit, the sum of exps) give every rank the per-token loss. Returns
    it and what the backward pass needs (kiwi prices these kernels: CostModel::VocabParallelCrossEntropyTime;
    `kiwi profile` times them as vocab_parallel_cross_entropy)."""
    logits = logits.float()
    logits_max = all_reduce(logits.amax(dim=-1), torch.distributed.ReduceOp.MAX)  # amax: no indices, 8x faster here
    logits = logits - logits_max.unsqueeze(-1)
    outside = (target < start) | (target >= start + logits.shape[-1])
    local = (target - start).masked_fill(outside, 0)
    predicted = logits.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
    predicted = all_reduce(predicted, torch.distributed.ReduceOp.SUM)
    exp = logits.exp()
    sum_exp = all_reduce(exp.sum(dim=-1), torch.distributed.ReduceOp.SUM)
    return torch.log(sum_exp) - predicted, (exp / sum_exp.unsqueeze(-1), outside, local)


def vocab_parallel_loss_backward(saved, grad: torch.Tensor) -> torch.Tensor:
    """The logits' gradient, local to the rank: (softmax - one-hot of the target) x the loss's gradient,
    made in the saved softmax's memory (as Megatron-LM does; the saved tensors are used once)."""
    softmax, outside, local = saved
    g = softmax
    g.scatter_add_(-1, local.unsqueeze(-1), -(~outside).to(g.dtype).unsqueeze(-1))
    return g.mul_(grad.unsqueeze(-1))
