"""Pipeline stages of a HuggingFace decoder language model, or of a BERT-style masked language model, with
torch.distributed.pipelining: each stage keeps its plan layers' blocks (the embedding on the first, the final
norm and the head on the last) in one model chunk, or with interleaved 1F1B (`virtual_stages` v > 1) in v
chunks placed as kiwi places them (chunk c on stage c % pp_degree), each run as the model's own forward does
(rotary position embeddings per chunk, or GPT-2's learned positions on the first; causal attention; an
encoder's embeddings module on the first and its MLM head on the last, attention unmasked); 1F1B, GPipe or
interleaved 1F1B over the plan's micro-batches, the model's own loss on the last stage."""
from typing import Callable, List, NamedTuple, Optional

import torch
from torch.distributed.device_mesh import DeviceMesh

from kiwi.torch.distributed.plan import HybridPlan, PlanError
from kiwi.torch.parallel.blocks import vocabulary_ends
from kiwi.torch.parallel.data_parallel import set_micro_batch_sync


class DecoderParts(NamedTuple):
    """What a pipeline splits around the blocks of a HuggingFace decoder: its base model (the blocks'
    parent), token embedding, learned positions and their dropout (GPT-2's wpe, drop) or rotary embedding
    (Llama's), final norm and head; tied: the head's weight is the embedding's."""
    base: torch.nn.Module
    embed: torch.nn.Module
    positions: Optional[torch.nn.Module]
    dropout: Optional[torch.nn.Module]
    rotary: Optional[torch.nn.Module]
    norm: Optional[torch.nn.Module]
    head: torch.nn.Module
    tied: bool
    # An encoder (BERT): its embeddings module, run whole on the first chunk (words, positions, token
    # types, their norm), and the head module around the vocabulary projection (the MLM transform and
    # decoder), run whole on the last; None for a decoder.
    embeddings: Optional[torch.nn.Module] = None
    head_block: Optional[torch.nn.Module] = None

    @property
    def encoder(self) -> bool:
        return self.embeddings is not None


_NORMS = ("norm", "ln_f")  # Llama, Mistral, Qwen2 / GPT-2, GPT-J, GPT-Neo


def _parent(root: torch.nn.Module, module: Optional[torch.nn.Module]) -> Optional[torch.nn.Module]:
    """The module of `root`'s tree that holds `module` as a direct child."""
    if module is None:
        return None
    return next((m for m in root.modules() if any(c is module for c in m.children())), None)


def _encoder_parts(model: torch.nn.Module, base: torch.nn.Module, embed: torch.nn.Module,
                   head: torch.nn.Module) -> Optional[tuple]:
    """(embeddings module, head module) of a BERT-style encoder: the module holding the input embedding
    (not the blocks' own parent, which a decoder's embedding shares), and the model's child that holds the
    output embedding; None when the model is not shaped so."""
    embeddings = _parent(model, embed)
    if embeddings is None or embeddings is base or embeddings is model:
        return None
    head_block = next((c for c in model.children() if any(m is head for m in c.modules())), None)
    if head_block is None or any(m is base for m in head_block.modules()):
        return None
    return embeddings, head_block


def final_norm(model: torch.nn.Module, blocks: torch.nn.ModuleList) -> Optional[torch.nn.Module]:
    """The norm after the blocks (the blocks' parent's `norm`, `ln_f`, ...), if any."""
    base = _parent(model, blocks)
    return next((getattr(base, n) for n in _NORMS if isinstance(getattr(base, n, None), torch.nn.Module)), None)


def decoder_parts(model: torch.nn.Module, blocks: torch.nn.ModuleList, source: str) -> DecoderParts:
    """The DecoderParts of a decoder language model: embedding and head by get_input_embeddings /
    get_output_embeddings, the final norm, positions and rotary embedding by the base model's attributes;
    of an encoder (BERT's masked language model) its embeddings module and head module instead; a PlanError
    naming layer.pp_degree and what is missing otherwise."""
    base = _parent(model, blocks)
    embed, head, tied = vocabulary_ends(model)
    norm = final_norm(model, blocks)
    rotary, positions = getattr(base, "rotary_emb", None), getattr(base, "wpe", None)
    encoder = _encoder_parts(model, base, embed, head) if base is not None and embed is not None and \
        head is not None and norm is None and rotary is None and positions is None else None
    if encoder is not None:
        return DecoderParts(base, embed, None, None, None, None, head, tied, *encoder)
    missing = [what for what, found in (("module holding the blocks", base), ("input embedding", embed),
                                        ("output embedding (head)", head), ("final norm (norm, ln_f)", norm),
                                        ("positions (rotary_emb or wpe)", rotary or positions)) if found is None]
    if missing:
        raise PlanError(f"{source}: layer.pp_degree: kiwi.torch.parallelize splits pipeline stages of decoder "
                        f"language models and BERT-style encoders; {type(model).__name__} has no "
                        f"{', no '.join(missing)}")
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if attention == "eager":  # the chunks pass no mask: only SDPA / flash attention are then causal
        raise PlanError(f"{source}: layer.pp_degree: pipeline stages run attention without a mask, causal with "
                        f"attn_implementation 'sdpa' or 'flash_attention_2', not 'eager'")
    return DecoderParts(base, embed, positions, getattr(base, "drop", None), rotary, norm, head, tied)


class DecoderChunk(torch.nn.Module):
    """One model chunk of a pipeline stage (the whole stage without interleaving): token ids (the first
    chunk) or hidden states in, hidden states or logits (the last chunk) out. It holds only its own blocks
    (and the embedding, or the final norm and the head), so each chunk's PipelineStage scales and
    synchronises only its own gradients; the model keeps them under their own names. The last chunk of
    a tied model also holds the embedding module (never run) so FSDP2 sees both users of the weight."""

    def __init__(self, parts: DecoderParts, blocks: torch.nn.ModuleList, layers: List[int], first: bool, last: bool):
        super().__init__()
        self.embeddings = parts.embeddings if first and parts.encoder else None
        self.embed = parts.embed if first and not parts.encoder else None
        self.positions = parts.positions if first else None
        self.dropout = parts.dropout if first else None
        self.blocks = torch.nn.ModuleList([blocks[i] for i in layers])
        self.norm = parts.norm if last else None
        self.head = parts.head if last and not parts.encoder else None
        self.head_block = parts.head_block if last and parts.encoder else None
        self.tied_embed = parts.embed if last and parts.tied and not first else None
        self._rotary = (parts.rotary,)  # buffers only: shared by the chunks, not registered

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        hidden = x
        if self.embeddings is not None:  # an encoder's words, positions, token types and their norm
            hidden = self.embeddings(x)
        if self.embed is not None:
            hidden = self.embed(x)
            if self.positions is not None:
                hidden = hidden + self.positions(positions)
            if self.dropout is not None:
                hidden = self.dropout(hidden)
        rotary = self._rotary[0]
        rope = rotary(hidden, positions) if rotary is not None else None
        for block in self.blocks:  # no mask: the attention is causal (HuggingFace's SDPA path)
            if rotary is None:  # learned positions (GPT-2): the blocks take the hidden states only
                out = block(hidden)
            else:
                out = block(hidden, attention_mask=None, position_ids=positions, position_embeddings=rope)
            hidden = out[0] if isinstance(out, tuple) else out
        if self.head_block is not None:  # an encoder's MLM transform and decoder
            return self.head_block(hidden)
        return self.head(self.norm(hidden)) if self.head is not None else hidden


def _drop(owner: torch.nn.Module, module: Optional[torch.nn.Module]) -> None:
    """Sets owner's child `module` (found by identity) to None."""
    for name, child in list(owner.named_children()):
        if module is not None and child is module:
            setattr(owner, name, None)


def stage_chunks(model: torch.nn.Module, parts: DecoderParts, blocks: torch.nn.ModuleList, plan: HybridPlan,
                 stage: int) -> List[DecoderChunk]:
    """This stage's model chunks in model order (chunk c of the plan runs on stage c % pp_degree, as kiwi's
    simulator and Megatron-LM place them); the model drops the other stages' blocks (nn.Identity), and the
    embedding (with its positions), the final norm and the head unless the stage runs the first or the
    last chunk. A tied embedding stays on the last stage too, as its head's copy (tied_embedding.py)."""
    indices = plan.stage_chunks(stage)
    last_chunk = len(plan.pp_partition) - 1
    chunks = [DecoderChunk(parts, blocks, plan.chunk_layers(c), c == 0, c == last_chunk) for c in indices]
    mine = plan.stage_layers(stage)
    for i in range(len(blocks)):
        if i not in mine:
            blocks[i] = torch.nn.Identity()
    if 0 not in indices:
        _drop(parts.base, parts.positions)
        _drop(parts.base, parts.dropout)
        if parts.encoder:  # the embeddings module keeps only a tied copy's word embedding
            keep = parts.embed if parts.tied and last_chunk in indices else None
            for name, child in list(parts.embeddings.named_children()):
                if child is not keep:
                    setattr(parts.embeddings, name, None)
        elif not (parts.tied and last_chunk in indices):
            _drop(parts.base, parts.embed)
    if last_chunk not in indices:
        _drop(parts.base, parts.norm)
        _drop(model, parts.head_block if parts.encoder else parts.head)
    return chunks


def loss_function(model: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The model's own loss of its logits (HuggingFace's shift and cross-entropy)."""
    vocab = model.config.vocab_size

    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return model.loss_function(logits=logits, labels=labels, vocab_size=vocab)
    return loss


def _plan_stage():
    """PipelineStage whose FSDP2 layers synchronise as their ZeRO stages say, as outside a pipeline
    (training.step): DP/ZeRO-1 after the last micro-batch, ZeRO-2/3 reduce-scatter every micro-batch's
    gradient, ZeRO-1/2 keep their parameters gathered until the step. torch.distributed.pipelining
    instead defers every FSDP2 layer's gradient sync and resharding to the end of the step (whole
    gradients and gathered parameters of every layer held meanwhile), which is neither what the plan
    says nor what kiwi prices."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining._backward import stage_backward

    class PlanStage(PipelineStage):
        def __init__(self, *args, accumulating=(), unsharded=(), **kwargs):
            super().__init__(*args, **kwargs)
            self.accumulating, self.unsharded = list(accumulating), list(unsharded)

        def backward_maybe_with_nosync(self, backward_type, bwd_kwargs, last_backward=False):
            if backward_type != "full" or not isinstance(self.submod, FSDPModule):
                return super().backward_maybe_with_nosync(backward_type, bwd_kwargs, last_backward)
            set_micro_batch_sync(self.accumulating, self.unsharded, last_backward)
            return stage_backward(bwd_kwargs["stage_output"], bwd_kwargs["output_grads"], bwd_kwargs["input_values"]), None

        def perform_reduce_grad(self, grad_scale_factor: int):
            if not isinstance(self.submod, FSDPModule):
                return super().perform_reduce_grad(grad_scale_factor)
            # every layer synchronised in its own backward pass (above): only the 1 / micro-batches is left
            if grad_scale_factor != 1:
                self.scale_grads(grad_scale_factor)

    return PlanStage


def make_schedule(plan: HybridPlan, chunks: List[torch.nn.Module], stage: int, mesh: DeviceMesh,
                  loss: Callable, device: torch.device, accumulating=(), unsharded=()):
    """The plan's schedule of this rank's chunks over the plan's micro-batches: 1F1B or GPipe of its one
    stage, or interleaved 1F1B of its `virtual_stages` chunks (one PipelineStage each, stage index = chunk).
    `accumulating` / `unsharded`: the FSDP2 modules that sync after the last micro-batch only / stay
    gathered until the step (training.step's lists), each handed to its chunk's stage."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
    group, count = mesh.get_group("pp"), len(plan.pp_partition)
    stage_kind = _plan_stage()

    def within(modules, chunk):
        inside = {id(m) for m in chunk.modules()}
        return [m for m in modules if id(m) in inside]
    stages = [stage_kind(module, c, count, device, group=group, accumulating=within(accumulating, module),
                         unsharded=within(unsharded, module))
              for module, c in zip(chunks, plan.stage_chunks(stage))]
    if plan.virtual_stages > 1:
        return ScheduleInterleaved1F1B(stages, n_microbatches=plan.micro_batches, loss_fn=loss)
    kind = Schedule1F1B if plan.pipeline == "1f1b" else ScheduleGPipe
    return kind(stages[0], n_microbatches=plan.micro_batches, loss_fn=loss)
