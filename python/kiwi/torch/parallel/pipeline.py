"""Pipeline stages of a HuggingFace decoder language model with torch.distributed.pipelining: each stage
keeps its plan layers' blocks (the embedding on the first, the final norm and the head on the last) and
runs them as the model's own forward does (rotary position embeddings per stage, causal attention);
1F1B or GPipe over the plan's micro-batches, the model's own loss on the last stage."""
from typing import Callable, List

import torch
from torch.distributed.device_mesh import DeviceMesh

from kiwi.torch.distributed.plan import HybridPlan, PlanError


def decoder_parts(model: torch.nn.Module, blocks: torch.nn.ModuleList, source: str):
    """(base model, its embedding, rotary embedding or None, final norm, head) of a Llama-family decoder
    (embed_tokens, layers, norm, rotary_emb: Llama, Mistral, Qwen2, ...); a PlanError otherwise."""
    base = next((m for m in model.modules() if any(c is blocks for c in m.children())), None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if base is None or not all(hasattr(base, n) for n in ("embed_tokens", "norm")) or head is None:
        raise PlanError(f"{source}: layer.pp_degree: kiwi.torch.parallelize splits pipeline stages of decoder "
                        f"language models of the Llama family (embed_tokens, layers, norm, lm_head); "
                        f"{type(model).__name__} is not one")
    if head.weight is base.embed_tokens.weight:
        raise PlanError(f"{source}: layer.pp_degree: tied input and output embeddings cannot sit on two stages")
    return base, base.embed_tokens, getattr(base, "rotary_emb", None), base.norm, head


class DecoderStage(torch.nn.Module):
    """One pipeline stage of a decoder model: token ids (first stage) or hidden states in, hidden states
    or logits (last stage) out. The other stages' blocks are dropped; parameter names stay the model's."""

    def __init__(self, model: torch.nn.Module, blocks: torch.nn.ModuleList, layers: List[int], first: bool,
                 last: bool, source: str):
        super().__init__()
        base, embed, rotary, norm, head = decoder_parts(model, blocks, source)
        for i in range(len(blocks)):
            if i not in layers:
                blocks[i] = torch.nn.Identity()
        if not first:
            base.embed_tokens = None
        if not last:
            base.norm = None
            for name, module in model.named_children():
                if module is head:
                    setattr(model, name, None)
        self.model = model
        self._parts = (base, rotary, blocks, list(layers), first, last, head if last else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base, rotary, blocks, layers, first, last, head = self._parts
        hidden = base.embed_tokens(x) if first else x
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        rope = rotary(hidden, positions) if rotary is not None else None
        for i in layers:  # no mask: the attention is causal (HuggingFace's SDPA path)
            out = blocks[i](hidden, attention_mask=None, position_ids=positions, position_embeddings=rope)
            hidden = out[0] if isinstance(out, tuple) else out
        return head(base.norm(hidden)) if last else hidden


def loss_function(model: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The model's own loss of its logits (HuggingFace's shift and cross-entropy)."""
    vocab = model.config.vocab_size

    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return model.loss_function(logits=logits, labels=labels, vocab_size=vocab)
    return loss


def make_schedule(plan: HybridPlan, stage_module: torch.nn.Module, stage: int, mesh: DeviceMesh,
                  loss: Callable, device: torch.device):
    """The plan's schedule (1F1B or GPipe) of this rank's stage over the plan's micro-batches."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    pipeline_stage = PipelineStage(stage_module, stage, plan.pp_degree, device, group=mesh.get_group("pp"))
    kind = Schedule1F1B if plan.pipeline == "1f1b" else ScheduleGPipe
    return kind(pipeline_stage, n_microbatches=plan.micro_batches, loss_fn=loss)


def check_pipeline(plan: HybridPlan) -> None:
    if plan.virtual_stages > 1:
        raise PlanError(f"{plan.source}: layer.virtual_stages: interleaved 1F1B ({plan.virtual_stages} chunks per "
                        "stage) is not applied by kiwi.torch.parallelize yet")
