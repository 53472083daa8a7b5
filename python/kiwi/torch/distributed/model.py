"""A GPT like kiwi's `gpt` model (models/transformer.cpp BuildGpt: learned positions, pre-LayerNorm
layers of separate q/k/v projections, causal softmax attention, GELU MLP of 4h, untied LM head),
written as functions of explicit parameter dicts so each layer can run under its own strategy.
Parameters use kiwi's names and layouts (Linear weights [in, out]). No dropout: runs must be
comparable with single-process training."""
import dataclasses
import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from kiwi.torch.distributed.tensor_parallel import (TpContext, column_shard, copy_to_tp, reduce_from_tp,
                                                    scatter_sequence, sequence_parallel_linears, shard_range,
                                                    vocab_parallel_cross_entropy)

Params = Dict[str, torch.Tensor]


@dataclasses.dataclass(frozen=True)
class GptConfig:
    layers: int = 4
    hidden: int = 64
    heads: int = 4
    seq: int = 16
    vocab: int = 50257  # kiwi's gpt (--vocab changes it)
    ffn: int = 0         # 0: 4 * hidden

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden

    def check(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"model: heads: {self.heads} does not divide hidden {self.hidden}")
        if self.vocab < 1:
            raise ValueError(f"model: vocab: must be positive (got {self.vocab})")


# Layer parameters: (name, shape, how Megatron splits it under TP: column dim, row dim or None).
def layer_parameter_specs(c: GptConfig):
    h, f = c.hidden, c.ffn_size
    return [("norm1.gamma", (h,), None), ("norm1.beta", (h,), None),
            ("q.weight", (h, h), 1), ("q.bias", (h,), 0), ("k.weight", (h, h), 1), ("k.bias", (h,), 0),
            ("v.weight", (h, h), 1), ("v.bias", (h,), 0), ("out.weight", (h, h), 0), ("out.bias", (h,), None),
            ("norm2.gamma", (h,), None), ("norm2.beta", (h,), None),
            ("fc1.weight", (h, f), 1), ("fc1.bias", (f,), 0), ("fc2.weight", (f, h), 0), ("fc2.bias", (h,), None)]


# Megatron's vocabulary-parallel embedding and LM head: the vocabulary split over the TP group of the
# layer beside them; position embeddings and the final norm replicated.
def embed_parameter_specs(c: GptConfig):
    return [("word.weight", (c.vocab, c.hidden), 0), ("position.weight", (c.seq, c.hidden), None)]


def head_parameter_specs(c: GptConfig):
    return [("final_norm.gamma", (c.hidden,), None), ("final_norm.beta", (c.hidden,), None),
            ("lm_head.weight", (c.hidden, c.vocab), 1)]


SPECS = {"embed": embed_parameter_specs, "head": head_parameter_specs}


def replicated_names(key: str, c: GptConfig):
    """The parameters of unit `key` Megatron TP keeps whole on every rank (layernorms, row-parallel
    biases, the position table): under sequence parallelism each rank's gradient of them is partial."""
    return [name for name, _, dim in SPECS.get(key, layer_parameter_specs)(c) if dim is None]


def _init(name: str, shape, gen: torch.Generator) -> torch.Tensor:
    if name.endswith("gamma"):
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)
    scale = 0.02 if len(shape) > 1 else 0.05  # small non-zero biases: a wrong bias split shows up
    return scale * torch.randn(shape, generator=gen)


def full_parameters(c: GptConfig, seed: int = 0) -> Dict[str, Params]:
    """Unsharded parameters of every unit ("embed", 0 .. layers-1, "head"), the same on every rank."""
    gen = torch.Generator().manual_seed(seed)
    out: Dict[str, Params] = {"embed": {n: _init(n, s, gen) for n, s, _ in embed_parameter_specs(c)}}
    for i in range(c.layers):
        out[str(i)] = {n: _init(n, s, gen) for n, s, _ in layer_parameter_specs(c)}
    out["head"] = {n: _init(n, s, gen) for n, s, _ in head_parameter_specs(c)}
    return out


def shard_layer(full: Params, c: GptConfig, tp: int, rank: int, key: str = "layer") -> Params:
    """This TP rank's part of a unit: a layer's q/k/v/fc1 split by columns (whole heads), out/fc2 by
    rows, layernorms and the row-parallel biases replicated; the embeddings' and head's vocabulary
    split (Megatron)."""
    out = {}
    for name, _, dim in SPECS.get(key, layer_parameter_specs)(c):
        out[name] = full[name].clone() if dim is None else column_shard(full[name], tp, rank, dim)
    return out


def embed_forward(p: Params, ids: torch.Tensor, tp: Optional[TpContext] = None, vocab: int = 0,
                  sp: bool = False) -> torch.Tensor:
    """Token + position embeddings; under TP the vocabulary-parallel lookup: each rank embeds the ids
    of its vocabulary range (zeros elsewhere) and the TP group sums them (one all-reduce forward; with
    sequence parallelism a reduce-scatter into this rank's sequence block, which gets its positions)."""
    if tp is None or tp.size == 1:
        return F.embedding(ids, p["word.weight"]) + p["position.weight"][: ids.shape[1]]
    start, end = shard_range(vocab, tp.size, tp.rank)
    outside = (ids < start) | (ids >= end)
    words = F.embedding((ids - start).masked_fill(outside, 0), p["word.weight"]).masked_fill(outside.unsqueeze(-1), 0.0)
    if sp:
        block = ids.shape[1] // tp.size
        return scatter_sequence(words, tp) + p["position.weight"][tp.rank * block:(tp.rank + 1) * block]
    return reduce_from_tp(words, tp) + p["position.weight"][: ids.shape[1]]


def _layer_norm(x, p, prefix):
    return F.layer_norm(x, (x.shape[-1],), p[prefix + ".gamma"], p[prefix + ".beta"], 1e-5)


_CAUSAL_MASKS: Dict[tuple, torch.Tensor] = {}


def _causal_mask(s: int, device) -> torch.Tensor:
    """[s, s], True above the diagonal; made once per length and device."""
    key = (s, str(device))
    if key not in _CAUSAL_MASKS:
        _CAUSAL_MASKS[key] = torch.ones(s, s, dtype=torch.bool, device=device).triu(1)
    return _CAUSAL_MASKS[key]


def _linear(x: torch.Tensor, p: Params, name: str) -> torch.Tensor:
    """x [tokens, in] @ weight [in, out] + bias as one addmm (its backward: two mm and a sum)."""
    return torch.addmm(p[name + ".bias"], x, p[name + ".weight"])


class _Region:
    """How a layer's input enters its TP region and its row-parallel output leaves it: Megatron's f
    before the column-parallel linears and g after the row-parallel one on [tokens, hidden] rows, or with
    sequence parallelism the linears over the all-gathered [b, s/t, h] blocks and the reduce-scatter back
    (rows of one sequence block)."""

    def __init__(self, tp: Optional[TpContext], sp: bool, b: int, s: int):
        self.tp, self.b, self.s = tp, b, s  # s: this rank's sequence length (a block under SP)
        self.sp = sp and tp is not None and tp.size > 1
        self.full = s * tp.size if self.sp else s  # the sequence inside the region

    def linears(self, x: torch.Tensor, p: Params, names) -> tuple:
        """The column-parallel linears `names` (kiwi's Linear weights [in, out], fused biases) of x."""
        if not self.sp:
            x = copy_to_tp(x, self.tp)
            return tuple(_linear(x, p, n) for n in names)
        layers = [(p[n + ".weight"], p[n + ".bias"]) for n in names]
        return sequence_parallel_linears(x.view(self.b, self.s, -1), self.tp, layers)

    def leave(self, x: torch.Tensor) -> torch.Tensor:
        if not self.sp:
            return reduce_from_tp(x, self.tp)
        return scatter_sequence(x.view(self.b, self.full, -1), self.tp).reshape(self.b * self.s, -1)


# A layer works on [tokens, hidden] rows (a view of [batch, seq, hidden]): its linears are single GEMMs
# with their biases fused, without the reshapes a batched matmul dispatches around each one.
def _core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The attention core: scores, causal softmax, context (what selective recomputation runs again)."""
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    probs = torch.softmax(scores.masked_fill(_causal_mask(q.shape[-2], q.device), float("-inf")), dim=-1)
    return probs @ v


def _attention(x: torch.Tensor, p: Params, heads: int, tp: Optional[TpContext], region: _Region,
               selective: bool) -> torch.Tensor:
    b, s = region.b, region.full
    local_heads = heads // (tp.size if tp else 1)
    d = p["q.weight"].shape[1] // local_heads
    q, k, v = (t.view(b, s, local_heads, d).transpose(1, 2) for t in region.linears(x, p, ("q", "k", "v")))
    # Megatron's selective recomputation (Korthikanti et al. 2023 §5): the core keeps only q, k, v and
    # runs again in the backward pass, so its [s, s] probabilities are not kept.
    core = torch.utils.checkpoint.checkpoint(_core, q, k, v, use_reentrant=False) if selective else _core(q, k, v)
    context = core.transpose(1, 2).reshape(b * s, local_heads * d)
    return region.leave(context @ p["out.weight"]) + p["out.bias"]


def _mlp(x: torch.Tensor, p: Params, region: _Region) -> torch.Tensor:
    hidden = F.gelu(region.linears(x, p, ("fc1",))[0])
    return region.leave(hidden @ p["fc2.weight"]) + p["fc2.bias"]


def layer_forward(p: Params, x: torch.Tensor, heads: int, tp: Optional[TpContext] = None, sp: bool = False,
                  selective: bool = False) -> torch.Tensor:
    """x [b, s, h], or under sequence parallelism this rank's block [b, s/t, h] (the layernorms, the
    residuals and the row-parallel biases then run on the block); `selective` recomputes the attention core."""
    b, s, h = x.shape
    region = _Region(tp, sp, b, s)
    x = x.reshape(b * s, h)
    x = x + _attention(_layer_norm(x, p, "norm1"), p, heads, tp, region, selective)
    x = x + _mlp(_layer_norm(x, p, "norm2"), p, region)
    return x.view(b, s, h)


def head_forward(p: Params, x: torch.Tensor, labels: torch.Tensor, tokens_in_batch: int,
                 tp: Optional[TpContext] = None, vocab: int = 0, sp: bool = False) -> torch.Tensor:
    """Summed token cross-entropy over the global batch's token count: the shares of all DP ranks add
    up to the mean loss, so gradients are summed (not averaged) over DP. Under TP the LM head is
    column-parallel over the vocabulary (its input gradient all-reduced backward; with sequence
    parallelism the final norm runs on this rank's block, all-gathered before the head) and the loss
    is Megatron's vocabulary-parallel cross-entropy."""
    if tp is None or tp.size == 1:
        logits = _layer_norm(x, p, "final_norm") @ p["lm_head.weight"]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum")
        return loss / tokens_in_batch
    normed = _layer_norm(x, p, "final_norm")
    if sp:  # the column-parallel head over the gathered blocks, keeping only this rank's
        b, s = normed.shape[0], normed.shape[1] * tp.size
        logits = sequence_parallel_linears(normed, tp, [(p["lm_head.weight"], None)])[0].view(b, s, -1)
    else:
        logits = copy_to_tp(normed, tp) @ p["lm_head.weight"]
    start, _ = shard_range(vocab, tp.size, tp.rank)
    return vocab_parallel_cross_entropy(logits, labels, tp, start).sum() / tokens_in_batch


def synthetic_batch(c: GptConfig, batch: int, iteration: int, seed: int = 0):
    """Token ids and next-token labels of one iteration, the same on every rank."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + iteration)
    tokens = torch.randint(0, c.vocab, (batch, c.seq + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
