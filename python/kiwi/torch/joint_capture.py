"""Generic capture: a training step's joint forward + backward ATen graph, as torch.compile's AOTAutograd
sees it, written as a kiwi graph of storages.

`make_fx` traces `loss = loss_fn(model(inputs)); grads = torch.autograd.grad(loss, params)` with
FakeTensors (no memory, no compute): the forward is the model's ATen ops, the backward is autograd's own.
Every ATen op becomes kiwi nodes by what it does to memory, found from the FakeTensors' storages:

- an op that makes new storages (most ops) gives one node per new storage; the first carries the op's
  FLOPs (torch's FLOP counter) and bytes, the others (layer norm's mean and rstd...) are its outputs,
  and the first reads a workspace node holding the op's temporaries (measured) and, since they all
  exist while the op runs, the other outputs' bytes;
- a view (view, transpose, slice, expand, `_unsafe_view`, split's pieces...) makes no node: whoever reads
  it reads its base's storage ("operands": "storages" in kiwi's graph format);
- an in-place op on an activation (dropout's `bernoulli_`, `relu_`) writes a new version of the storage:
  one node, run out of place (on a copy) so that every node is a value, and the old version is freed
  after its last reader; an in-place op on a parameter, buffer or input (batch norm's running
  statistics) writes it in place: a one-byte node that prices the op.

The graph ends with `step.outputs`, which reads what the step hands back (loss, gradients) and what its
caller holds all step (the inputs), so that the schedule keeps them to the end."""
import dataclasses
import functools
import json
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.flop_counter import conv_flop_count, flop_registry, sdpa_backward_flop_count, sdpa_flop_count

import kiwi
from kiwi.torch.aten_kinds import kiwi_kind, kiwi_op, overwrites
from kiwi.torch.chunked_optimizer import chunked_workspace
from kiwi.torch.dtypes import KIWI_DTYPES, node_bytes
from kiwi.torch.errors import CaptureError, PlanError, TraceError


# Ops that write an argument their schema does not mark as written: batch norm's running statistics
# in training mode (the argument positions).
_UNANNOTATED_WRITES = {"native_batch_norm": (3, 4), "cudnn_batch_norm": (3, 4), "miopen_batch_norm": (3, 4)}


@dataclasses.dataclass
class Produced:
    """What computing one kiwi node does: run `fx` (an op node) and keep one of its effects."""
    fx: torch.fx.Node
    what: str                       # "output" (a new storage), "version" (an activation written), "write",
                                    # "workspace" (the op's temporaries: counted, never a tensor of kiwi's),
                                    # "optimizer" (the optimizer's step; fx is the graph's output node)
    index: int = 0                  # "output": position among the op's flattened outputs
    storage: int = -1               # the storage made or written


@dataclasses.dataclass
class Storage:
    """One storage of the traced step: who made it (root), and its kiwi node per version."""
    root: Tuple[torch.fx.Node, Optional[int]]   # the FX node (and output index) whose tensor is the storage
    nbytes: int
    persistent: bool                             # a placeholder: parameter, buffer, input, constant
    nodes: List[int] = dataclasses.field(default_factory=list)   # kiwi node of each version, in order


# The node holding the optimizer step's temporaries (Adam's `denom`s), when the step has any.
OPTIMIZER_WORKSPACE = "optimizer.workspace"


@dataclasses.dataclass
class JointCapture:
    """A captured training step: the traced joint graph, kiwi's storage graph of it, and how they match."""
    model: torch.nn.Module
    gm: torch.fx.GraphModule
    graph: Dict[str, Any]                 # kiwi graph JSON, "operands": "storages"
    produced: List[Optional[Produced]]    # per kiwi node: what computes it (None: placeholder, step.outputs)
    storages: List[Storage]
    storage_of: Dict[torch.fx.Node, int]  # FX tensor node -> storage
    chain: Dict[torch.fx.Node, List[torch.fx.Node]]   # FX node -> view ops from its storage's root to it
    reads: Dict[torch.fx.Node, Dict[int, int]]        # op node -> {storage: kiwi node of the version it reads}
    placeholders: List[torch.fx.Node]
    param_names: List[str]
    buffer_names: List[str]
    input_spec: Any                       # pytree spec of (args, kwargs)
    input_leaves: List[Any]               # the example inputs' leaves (tensors are placeholders)
    outputs_node: int                     # kiwi id of step.outputs
    loss_fn: Callable[..., Any]
    cluster: Any
    profile: Any = None
    workspaces: Dict[str, int] = dataclasses.field(default_factory=dict)   # FX op name -> temporaries (bytes)
    optimizer: Optional[torch.optim.Optimizer] = None   # its step is the graph's node "optimizer"
    seconds: Dict[str, float] = dataclasses.field(default_factory=dict)   # FX op name -> measured time
    # Every schedule plan_joint found for this capture: (predicted peak, seconds, solver, schedule).
    known_schedules: List[Tuple[int, float, str, List[Dict[str, Any]]]] = dataclasses.field(default_factory=list)
    optimizer_chunk_bytes: int = 0   # > 0: the step updates the parameters this many bytes at a time (chunked_step)
    chunked: Dict[int, "JointCapture"] = dataclasses.field(default_factory=dict)   # with_optimizer_chunks' results

    def with_optimizer_chunks(self, chunk_bytes: int) -> "JointCapture":
        """This step with the optimizer's update run a chunk at a time (kiwi.torch.chunked_optimizer): the
        same arithmetic, and in place of the step's temporaries for the largest parameter (measured, or
        Adam's two parameter-sized `denom`s) two chunk-sized ones. The optimizer's time stays as captured
        (the chunks add one Python call each). One capture per chunk size, kept."""
        if chunk_bytes <= 0 or self.optimizer is None:
            raise PlanError("optimizer_chunks: needs a positive chunk size and a step captured with its optimizer")
        if chunk_bytes not in self.chunked:
            graph = json.loads(json.dumps(self.graph))
            for node in graph["nodes"]:
                if node["name"] == OPTIMIZER_WORKSPACE:
                    node["shape"] = [max(1, min(node["shape"][0], chunked_workspace(self.model, chunk_bytes)))]
            self.chunked[chunk_bytes] = dataclasses.replace(self, graph=graph, known_schedules=[],
                                                            optimizer_chunk_bytes=chunk_bytes, chunked={})
        return self.chunked[chunk_bytes]

    @property
    def name(self) -> str:
        return self.graph["name"]

    @functools.cached_property
    def effects(self) -> Dict[torch.fx.Node, List[Tuple[int, Produced]]]:
        """Per FX op (the graph's output node for the optimizer's step): the kiwi nodes it makes, in order."""
        out: Dict[torch.fx.Node, List[Tuple[int, Produced]]] = {}
        for v, p in enumerate(self.produced):
            if p is not None:
                out.setdefault(p.fx, []).append((v, p))
        return out

    @functools.cached_property
    def output_node(self) -> torch.fx.Node:
        """The traced step's output: (loss, gradient per trainable parameter or None)."""
        return next(n for n in self.gm.graph.nodes if n.op == "output")


def _loss_of(output: Any, labels: Any, loss: Union[str, Callable[..., Any], None]) -> torch.Tensor:
    if callable(loss):
        return loss(output, labels) if labels is not None else loss(output)
    if labels is not None and loss == "cross_entropy":
        logits = output.logits if hasattr(output, "logits") else output
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    if hasattr(output, "loss") and isinstance(output.loss, torch.Tensor):
        return output.loss                                      # HuggingFace models given labels
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        output = output[0]
    if isinstance(output, torch.Tensor) and output.numel() == 1:
        return output.reshape(())
    raise CaptureError("loss: the model's output is not a scalar loss; pass labels= (cross-entropy) or loss=fn")


def _trace(model: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], labels: Any,
           loss: Union[str, Callable[..., Any], None]):
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    buffers = list(model.named_buffers())
    leaves, spec = pytree.tree_flatten((args, kwargs, labels))
    tensor_at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    p_names, b_names = [n for n, _ in params], [n for n, _ in buffers]

    def step(p_values, b_values, in_values):
        filled = list(leaves)
        for i, v in zip(tensor_at, in_values):
            filled[i] = v
        a, kw, lab = pytree.tree_unflatten(filled, spec)
        state = dict(zip(p_names, p_values))
        state.update(zip(b_names, b_values))
        out = torch.func.functional_call(model, state, a, kw, strict=False, tie_weights=True)
        value = _loss_of(out, lab, loss)
        grads = torch.autograd.grad(value, p_values, allow_unused=True)
        return value, grads

    p_values = [p.detach().requires_grad_(True) for _, p in params]
    b_values = [b.detach() for _, b in buffers]
    in_values = [leaves[i].detach() for i in tensor_at]
    try:
        gm = make_fx(step, tracing_mode="fake", _allow_non_fake_inputs=True)(p_values, b_values, in_values)
    except CaptureError:
        raise
    except Exception as e:  # torch's own tracing errors: data-dependent control flow, unsupported Python
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceError(f"make_fx cannot trace {type(model).__name__}: {type(e).__name__}: {first}") from None
    return gm, p_names, b_names, spec, leaves


def _tensors(value: Any) -> List[Optional[torch.Tensor]]:
    """An FX node's value as a flat list of its tensor outputs (None where an output is not a tensor)."""
    flat = pytree.tree_leaves(value) if isinstance(value, (tuple, list)) else [value]
    return [v if isinstance(v, torch.Tensor) else None for v in flat]


def _dtype_shape(t: torch.Tensor, nbytes: int) -> Tuple[str, List[int]]:
    """A storage as a kiwi tensor: its tensor's dtype and shape when they cover it, else u8[bytes]."""
    dtype = KIWI_DTYPES.get(t.dtype)
    if dtype is not None and t.numel() * t.element_size() == nbytes and all(d >= 1 for d in t.shape):
        return dtype, [int(d) for d in t.shape]
    return "u8", [max(int(nbytes), 1)]


def _shape(t: Any) -> Tuple[int, ...]:
    return tuple(t.shape)


# Ops torch's FLOP counter has no formula for, counted with its formula of the same computation: the
# CPU's fused attention, forward (query, key, value, ...) and backward (grad_out, query, key, value, ...).
_FLOPS_AS = {
    "_scaled_dot_product_flash_attention_for_cpu":
        lambda q, k, v, *rest, **kw: sdpa_flop_count(_shape(q), _shape(k), _shape(v)),
    "_scaled_dot_product_flash_attention_for_cpu_backward":
        lambda g, q, k, v, *rest, **kw: sdpa_backward_flop_count(_shape(g), _shape(q), _shape(k), _shape(v)),
}


def _conv_backward_flops(grad_out, x, w, bias, stride, padding, dilation, transposed, output_padding, groups,
                         output_mask, **kw) -> int:
    """Each gradient a convolution's backward computes (the input's, the weight's) is a convolution of
    the forward's size. torch's formula counts a grouped convolution's as a dense one (48x too many on
    MobileNetV2's depthwise 3x3s)."""
    forward = conv_flop_count(_shape(x), _shape(w), _shape(grad_out), transposed=transposed)
    return forward * (bool(output_mask[0]) + bool(output_mask[1]))


# Ops whose count torch's FLOP counter has wrong, counted here instead.
_FLOPS_INSTEAD = {"convolution_backward": _conv_backward_flops}


def _flops(n: torch.fx.Node) -> float:
    packet = getattr(n.target, "overloadpacket", None)
    formula = _FLOPS_INSTEAD.get(getattr(packet, "__name__", "")) or flop_registry.get(packet)
    if formula is None:
        formula = _FLOPS_AS.get(getattr(packet, "__name__", ""))
    if formula is None:
        return 0.0
    args, kwargs = pytree.tree_map_only(torch.fx.Node, lambda a: a.meta.get("val"), (n.args, n.kwargs))
    try:
        return float(formula(*args, **kwargs, out_val=n.meta.get("val")))
    except Exception:  # a formula that does not take this overload's arguments: the op is priced by bytes
        return 0.0


class StorageGraphBuilder:
    """Walks a traced joint graph (make_fx's, or AOTAutograd's under torch.compile) once and writes kiwi's
    storage graph."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, workspaces: Dict[str, int], seconds: Dict[str, float]):
        self.gm = gm
        self.workspaces = workspaces
        self.seconds = seconds
        self.nodes: List[Dict[str, Any]] = []
        self.produced: List[Optional[Produced]] = []
        self.storages: List[Storage] = []
        self.by_ref: Dict[Any, int] = {}
        self.storage_of: Dict[torch.fx.Node, int] = {}
        self.chain: Dict[torch.fx.Node, List[torch.fx.Node]] = {}
        self.reads: Dict[torch.fx.Node, Dict[int, int]] = {}
        self.name = name

    def add(self, name: str, kind: str, op: str, dtype: str, shape: List[int], inputs: List[int],
            backward: bool, produced: Optional[Produced], flops: float = 0.0, nbytes: int = 0,
            cost: Optional[float] = None) -> int:
        node = {"id": len(self.nodes), "name": name, "kind": kind, "op": op, "dtype": dtype, "shape": shape,
                "inputs": inputs}
        if backward:
            node["pass"] = "backward"
        if flops > 0:
            node["flops"] = flops
        if nbytes > 0:
            node["bytes_accessed"] = int(nbytes)
        if cost is not None:
            node["cost"] = float(cost)
        self.nodes.append(node)
        self.produced.append(produced)
        return node["id"]

    def new_storage(self, t: torch.Tensor, root: Tuple[torch.fx.Node, Optional[int]], persistent: bool) -> int:
        ref = StorageWeakRef(t.untyped_storage())
        self.by_ref[ref] = len(self.storages)
        self.storages.append(Storage(root, int(t.untyped_storage().nbytes()), persistent))
        return len(self.storages) - 1

    def find(self, t: torch.Tensor) -> Optional[int]:
        return self.by_ref.get(StorageWeakRef(t.untyped_storage()))

    def optimizer_states(self, optimizer: torch.optim.Optimizer,
                         params: List[Tuple[str, torch.Tensor]]) -> Dict[str, List[int]]:
        """The optimizer's state as nodes resident from the step's start (PyTorch keeps it between
        steps), per parameter name."""
        states: Dict[str, List[int]] = {}
        stepped = {id(q) for group in optimizer.param_groups for q in group["params"]}
        for name, p in params:
            if id(p) not in stepped:
                continue
            states[name] = []
            for key, value in optimizer.state.get(p, {}).items():
                if isinstance(value, torch.Tensor):
                    dtype, shape = _dtype_shape(value, value.numel() * value.element_size())
                    states[name].append(self.add(f"{name}.{key}", "optimizer_state", key, dtype, shape, [], False,
                                                 None, nbytes=0))
        return states

    def optimizer_step(self, kind: str, output: torch.fx.Node, states: Dict[str, List[int]],
                       params: List[Tuple[str, torch.fx.Node, Optional[torch.fx.Node]]], workspace: int) -> int:
        """The optimizer's step after the backward: a workspace for its temporaries and a node reading
        parameters, gradients and state. `params`: (name, placeholder, its gradient's FX node or None)."""
        inputs: List[int] = []
        traffic = 0
        for name, placeholder, grad in params:
            if grad is None or name not in states:
                continue
            for fx in (placeholder, grad):
                inputs += self.current(self.storage_of[fx])
                traffic += self.storages[self.storage_of[fx]].nbytes
            for v in states[name]:
                inputs.append(v)
                traffic += node_bytes(self.nodes[v])
        seconds = self.seconds.get(output.name)
        if workspace > 0:
            inputs.append(self.add(OPTIMIZER_WORKSPACE, "opaque", "workspace", "u8", [workspace], [], True,
                                   Produced(output, "workspace"), cost=None if seconds is None else 0.0))
        return self.add("optimizer", "optimizer", kind, "u8", [1], sorted(set(inputs)), True,
                        Produced(output, "optimizer"), 0.0, traffic, seconds)

    def same_as(self, n: torch.fx.Node, first: torch.fx.Node) -> None:
        """Placeholder n is the same tensor as `first` (labels that are the input ids): one storage."""
        self.storage_of[n] = self.storage_of[first]
        self.chain[n] = []

    def placeholder(self, n: torch.fx.Node, kind: str, op: str, persistent: bool = True) -> None:
        """A graph input: resident all step (parameters, the batch), or, not `persistent`, a tensor
        handed in that the graph frees after its last reader (a compiled backward's saved tensors)."""
        t = n.meta["val"]
        s = self.new_storage(t, (n, None), persistent=persistent)
        dtype, shape = _dtype_shape(t, self.storages[s].nbytes)
        self.storages[s].nodes.append(self.add(n.name, kind, op, dtype, shape, [], False, None))
        self.storage_of[n] = s
        self.chain[n] = []

    def constant(self, n: torch.fx.Node) -> None:
        """A get_attr node: a tensor constant of the traced module is resident like a parameter."""
        val = getattr(self.gm, n.target)
        if isinstance(val, torch.Tensor):
            n.meta.setdefault("val", val)
            self.placeholder(n, "parameter", "constant")

    def finish(self, held: set, what: str) -> Tuple[Dict[str, Any], int]:
        """The graph, ended by `step.outputs` reading the storages `held` to the end (what the step hands
        back, what its caller holds), checked by kiwi's verifier; and step.outputs' id."""
        outputs = self.add("step.outputs", "opaque", "step_outputs", "u8", [1],
                           sorted({v for s in held for v in self.current(s)}), True, None)
        graph = {"kiwi_graph_version": 1, "name": self.name, "operands": "storages", "nodes": self.nodes}
        try:
            kiwi.parse_graph(graph, what)
        except kiwi.BadInputError as e:   # a failure here is a bug of kiwi's capture
            raise CaptureError(f"internal error: {what} does not verify: {e}") from None
        return graph, outputs

    def current(self, s: int) -> List[int]:
        """The kiwi nodes a reader of storage s depends on: its latest version (and, for a persistent
        storage written in place, the placeholder besides the write)."""
        nodes = self.storages[s].nodes
        return [nodes[0], nodes[-1]] if self.storages[s].persistent and len(nodes) > 1 else [nodes[-1]]

    def op(self, n: torch.fx.Node, backward: bool) -> None:
        arg_nodes = [a for a in pytree.tree_leaves((n.args, n.kwargs)) if isinstance(a, torch.fx.Node)]
        if n.target is operator.getitem:
            self.getitem(n)
            return
        outs = _tensors(n.meta.get("val"))
        read_storages: List[int] = []
        for a in arg_nodes:
            for t in _tensors(a.meta.get("val")):
                s = self.find(t) if t is not None else None
                if s is not None and s not in read_storages:
                    read_storages.append(s)
        self.reads[n] = {s: self.storages[s].nodes[-1] for s in read_storages}
        inputs = sorted({v for s in read_storages for v in self.current(s)})
        written = self.written_storages(n)
        fresh = [(i, t) for i, t in enumerate(outs) if t is not None and self.find(t) is None]
        # A view: its output's storage is one it reads, it writes nothing, it makes nothing.
        if not fresh and not written:
            self.alias(n, outs, arg_nodes)
            return
        kind, op = kiwi_kind(n.target), kiwi_op(n.target, backward, n.args)
        tuple_out = isinstance(n.meta.get("val"), (tuple, list))
        effects: List[Tuple[str, int, int, str, List[int], int]] = []   # what, index, storage, dtype, shape, bytes
        for i, t in fresh:
            st = self.new_storage(t, (n, i if tuple_out else None), False)
            effects.append(("output", i, st, *_dtype_shape(t, self.storages[st].nbytes), self.storages[st].nbytes))
        for st in written:
            if self.storages[st].persistent:   # written in place: no new memory
                effects.append(("write", 0, st, "u8", [1], 0))
            else:
                root_t = _root_tensor(self.storages[st].root)
                effects.append(("version", 0, st, *_dtype_shape(root_t, self.storages[st].nbytes),
                                self.storages[st].nbytes))
        overwritten = set(written) if overwrites(n.target) else set()   # written, never read
        read_bytes = sum(self.storages[x].nbytes for x in read_storages if x not in overwritten)
        out_bytes = sum(e[5] for e in effects)
        # The runner writes an activation's new version into a copy of the old one (JointRunner's
        # _arguments): one more read and write of it. Not for an op that overwrites it: its rate (a
        # random fill's, 40x slower than a copy on a CPU) would price the copy too.
        copy_bytes = 2 * sum(e[5] for e in effects if e[0] == "version" and e[2] not in overwritten)
        # While the op runs, its temporaries and all its outputs exist at once; kiwi's nodes have one
        # output each, so the first node also reads a workspace holding the temporaries and the other
        # outputs' bytes (those outputs become kiwi nodes right after it).
        transient = self.workspaces.get(n.name, 0) + out_bytes - effects[0][5]
        # Measured times: the op's first node carries the op's time, its workspace and other outputs
        # none (one run of the op makes them all).
        seconds = self.seconds.get(n.name)
        rest = None if seconds is None else 0.0
        first_inputs = list(inputs)
        if transient > 0:
            first_inputs.append(self.add(f"{n.name}.workspace", "opaque", "workspace", "u8", [transient], [],
                                         backward, Produced(n, "workspace"), cost=rest))
        for k, (what, i, st, dtype, shape, nbytes) in enumerate(effects):
            if k == 0:
                v = self.add(n.name, kind, op, dtype, shape, first_inputs, backward, Produced(n, what, i, st),
                             _flops(n), read_bytes + out_bytes + copy_bytes, seconds)
            else:
                suffix = f"out{i}" if what == "output" else f"writes{st}"
                v = self.add(f"{n.name}.{suffix}", "opaque", f"{op}.output", dtype, shape, inputs, backward,
                             Produced(n, what, i, st), cost=rest)
            self.storages[st].nodes.append(v)
        # The op's own tensor outputs: fresh ones are their storages' roots; the others alias an argument.
        if isinstance(n.meta.get("val"), torch.Tensor):
            t = n.meta["val"]
            s = self.find(t)
            self.storage_of[n] = s
            if fresh:
                self.chain[n] = []
            else:  # an in-place op returns (a view of) the argument it wrote
                parent = self.aliased_arg(n, t, arg_nodes)
                self.chain[n] = list(self.chain[parent]) if parent is not None else []

    def written_storages(self, n: torch.fx.Node) -> List[int]:
        schema = getattr(n.target, "_schema", None)
        if schema is None:
            return []
        out: List[int] = []
        unannotated = _UNANNOTATED_WRITES.get(getattr(getattr(n.target, "overloadpacket", None), "__name__", ""), ())
        for i, arg in enumerate(schema.arguments):
            if (arg.alias_info is None or not arg.alias_info.is_write) and i not in unannotated:
                continue
            value = n.args[i] if i < len(n.args) else n.kwargs.get(arg.name)
            for a in pytree.tree_leaves(value):
                if isinstance(a, torch.fx.Node):
                    for t in _tensors(a.meta.get("val")):
                        s = self.find(t) if t is not None else None
                        if s is not None and s not in out:
                            out.append(s)
        return out

    def aliased_arg(self, n: torch.fx.Node, t: torch.Tensor, arg_nodes: List[torch.fx.Node]) -> Optional[torch.fx.Node]:
        s = self.find(t)
        for a in arg_nodes:
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor) and self.find(v) == s:
                return a
        return None

    def alias(self, n: torch.fx.Node, outs: List[Optional[torch.Tensor]], arg_nodes: List[torch.fx.Node]) -> None:
        """A view (or a list of views): no kiwi node; its chain is its parent's plus itself."""
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            parent = self.aliased_arg(n, val, arg_nodes)
            if parent is None:
                return
            self.storage_of[n] = self.find(val)
            self.chain[n] = self.chain.get(parent, []) + [n]
        elif isinstance(val, (tuple, list)) and outs:
            for a in arg_nodes:  # split, unbind, chunk: the pieces are views of one argument
                v = a.meta.get("val")
                if isinstance(v, torch.Tensor) and any(t is not None and self.find(t) == self.find(v) for t in outs):
                    self.chain[n] = self.chain.get(a, []) + [n]
                    return

    def getitem(self, n: torch.fx.Node) -> None:
        parent, index = n.args[0], n.args[1]
        t = n.meta.get("val")
        if not isinstance(t, torch.Tensor):
            return
        s = self.find(t)
        self.storage_of[n] = s
        st = self.storages[s] if s is not None else None
        if st is not None and st.root == (parent, index):
            st.root = (n, None)   # the piece itself is the storage's tensor from here on
            self.chain[n] = []
        elif parent in self.chain:
            self.chain[n] = self.chain[parent] + [n]
        else:
            self.chain[n] = []


def _same_input(leaves: List[Any], k: int) -> Optional[int]:
    """The first earlier input tensor that is the same tensor as input k (the same storage, offset, shape
    and strides), so that both are one storage; None if there is none."""
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    t = tensors[k]
    for j in range(k):
        u = tensors[j]
        if (u.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() and u.storage_offset() == t.storage_offset()
                and u.shape == t.shape and u.stride() == t.stride() and u.dtype == t.dtype):
            return j
    return None


def _root_tensor(root: Tuple[torch.fx.Node, Optional[int]]) -> torch.Tensor:
    node, index = root
    val = node.meta["val"]
    return val if index is None else pytree.tree_leaves(val)[index]


def capture_joint(model: torch.nn.Module, example_inputs: Union[torch.Tensor, Sequence[Any], Dict[str, Any]],
                  labels: Any = None, loss: Union[str, Callable[..., Any], None] = "cross_entropy",
                  kwargs: Optional[Dict[str, Any]] = None, cluster: Any = None,
                  profile: Any = None, workspaces: str = "measured",
                  optimizer: Optional[torch.optim.Optimizer] = None, times: Optional[str] = None) -> JointCapture:
    """Captures one training step of `model` (forward, loss, autograd's backward) generically.

    example_inputs: a tensor, a tuple of positional arguments, or a dict of keyword arguments.
    labels + loss="cross_entropy": the loss is cross-entropy of the model's output (its `.logits` for
    HuggingFace models) against labels; loss=fn: fn(output, labels); loss=None or no labels: the model
    returns its loss (a scalar, a tuple starting with it, or an object with `.loss`: HuggingFace models
    given `labels` in their keyword arguments).
    workspaces="measured" runs the step for real (checkpoint-all; measure_step_costs) to measure each op's
    temporaries, which kiwi counts while the op runs; "none" captures without running anything
    (FakeTensors only, unless times="measured").
    times="measured" (the default when workspaces are measured) gives each op the time it took in
    those runs (kiwi graph's node "cost", seconds), so that a plan's predicted step time is the
    runner's on this machine; "model" leaves the times to kiwi's cost model (`cluster`, `profile`: a
    `kiwi profile` file or dict, whose runner_op_time then prices each op's share of the runner).
    optimizer: a torch.optim optimizer (Adam, AdamW, SGD) over the model's parameters makes its step
    part of the captured step (the plan's step then calls it); its state is created first if it has
    none (one step on zero gradients, the parameters left as they were). Without it the step ends
    with the gradients, and your optimizer runs after it."""
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        args: Tuple[Any, ...] = (example_inputs,)
    elif isinstance(example_inputs, dict):
        args, kwargs = (), {**example_inputs, **(kwargs or {})}
    else:
        args = tuple(example_inputs)
    if loss is not None and not callable(loss) and loss != "cross_entropy":
        raise CaptureError(f"loss: '{loss}' is not 'cross_entropy', a function or None")
    if workspaces not in ("measured", "none"):
        raise CaptureError(f"workspaces: '{workspaces}' is not 'measured' or 'none'")
    if times is None:
        times = "measured" if workspaces == "measured" else "model"
    if times not in ("measured", "model"):
        raise CaptureError(f"times: '{times}' is not 'measured' or 'model'")
    if not any(p.requires_grad for p in model.parameters()):
        raise CaptureError(f"model: {type(model).__name__} has no parameter that requires a gradient")
    opt_kind = _check_optimizer(model, optimizer)
    lab = labels if loss is not None else None
    gm, p_names, b_names, spec, leaves = _trace(model, args, dict(kwargs or {}), lab, loss)
    from kiwi.torch.costs import local_cluster, runner_profile
    profile = runner_profile(profile)   # the plans run in kiwi's runner, at its per-op time
    device = next((str(p.device) for p in model.parameters()), "cpu")
    cap = _build(model, gm, p_names, b_names, spec, leaves, loss, cluster or local_cluster(device), profile, {},
                 {}, optimizer, opt_kind)
    if workspaces == "measured" or times == "measured":
        measured = measure_step_costs(cap, timed=times == "measured")
        cap = _build(model, gm, p_names, b_names, spec, leaves, loss, cap.cluster, profile,
                     measured.workspaces if workspaces == "measured" else {},
                     measured.seconds if times == "measured" else {}, optimizer, opt_kind)
    return cap


def _check_optimizer(model: torch.nn.Module, optimizer: Any) -> Optional[str]:
    """The optimizer's kind for kiwi's cost model, after checking it steps only the model's parameters."""
    if optimizer is None:
        return None
    from kiwi.torch.capture import OptimizerSpec
    from kiwi.torch.measure import prime_optimizer
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise CaptureError(f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
    spec = OptimizerSpec.of(optimizer)
    mine = {id(p) for p in model.parameters() if p.requires_grad}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in mine:
                raise CaptureError(f"optimizer: it steps a tensor of shape {tuple(p.shape)} that is not a "
                                   f"trainable parameter of {type(model).__name__}")
    if not optimizer.state:
        prime_optimizer(optimizer)
    return spec.kind


def _build(model, gm, p_names, b_names, spec, leaves, loss, cluster, profile, workspaces: Dict[str, int],
           seconds: Dict[str, float], optimizer: Optional[torch.optim.Optimizer] = None,
           opt_kind: Optional[str] = None) -> JointCapture:
    b = StorageGraphBuilder(gm, type(model).__name__, workspaces, seconds)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    n_params, n_buffers = len(p_names), len(b_names)
    for i, n in enumerate(placeholders):
        if i < n_params:
            b.placeholder(n, "parameter", "parameter")
        elif i < n_params + n_buffers:
            b.placeholder(n, "parameter", "buffer")
        else:
            twin = _same_input(leaves, i - n_params - n_buffers)
            if twin is not None:
                b.same_as(n, placeholders[n_params + n_buffers + twin])
            else:
                b.placeholder(n, "input", "input")
    output = next(n for n in gm.graph.nodes if n.op == "output")
    loss_node = output.args[0][0]
    named = dict(model.named_parameters())
    states = b.optimizer_states(optimizer, [(name, named[name]) for name in p_names]) if optimizer is not None else {}
    backward = False
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            b.constant(n)
        elif n.op == "call_function":
            b.op(n, backward)
            if n is loss_node:
                backward = True
    grads = list(output.args[0][1:])
    if optimizer is not None:
        from kiwi.torch.costs import optimizer_workspace
        params = [(name, placeholders[i], grads[i]) for i, name in enumerate(p_names)]
        stepped = [named[name] for name, _, g in params if g is not None and name in states]
        ws = workspaces.get(output.name, optimizer_workspace(stepped, opt_kind, False))
        b.optimizer_step(opt_kind, output, states, params, ws)
        held_fx = [loss_node]   # the gradients end in the optimizer's step
    else:
        held_fx = [n for n in pytree.tree_leaves(output.args) if isinstance(n, torch.fx.Node)]
    held = {b.storage_of[n] for n in held_fx if n in b.storage_of}
    held |= {b.storage_of[n] for n in placeholders[n_params + n_buffers:]}
    graph, outputs = b.finish(held, f"the captured graph of {b.name}")
    return JointCapture(model, gm, graph, b.produced, b.storages, b.storage_of, b.chain, b.reads, placeholders,
                        p_names, b_names, spec, leaves, outputs, loss, cluster, profile, dict(workspaces), optimizer,
                        dict(seconds))


@dataclasses.dataclass
class StepCosts:
    """What running a captured step measured, per FX op name: temporaries (bytes) and time (seconds)."""
    workspaces: Dict[str, int]
    seconds: Dict[str, float]


def measure_step_costs(cap: JointCapture, timed: bool = True, repeats: int = 5) -> StepCosts:
    """Each op's temporaries (bytes its run allocated above what it left allocated: oneDNN's reordered
    convolution operands, a softmax's scratch) and, when `timed`, its time, from real steps
    (checkpoint-all) after warm-up steps (three; one untimed): `repeats` steps under the profiler, one
    range per op, then as many unprofiled ones (one profiled step untimed). An op's time is its median
    over the profiled steps (on a CPU its range's wall time; on a CUDA device the time between CUDA
    events around it, since its range times only the launch), scaled so that all ops sum to the median
    unprofiled step (the profiler adds its own time; the runner's bookkeeping between ops is spread
    over them). The model's buffers, parameters, optimizer and random-number generators are left as
    they were."""
    import copy
    import statistics
    import time
    from kiwi.torch.joint_run import JointRunner, checkpoint_all
    from kiwi.torch.measure import measure_step
    runner = JointRunner(cap)
    device = next((p.device for p in cap.model.parameters()), torch.device("cpu"))
    cuda = device.type == "cuda"
    saved = {k: v.detach().clone() for k, v in cap.model.named_buffers()}
    if cap.optimizer is not None:   # the runs step it: parameters and state are put back afterwards
        saved.update({k: v.detach().clone() for k, v in cap.model.named_parameters()})
        opt_state = copy.deepcopy(cap.optimizer.state_dict())
    schedule = checkpoint_all(cap)
    profiled, plain, events = [], [], []
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    try:
        with torch.random.fork_rng(devices=[device] if cuda else []):
            for _ in range(3 if timed else 1):   # first runs pay one-time costs (kernel caches, the allocator's growth)
                runner.run(schedule)
            for _ in range(max(1, repeats) if timed else 1):
                profiled.append(measure_step(lambda: runner.run(schedule, ranges=True), [], str(device), ranges=True))
            if timed:
                runner.run(schedule)   # the profiler's own allocations out of the caches
            for _ in range(max(1, repeats) if timed else 0):
                sync()
                t0 = time.perf_counter()
                runner.run(schedule)
                sync()
                plain.append(time.perf_counter() - t0)
            for _ in range(max(1, repeats) if timed and cuda else 0):
                events.append({})
                runner.run(schedule, events=events[-1])
            sync()
    finally:
        with torch.no_grad():
            for k, v in list(cap.model.named_buffers()) + list(cap.model.named_parameters()):
                if k in saved:
                    v.copy_(saved[k])
        if cap.optimizer is not None:
            cap.optimizer.load_state_dict(opt_state)
    workspaces: Dict[str, int] = {}
    times: Dict[str, float] = {}
    for name, r in profiled[0].ranges.items():
        v = int(name[len("kiwi::"):])
        p = cap.produced[v]
        if p is None:
            continue
        extra = r.peak - max(r.level_after, r.level_before)
        if extra > 0:
            workspaces[p.fx.name] = int(extra)
        if timed and cuda:
            times[p.fx.name] = statistics.median(e[v][0].elapsed_time(e[v][1]) * 1e-3 for e in events if v in e)
        elif timed:
            times[p.fx.name] = statistics.median(m.ranges[name].seconds for m in profiled if name in m.ranges)
    if not timed:
        return StepCosts(workspaces, {})
    total = sum(times.values())
    scale = statistics.median(plain) / total if total > 0 else 1.0
    return StepCosts(workspaces, {k: t * scale for k, t in times.items()})
