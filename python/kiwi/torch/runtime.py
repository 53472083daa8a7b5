"""The applied module: runs the captured FX graph node by node and keeps, of what autograd saves, exactly
the tensors the plan keeps. Saved-tensor hooks replace a dropped tensor by a handle; before each
autograd group runs (a pre-hook on the node's grad_fn) the tensors it needs are recomputed by
re-running their FX nodes, with the random-number state and batch-norm statistics of the first run.
The policy is schedule.py's, step for step, so the simulator's prediction is this module's execution."""
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from kiwi.torch.errors import PlanError
from kiwi.torch.execution import NodeRunner, batchnorm_module, is_random, load_args, storage_ptr, tensor_key
from kiwi.torch.accumulation import captured_loss, run_step
from kiwi.torch.semantics import Bundle, Group
from kiwi.torch.stepping import StepConfig


class _Rec:
    """What a pack hook returns: the saved tensor, or (once dropped) where to recompute it from."""
    __slots__ = ("t", "fx", "index", "kind", "target", "geometry", "__weakref__")

    def __init__(self, t: torch.Tensor, fx: str, index: int):
        self.t: Optional[torch.Tensor] = t
        self.fx = fx
        self.index = index
        self.kind = "keep"
        self.target = -1          # kiwi id of the tensor it is (or views, or is an own buffer of)
        self.geometry: Optional[Tuple[Tuple[int, ...], Tuple[int, ...], int]] = None


class _Step:
    """One forward call and the backward pass that follows it."""

    def __init__(self, plan: "Program", inputs: Sequence[Any], masks: Optional[Dict[str, torch.Tensor]] = None,
                 rows: slice = slice(None)):
        self.p = plan
        self.inputs = list(inputs)
        self.masks = masks or {}                       # dropout masks of the whole batch (micro-batches)
        self.rows = rows                               # this micro-batch's rows of them
        self.env: Dict[str, Any] = {}
        self.consts: Dict[str, Any] = {}
        self.recs: Dict[int, List[weakref.ref]] = {}   # kiwi id -> recs holding (or standing for) it
        self.cache: Dict[int, Any] = {}                # recomputed tensors (own buffers: index -> tensor)
        self.uses = dict(plan.uses)
        self.rng: Dict[str, Any] = {}
        self.pending: List[Group] = []
        self.callback_queued = False
        self.fallbacks = 0                             # recomputations the plan did not foresee
        self.recomputed = 0
        self._packed: List[_Rec] = []
        self._fx = ""
        self.exact: Dict[Any, str] = {}                # tensor identity -> FX node (this call's values)
        self.owner: Dict[int, str] = {}                # storage -> first FX node that made it
        self.keys: Dict[str, Tuple[Any, int]] = {}     # FX node -> its entries in exact and owner
        self.left = dict(plan.left)                    # kiwi id -> FX consumers still to run
        self.marker: Any = None                        # open profiler range of a backward group

    # ---- forward ---------------------------------------------------------------------------------
    def pack(self, t: torch.Tensor) -> _Rec:
        rec = _Rec(t, self._fx, len(self._packed))
        self._packed.append(rec)
        return rec

    def unpack(self, rec: _Rec) -> torch.Tensor:
        if rec.t is not None:
            return rec.t
        value = self.lookup(rec.target)
        if value is None:  # not foreseen by the plan (autograd ran groups in another order): still correct
            self.fallbacks += 1
            temps: List[int] = []
            self.ensure(rec.target, temps)
            value = self.lookup(rec.target)
            for t in temps:
                if t != rec.target:
                    self.cache.pop(t, None)
        if rec.kind == "own":
            return value[rec.index]
        if rec.geometry is not None:
            shape, stride, offset = rec.geometry
            return torch.as_strided(value, shape, stride, offset)
        return value

    def run_forward(self) -> Any:
        p = self.p
        feed = iter(self.inputs)
        for node in p.nodes:
            if node.op == "placeholder":
                value = next(feed)
                p.check_input(node.name, value)
                self.remember(node.name, value)
            elif node.op == "get_attr":
                value = p.runner.fetch_attr(node.target)
            else:
                value = self.run_node(node)
            self.env[node.name] = value
            if not isinstance(value, torch.Tensor):
                self.consts[node.name] = value
            self.release_after(node)
        out = self.env.pop(p.output)
        self.env.clear()  # the caller holds the output; nothing else of the forward stays referenced here
        return out

    def run_node(self, node: torch.fx.Node) -> Any:
        p = self.p
        args, kwargs = load_args(node, self.env)
        if node.name in p.random and node.name not in self.masks:
            self.rng[node.name] = _rng_state()
        self._fx, self._packed = node.name, []
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack), _marker(p, "kiwi::f::" + node.name):
            value = self.call(node, args, kwargs)
        if isinstance(value, torch.Tensor):
            self.remember(node.name, value)
            p.note_geometry(node.name, value)
        for rec in self._packed:
            self.classify(rec)
        self._packed = []
        group = p.group_of.get(node.name)
        if group is not None and isinstance(value, torch.Tensor) and value.grad_fn is not None:
            value.grad_fn.register_prehook(lambda grads, g=group: self.before_group(g))
            if p.instrument:
                value.grad_fn.register_hook(lambda grad_in, grad_out: self.end_marker())
        return value

    def call(self, node: torch.fx.Node, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """Runs the node; a dropout of a micro-batch applies its rows of the batch's mask (dropout(x) is
        x times its mask, so the values are those of the unsplit batch)."""
        mask = self.masks.get(node.name)
        if mask is not None:
            return args[0] * mask[self.rows]
        return self.p.runner.run(node, args, kwargs)

    def classify(self, rec: _Rec) -> None:
        p = self.p
        t = rec.t
        ptr = storage_ptr(t)
        if ptr in p.param_storages:
            return
        source = self.exact.get(tensor_key(t))
        if source is None and ptr in self.owner:
            source = self.owner[ptr]
            rec.geometry = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
            rec.kind = "view"
        if source is not None:
            rec.target = p.value_of.get(source, -1)
            if rec.kind == "keep":
                rec.kind = "value"
        else:
            rec.kind, rec.target = "own", p.own_target.get((rec.fx, rec.index), -1)
        if rec.target >= 0:
            self.recs.setdefault(rec.target, []).append(weakref.ref(rec))

    def remember(self, name: str, value: torch.Tensor) -> None:
        key, ptr = tensor_key(value), storage_ptr(value)
        self.exact[key] = name
        self.owner.setdefault(ptr, name)
        self.keys[name] = (key, ptr)

    def forget(self, kid: int) -> None:
        """A value no one holds any more: its memory may be reused, so its address no longer identifies it."""
        if any(ref() is not None and ref().t is not None for ref in self.recs.get(kid, ())):
            return
        for name in self.p.names_of.get(kid, ()):
            key, ptr = self.keys.pop(name, (None, None))
            if self.exact.get(key) == name:
                del self.exact[key]
            if self.owner.get(ptr) == name:
                del self.owner[ptr]

    def release_after(self, node: torch.fx.Node) -> None:
        """Drops what the plan frees after this node (schedule.py's forward rule)."""
        p = self.p
        for kid in p.read_by.get(node.name, ()):
            self.left[kid] -= 1
            if self.left[kid] == 0:
                for name in p.names_of.get(kid, ()):
                    self.env.pop(name, None)
                if kid in p.dropped:
                    self.drop(kid)
                self.forget(kid)
        for kid in p.own_of.get(node.name, ()):
            if kid in p.dropped:
                self.drop(kid)

    def drop(self, kid: int) -> None:
        for ref in self.recs.get(kid, ()):
            rec = ref()
            if rec is not None:
                rec.t = None

    # ---- backward --------------------------------------------------------------------------------
    def before_group(self, g: Group) -> None:
        if not self.callback_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self.end_backward)
            self.callback_queued = True
        self.finish_pending()
        temps: List[int] = []
        for t in sorted(g.need, key=self.p.position.__getitem__):
            self.ensure(t, temps)
        for t in temps:
            if self.uses.get(t, 0) == 0:
                self.cache.pop(t, None)
        self.pending.append(g)
        if self.p.instrument:
            self.end_marker()
            self.marker = torch.autograd.profiler.record_function("kiwi::b::" + g.fx)
            self.marker.__enter__()

    def end_marker(self) -> None:
        if self.marker is not None:
            self.marker.__exit__(None, None, None)
            self.marker = None

    def finish_pending(self) -> None:
        for g in self.pending:
            for t in g.need:
                self.uses[t] = self.uses.get(t, 0) - 1
                if self.uses[t] <= 0:
                    self.cache.pop(t, None)
        self.pending = []

    def end_backward(self) -> None:
        self.end_marker()
        self.finish_pending()
        self.cache.clear()
        self.rng.clear()

    def lookup(self, kid: int) -> Any:
        if kid in self.cache:
            return self.cache[kid]
        own = kid in self.p.own_nodes
        found: Dict[int, torch.Tensor] = {}
        for ref in self.recs.get(kid, ()):
            rec = ref()
            if rec is None or rec.t is None:
                continue
            if own:
                found[rec.index] = rec.t
            elif rec.kind == "value":
                return rec.t
            elif rec.kind == "view":
                shape, stride, offset = self.p.geometry[kid]
                return torch.as_strided(rec.t, shape, stride, offset)
        if own and found and set(found) >= set(self.p.own_indices[kid]):
            return found
        return None

    def ensure(self, kid: int, temps: List[int]) -> None:
        if self.lookup(kid) is not None:
            return
        self.rerun(self.p.bundles[self.p.bundle_of[kid]], kid, temps)

    def resolve(self, arg: torch.fx.Node, temps: List[int]) -> Any:
        p = self.p
        if arg.name in self.consts:
            return self.consts[arg.name]
        kid = p.value_of.get(arg.name)
        if kid is None or kid in p.always:
            return p.constant(self, arg)
        self.ensure(kid, temps)
        return self.lookup(kid)

    def rerun(self, b: Bundle, want: int, temps: List[int]) -> None:
        """Re-runs FX node b.fx (schedule.py's _Run.rerun): its value, and its own buffers if wanted."""
        p = self.p
        node = p.fx_nodes[b.fx]
        want_own = [m for m in b.own if self.lookup(m) is None and (m == want or self.uses.get(m, 0) > 0)]

        def value_of(a: torch.fx.Node) -> Any:
            v = self.resolve(a, temps)
            if want_own and isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
                v = v.detach().requires_grad_(p.requires_grad.get(a.name, False) and v.is_floating_point())
            return v

        args = tuple(torch.fx.node.map_arg(node.args, value_of))
        kwargs = dict(torch.fx.node.map_arg(node.kwargs, value_of))
        self.recomputed += 1
        packed: List[torch.Tensor] = []
        with _replay(p, b.fx, self.rng.get(b.fx)):
            if want_own:
                with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(
                        lambda t: packed.append(t) or t, lambda t: t):
                    value = self.call(node, args, kwargs)
            else:
                with torch.no_grad():
                    value = self.call(node, args, kwargs)
        for m in b.companions + [b.node] + ([b.saved] if b.saved is not None and b.saved == want else []):
            if m in self.cache or (m != b.node and m not in want_own):
                continue
            self.cache[m] = value.detach() if m == b.node else {i: packed[i].detach() for i in b.own[m]}
            if self.uses.get(m, 0) == 0:  # needed by no group: freed once this group's tensors are ready
                temps.append(m)


class _marker:
    """A profiler range around a node when the program is instrumented (calibration), else nothing."""

    def __init__(self, program: "Program", name: str):
        self.rf = torch.autograd.profiler.record_function(name) if program.instrument else None

    def __enter__(self):
        if self.rf is not None:
            self.rf.__enter__()
        return self

    def __exit__(self, *exc):
        if self.rf is not None:
            self.rf.__exit__(*exc)
        return False


def _rng_state() -> Tuple[bytes, Optional[bytes]]:
    """The generators' states as bytes: kept outside tensor memory, as the plan's accounting assumes."""
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return bytes(torch.get_rng_state().numpy()), None if cuda is None else bytes(cuda.numpy())


def _state_tensor(state: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(state), dtype=torch.uint8)


class _replay:
    """Re-running a node as it first ran: same random numbers, batch-norm statistics left untouched."""

    def __init__(self, program: "Program", fx: str, rng: Optional[Tuple[bytes, Optional[bytes]]]):
        self.rng = rng
        self.bn = program.batchnorm.get(fx)
        self.fork = None
        self.saved_stats: List[Tuple[torch.Tensor, torch.Tensor]] = []

    def __enter__(self):
        if self.rng is not None:
            devices = [torch.cuda.current_device()] if self.rng[1] is not None else []
            self.fork = torch.random.fork_rng(devices=devices)
            self.fork.__enter__()
            torch.set_rng_state(_state_tensor(self.rng[0]))
            if self.rng[1] is not None:
                torch.cuda.set_rng_state(_state_tensor(self.rng[1]))
        if self.bn is not None:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                buf = getattr(self.bn, name, None)
                if buf is not None:
                    self.saved_stats.append((buf, buf.clone()))
        return self

    def __exit__(self, *exc):
        for buf, copy in self.saved_stats:
            buf.copy_(copy)
        if self.fork is not None:
            self.fork.__exit__(*exc)
        return False


class Program:
    """Everything a forward call needs, resolved once from the capture and the keep set."""

    def __init__(self, captured, dropped: Sequence[int], instrument: bool = False, micro_batches: int = 1):
        st = captured.structure
        self.instrument = instrument
        self.micro_batches = micro_batches
        self.runner: NodeRunner = captured.runner
        self.nodes = captured.model_nodes
        self.output = captured.model_output
        self.fx_nodes = {n.name: n for n in captured.gm.graph.nodes}
        self.value_of = dict(st.value_of)
        self.bundles = st.bundles
        self.bundle_of = st.bundle_of
        self.dropped = set(dropped)
        graph = captured.graph
        self.position = {v: i for i, v in enumerate(graph["order"])}
        self.always = {v["id"] for v in graph["nodes"] if v["kind"] in ("parameter", "optimizer_state", "input")}
        self.uses: Dict[int, int] = {}
        for g in st.groups:
            for t in g.need:
                self.uses[t] = self.uses.get(t, 0) + 1
        self.group_of = {g.fx: g for g in st.groups if g.fx}
        self.own_target = {(b.fx, i): kid for b in st.bundles.values() for kid, idx in b.own.items() for i in idx}
        self.own_nodes = {kid for b in st.bundles.values() for kid in b.own}
        self.own_indices = {kid: idx for b in st.bundles.values() for kid, idx in b.own.items()}
        self.own_of = {b.fx: list(b.own) for b in st.bundles.values()}
        self.random = {n.name for n in self.nodes if n.op in ("call_module", "call_function", "call_method")
                       and is_random(self.runner, n)}
        self.batchnorm = {n.name: m for n in self.nodes for m in [batchnorm_module(self.runner, n)] if m is not None}
        self.requires_grad = {name: rec.meta.requires_grad for name, rec in captured.records.items() if rec.meta}
        self.meta = {name: rec.meta for name, rec in captured.records.items() if rec.meta}
        self.param_storages = {storage_ptr(t) for t in list(captured.gm.parameters()) + list(captured.gm.buffers())}
        self.names_of: Dict[int, List[str]] = {}
        for name, kid in self.value_of.items():
            self.names_of.setdefault(kid, []).append(name)
        self.read_by, self.left = self._consumers()
        self.geometry: Dict[int, Tuple[Tuple[int, ...], Tuple[int, ...], int]] = {}

    def _consumers(self):
        read_by: Dict[str, List[int]] = {}
        left: Dict[int, int] = {}
        for node in list(self.nodes) + [self.fx_nodes[self.output_node_name()]]:
            kids = {self.value_of[a.name] for a in node.all_input_nodes if a.name in self.value_of}
            read_by[node.name] = sorted(kids)
            for kid in kids:
                left[kid] = left.get(kid, 0) + 1
        return read_by, left

    def output_node_name(self) -> str:
        return next(n.name for n in self.fx_nodes.values() if n.op == "output")

    def check_input(self, name: str, value: Any) -> None:
        meta = self.meta.get(name)
        if meta is not None and (not isinstance(value, torch.Tensor) or tuple(value.shape) != meta.shape):
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            hint = (f"the plan splits the batch into {self.micro_batches} micro-batches: run the step with "
                    f"module.train_step(inputs, labels, optimizer)" if self.micro_batches > 1 else
                    "capture and plan again for other shapes")
            raise PlanError(f"input '{name}': the plan was made for shape {meta.shape}, got {got} ({hint})")

    def constant(self, step: _Step, arg: torch.fx.Node) -> Any:
        if arg.op == "placeholder":
            return step.inputs[[n.name for n in self.nodes if n.op == "placeholder"].index(arg.name)]
        if arg.op == "get_attr":
            return self.runner.fetch_attr(arg.target)
        raise PlanError(f"node '{arg.name}': no value to recompute from")

    def note_geometry(self, name: str, value: torch.Tensor) -> None:
        """Shape, strides and offset of each FX value: a view saved by autograd is re-based on them."""
        kid = self.value_of.get(name)
        if kid is not None and kid not in self.geometry:
            self.geometry[kid] = (tuple(value.shape), tuple(value.stride()), value.storage_offset())


class RematModule(torch.nn.Module):
    """A captured model whose training step keeps exactly the activations a plan keeps
    (kiwi.torch.apply_remat). It shares the original model's parameters and buffers."""

    def __init__(self, captured, dropped: Sequence[int], instrument: bool = False, config: StepConfig = StepConfig()):
        super().__init__()
        self.graph_module = captured.gm
        self._program = Program(captured, dropped, instrument, config.micro_batches)
        self.config = config
        self.loss_fn = captured_loss(captured)
        self.last_step: Optional[_Step] = None
        self._batch: Optional[Tuple[Dict[str, torch.Tensor], slice]] = None  # set by train_step

    def forward(self, *inputs: Any) -> Any:
        masks, rows = self._batch if self._batch is not None else (None, slice(None))
        step = _Step(self._program, inputs, masks, rows)
        self.last_step = step
        return step.run_forward()

    def train_step(self, inputs: Any, labels: Optional[torch.Tensor] = None,
                   optimizer: Optional[torch.optim.Optimizer] = None) -> torch.Tensor:
        """One training step as the plan runs it (accumulation.run_step): each micro-batch's forward,
        loss and backward (gradients accumulate in .grad), then the optimizer step, in chunks when the plan
        says. Returns the batch's loss (detached)."""
        return run_step(self, inputs, labels, optimizer)

    @property
    def dropped(self) -> List[int]:
        return sorted(self._program.dropped)
