"""FSDP2's all-gather and reduce-scatter on gloo, run as all-reduces in the buffer FSDP2 already holds.
gloo's own all-gather and reduce-scatter copy their whole buffer (the gathered result, the
reduce-scatter's input: one layer's parameters or gradient) into a temporary, and gloo's worker thread
holds a reference to the buffers it ran on until it gets to drop it: a buffer FSDP2 frees then is freed
on that thread, unseen by the profiler that measures a CPU step. Either way a rank's peak varied from run
to run by up to two layers (4 gloo ranks, docs/distributed.md). An all-reduce in place, on a view that
does not own the buffer's memory, allocates nothing and leaves every free to FSDP2: the peak is FSDP2's
own, as on NCCL. It moves twice a reduce-scatter's bytes over the wire; the step's collectives are
counted as the ones they stand for (collectives.counted_as), the convention of kiwi's cost model."""
import ctypes
from typing import Optional

import torch
import torch.distributed as dist
# FSDP2's interfaces for a custom collective (torch >= 2.8) and its default buffer allocation, private
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllocMixin

from kiwi.torch.parallel.collectives import counted_as


def _all_reduce_in_place(t: torch.Tensor, group: dist.ProcessGroup) -> None:
    """dist.all_reduce(t) (SUM, waited for) through a view of t's memory that does not keep it alive: gloo's
    thread may drop its reference after FSDP2 drops t's, and t is then freed here all the same."""
    memory = (ctypes.c_byte * (t.numel() * t.element_size())).from_address(t.data_ptr())
    dist.all_reduce(torch.frombuffer(memory, dtype=t.dtype), group=group)


class InPlaceAllGather(DefaultAllocMixin, AllGather):
    """The gathered result as the sum of every rank's buffer, zero but in its own slot."""

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 async_op: bool = False) -> Optional[dist.Work]:
        rows, rank = output_tensor.view(group.size(), -1), group.rank()
        if rows[rank].data_ptr() != input_tensor.data_ptr():  # FSDP2 copies its shard into the slot itself
            rows[rank].copy_(input_tensor.view(-1))
        rows[:rank].zero_()
        rows[rank + 1:].zero_()
        with counted_as("all_gather"):
            _all_reduce_in_place(output_tensor, group)
        return None


class InPlaceReduceScatter(DefaultAllocMixin, ReduceScatter):
    """The input summed over the ranks in place, then this rank's slice (divided by the ranks for AVG)."""

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op=dist.ReduceOp.SUM, async_op: bool = False) -> Optional[dist.Work]:
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            raise ValueError(f"kiwi's gloo reduce-scatter: reduce op {op} is not SUM or AVG")
        with counted_as("reduce_scatter"):
            _all_reduce_in_place(input_tensor, group)
        output_tensor.copy_(input_tensor.view(group.size(), -1)[group.rank()].view_as(output_tensor))
        if op == dist.ReduceOp.AVG:
            output_tensor.div_(group.size())
        return None


def use_in_place_collectives(module, group: dist.ProcessGroup) -> None:
    """On a gloo group, FSDP2 `module`'s all-gathers and reduce-scatters become in-place all-reduces;
    other backends (NCCL) keep FSDP2's own."""
    if dist.get_backend(group) != "gloo":
        return
    module.set_custom_all_gather(InPlaceAllGather())
    module.set_custom_reduce_scatter(InPlaceReduceScatter())
