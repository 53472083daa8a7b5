"""Pipeline parallelism over point-to-point send/recv: this rank's stage (the plan's partition), its
micro-batches, and the 1F1B-flush schedule (Narayanan et al. 2021: P - s - 1 warm-up forwards, then
one forward one backward, then the remaining backwards) or GPipe (all forwards, then all backwards).
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
    """The units of this rank's stage and how a micro-batch flows through them."""

    def __init__(self, plan: HybridPlan, config: GptConfig, layout: Layout, pool: GroupPool, units: List[Unit],
                 counter: CommCounter):
        self.plan, self.config, self.layout, self.pool, self.units, self.counter = plan, config, layout, pool, units, counter
        self.first = layout.stage == 0
        self.last = layout.stage == plan.pp_degree - 1
        layers = plan.stage_layers(layout.stage)
        self.first_layer, self.last_layer = layers[0], layers[-1]
        self.ids = self.labels = None

    def set_batch(self, ids: torch.Tensor, labels: torch.Tensor) -> None:
        self.ids, self.labels = ids, labels

    def _samples(self, mb: int, dp: int, dp_rank: int) -> slice:
        b = self.plan.microbatch
        per = b // dp
        start = mb * b + dp_rank * per
        return slice(start, start + per)

    def forward(self, mb: int, x: Optional[torch.Tensor]) -> torch.Tensor:
        plan = self.plan
        prev = None if self.first else plan.layers[self.first_layer - 1]
        for unit in self.units:
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

    def input_shape(self) -> tuple:
        return self._boundary_shape(self.plan.layers[self.first_layer - 1])

    def output_shape(self) -> tuple:
        return self._boundary_shape(self.plan.layers[self.last_layer])


class PipelineRunner:
    def __init__(self, stage: Stage, layout: Layout, counter: CommCounter, grad_sync: GradSync):
        self.stage, self.layout, self.counter, self.grad_sync = stage, layout, counter, grad_sync
        self.prev_rank = layout.rank - layout.per_stage
        self.next_rank = layout.rank + layout.per_stage
        self.pending: List = []   # isend works, waited at the end of the iteration
        self.losses: List[float] = []

    # --- point-to-point -------------------------------------------------------------------------
    def _send(self, t: torch.Tensor, dst: int, purpose: str, mb: int) -> None:
        t = t.detach().contiguous()
        self.pending.append((self.counter.isend(t, dst, purpose, f"stage{self.layout.stage}"), t))

    def _recv(self, shape, src: int) -> torch.Tensor:
        t = torch.empty(shape)
        with self.counter.blocked("recv"):
            self.counter.irecv(t, src).wait()
        return t

    def recv_forward(self) -> Optional[torch.Tensor]:
        if self.stage.first:
            return None
        return self._recv(self.stage.input_shape(), self.prev_rank).requires_grad_(True)

    def send_forward(self, y: torch.Tensor, mb: int) -> None:
        if not self.stage.last:
            self._send(y, self.next_rank, SEND_FORWARD, mb)

    def recv_backward(self) -> Optional[torch.Tensor]:
        return None if self.stage.last else self._recv(self.stage.output_shape(), self.next_rank)

    def send_backward(self, dx: Optional[torch.Tensor], mb: int) -> None:
        if not self.stage.first:
            self._send(dx, self.prev_rank, SEND_BACKWARD, mb)

    # --- steps ----------------------------------------------------------------------------------
    def forward_step(self, mb: int, x: Optional[torch.Tensor]) -> torch.Tensor:
        y = self.stage.forward(mb, x)
        if self.stage.last:
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
        (self._gpipe if schedule == "gpipe" else self._one_f_one_b)(m)
        with self.counter.blocked("send"):
            for work, _ in self.pending:
                work.wait()
        self.pending = []

    def _gpipe(self, m: int) -> None:
        saved = []
        for mb in range(m):
            x = self.recv_forward()
            y = self.forward_step(mb, x)
            self.send_forward(y, mb)
            saved.append((x, y))
        for k, mb in enumerate(reversed(range(m))):
            x, y = saved.pop()
            dx = self.backward_step(x, y, self.recv_backward(), k == m - 1)
            self.send_backward(dx, mb)

    def _one_f_one_b(self, m: int) -> None:
        stages, s = self.stage.plan.pp_degree, self.layout.stage
        warm = min(stages - s - 1, m)
        queue = collections.deque()
        for mb in range(warm):
            x = self.recv_forward()
            y = self.forward_step(mb, x)
            self.send_forward(y, mb)
            queue.append((x, y))
        backward_mb = 0
        x = self.recv_forward() if warm < m else None
        for mb in range(warm, m):
            y = self.forward_step(mb, x)
            self.send_forward(y, mb)
            queue.append((x, y))
            dy = self.recv_backward()
            x0, y0 = queue.popleft()
            dx = self.backward_step(x0, y0, dy, backward_mb == m - 1)
            self.send_backward(dx, backward_mb)
            backward_mb += 1
            x = self.recv_forward() if mb + 1 < m else None
        while queue:
            x0, y0 = queue.popleft()
            dx = self.backward_step(x0, y0, self.recv_backward(), backward_mb == m - 1)
            self.send_backward(dx, backward_mb)
            backward_mb += 1
