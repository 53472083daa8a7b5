"""Slice-Gather (Galvatron-BMW §VI) between neighbouring layers of different layouts, as kiwi prices it
(cost::SliceGatherSeconds): a layer's output is split over its DP ranks by samples and replicated over
its TP group, so two layouts differ in their DP degree. Toward a smaller DP degree each rank all-gathers
the rows its new share is made of from the ranks that hold them (forward), and keeps its own rows of the
replicated input gradient (backward: a slice); toward a larger one the transpose: a slice forward, the
gradient all-gathered backward. The gathering ranks are groups of dp_large / dp_small consecutive
large-layout shares (mesh (pp, dp_small, dp_large / dp_small, tp_large), its third dimension), which is
where a rank's rows sit when the ranks of a stage are numbered dp-major in both layouts.

The gradient crossing the boundary is scaled by dp_prev / dp_next: each rank's loss is the mean over
its own rows of the last layout and FSDP2 averages a layer's gradients over that layer's DP ranks, so a
layer of another DP degree weighs its rows as its own degree says."""
from typing import Any, Tuple

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

Layout = Tuple[int, int]  # (dp, tp)


def boundary_mesh(device_type: str, pp: int, prev: Layout, next_: Layout) -> DeviceMesh:
    """The mesh whose "inner" dimension groups the ranks one Slice-Gather gathers over (made on every rank,
    in the same order)."""
    small, large = sorted((prev, next_))
    return init_device_mesh(device_type, (pp, small[0], large[0] // small[0], large[1]),
                            mesh_dim_names=("pp", "outer", "inner", "tp"))


def _gather_rows(x: torch.Tensor, group: Any) -> torch.Tensor:
    out = torch.empty((dist.get_world_size(group) * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


class _Gather(torch.autograd.Function):
    """Forward: this rank's rows all-gathered over `group` (in its rank order); backward: its own rows of
    the gradient, scaled."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: Any, index: int, scale: float) -> torch.Tensor:
        ctx.rows, ctx.index, ctx.scale = x.shape[0], index, scale
        return _gather_rows(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        start = ctx.index * ctx.rows
        return grad[start:start + ctx.rows] * ctx.scale, None, None, None


class _Slice(torch.autograd.Function):
    """Forward: this rank's part of the rows; backward: the gradient's parts all-gathered over `group`,
    scaled."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: Any, index: int, scale: float) -> torch.Tensor:
        rows = x.shape[0] // dist.get_world_size(group)
        ctx.group, ctx.scale = group, scale
        return x[index * rows:(index + 1) * rows].clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _gather_rows(grad, ctx.group) * ctx.scale, None, None, None


def relayout(x: torch.Tensor, mesh: DeviceMesh, prev: Layout, next_: Layout) -> torch.Tensor:
    """`x` (rows of this rank's share under `prev`) as its share under `next_`, over `mesh`'s "inner"
    group (boundary_mesh)."""
    if prev[0] == next_[0]:
        return x
    group, index = mesh.get_group("inner"), mesh["inner"].get_local_rank()
    scale = prev[0] / next_[0]
    return (_Gather if next_[0] < prev[0] else _Slice).apply(x, group, index, scale)


def relayout_rows(x: torch.Tensor, mesh: DeviceMesh, prev: Layout, next_: Layout) -> torch.Tensor:
    """The same for tensors without gradients (labels)."""
    with torch.no_grad():
        return relayout(x, mesh, prev, next_)
