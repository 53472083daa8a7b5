"""Data parallelism of a layer with FSDP2 (`fully_shard`), by the plan's ZeRO stage over the DP ranks:
ZeRO-3 reshards the parameters after the forward pass (all-gathered again for the backward), ZeRO-2
keeps them unsharded from the first forward pass to the step (all-gathered once per step), ZeRO-1 does
as ZeRO-2 but reduce-scatters the gradients once per step (after the last micro-batch, training.py),
and plain DP is FSDP2 over a
(dp, 1) mesh: replicated parameters, gradients all-reduced (HSDP with shards of one rank)."""
from typing import Optional, Sequence

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from kiwi.torch.distributed.plan import LayerStrategy
from kiwi.torch.parallel.gloo_comms import use_in_place_collectives


def shard_layer(module: torch.nn.Module, strategy: LayerStrategy, dp_mesh: DeviceMesh,
                replicate_mesh: Optional[DeviceMesh]) -> FSDPModule:
    """fully_shard(module) as `strategy`'s ZeRO stage says; `replicate_mesh` is the (dp, 1) mesh of
    plain data parallelism."""
    stage = strategy.zero_stage
    if stage == 0 and replicate_mesh is not None:
        return fully_shard(module, mesh=replicate_mesh, reshard_after_forward=False)
    wrapped = fully_shard(module, mesh=dp_mesh, reshard_after_forward=stage == 3)
    use_in_place_collectives(wrapped, dp_mesh.get_group())
    return wrapped


def set_micro_batch_sync(accumulating: Sequence[FSDPModule], unsharded: Sequence[FSDPModule], last: bool) -> None:
    """Before a micro-batch's backward pass: DP/ZeRO-1 layers (`accumulating`) synchronise only in the last
    one, ZeRO-1/2 layers (`unsharded`) keep their parameters gathered until then; ZeRO-3 as FSDP2 does."""
    for module in accumulating:
        module.set_requires_gradient_sync(last, recurse=False)
    for module in unsharded:
        module.set_reshard_after_backward(last, recurse=False)


def syncs_every_micro_batch(strategy: LayerStrategy) -> bool:
    """ZeRO-2/3 reduce-scatter each micro-batch's gradients (their whole gradients are never kept);
    DP and ZeRO-1 accumulate whole gradients and synchronise once, after the last micro-batch."""
    return strategy.zero_stage >= 2
