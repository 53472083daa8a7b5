"""Bytes of every collective a step runs, by kind and mesh dimension, counted where they are dispatched
(a TorchDispatchMode sees DTensor's functional collectives, those inside its ops included, and FSDP2's
c10d ones alike), in the
convention kiwi's cost model states them: all-reduce the buffer, all-gather the gathered result,
reduce-scatter the input (sim::LayerPlanTraffic)."""
import contextlib
from typing import Dict, Iterator, List, Optional

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _resolve_process_group
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

# op name (without overload) -> kind; the gathered result is the input times the group size
_KINDS = {"all_reduce": "all_reduce", "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
          "all_gather_into_tensor": "all_gather", "_allgather_base_": "all_gather", "allgather_": "all_gather",
          "allgather_into_tensor_coalesced_": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
          "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
          "reduce_scatter_": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
          "reduce_scatter_tensor_coalesced_": "reduce_scatter", "send": "send"}


# the kind an all-reduce is counted as while it stands for another collective (gloo_comms.py); its bytes
# are the same: the gathered result of an all-gather, the input of a reduce-scatter
_standing_for: List[str] = []


@contextlib.contextmanager
def counted_as(kind: str) -> Iterator[None]:
    """The collectives dispatched inside count as `kind` ("all_gather", "reduce_scatter")."""
    _standing_for.append(kind)
    try:
        yield
    finally:
        _standing_for.pop()


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(t) for t in x)
    return 0


def _group(args, kwargs) -> Optional[dist.ProcessGroup]:
    """The collective's group: a functional collective names it in its last string argument (after its
    reduce op), a c10d one passes it boxed."""
    name = None
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, str):
            name = a
        elif isinstance(a, torch.ScriptObject):
            try:
                return dist.ProcessGroup.unbox(a)
            except RuntimeError:  # another boxed object (the reduce op)
                continue
    return _resolve_process_group(name) if name is not None else None


class CollectiveBytes(TorchDispatchMode):
    """with CollectiveBytes(pm.groups) as c: ...; c.bytes == {("tp", "all_reduce"): n, ("dp", "all_gather"): m,
    ...} for this rank; `groups` names process groups ({"dp": [group]}) and a collective counts under the
    name of its group or, for a group not named, of the named group with its ranks (DTensor may run a
    mesh's collectives on an equal mesh's groups); the others count as "other"."""

    def __init__(self, groups: Dict[str, List[dist.ProcessGroup]]):
        super().__init__()
        self.bytes: Dict[tuple, int] = {}
        self.calls: Dict[tuple, int] = {}
        self._dims = {frozenset(dist.get_process_group_ranks(g)): dim for dim, gs in groups.items() for g in gs}
        self._names = {g.group_name: dim for dim, gs in groups.items() for g in gs}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            # let DTensor run the op first (a mode runs before subclasses): the collectives it issues inside
            # (the vocabulary-parallel loss's, a norm's gradient under SP) come back here as plain ops
            return NotImplemented
        kwargs = kwargs or {}
        namespace = func.namespace
        if namespace in ("c10d", "_c10d_functional"):
            kind = _KINDS.get(func._opname)
            if kind is not None:
                group = _group(args, kwargs)
                ranks = frozenset(dist.get_process_group_ranks(group)) if group is not None else frozenset()
                dim = self._names.get(group.group_name) if group is not None else None
                dim, size = dim or self._dims.get(ranks, "other"), max(1, len(ranks))
                if namespace == "_c10d_functional":  # (input, ...): an all-gather's input is one rank's share
                    payload = _tensor_bytes(args[0]) * (size if kind == "all_gather" else 1)
                elif kind == "send":  # c10d.send(tensors, peer, tag): the message
                    payload, dim = _tensor_bytes(args[0]), "pp"
                else:  # c10d: (tensors, ...) or (outputs, inputs, ...): a reduce-scatter counts its input
                    payload = _tensor_bytes(args[1] if kind == "reduce_scatter" else args[0])
                key = (dim, _standing_for[-1] if _standing_for else kind)
                self.bytes[key] = self.bytes.get(key, 0) + payload
                self.calls[key] = self.calls.get(key, 0) + 1
        return func(*args, **kwargs)
