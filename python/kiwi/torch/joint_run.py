"""Runs a captured training step (kiwi.torch.joint_capture) exactly as a kiwi schedule says: each
`compute` runs the node's ATen op on the real tensors, each `free` drops the node's storage, and a
node computed again is recomputed from the versions its schedule keeps. The values are the traced
step's (autograd's own backward, the same kernels in the same order): gradients are bit-identical to
`torch.autograd.grad` of the unmodified model where no op is recomputed out of its order, and random
ops (dropout) replay the generator state of their first run when recomputed."""
import contextlib
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree

from torch.autograd.profiler import record_function

from kiwi.torch.arg_templates import ArgTemplate
from kiwi.torch.aten_kinds import is_random
from kiwi.torch.chunked_optimizer import chunked_step
from kiwi.torch.dtypes import node_bytes
from kiwi.torch.errors import PlanError
from kiwi.torch.joint_capture import JointCapture


_NOTHING = torch.empty(0, dtype=torch.uint8)   # the value of nodes that hold no tensor of their own


class JointRunner:
    """Replays schedules of one JointCapture on the model's current parameters and buffers."""

    def __init__(self, cap: JointCapture):
        self.cap = cap
        self.params = dict(cap.model.named_parameters())
        self.buffers = dict(cap.model.named_buffers())
        self.storage_of_node = {v: s for s, st in enumerate(cap.storages) for v in st.nodes}
        self.templates: Dict[torch.fx.Node, ArgTemplate] = {}
        self.argument_sites: Dict[torch.fx.Node, Optional[List[Tuple[int, Any, Any]]]] = {}   # _where_arguments_are's
        self._analysed: Optional[Tuple[Any, list, Dict[int, set], set]] = None   # the last schedule's
        self.gradient_scale = 1.0   # what a captured optimizer's step multiplies the gradients by

    def run(self, schedule: Sequence[Dict[str, Any]], inputs: Optional[Sequence[Any]] = None, ranges: bool = False,
            events: Optional[Dict[int, Tuple[Any, Any]]] = None) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """One step under `schedule` (kiwi's [{"op": "compute"|"free", "node": id}]): the loss and the
        gradients of the model's trainable parameters (None where a parameter is unused). `inputs`:
        the tensor leaves of (args, kwargs, labels) in capture order; default the example inputs.
        `ranges`: each op runs in a profiler range "kiwi::<node id>" (measure.measure_step(ranges=True)).
        `events` (CUDA): a dict that gets, per node id, the CUDA events recorded on the current stream
        before and after its op's first run (the GPU's time of the op, where a profiler range has the
        CPU's time of launching it)."""
        cap = self.cap
        retain, recomputed = self._analyse(schedule)
        timed = ranges or events is not None
        env: Dict[int, torch.Tensor] = {}
        pending: Dict[int, torch.Tensor] = {}
        rng: Dict[torch.fx.Node, Any] = {}
        ran: set = set()
        stepped = False
        leaves = [leaf for leaf in cap.input_leaves if isinstance(leaf, torch.Tensor)] if inputs is None else list(inputs)
        values = [self.params[n].detach() for n in cap.param_names] + \
                 [self.buffers[n] for n in cap.buffer_names] + [t.detach() for t in leaves]
        if len(values) != len(cap.placeholders):
            raise PlanError(f"inputs: {len(leaves)} tensors given, the step was captured with "
                            f"{len(cap.placeholders) - len(cap.param_names) - len(cap.buffer_names)}")
        placeholder_value = dict(zip(cap.placeholders, values))
        outputs_value: Dict[str, Any] = {}
        with torch.no_grad():
            for i, step in enumerate(schedule):
                v = int(step["node"])
                if step["op"] == "free":
                    env.pop(v, None)
                    continue
                if v == cap.outputs_node:
                    outputs_value = self._outputs(env, placeholder_value)
                    env[v] = _NOTHING
                    continue
                produced = cap.produced[v]
                if produced is None and cap.graph["nodes"][v]["kind"] == "optimizer_state":
                    env[v] = _NOTHING   # the optimizer holds it
                    continue
                if produced is None:   # a placeholder: the model's tensor
                    if v not in self.storage_of_node:
                        raise PlanError(f"schedule[{i}]: node {v} is not in the captured step")
                    node = cap.storages[self.storage_of_node[v]].root[0]
                    env[v] = placeholder_value[node] if node in placeholder_value else getattr(cap.gm, node.target)
                    continue
                if v in pending:
                    env[v] = pending.pop(v)
                    continue
                if produced.what == "workspace":   # the op allocates it itself; kiwi only counts it
                    env[v] = _NOTHING
                    continue
                if produced.what == "optimizer":
                    if stepped:
                        raise PlanError(f"schedule[{i}]: computes the optimizer's step twice")
                    with _range(ranges, events, v) if timed else contextlib.nullcontext():
                        stepped = self._optimizer_step(env, placeholder_value)
                    env[v] = _NOTHING
                    continue
                again = produced.fx in ran   # the op ran before in this step: its writes go to copies
                ran.add(produced.fx)
                if timed:
                    with _range(ranges, events, v):
                        made = self._run_op(produced.fx, env, placeholder_value, rng, again, recomputed)
                else:
                    made = self._run_op(produced.fx, env, placeholder_value, rng, again, recomputed)
                for w, value in made.items():
                    if w == v:
                        env[v] = value
                    elif w in retain.get(i, ()):
                        pending[w] = value   # the op's other storages, until the schedule computes them
                    del value
                del made
        if not outputs_value:
            raise PlanError("schedule: never computes step.outputs")
        if cap.optimizer is not None and not stepped:
            raise PlanError("schedule: never computes the optimizer's step")
        return outputs_value["loss"], outputs_value["grads"]

    def _analyse(self, schedule: Sequence[Dict[str, Any]]) -> Tuple[Dict[int, set], set]:
        """What run() needs to know of a schedule beforehand (a walk of all of it), kept for the next
        step on the same schedule: a training loop runs one schedule over and over."""
        last = self._analysed
        if last is None or last[0] is not schedule or len(last[1]) != len(schedule) or \
                any(a is not b for a, b in zip(last[1], schedule)):
            last = self._analysed = (schedule, list(schedule), _retained_outputs(self.cap, schedule),
                                     _recomputed_ops(self.cap, schedule))
        return last[2], last[3]

    def _optimizer_step(self, env, placeholders) -> bool:
        """The captured optimizer's step on the gradients the schedule holds (times gradient_scale),
        added in place to a `.grad` earlier micro-batches left (joint_batches); they are dropped after
        it (as `zero_grad(set_to_none=True)` would), so the schedule's free of them frees them."""
        params = []
        for name, g in zip(self.cap.param_names, self.cap.output_node.args[0][1:]):
            if isinstance(g, torch.fx.Node):
                p, value = self.params[name], self._grad_value(g, env, placeholders)
                if p.grad is not None:
                    p.grad.add_(value, alpha=self.gradient_scale)
                else:
                    p.grad = value if self.gradient_scale == 1.0 else value * self.gradient_scale
                params.append(p)
        if self.cap.optimizer_chunk_bytes:
            chunked_step(self.cap.optimizer, self.cap.optimizer_chunk_bytes)
        else:
            self.cap.optimizer.step()
        for p in params:
            p.grad = None
        return True

    def _value(self, fx: torch.fx.Node, reader: Optional[torch.fx.Node], env: Dict[int, torch.Tensor],
               placeholders: Dict[torch.fx.Node, Any], base: Optional[torch.Tensor] = None) -> Any:
        """The value `reader` sees for its argument `fx`: the version of fx's storage it reads, viewed
        through fx's chain of views (`base`: that storage's tensor, given when it is a fresh copy)."""
        cap = self.cap
        s = cap.storage_of.get(fx)
        if s is None:
            if fx.op == "placeholder":
                return placeholders[fx]
            raise PlanError(f"internal: the capture has no storage for '{fx.name}'")
        st = cap.storages[s]
        if base is None:
            if st.persistent:
                base = self._root_value(st.root[0], placeholders)
            else:
                version = cap.reads[reader][s] if reader is not None else st.nodes[-1]
                base = self._resident(version, reader, env)
        chain = cap.chain.get(fx)
        return self._replay(chain, base, env, placeholders) if chain else base

    def _root_value(self, root: torch.fx.Node, placeholders: Dict[torch.fx.Node, Any]) -> torch.Tensor:
        """The tensor of a persistent storage's root: the model's parameter, buffer or input for a
        placeholder, the traced module's attribute for a constant."""
        value = placeholders.get(root)
        return getattr(self.cap.gm, root.target) if value is None else value

    def _resident(self, version: int, reader: Optional[torch.fx.Node], env: Dict[int, torch.Tensor]) -> torch.Tensor:
        if version not in env:
            raise PlanError(f"schedule: {reader.name if reader is not None else 'the step'} reads "
                            f"'{self.cap.graph['nodes'][version]['name']}', which is not resident")
        return env[version]

    def _template(self, fx: torch.fx.Node) -> ArgTemplate:
        t = self.templates.get(fx)
        if t is None:
            t = self.templates[fx] = ArgTemplate(fx)
        return t

    def _replay(self, chain: List[torch.fx.Node], value: Any, env, placeholders) -> Any:
        """`value` viewed through `chain`: each view's first tensor argument is the one it views."""
        for view in chain:
            if view.target is operator.getitem:
                value = value[view.args[1]]
                continue
            t = self._template(view)
            args, kwargs = t.fill([value] + [self._const(a, placeholders) for a in t.nodes[1:]])
            value = view.target(*args, **kwargs)
        return value

    def _const(self, a: torch.fx.Node, placeholders):
        if a.op == "placeholder":
            return placeholders[a]
        raise PlanError(f"internal: view argument {a.name} is not the viewed tensor")

    def _run_op(self, fx: torch.fx.Node, env, placeholders, rng, again: bool, recomputed) -> Dict[int, torch.Tensor]:
        cap = self.cap
        produced_here = cap.effects[fx]
        template = self._template(fx)
        copies: Dict[int, torch.Tensor] = {}   # storage written -> its new version (a copy)
        values = self._fast_arguments(fx, env, placeholders)
        if values is None:
            copies, values = self._arguments(fx, template, env, placeholders, again)
        args, kwargs = template.fill(values)
        del values
        if fx in recomputed and is_random(fx.target, fx.args, fx.kwargs):
            # The generator's state of the first run, kept for the recomputations as Python bytes: host
            # memory outside PyTorch's allocator (5,056 bytes for a CPU's generator, 16 for a CUDA
            # device's, whose state lives on the host too).
            device = _device_of(fx)
            if fx not in rng:
                rng[fx] = rng_state(device)
                result = fx.target(*args, **kwargs)
            else:
                with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                    set_rng_state(device, rng[fx])
                    result = fx.target(*args, **kwargs)
        else:
            result = fx.target(*args, **kwargs)
        del args, kwargs
        outs = [result] if not isinstance(result, (tuple, list)) else pytree.tree_leaves(result)
        made: Dict[int, torch.Tensor] = {}
        for w, p in produced_here:
            if p.what == "output":
                made[w] = outs[p.index]
            elif p.what == "version":
                made[w] = copies[p.storage]
            elif p.what == "write":
                made[w] = _NOTHING
        return made

    def _arguments(self, fx: torch.fx.Node, template: ArgTemplate, env, placeholders, again: bool
                   ) -> Tuple[Dict[int, torch.Tensor], List[Any]]:
        """The values of fx's tensor arguments, and the copies its writes go into (storage -> its new
        version): an activation written in place is written into a copy, and so is a parameter or
        buffer when the op runs again in this step."""
        cap = self.cap
        copies: Dict[int, torch.Tensor] = {}
        for w, p in cap.effects[fx]:
            if p.what == "version":
                copies[p.storage] = self._resident(cap.reads[fx][p.storage], fx, env).clone()
            elif p.what == "write" and again:
                st = cap.storages[p.storage]
                copies[p.storage] = self._value(st.root[0], None, env, placeholders).clone()

        def arg(a: torch.fx.Node):
            s = cap.storage_of.get(a)
            if s is not None and s in copies:
                return self._value(a, fx, env, placeholders, base=copies[s])
            return self._value(a, fx, env, placeholders)

        return copies, [arg(a) for a in template.nodes]

    def _fast_arguments(self, fx: torch.fx.Node, env, placeholders) -> Optional[List[Any]]:
        """_arguments for an op that writes nothing (most ops), from where each argument was found once
        (a step runs thousands of ops, and on a GPU the host's time per op sets the step's pace); None
        for an op that writes, or when an argument is not resident (_arguments then says which)."""
        reads = self.argument_sites.get(fx, False)
        if reads is False:
            reads = self.argument_sites[fx] = self._where_arguments_are(fx)
        if reads is None:
            return None
        values = []
        try:
            for kind, at, chain in reads:
                if kind == 0:   # a version of an activation's storage
                    value = env[at]
                elif kind == 1:   # a placeholder with no storage of its own
                    value = placeholders[at]
                else:   # a parameter, buffer or constant: resident all step
                    value = self._root_value(at, placeholders)
                values.append(self._replay(chain, value, env, placeholders) if chain else value)
        except KeyError:
            return None
        return values

    def _where_arguments_are(self, fx: torch.fx.Node) -> Optional[List[Tuple[int, Any, Any]]]:
        """Per tensor argument of fx (an op that writes nothing): where its value is (the kiwi node of
        the version it reads, a placeholder, or a resident root) and the views to replay on it."""
        cap = self.cap
        if any(p.what in ("version", "write") for _, p in cap.effects[fx]):
            return None
        out: List[Tuple[int, Any, Any]] = []
        for a in self._template(fx).nodes:
            s = cap.storage_of.get(a)
            if s is None:
                if a.op != "placeholder":
                    return None
                out.append((1, a, None))
            elif cap.storages[s].persistent:
                out.append((2, cap.storages[s].root[0], cap.chain.get(a)))
            else:
                out.append((0, cap.reads[fx][s], cap.chain.get(a)))
        return out

    def _outputs(self, env, placeholders) -> Dict[str, Any]:
        loss_fx, grads_fx = self.cap.output_node.args[0][0], self.cap.output_node.args[0][1:]

        def value(a):
            return a if not isinstance(a, torch.fx.Node) else self._grad_value(a, env, placeholders)

        if self.cap.optimizer is not None:   # the gradients went into the optimizer's step
            return {"loss": value(loss_fx), "grads": [None for _ in grads_fx]}
        return {"loss": value(loss_fx), "grads": [value(g) for g in grads_fx]}

    def _grad_value(self, a: torch.fx.Node, env, placeholders) -> torch.Tensor:
        """A step output's value (the loss, a gradient): its storage's last version."""
        st = self.cap.storages[self.cap.storage_of[a]]
        base = None if st.persistent else env.get(st.nodes[-1])
        if base is None and not st.persistent:
            raise PlanError(f"schedule: '{a.name}' (a step output) is not resident when the step reads it")
        return self._value(a, None, env, placeholders, base=base)


@contextlib.contextmanager
def _range(ranges: bool, events: Optional[Dict[int, Tuple[Any, Any]]], v: int):
    """Node v's op inside its profiler range (when measuring ranges) and between its CUDA events (when
    timing them)."""
    with record_function(f"kiwi::{v}") if ranges else contextlib.nullcontext():
        if events is None or v in events:
            yield
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        events[v] = (start, end)


def _device_of(fx: torch.fx.Node) -> torch.device:
    """The device an op runs on: its first tensor output's."""
    t = next((t for t in pytree.tree_leaves(fx.meta.get("val")) if isinstance(t, torch.Tensor)), None)
    return t.device if t is not None else torch.device("cpu")


def rng_state(device: torch.device) -> bytes:
    """The random-number generator state of `device` (the CPU's, or a CUDA device's), as bytes."""
    state = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    return state.numpy().tobytes()


def set_rng_state(device: torch.device, state: bytes) -> None:
    t = torch.frombuffer(bytearray(state), dtype=torch.uint8)
    if device.type == "cuda":
        torch.cuda.set_rng_state(t, device)
    else:
        torch.set_rng_state(t)


def recomputed_nodes(schedule: Sequence[Dict[str, Any]]) -> List[int]:
    """The nodes a schedule computes more than once, in the order of their first recomputation."""
    seen: set = set()
    again: Dict[int, None] = {}
    for step in schedule:
        if step["op"] == "compute":
            v = int(step["node"])
            if v in seen:
                again[v] = None
            seen.add(v)
    return list(again)


def _recomputed_ops(cap: JointCapture, schedule: Sequence[Dict[str, Any]]) -> set:
    """The FX ops one of whose nodes the schedule computes more than once."""
    return {cap.produced[v].fx for v in recomputed_nodes(schedule)
            if 0 <= v < len(cap.produced) and cap.produced[v] is not None}


def _retained_outputs(cap: JointCapture, schedule: Sequence[Dict[str, Any]]) -> Dict[int, set]:
    """For each step that runs an op: its other outputs that the schedule computes next (frees aside),
    kept until then, as kiwi counts them; the others are dropped at once, so that no tensor lives
    that the schedule does not count."""
    out: Dict[int, set] = {}
    for i, step in enumerate(schedule):
        v = int(step["node"])
        if step["op"] != "compute" or not 0 <= v < len(cap.produced) or cap.produced[v] is None:
            continue
        fx = cap.produced[v].fx
        mine = {w for w, p in cap.effects.get(fx, []) if w != v and p.what != "workspace"}
        for j in range(i + 1, len(schedule)):
            if schedule[j]["op"] == "free":
                continue
            w = int(schedule[j]["node"])
            if w not in mine:
                break
            out.setdefault(i, set()).add(w)
    return out


def rerun_transients(cap: JointCapture, schedule: Sequence[Dict[str, Any]]) -> Dict[int, int]:
    """Steps at which the runner computes an op's second or later output alone (not kept from the op's
    run just before) and so re-runs the whole op: the bytes that exist for that instant beyond the
    output kept (the op's temporaries and its other outputs, dropped at once), which no node counts."""
    retain = _retained_outputs(cap, schedule)
    nodes = cap.graph["nodes"]
    pending: set = set()
    out: Dict[int, int] = {}
    for i, step in enumerate(schedule):
        v = int(step["node"])
        if step["op"] != "compute" or not 0 <= v < len(cap.produced) or cap.produced[v] is None:
            continue
        p = cap.produced[v]
        if v in pending:
            pending.discard(v)
            continue
        if p.what in ("workspace", "optimizer"):
            continue
        pending |= retain.get(i, set())
        mine = [w for w, q in cap.effects[p.fx] if q.what in ("output", "version")]
        if mine and mine[0] != v:
            out[i] = cap.workspaces.get(p.fx.name, 0) + sum(node_bytes(nodes[w]) for w in mine if w != v)
    return out


def checkpoint_all(cap: JointCapture) -> List[Dict[str, Any]]:
    """Every node once, in order, freed after its last reader (kiwi's checkpoint-all schedule)."""
    import kiwi
    return kiwi.solve_remat(cap.graph, 1 << 62, "checkpoint-all", cap.cluster, check=False).schedule
