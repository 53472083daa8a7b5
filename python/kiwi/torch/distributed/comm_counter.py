"""Every collective and point-to-point call of the runtime goes through a CommCounter, which counts the
bytes per purpose the way kiwi's cost model states them (cost/layer_cost.h LayerCommunication, the
`bytes` of cost::CollectiveTime): all-reduce: the buffer; all-gather: the gathered result;
reduce-scatter: the input; send: the message. Only torch.distributed moves the data."""
import collections
import contextlib
import time
from typing import Dict, List, Optional

import torch
import torch.distributed as dist

# Purposes (the cost model's terms); reports and tests key on these names.
TP_ALL_REDUCE = "tp_all_reduce"
SDP_ALL_GATHER = "sdp_all_gather"
SDP_REDUCE_SCATTER = "sdp_reduce_scatter"      # ZeRO-1/2/3's gradient reduce-scatter
STEP_ALL_GATHER = "step_all_gather"            # ZeRO-1/2: the updated parameters after the step
DP_ALL_REDUCE = "dp_all_reduce"
SLICE_GATHER = "slice_gather"                    # forward all-gather when the DP degree shrinks
SLICE_GATHER_BACKWARD = "slice_gather_backward"  # backward all-gather when the DP degree grows
SP_ALL_GATHER = "sp_all_gather"                  # sequence parallelism: the shards gathered (f forward, g backward)
SP_REDUCE_SCATTER = "sp_reduce_scatter"          # and partial sums reduced into them (g forward, f backward)
SP_GRAD_ALL_REDUCE = "sp_grad_all_reduce"        # and the TP sum of the replicated parameters' gradients
SEQUENCE_GATHER = "sequence_gather"                    # a sequence-parallel layer's output made whole for another layout
SEQUENCE_GATHER_BACKWARD = "sequence_gather_backward"  # a sequence-parallel layer's input gradient made whole
SEND_FORWARD = "send_forward"
SEND_BACKWARD = "send_backward"


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class CommCounter:
    """Bytes and calls per (purpose, unit) since the last reset(); unit is a layer index, "embed" or "head"."""

    def __init__(self):
        self.bytes: Dict[tuple, int] = collections.Counter()
        self.calls: Dict[tuple, int] = collections.Counter()
        self.seconds: Dict[str, float] = collections.Counter()  # wall time blocked in calls, per purpose

    def reset(self) -> None:
        self.bytes.clear()
        self.calls.clear()
        self.seconds.clear()

    @contextlib.contextmanager
    def blocked(self, purpose: str):
        """Adds the wall time of the enclosed blocking call (or wait) to `purpose`."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[purpose] += time.perf_counter() - t0

    def record(self, purpose: str, unit, count: int) -> None:
        self.bytes[(purpose, unit)] += count
        self.calls[(purpose, unit)] += 1

    def snapshot(self) -> Dict[str, Dict[str, int]]:
        """{purpose: {unit: bytes}} with units as strings (JSON-friendly), plus "calls"."""
        out: Dict[str, Dict[str, int]] = {}
        for (purpose, unit), b in sorted(self.bytes.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
            out.setdefault(purpose, {})[str(unit)] = b
        calls: Dict[str, Dict[str, int]] = {}
        for (purpose, unit), c in self.calls.items():
            calls.setdefault(purpose, {})[str(unit)] = c
        return {"bytes": out, "calls": calls}

    # --- the wrapped calls -------------------------------------------------------------------------

    def all_reduce(self, t: torch.Tensor, group, purpose: str, unit, async_op: bool = False, op=None):
        self.record(purpose, unit, nbytes(t))
        with self.blocked(purpose):
            return dist.all_reduce(t, op=op if op is not None else dist.ReduceOp.SUM, group=group, async_op=async_op)

    def all_gather(self, shard: torch.Tensor, group, group_size: int, purpose: str, unit) -> List[torch.Tensor]:
        """List-form all_gather (gloo in torch 1.13 has no _allgather_base); returns the shards in rank order."""
        out = [torch.empty_like(shard) for _ in range(group_size)]
        self.record(purpose, unit, nbytes(shard) * group_size)
        with self.blocked(purpose):
            dist.all_gather(out, shard.contiguous(), group=group)
        return out

    def reduce_scatter(self, full: torch.Tensor, group, group_size: int, index: int, purpose: str, unit) -> torch.Tensor:
        """Sum `full` over the group and keep chunk `index`. Counted as one reduce-scatter of `full`;
        gloo has no reduce_scatter, so it runs as an all-reduce plus a slice (twice a ring
        reduce-scatter's traffic on the wire); NCCL uses reduce_scatter_tensor / _reduce_scatter_base."""
        self.record(purpose, unit, nbytes(full))
        chunk = full.numel() // group_size
        if dist.get_backend(group) == "nccl":
            out = torch.empty(chunk, dtype=full.dtype, device=full.device)
            fn = getattr(dist, "reduce_scatter_tensor", None) or getattr(dist, "_reduce_scatter_base")
            with self.blocked(purpose):
                fn(out, full.contiguous(), group=group)
            return out
        buf = full.contiguous().clone()
        with self.blocked(purpose):
            dist.all_reduce(buf, group=group)
        return buf[index * chunk:(index + 1) * chunk].clone()

    def isend(self, t: torch.Tensor, dst: int, purpose: str, unit, tag: int = 0):
        self.record(purpose, unit, nbytes(t))
        return dist.isend(t.contiguous(), dst, tag=tag)

    @staticmethod
    def irecv(t: torch.Tensor, src: int, tag: int = 0):
        return dist.irecv(t, src, tag=tag)  # the sender counts the message


class NullCounter(CommCounter):
    """Counts nothing (the single-process reference never communicates)."""

    def record(self, purpose: str, unit, count: int) -> None:  # noqa: D401
        return None


def merge_snapshots(snapshots: List[dict], key: str = "bytes") -> Dict[str, Dict[str, int]]:
    """Sums per-rank snapshots into {purpose: {unit: total}}."""
    out: Dict[str, Dict[str, int]] = {}
    for snap in snapshots:
        for purpose, units in snap.get(key, {}).items():
            for unit, b in units.items():
                out.setdefault(purpose, {})
                out[purpose][unit] = out[purpose].get(unit, 0) + b
    return out


def total(snapshot_bytes: Dict[str, Dict[str, int]], purpose: str, unit: Optional[str] = None) -> int:
    units = snapshot_bytes.get(purpose, {})
    return units.get(unit, 0) if unit is not None else sum(units.values())
