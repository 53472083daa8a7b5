"""Tracing: torch.fx symbolic tracing with errors that name the construct, then one recorded forward
pass on the example inputs (shape propagation, as torch.fx's ShapeProp, plus which tensors autograd
saves while each node runs, found with saved-tensor hooks)."""
import dataclasses
import os
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from kiwi.torch.errors import TraceError
from kiwi.torch.execution import NodeRunner, load_args, storage_nbytes, storage_ptr, tensor_key


@dataclasses.dataclass
class TensorMeta:
    shape: Tuple[int, ...]
    dtype: torch.dtype
    requires_grad: bool

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


@dataclasses.dataclass
class Saved:
    """One tensor autograd saved while a node ran. kind: "param" (a parameter or buffer), "input"
    (a graph input), "value" (exactly the output of FX node `source`), "view" (a view of it), "own"
    (a buffer the node made for its backward, e.g. max-pool indices)."""
    index: int
    kind: str
    source: Optional[str]
    nbytes: int
    dtype: torch.dtype
    shape: Tuple[int, ...]
    storage: int = 0  # storage address: two entries sharing a storage hold its bytes once


@dataclasses.dataclass
class NodeRecord:
    name: str
    op: str
    target: Any
    meta: Optional[TensorMeta]          # None: not a tensor
    value: Any = None                   # python value of non-tensor nodes (sizes, ints)
    alias_of: Optional[str] = None      # the output is this node's tensor object itself
    saved: List[Saved] = dataclasses.field(default_factory=list)


def _user_frame(error: BaseException) -> str:
    """file:line: code of the innermost frame outside torch and kiwi: the model line at fault."""
    torch_dir = os.path.dirname(torch.__file__)
    kiwi_dir = os.path.dirname(os.path.dirname(__file__))
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if not frame.filename.startswith((torch_dir, kiwi_dir)) and "<" not in frame.filename:
            return f"{os.path.basename(frame.filename)}:{frame.lineno}: {(frame.line or '').strip()}"
    return ""


def symbolic_trace(model: torch.nn.Module) -> torch.fx.GraphModule:
    """torch.fx.symbolic_trace with a one-line TraceError naming the model line that failed."""
    try:
        return torch.fx.symbolic_trace(model)
    except Exception as e:  # torch.fx raises TraceError, TypeError, RuntimeError... per construct
        where = _user_frame(e)
        what = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceError(f"torch.fx cannot trace {type(model).__name__}"
                         f"{' at ' + where if where else ''}: {what} (kiwi needs a graph without "
                         f"data-dependent control flow; wrap the construct in a leaf module or rewrite it)") from None


class _Identifier:
    """Maps tensors to the FX values, parameters and inputs they are (or view)."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.param_storages = {storage_ptr(t) for t in list(gm.parameters()) + list(gm.buffers())}
        self.exact: Dict[Any, str] = {}
        self.owner: Dict[int, str] = {}
        self.inputs: set = set()

    def add_value(self, name: str, t: torch.Tensor, is_input: bool) -> None:
        self.exact[tensor_key(t)] = name
        self.owner.setdefault(storage_ptr(t), name)
        if is_input:
            self.inputs.add(name)

    def classify(self, index: int, t: torch.Tensor) -> Saved:
        ptr, nbytes = storage_ptr(t), storage_nbytes(t)
        shape, dtype = tuple(t.shape), t.dtype
        if ptr in self.param_storages:
            return Saved(index, "param", None, nbytes, dtype, shape, ptr)
        source = self.exact.get(tensor_key(t))
        kind = "value"
        if source is None:
            source, kind = self.owner.get(ptr), "view"
        if source is None:
            return Saved(index, "own", None, nbytes, dtype, shape, ptr)
        return Saved(index, "input" if source in self.inputs else kind, source, nbytes, dtype, shape, ptr)


def record_forward(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Tuple[Dict[str, NodeRecord], Any]:
    """Runs gm once (grad enabled, out of place) and records every node: its output's metadata, whether
    it aliases an input, and what autograd saved while it ran. Saved tensors are not kept (the pack hook
    drops them), so this costs a forward pass without activations. Returns the records and the output."""
    runner = NodeRunner(gm)
    ident = _Identifier(gm)
    env: Dict[str, Any] = {}
    records: Dict[str, NodeRecord] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise TraceError(f"{type(gm).__name__}: the model takes {len(placeholders)} inputs "
                         f"({', '.join(p.name for p in placeholders)}), {len(inputs)} example inputs were given")
    packed: List[torch.Tensor] = []

    def pack(t: torch.Tensor) -> int:
        packed.append(t)
        return len(packed) - 1  # the marker autograd stores instead of the tensor

    def unpack(_: Any) -> None:
        raise RuntimeError("kiwi capture: this forward pass was recorded for planning, not for backward")

    output = None
    feed = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "output":
            output = torch.fx.node.map_arg(node.args[0], lambda n: env[n.name])
            break
        packed.clear()
        if node.op == "placeholder":
            value = next(feed)
        else:
            args, kwargs = load_args(node, env)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                value = runner.run(node, args, kwargs)
        rec = NodeRecord(node.name, node.op, node.target, None)
        if isinstance(value, torch.Tensor):
            rec.meta = TensorMeta(tuple(value.shape), value.dtype, value.requires_grad)
            rec.alias_of = next((a.name for a in node.all_input_nodes if env.get(a.name) is value), None)
            ident.add_value(node.name, value, node.op == "placeholder")
        else:
            rec.value = value
        rec.saved = [ident.classify(i, t) for i, t in enumerate(packed)]
        packed.clear()
        records[node.name] = rec
        env[node.name] = value
    return records, output
