"""Pipeline stages of a HuggingFace decoder language model with torch.distributed.pipelining: each stage
keeps its plan layers' blocks (the embedding on the first, the final norm and the head on the last) in
one model chunk, or with interleaved 1F1B (`virtual_stages` v > 1) in v chunks placed as kiwi places them
(chunk c on stage c % pp_degree), each run as the model's own forward does (rotary position embeddings
per chunk, causal attention); 1F1B, GPipe or interleaved 1F1B over the plan's micro-batches, the model's
own loss on the last stage."""
from typing import Callable, List

import torch
from torch.distributed.device_mesh import DeviceMesh

from kiwi.torch.distributed.plan import HybridPlan, PlanError
from kiwi.torch.parallel.blocks import vocabulary_ends


def decoder_parts(model: torch.nn.Module, blocks: torch.nn.ModuleList, source: str):
    """(base model, its embedding, rotary embedding or None, final norm, head) of a Llama-family decoder
    (embed_tokens, layers, norm, rotary_emb: Llama, Mistral, Qwen2, ...); a PlanError otherwise."""
    base = next((m for m in model.modules() if any(c is blocks for c in m.children())), None)
    _, head, tied = vocabulary_ends(model)
    if base is None or not all(hasattr(base, n) for n in ("embed_tokens", "norm")) or head is None:
        raise PlanError(f"{source}: layer.pp_degree: kiwi.torch.parallelize splits pipeline stages of decoder "
                        f"language models of the Llama family (embed_tokens, layers, norm, lm_head); "
                        f"{type(model).__name__} is not one")
    if tied:
        raise PlanError(f"{source}: layer.pp_degree: tied input and output embeddings cannot sit on two stages")
    return base, base.embed_tokens, getattr(base, "rotary_emb", None), base.norm, head


class DecoderChunk(torch.nn.Module):
    """One model chunk of a pipeline stage (the whole stage without interleaving): token ids (the first
    chunk) or hidden states in, hidden states or logits (the last chunk) out. It holds only its own blocks
    (and the embedding, or the final norm and the head), so each chunk's PipelineStage scales and
    synchronises only its own gradients; the model keeps them under their own names."""

    def __init__(self, parts, blocks: torch.nn.ModuleList, layers: List[int], first: bool, last: bool):
        super().__init__()
        _, embed, rotary, norm, head = parts
        self.embed = embed if first else None
        self.blocks = torch.nn.ModuleList([blocks[i] for i in layers])
        self.norm = norm if last else None
        self.head = head if last else None
        self._rotary = (rotary,)  # buffers only: shared by the chunks, not registered

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(x) if self.embed is not None else x
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        rotary = self._rotary[0]
        rope = rotary(hidden, positions) if rotary is not None else None
        for block in self.blocks:  # no mask: the attention is causal (HuggingFace's SDPA path)
            out = block(hidden, attention_mask=None, position_ids=positions, position_embeddings=rope)
            hidden = out[0] if isinstance(out, tuple) else out
        return self.head(self.norm(hidden)) if self.head is not None else hidden


def stage_chunks(model: torch.nn.Module, blocks: torch.nn.ModuleList, plan: HybridPlan,
                 stage: int) -> List[DecoderChunk]:
    """This stage's model chunks in model order (chunk c of the plan runs on stage c % pp_degree, as kiwi's
    simulator and Megatron-LM place them); the model drops the other stages' blocks (nn.Identity), and the
    embedding, the final norm and the head unless the stage runs the first or the last chunk."""
    parts = decoder_parts(model, blocks, plan.source)
    base, _, _, _, head = parts
    indices = plan.stage_chunks(stage)
    last_chunk = len(plan.pp_partition) - 1
    chunks = [DecoderChunk(parts, blocks, plan.chunk_layers(c), c == 0, c == last_chunk) for c in indices]
    mine = plan.stage_layers(stage)
    for i in range(len(blocks)):
        if i not in mine:
            blocks[i] = torch.nn.Identity()
    if 0 not in indices:
        base.embed_tokens = None
    if last_chunk not in indices:
        base.norm = None
        for name, module in model.named_children():
            if module is head:
                setattr(model, name, None)
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
            for module in self.accumulating:
                module.set_requires_gradient_sync(last_backward, recurse=False)
            for module in self.unsharded:
                module.set_reshard_after_backward(last_backward, recurse=False)
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
