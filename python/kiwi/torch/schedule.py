"""The schedule a keep set really executes in PyTorch: the computes and frees of the applied module
(runtime.py), written as a kiwi plan so that the simulator predicts its peak memory and time.

Policy (runtime.py implements the same, step for step):
  * inputs, parameters, optimizer state and framework buffers exist before the step and stay;
  * forward: every FX node runs once, in order, with its workspace W(n) resident while it runs and its
    own buffers X(n) made with it; a tensor is freed once no later forward op reads it, unless it is
    kept and autograd saved it for a backward op;
  * backward, one autograd group at a time (kiwi's backward order, which is autograd's: reverse
    creation order): before the group runs, every tensor it needs that is not resident is recomputed
    by re-running its FX node (recursively from resident ancestors); recomputed tensors that a later
    group needs stay, the other recomputed ancestors are freed once the group's tensors are ready;
    after the group, a tensor no later group needs is freed.
"""
from typing import Dict, List, Set, Tuple

from kiwi.torch.dtypes import node_bytes
from kiwi.torch.semantics import Bundle, Group, Structure


class _Run:
    def __init__(self, graph: dict, st: Structure, keep: Dict[int, bool]):
        self.nodes = graph["nodes"]
        self.order: List[int] = graph["order"]
        self.st = st
        self.keep = keep
        self.steps: List[dict] = []
        self.resident: Set[int] = set()
        self.always = {v["id"] for v in self.nodes if v["kind"] in ("parameter", "optimizer_state", "input")}
        # Forward tensors the step's last node reads (the loss the caller holds): resident to the end.
        self.pinned = {u for u in self.nodes[st.optimizer]["inputs"]} if st.optimizer is not None else set()
        self.uses: Dict[int, int] = {}
        for g in st.groups:
            for t in g.need:
                self.uses[t] = self.uses.get(t, 0) + 1
        self.position = {v: i for i, v in enumerate(self.order)}
        self.left = {"forward": {v["id"]: 0 for v in self.nodes}, "backward": {v["id"]: 0 for v in self.nodes}}
        for v in self.nodes:
            for u in set(v["inputs"]):
                self.left[v.get("pass", "forward")][u] += 1

    def compute(self, v: int) -> None:
        assert v not in self.resident, f"node {v} recomputed while resident"
        self.steps.append({"op": "compute", "node": v})
        self.resident.add(v)

    def free(self, v: int) -> None:
        if v in self.resident and v not in self.always:
            self.steps.append({"op": "free", "node": v})
            self.resident.discard(v)

    def retained(self, t: int) -> bool:
        return t in self.pinned or (self.keep.get(t, True) and self.uses.get(t, 0) > 0)

    def consume(self, v: int) -> None:
        """After v ran, frees what no later op reads: in the forward pass a tensor no later forward op
        reads unless it is retained for the backward; in the backward pass gradients whose consumers
        have all run (forward tensors are freed per group, finish_group)."""
        phase = self.nodes[v].get("pass", "forward")
        left = self.left[phase]
        for u in set(self.nodes[v]["inputs"]):
            left[u] -= 1
            if left[u] == 0 and self.nodes[u].get("pass", "forward") == phase and \
                    (phase == "backward" or not self.retained(u)):
                self.free(u)
        if left[v] == 0 and (phase == "forward" and not self.retained(v) or
                             phase == "backward" and self.left["backward"][v] == 0):
            self.free(v)

    # ---- backward recomputation ----------------------------------------------------------------
    def ensure(self, t: int, temps: List[int]) -> None:
        if t in self.resident:
            return
        self.rerun(self.st.bundles[self.st.bundle_of[t]], t, temps)

    def rerun(self, b: Bundle, want: int, temps: List[int]) -> None:
        for u in b.fx_inputs:
            self.ensure(u, temps)
        if b.workspace is not None:
            self.compute(b.workspace)
        for m in b.companions + [b.node] + ([b.saved] if b.saved is not None else []):
            if m in self.resident or (m == b.saved and m != want):
                continue
            self.compute(m)
            if self.uses.get(m, 0) == 0:  # needed by no group: freed once this group's tensors are ready
                temps.append(m)
        if b.workspace is not None:
            self.free(b.workspace)

    def finish_group(self, need: List[int]) -> None:
        for t in need:
            self.uses[t] -= 1
            if self.uses[t] == 0:
                self.free(t)


def realize(graph: dict, st: Structure, keep: Dict[int, bool]) -> List[dict]:
    """The applied module's execution of `keep` (kiwi id -> kept; missing = kept) as plan steps."""
    run = _Run(graph, st, keep)
    for v in run.order:
        if v in run.always:
            run.compute(v)
    first = {}
    last = {}
    for g in st.groups:
        members = [v for v in (g.unpack, g.workspace) if v is not None] + g.backward
        first[members[0]] = g
        last[g.release if g.release is not None else g.backward[-1]] = g
    for v in run.order:
        if v in run.always:
            continue
        node = run.nodes[v]
        if node.get("pass", "forward") == "forward":
            run.compute(v)
            run.consume(v)
            continue
        g = first.get(v)
        if g is not None:
            temps: List[int] = []
            for t in sorted(g.need, key=run.position.__getitem__):
                run.ensure(t, temps)
            for t in temps:
                if run.uses.get(t, 0) == 0:
                    run.free(t)
        run.compute(v)
        run.consume(v)
        if v in last:
            run.finish_group(last[v].need)
    return run.steps


def droppable(graph: dict, st: Structure) -> List[int]:
    """Forward tensors a plan may drop: FX values, dropout masks and saved buffers that some backward
    group needs (others are freed after their last forward use anyway), except the caller's loss inputs."""
    needed = {t for g in st.groups for t in g.need}
    return sorted(t for t in needed if t in st.bundle_of and t not in st.forced_keep)


def memory_floor(graph: dict, st: Structure, steps: List[dict], timeline: List[int]) -> Tuple[int, int]:
    """A lower bound on the peak of every plan the applied module can run, and the group that sets it.
    Whatever is dropped, right after a group's last backward node the parameters, optimizer state,
    inputs, gradients alive then (the backward pass is the same in every plan), the group's workspace
    and the tensors it needs are resident; only droppable tensors it does not need can be gone.
    `steps`/`timeline`: the keep-all schedule (realize with nothing dropped) and its simulated memory."""
    nodes = graph["nodes"]
    droppable_set = set(droppable(graph, st))
    last = {}
    for g in st.groups:
        last[g.release if g.release is not None else g.backward[-1]] = g
    if st.optimizer is not None:  # the optimizer step (its temporaries with every gradient) bounds every plan too
        last[st.optimizer] = Group("optimizer", st.optimizer, [st.optimizer], [])
    resident: Set[int] = set()
    best, where = 0, -1
    for i, s in enumerate(steps):
        (resident.add if s["op"] == "compute" else resident.discard)(s["node"])
        g = last.get(s["node"]) if s["op"] == "compute" else None
        if g is None:
            continue
        removable = sum(node_bytes(nodes[v]) for v in resident if v in droppable_set and v not in set(g.need))
        if timeline[i] - removable > best:
            best, where = timeline[i] - removable, g.node
    return best, where
