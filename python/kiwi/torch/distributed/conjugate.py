"""One autograd function for the runtime's communication pairs: a forward map and the map its
gradient takes backward (Megatron's f: identity / all-reduce; g: all-reduce / identity; sequence
parallelism's all-gather / reduce-scatter and back; Slice-Gather's gather / slice and back)."""
from typing import Callable

import torch

Map = Callable[[torch.Tensor], torch.Tensor]


class _Conjugate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forward: Map, backward: Map):
        ctx.backward_map = backward
        return forward(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.backward_map(grad), None, None


def conjugate(x: torch.Tensor, forward: Map, backward: Map) -> torch.Tensor:
    """forward(x), whose gradient is backward(the output's gradient)."""
    return _Conjugate.apply(x, forward, backward)


def identity(t: torch.Tensor) -> torch.Tensor:
    return t.view_as(t)
