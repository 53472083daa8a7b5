"""A tied input embedding and head across pipeline stages, as Megatron-LM keeps them: the first stage
holds the embedding's weight, the last stage its own copy for the head (made equal at the start), and
before each optimizer step the two copies' gradients are summed over a group of the first- and the
last-stage rank at each (dp, tp) position, so both take the same step as the one tied weight would."""
import dataclasses
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from kiwi.torch.distributed.plan import HybridPlan, LayerStrategy


def tied_group(mesh: DeviceMesh) -> Optional[dist.ProcessGroup]:
    """This rank's group of the first- and last-stage ranks at its (dp, tp) position (None on a middle
    stage). Every rank creates every group, in one order, as new_group requires."""
    first, last = mesh.mesh[0].flatten().tolist(), mesh.mesh[-1].flatten().tolist()  # (dp, 1, tp) each
    mine = None
    for pair in zip(first, last):
        group = dist.new_group(list(pair))
        if dist.get_rank() in pair:
            mine = group
    return mine


def _sharded(strategy: LayerStrategy) -> bool:
    return strategy.dp > 1 and strategy.zero_stage >= 1  # ZeRO: FSDP2's Shard(0); DP: whole (replicate mesh)


@dataclasses.dataclass
class TiedEmbedding:
    """The tied weight's copy on this rank (the first or the last stage) and the pair's group; `same_shards`:
    both stages' FSDP2 hold the same rows of it, so their local gradients add up directly."""
    weight: torch.nn.Parameter
    group: dist.ProcessGroup
    same_shards: bool

    def sum_gradients(self) -> None:
        """grad := first stage's grad + last stage's grad, on both (before the optimizer step)."""
        grad = self.weight.grad
        if grad is None:
            grad = self.weight.grad = torch.zeros_like(self.weight)
        local = grad.to_local() if isinstance(grad, DTensor) else grad
        if self.same_shards:
            dist.all_reduce(local, group=self.group)
            return
        # one stage shards the weight (ZeRO), the other keeps it whole (DP): add whole gradients, keep own rows
        whole = grad.full_tensor() if isinstance(grad, DTensor) else grad.clone()
        dist.all_reduce(whole, group=self.group)
        if isinstance(grad, DTensor) and local.shape != whole.shape:
            rank = grad.device_mesh.get_local_rank(0)
            whole = torch.chunk(whole, grad.device_mesh.size(0), dim=0)[rank]  # FSDP2's Shard(0) rows
        local.copy_(whole)


def tie_across_stages(mesh: DeviceMesh, weight: torch.Tensor) -> Optional[dist.ProcessGroup]:
    """Before FSDP2 wraps anything: makes the last stage's copy equal to the first stage's (broadcast over
    the pair) and returns this rank's pair group (None on a middle stage)."""
    group = tied_group(mesh)
    if group is not None:
        with torch.no_grad():
            dist.broadcast(weight.data, group=group, group_src=0)
    return group


def tied_embedding(plan: HybridPlan, group: dist.ProcessGroup, weight: torch.nn.Parameter) -> TiedEmbedding:
    """The TiedEmbedding of this rank's copy (the parameter the optimizer steps, after FSDP2's wrapping)."""
    last_chunk = len(plan.pp_partition) - 1
    first, last = plan.layers[0], plan.layers[plan.chunk_layers(last_chunk)[0]]  # each root's strategy
    return TiedEmbedding(weight, group, _sharded(first) == _sharded(last))
