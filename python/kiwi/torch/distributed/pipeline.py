"""Pipeline parallelism over point-to-point send/recv: this rank's stage (the plan's partition), its
micro-batches, and the 1F1B-flush schedule (Narayanan et al. 2021: P - s - 1 warm-up forwards, then
one forward one backward, then the remaining backwards), GPipe (all forwards, then all backwards), or
interleaved 1F1B (the plan's virtual_stages: v model chunks per stage, Megatron-LM's order).
Rank l of stage s exchanges activations and gradients with rank l of stages s - 1 and s + 1, each
sending the activation of its own samples (cost/layer_cost.cpp PointToPointSeconds)."""
import collections
from typing import List, Optional

import torch

from kiwi.torch.distributed.comm_counter import SEND_BACKWARD, SEND_FORWARD, CommCounter
from kiwi.torch.distributed.data_parallel import GradSync
from kiwi.torch.distributed.groups import GroupPool, Layout
from kiwi.torch.distributed.model import GptConfig
from kiwi.torch.distributed.plan import HybridPlan
from kiwi.torch.distributed.slice_gather import reshard
from kiwi.torch.distributed.units import Unit


class Stage:
    """The units of this rank's stage, by model chunk (one without interleaving), and how a micro-batch
    flows through a chunk."""

    def __init__(self, plan: HybridPlan, config: GptConfig, layout: Layout, pool: GroupPool, units: List[Unit],
                 counter: CommCounter):
        self.plan, self.config, self.layout, self.pool, self.units, self.counter = plan, config, layout, pool, units, counter
        self.chunk_ids = plan.stage_chunks(layout.stage)  # global chunk index of each local chunk
        self.num_chunks = len(plan.pp_partition)
        by_key = {u.key: u for u in units}
        self.chunk_units: List[List[Unit]] = []
        self.chunk_span: List[tuple] = []  # (first layer, last layer) of each local chunk
        for c in self.chunk_ids:
            layers = plan.chunk_layers(c)
            keys = (["embed"] if c == 0 else []) + [str(i) for i in layers] + (["head"] if c == self.num_chunks - 1 else [])
            self.chunk_units.append([by_key[k] for k in keys])
            self.chunk_span.append((layers[0], layers[-1]))
        self.ids = self.labels = None

    def set_batch(self, ids: torch.Tensor, labels: torch.Tensor) -> None:
        self.ids, self.labels = ids, labels

    def is_first(self, k: int) -> bool:
        """Local chunk k is the model's first (it embeds)."""
        return self.chunk_ids[k] == 0

    def is_last(self, k: int) -> bool:
        """Local chunk k is the model's last (it has the head and the loss)."""
        return self.chunk_ids[k] == self.num_chunks - 1

    def _samples(self, mb: int, dp: int, dp_rank: int) -> slice:
        b = self.plan.microbatch
        per = b // dp
        start = mb * b + dp_rank * per
        return slice(start, start + per)

    def forward(self, mb: int, x: Optional[torch.Tensor], k: int = 0) -> torch.Tensor:
        plan = self.plan
        first_layer = self.chunk_span[k][0]
        prev = None if self.is_first(k) else plan.layers[first_layer - 1]
        for unit in self.chunk_units[k]:
            s = unit.strategy
            if unit.key == "embed":
                x = unit.forward(self.ids[self._samples(mb, s.dp, unit.dp.rank)])
            elif unit.key == "head":
                labels = self.labels[self._samples(mb, s.dp, unit.dp.rank)]
                x = unit.forward(x, labels, plan.global_batch * self.config.seq)
            else:
                if prev is not None:
                    x = reshard(x, prev, s, self.layout, self.pool, self.counter, unit.unit_id)
                x = unit.forward(x)
                prev = s
        return x

    def _boundary_shape(self, s) -> tuple:
        """A layer's output on one rank: its DP shard of the micro-batch, its sequence block under SP."""
        seq = self.config.seq // s.tp if s.sequence_split else self.config.seq
        return (self.plan.microbatch // s.dp, seq, self.config.hidden)

    def input_shape(self, k: int = 0) -> tuple:
        return self._boundary_shape(self.plan.layers[self.chunk_span[k][0] - 1])

    def output_shape(self, k: int = 0) -> tuple:
        return self._boundary_shape(self.plan.layers[self.chunk_span[k][1]])


class PipelineRunner:
    def __init__(self, stage: Stage, layout: Layout, counter: CommCounter, grad_sync: GradSync):
        self.stage, self.layout, self.counter, self.grad_sync = stage, layout, counter, grad_sync
        # the neighbouring stages; with interleaving the last stage's chunks feed the first stage's next ones
        self.prev_rank = (layout.rank - layout.per_stage) % layout.world
        self.next_rank = (layout.rank + layout.per_stage) % layout.world
        self.pending: List = []   # isend works, waited at the end of the iteration
        self.losses: List[float] = []

    # --- point-to-point -------------------------------------------------------------------------
    def _tag(self, chunk: int, mb: int, backward: bool) -> int:
        """One tag per message, named by the chunk it goes into: with interleaving two stages may exchange
        activations and gradients in both directions (2 stages), so arrival order cannot pair them."""
        return 2 * (mb * self.stage.num_chunks + chunk) + int(backward)

    def _send(self, t: torch.Tensor, dst: int, purpose: str, tag: int) -> None:
        t = t.detach().contiguous()
        self.pending.append((self.counter.isend(t, dst, purpose, f"stage{self.layout.stage}", tag), t))

    def _recv(self, shape, src: int, tag: int) -> torch.Tensor:
        t = torch.empty(shape)
        with self.counter.blocked("recv"):
            self.counter.irecv(t, src, tag).wait()
        return t

    def recv_forward(self, mb: int, k: int = 0) -> Optional[torch.Tensor]:
        if self.stage.is_first(k):
            return None
        tag = self._tag(self.stage.chunk_ids[k], mb, False)
        return self._recv(self.stage.input_shape(k), self.prev_rank, tag).requires_grad_(True)

    def send_forward(self, y: torch.Tensor, mb: int, k: int = 0) -> None:
        if not self.stage.is_last(k):
            self._send(y, self.next_rank, SEND_FORWARD, self._tag(self.stage.chunk_ids[k] + 1, mb, False))

    def recv_backward(self, mb: int, k: int = 0) -> Optional[torch.Tensor]:
        if self.stage.is_last(k):
            return None
        return self._recv(self.stage.output_shape(k), self.next_rank, self._tag(self.stage.chunk_ids[k], mb, True))

    def send_backward(self, dx: Optional[torch.Tensor], mb: int, k: int = 0) -> None:
        if not self.stage.is_first(k):
            self._send(dx, self.prev_rank, SEND_BACKWARD, self._tag(self.stage.chunk_ids[k] - 1, mb, True))

    # --- steps ----------------------------------------------------------------------------------
    def forward_step(self, mb: int, x: Optional[torch.Tensor], k: int = 0) -> torch.Tensor:
        y = self.stage.forward(mb, x, k)
        if self.stage.is_last(k):
            self.losses.append(float(y.detach()))
        return y

    def backward_step(self, x: Optional[torch.Tensor], y: torch.Tensor, dy: Optional[torch.Tensor],
                      last_microbatch: bool) -> Optional[torch.Tensor]:
        self.grad_sync.enabled = last_microbatch  # DP gradients are all-reduced once, in the last micro-batch
        torch.autograd.backward(y, None if dy is None else dy)
        self.grad_sync.enabled = False
        return None if x is None else x.grad

    def run(self, schedule: str, m: int) -> None:
        self.losses = []
        if self.stage.plan.virtual_stages > 1:
            self._interleaved(m)
        else:
            (self._gpipe if schedule == "gpipe" else self._one_f_one_b)(m)
        with self.counter.blocked("send"):
            for work, _ in self.pending:
                work.wait()
        self.pending = []

    def _gpipe(self, m: int) -> None:
        saved = []
        for mb in range(m):
            x = self.recv_forward(mb)
            y = self.forward_step(mb, x)
            self.send_forward(y, mb)
            saved.append((x, y))
        for k, mb in enumerate(reversed(range(m))):
            x, y = saved.pop()
            dx = self.backward_step(x, y, self.recv_backward(mb), k == m - 1)
            self.send_backward(dx, mb)

    def _one_f_one_b(self, m: int) -> None:
        stages, s = self.stage.plan.pp_degree, self.layout.stage
        warm = min(stages - s - 1, m)
        queue = collections.deque()
        for mb in range(warm):
            x = self.recv_forward(mb)
            y = self.forward_step(mb, x)
            self.send_forward(y, mb)
            queue.append((x, y))
        backward_mb = 0
        x = self.recv_forward(warm) if warm < m else None
        for mb in range(warm, m):
            y = self.forward_step(mb, x)
            self.send_forward(y, mb)
            queue.append((x, y))
            dy = self.recv_backward(backward_mb)
            x0, y0 = queue.popleft()
            dx = self.backward_step(x0, y0, dy, backward_mb == m - 1)
            self.send_backward(dx, backward_mb)
            backward_mb += 1
            x = self.recv_forward(mb + 1) if mb + 1 < m else None
        while queue:
            x0, y0 = queue.popleft()
            dx = self.backward_step(x0, y0, self.recv_backward(backward_mb), backward_mb == m - 1)
            self.send_backward(dx, backward_mb)
            backward_mb += 1

    def _interleaved(self, m: int) -> None:
        """Megatron-LM's interleaved 1F1B: 2 (P - s - 1) + (v - 1) P warm-up forwards, then one forward one
        backward, then the remaining backwards; forward k runs local chunk (k mod Pv) / P of micro-batch
        (k / Pv) P + k mod P, the backwards take the chunks in reverse (cost/pipeline.h MicrobatchesInFlight,
        tests/cost/pipeline_schedule_test.cpp)."""
        p, v, s = self.stage.plan.pp_degree, self.stage.plan.virtual_stages, self.layout.stage
        total = v * m
        warm = min(2 * (p - s - 1) + (v - 1) * p, total)
        saved = {}

        def order(k: int, backward: bool):
            group = (k % (p * v)) // p
            return (v - 1 - group if backward else group), (k // (p * v)) * p + k % p

        def forward(k: int) -> None:
            chunk, mb = order(k, False)
            x = self.recv_forward(mb, chunk)
            y = self.forward_step(mb, x, chunk)
            self.send_forward(y, mb, chunk)
            saved[(chunk, mb)] = (x, y)

        def backward(k: int) -> None:
            chunk, mb = order(k, True)
            x, y = saved.pop((chunk, mb))
            dx = self.backward_step(x, y, self.recv_backward(mb, chunk), mb == m - 1)
            self.send_backward(dx, mb, chunk)

        for k in range(warm):
            forward(k)
        for i in range(total - warm):
            forward(warm + i)
            backward(i)
        for i in range(total - warm, total):
            backward(i)
