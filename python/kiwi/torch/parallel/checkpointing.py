"""Activation checkpointing of a layer the torch-native way (torch.distributed._composable's
`checkpoint`: hooks, the module and its parameter names unchanged): the whole block, whose forward
re-runs in the backward pass, or Megatron's selective recomputation (Korthikanti et al. 2023 §5) as a
selective-activation-checkpointing policy: the attention core (fused scaled dot-product attention, or
the eager scores, softmax and context products) is recomputed, every other activation is kept."""
import torch
from torch.distributed._composable import checkpoint
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

_ATEN = torch.ops.aten
# The block's linears run as mm/addmm on 2-D views, never bmm: bmm and baddbmm are the eager core's.
_CORE_NAMES = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
               "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
               "bmm", "baddbmm", "_softmax")
ATTENTION_CORE = frozenset(getattr(_ATEN, name).default for name in _CORE_NAMES if hasattr(_ATEN, name))


def _attention_core_policy(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.PREFER_RECOMPUTE if op in ATTENTION_CORE else CheckpointPolicy.MUST_SAVE


def _selective_contexts():
    return create_selective_checkpoint_contexts(_attention_core_policy)


def checkpoint_block(block: torch.nn.Module, selective: bool) -> None:
    """Recompute the block's activations in its backward pass: all of them, or (selective) the
    attention core's."""
    if selective:
        checkpoint(block, context_fn=_selective_contexts)
    else:
        checkpoint(block)
