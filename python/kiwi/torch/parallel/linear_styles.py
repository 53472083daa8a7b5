"""Column- and row-parallel DTensor styles for the linears torch's ColwiseParallel / RowwiseParallel
refuse (they split nn.Linear and nn.Embedding only): a transposed linear (transformers' Conv1D, GPT-2's:
y = x @ W + b with W [in, out]) and a fused projection of equal parts side by side (GPT-2's c_attn: q, k
and v), each part split over the ranks so that every rank holds its own heads' q, k and v."""
from functools import partial
from typing import Tuple

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
from torch.distributed.tensor.placement_types import _StridedShard  # private in torch 2.13; FSDP2 + TP use it


def is_transposed(module: torch.nn.Module) -> bool:
    """A linear whose weight is [in, out] (transformers' Conv1D: nx inputs, nf outputs)."""
    weight = getattr(module, "weight", None)
    return (not isinstance(module, torch.nn.Linear) and isinstance(weight, torch.Tensor) and weight.dim() == 2
            and (getattr(module, "nx", None), getattr(module, "nf", None)) == tuple(weight.shape))


def features(module: torch.nn.Module) -> Tuple[int, int]:
    """(input features, output features) of an nn.Linear or a transposed linear."""
    in_dim, out_dim = (0, 1) if is_transposed(module) else (1, 0)
    return module.weight.shape[in_dim], module.weight.shape[out_dim]


def _output_split(dim: int, parts: int):
    # _StridedShard(dim, parts) cuts dim into parts x ranks pieces and gives rank r pieces r, r + ranks, ...:
    # q_r, k_r, v_r for parts=3, so the parameter keeps its own layout (full_tensor() is the model's weight)
    return _StridedShard(dim, split_factor=parts) if parts > 1 else Shard(dim)


def _local_output(module, output, mesh):
    # the output's last dim is split as the weight's outputs (a fused one's: q_r, k_r, v_r side by side,
    # which a redistribution to Shard(-1) would move across ranks): the rank goes on with its own columns
    return output.to_local()


def _replicated(grad):
    # a replicated parameter that each rank used a slice of gets its gradient in the slices' layout: gather
    # them so the optimizer sees the parameter's layout (FSDP2 replaces the parameter, and does the same)
    return grad.redistribute(grad.device_mesh, [Replicate()]) if grad.placements != (Replicate(),) else grad


class ColumnParallel(ColwiseParallel):
    """ColwiseParallel for a transposed linear (its outputs are dim 1 of the weight: Shard(1), the
    bias Shard(0)) or a fused nn.Linear / transposed one of `parts` equal outputs (each part split);
    its output is always the rank's local columns."""

    def __init__(self, parts: int = 1):
        super().__init__()
        self.parts = parts

    def _partition(self, name: str, module: torch.nn.Module, mesh: DeviceMesh) -> None:
        out_dim = 1 if is_transposed(module) else 0
        # A fused bias stays replicated: FSDP2 would shard its one dim after TP's strided split, a layout
        # DTensor cannot describe (full_tensor() and checkpoints would misplace it). Each rank adds its
        # q_r, k_r, v_r slice, and the slices' gradients are all-gathered into the replicated one.
        bias = Replicate() if self.parts > 1 else Shard(0)
        for key, placement in (("weight", _output_split(out_dim, self.parts)), ("bias", bias)):
            param = getattr(module, key, None)
            if isinstance(param, torch.nn.Parameter):
                param = torch.nn.Parameter(
                    distribute_tensor(param, mesh, [placement], src_data_rank=self.src_data_rank),
                    requires_grad=param.requires_grad)
                if placement == Replicate() and param.requires_grad:
                    param.register_hook(_replicated)
                module.register_parameter(key, param)

    def _apply(self, module: torch.nn.Module, device_mesh: DeviceMesh) -> torch.nn.Module:
        return distribute_module(module, device_mesh, self._partition,
                                 partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
                                 _local_output)


class RowParallel(RowwiseParallel):
    """RowwiseParallel for a transposed linear: its inputs are dim 0 of the weight (Shard(0)), the bias
    replicated (added once, to the reduced sum)."""

    def _partition(self, name: str, module: torch.nn.Module, mesh: DeviceMesh) -> None:
        for key, placement in (("weight", Shard(0)), ("bias", Replicate())):
            param = getattr(module, key, None)
            if isinstance(param, torch.nn.Parameter):
                module.register_parameter(key, torch.nn.Parameter(
                    distribute_tensor(param, mesh, [placement], src_data_rank=self.src_data_rank),
                    requires_grad=param.requires_grad))

    def _apply(self, module: torch.nn.Module, device_mesh: DeviceMesh) -> torch.nn.Module:
        self.desired_input_layouts = (Shard(-1),)  # the column-parallel group's local outputs
        return distribute_module(module, device_mesh, self._partition,
                                 partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
                                 partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))
