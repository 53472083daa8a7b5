"""Data parallelism for one unit (embeddings, a layer, the head) of a plan:
 - DP: replicated parameters; gradients all-reduced in buckets launched from gradient-accumulator
   hooks while the backward pass goes on (PyTorch DDP's scheme), only in the last micro-batch;
 - ZeRO-1/2 (Rajbhandari et al. 2020, P_os and P_os+g): replicated parameters; the unit's gradients
   reduce-scattered into a flat shard of 1/dp that the optimizer steps (so its states are 1/dp too),
   then the updated shards all-gathered back into the parameters. ZeRO-1 reduce-scatters the
   accumulated gradients once, after the last micro-batch; ZeRO-2 after each micro-batch's backward of
   the unit, keeping only the shard's sum;
 - SDP (ZeRO-3, Rajbhandari et al. 2020): each DP rank keeps 1/dp of the flattened parameters; they are
   all-gathered before the forward and freed after it, all-gathered again when the unit's backward
   starts and freed when it ends; gradients are reduce-scattered back to the shards."""
from typing import Callable, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from kiwi.torch.distributed.comm_counter import (DP_ALL_REDUCE, SDP_ALL_GATHER, SDP_REDUCE_SCATTER, STEP_ALL_GATHER,
                                                 CommCounter, nbytes)

Params = Dict[str, torch.Tensor]


def _storage_ptr(t: torch.Tensor) -> int:
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return storage.data_ptr()


class DpGroup:
    def __init__(self, group, size: int, rank: int):
        self.group, self.size, self.rank = group, size, rank


def padded_flat(tensors: List[torch.Tensor], numel: int) -> torch.Tensor:
    """The tensors flattened one after another into `numel` elements, zero-padded (dp equal chunks)."""
    flat = torch.zeros(numel, dtype=tensors[0].dtype, device=tensors[0].device)
    flat[: sum(t.numel() for t in tensors)] = torch.cat([t.reshape(-1) for t in tensors])
    return flat


class ShardedParams:
    """ZeRO-3 storage of one unit's (TP-shard) parameters: a flat shard of numel ceil(total / dp)."""

    def __init__(self, local: Params, dp: DpGroup, counter: CommCounter, unit):
        self.names = list(local)
        self.shapes = [local[n].shape for n in self.names]
        self.numels = [local[n].numel() for n in self.names]
        self.total = sum(self.numels)
        self.dp, self.counter, self.unit = dp, counter, unit
        self.chunk = -(-self.total // dp.size)
        self.shard = nn.Parameter(self.expected_shard(local).clone())
        self.gathered: Optional[torch.Tensor] = None  # during the forward / the backward only

    def expected_shard(self, local: Params) -> torch.Tensor:
        """This rank's chunk of `local` flattened (the reference's parameters, for comparisons)."""
        flat = padded_flat([local[n] for n in self.names], self.chunk * self.dp.size)
        return flat[self.dp.rank * self.chunk:(self.dp.rank + 1) * self.chunk]

    def gather(self) -> torch.Tensor:
        parts = self.counter.all_gather(self.shard.detach(), self.dp.group, self.dp.size, SDP_ALL_GATHER, self.unit)
        return torch.cat(parts)

    def reduce_scatter(self, grad_full: torch.Tensor) -> torch.Tensor:
        return self.counter.reduce_scatter(grad_full, self.dp.group, self.dp.size, self.dp.rank,
                                           SDP_REDUCE_SCATTER, self.unit)

    def views(self, full: torch.Tensor) -> Params:
        out, offset = {}, 0
        for name, shape, n in zip(self.names, self.shapes, self.numels):
            out[name] = full[offset:offset + n].view(shape)
            offset += n
        return out


class ZeroShard:
    """ZeRO-1/2 state of one unit's (TP-shard) parameters, which stay whole on every rank: `shard`, a
    flat 1/dp of them (numel ceil(total / dp)) whose .grad is the reduce-scattered gradient, is what
    the optimizer steps."""

    def __init__(self, params: List[nn.Parameter], dp: DpGroup, counter: CommCounter, unit, every_microbatch: bool):
        self.params, self.dp, self.counter, self.unit = params, dp, counter, unit
        self.total = sum(p.numel() for p in params)
        self.chunk = -(-self.total // dp.size)
        flat = padded_flat([p.detach() for p in params], self.chunk * dp.size)
        self.shard = nn.Parameter(flat[dp.rank * self.chunk:(dp.rank + 1) * self.chunk].clone())
        self.ready = 0
        if every_microbatch:  # ZeRO-2: once every parameter of the unit has this micro-batch's gradient
            for p in params:
                p.register_post_accumulate_grad_hook(self._accumulated)

    def _accumulated(self, _param) -> None:
        self.ready += 1
        if self.ready == len(self.params):
            self.reduce_scatter()

    def reduce_scatter(self) -> None:
        """Sums the whole gradients over the DP ranks into this rank's shard and frees them (nothing
        to do when ZeRO-2 has reduced them already; a parameter without a gradient adds zeros)."""
        self.ready = 0
        if all(p.grad is None for p in self.params):
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        part = self.counter.reduce_scatter(padded_flat(grads, self.chunk * self.dp.size), self.dp.group, self.dp.size,
                                           self.dp.rank, SDP_REDUCE_SCATTER, self.unit)
        self.shard.grad = part if self.shard.grad is None else self.shard.grad + part
        for p in self.params:
            p.grad = None

    def gather(self) -> None:
        """After the optimizer step: every rank's updated shard back into the whole parameters."""
        parts = self.counter.all_gather(self.shard.detach(), self.dp.group, self.dp.size, STEP_ALL_GATHER, self.unit)
        full, offset = torch.cat(parts), 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(full[offset:offset + p.numel()].view_as(p))
                offset += p.numel()


class _GatherFn(torch.autograd.Function):
    """Forward: all-gather the shards into the full flat parameters. Backward (once every use of them
    has its gradient, i.e. at the end of the unit's backward): free the re-gathered copy and
    reduce-scatter the gradient to the shard."""

    @staticmethod
    def forward(ctx, shard, sp: ShardedParams):
        ctx.sp = sp
        return sp.gather()

    @staticmethod
    def backward(ctx, grad_full):
        ctx.sp.gathered = None
        return ctx.sp.reduce_scatter(grad_full), None


def run_sharded(sp: ShardedParams, fn: Callable[[Params], torch.Tensor]) -> torch.Tensor:
    """Runs fn(params) with gathered parameters that autograd does not keep: tensors it saves from
    them are replaced by (offset, size, stride) and re-gathered once when the unit's backward starts
    (a hook on the output's gradient), so the forward's copy is freed as soon as fn returns."""
    full = _GatherFn.apply(sp.shard, sp)
    ptr, state = _storage_ptr(full), {"full": full}

    def pack(t):
        if state["full"] is not None and t.dtype == state["full"].dtype and _storage_ptr(t) == ptr:
            return ("kiwi-sdp", t.storage_offset(), tuple(t.size()), tuple(t.stride()))
        return t

    def unpack(x):
        if isinstance(x, tuple) and len(x) == 4 and x[0] == "kiwi-sdp":
            if sp.gathered is None:  # not prefetched: gather now (shows up as an extra all-gather)
                sp.gathered = sp.gather()
            return sp.gathered.as_strided(x[2], x[3], x[1])
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = fn(sp.views(full))
    state["full"] = None
    del full

    def prefetch(grad):
        if sp.gathered is None:
            sp.gathered = sp.gather()
        return grad

    if y.requires_grad:
        y.register_hook(prefetch)
    return y


class GradSync:
    """DP gradient all-reduce in buckets of at most `bucket_bytes`, per DP group, in the order the
    backward pass produces gradients (reverse registration order); a bucket is launched
    asynchronously as soon as all its gradients are accumulated in the last micro-batch."""

    def __init__(self, counter: CommCounter, bucket_bytes: int):
        self.counter, self.bucket_bytes = counter, bucket_bytes
        self.entries: List[tuple] = []   # (param, dp group, unit) in registration (forward) order
        self.buckets: List[dict] = []
        self.enabled = False
        self._hooks = []

    def register(self, params: List[nn.Parameter], dp: DpGroup, unit) -> None:
        if dp.size > 1:
            self.entries.extend((p, dp, unit) for p in params)

    def build(self) -> None:
        current = None
        self.unit_of = {id(p): unit for p, _, unit in self.entries}
        for p, dp, unit in reversed(self.entries):
            if current is None or current["dp"] is not dp or current["bytes"] + nbytes(p) > self.bucket_bytes:
                current = {"dp": dp, "params": [], "bytes": 0, "units": set(), "ready": 0, "work": None, "flat": None}
                self.buckets.append(current)
            current["params"].append(p)
            current["bytes"] += nbytes(p)
            current["units"].add(unit)
        for bucket in self.buckets:
            for p in bucket["params"]:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]  # the AccumulateGrad node (as DDP)
                acc.register_hook(self._make_hook(bucket))
                self._hooks.append(acc)

    def _make_hook(self, bucket):
        def hook(*_):
            if not self.enabled:
                return
            bucket["ready"] += 1
            if bucket["ready"] == len(bucket["params"]):
                self._launch(bucket)
        return hook

    def _launch(self, bucket) -> None:
        flat = torch.cat([p.grad.reshape(-1) for p in bucket["params"]])
        for p in bucket["params"]:  # one bucket may span units: count each unit's share
            self.counter.record(DP_ALL_REDUCE, self.unit_of[id(p)], nbytes(p))
        bucket["flat"] = flat
        bucket["work"] = dist.all_reduce(flat, group=bucket["dp"].group, async_op=True)

    def finish(self) -> None:
        """Waits for every bucket and writes the summed gradients back."""
        for bucket in self.buckets:
            if bucket["work"] is None:
                if bucket["ready"] != len(bucket["params"]):
                    raise RuntimeError(f"kiwi: DP bucket of units {sorted(map(str, bucket['units']))} got "
                                       f"{bucket['ready']} of {len(bucket['params'])} gradients")
                self._launch(bucket)
            with self.counter.blocked(DP_ALL_REDUCE):
                bucket["work"].wait()
            offset = 0
            for p in bucket["params"]:
                n = p.numel()
                p.grad.copy_(bucket["flat"][offset:offset + n].view_as(p.grad))
                offset += n
            bucket["work"], bucket["flat"], bucket["ready"] = None, None, 0
