"""kiwi.torch.capture: a PyTorch model -> kiwi's training graph, with what really lives in memory."""
import copy
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx
import torch.nn.functional as F

import kiwi
from kiwi.torch import costs as cost_mod
from kiwi.torch.errors import CaptureError, UnsupportedOpError
from kiwi.torch.execution import NodeRunner
from kiwi.torch.ops import ForwardBuilder, map_node
from kiwi.torch.semantics import Structure, Workspace, augment
from kiwi.torch.tracing import NodeRecord, record_forward, symbolic_trace

LOSS_NODE = "kiwi_loss"
LABELS = "kiwi_labels"


@dataclasses.dataclass
class OptimizerSpec:
    """What kiwi needs of the optimizer: its states and its step's temporaries."""
    kind: str = "adam"          # "adam" (Adam/AdamW: two fp32 states), "fused_adam" (fused=True), "sgd", "none"
    momentum: bool = False      # SGD with momentum: one state per parameter
    foreach: bool = False       # multi-tensor implementation (temporaries the size of all parameters)

    @staticmethod
    def of(optimizer: Union[str, torch.optim.Optimizer, None]) -> "OptimizerSpec":
        if optimizer is None or optimizer == "none":
            return OptimizerSpec("none")
        if isinstance(optimizer, str):
            name = optimizer.lower()
            if name in ("adam", "adamw"):
                return OptimizerSpec("adam")
            if name == "fused_adam":
                return OptimizerSpec("fused_adam")
            if name in ("sgd", "sgd-momentum"):
                return OptimizerSpec("sgd", momentum=name == "sgd-momentum")
            raise CaptureError(f"optimizer: '{optimizer}' is not one of adam, adamw, fused_adam, sgd, sgd-momentum, "
                               "none")
        group = optimizer.param_groups[0] if optimizer.param_groups else {}
        foreach = bool(group.get("foreach") or group.get("fused"))
        if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
            # The fused kernel steps each parameter in one pass, with no parameter-sized temporaries.
            return OptimizerSpec("fused_adam") if group.get("fused") else OptimizerSpec("adam", foreach=foreach)
        if isinstance(optimizer, torch.optim.SGD):
            return OptimizerSpec("sgd", momentum=group.get("momentum", 0) != 0, foreach=foreach)
        raise CaptureError(f"optimizer: {type(optimizer).__name__} is not modelled (Adam, AdamW, SGD)")


@dataclasses.dataclass
class Captured:
    """A captured model: its FX graph, kiwi's training graph of it, and how the two correspond."""
    model: torch.nn.Module
    gm: torch.fx.GraphModule
    runner: NodeRunner
    records: Dict[str, NodeRecord]
    model_nodes: List[torch.fx.Node]      # the FX nodes the applied module runs (the model, not the loss)
    model_output: str                     # FX node whose value the model returns
    loss_outside: bool                    # the loss is computed by the caller (capture appended it)
    forward_graph: dict                   # kiwi forward graph
    training_graph: dict                  # kiwi's BuildTrainingGraph result, before the PyTorch semantics
    graph: dict                           # the training graph the planners see
    structure: Structure
    optimizer: OptimizerSpec
    cluster: Any                          # the device kiwi's cost model prices ops on
    costs: str                            # "analytic" or "measured"
    workspace: Workspace
    framework_bytes: int
    fx_args: Dict[str, List[int]]
    fx_order: List[str]
    companions: Dict[str, List[int]]
    source: Dict[str, Any] = dataclasses.field(default_factory=dict)   # capture()'s arguments
    profile: Any = None                   # a device profile (`kiwi profile`): path or dict, or None
    _smaller: Dict[int, "Captured"] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.graph.get("name", "")

    @property
    def batch(self) -> int:
        """The batch size of the example inputs (their first dimension)."""
        return int(self.source["inputs"][0].shape[0])

    def at_batch(self, batch: int) -> "Captured":
        """The same model captured on the first `batch` samples of the example inputs (a micro-batch),
        with the same loss, optimizer and costs; made once and kept."""
        if batch == self.batch:
            return self
        if batch not in self._smaller:
            src = self.source
            labels = src["labels"][:batch] if src["labels"] is not None else None
            self._smaller[batch] = capture(self.model, tuple(t[:batch] for t in src["inputs"]), labels=labels,
                                           loss=src["loss"], optimizer=src["optimizer"], costs=self.costs,
                                           cluster=self.cluster, name=self.name, profile=self.profile)
        return self._smaller[batch]

    def summary(self) -> Dict[str, Any]:
        return kiwi.graph_summary(self.graph, self.cluster, self.profile)

    def rebuild(self, workspace: Workspace, node_costs: Optional[Dict[int, float]] = None) -> None:
        """Re-derives `graph` with other workspaces (and measured costs per kiwi node id)."""
        graph = copy.deepcopy(self.training_graph)
        if node_costs:
            for v, c in node_costs.items():
                graph["nodes"][v]["cost"] = float(c)
        loss = self.structure.value_of.get(LOSS_NODE if self.loss_outside else self.model_output)
        st = augment(graph, self.records, self.fx_order, self.structure.value_of, self.companions, self.fx_args,
                     workspace, self.framework_bytes, self.optimizer.momentum, loss, self.loss_outside)
        self.graph = kiwi.parse_graph(graph, "captured graph")
        self.structure = st
        self.workspace = workspace


def _append_loss(gm: torch.fx.GraphModule, loss: Any) -> str:
    """Appends labels -> loss(model output, labels) to the FX graph; returns the model output's name."""
    g = gm.graph
    out = next(n for n in g.nodes if n.op == "output")
    model_out = out.args[0]
    if not isinstance(model_out, torch.fx.Node):
        raise CaptureError(f"{type(gm).__name__}: the model must return one tensor (the logits) when labels "
                           f"are given; it returns {type(model_out).__name__}")
    last_placeholder = [n for n in g.nodes if n.op == "placeholder"][-1]
    with g.inserting_after(last_placeholder):
        labels = g.placeholder(LABELS)
    with g.inserting_before(out):
        if isinstance(loss, torch.nn.Module):
            gm.add_submodule(LOSS_NODE, loss)
            node = g.call_module(LOSS_NODE, (model_out, labels))
        else:
            node = g.call_function(loss, (model_out, labels))
    node.name = LOSS_NODE
    out.args = (node,)
    gm.recompile()
    return model_out.name


def capture(model: torch.nn.Module, example_inputs: Union[torch.Tensor, Sequence[Any]],
            labels: Optional[torch.Tensor] = None,
            loss: Union[str, Callable[..., Any], torch.nn.Module] = "cross_entropy",
            optimizer: Union[str, torch.optim.Optimizer, None] = "adam", costs: str = "analytic",
            cluster: Any = None, name: Optional[str] = None, profile: Any = None) -> Captured:
    """Traces `model` with torch.fx, runs it once on `example_inputs` (shapes, dtypes, and which tensors
    autograd saves), maps every op to kiwi's IR, derives the training graph (ir::BuildTrainingGraph) and
    adds PyTorch's memory semantics (semantics.py). With `labels`, the step's loss is loss(model(x),
    labels) computed by the caller (cross entropy by default); without, the model returns its loss.
    costs: "analytic" (roofline on `cluster`, default the local CPU) or "measured" (one profiled
    training step: per-op times and temporaries). profile: a device profile written by `kiwi profile`
    (path or dict): the analytic costs then use its measured GEMM, convolution, bandwidth and per-op
    times instead of the roofline's. Errors name the construct (TraceError,
    UnsupportedOpError, CaptureError)."""
    inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    if costs not in ("analytic", "measured"):
        raise CaptureError(f"costs: must be 'analytic' or 'measured', got '{costs}'")
    spec = OptimizerSpec.of(optimizer)
    gm = symbolic_trace(model)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise CaptureError(f"{type(model).__name__}: the model takes {len(placeholders)} inputs "
                           f"({', '.join(placeholders)}), {len(inputs)} example inputs were given")
    loss_outside = labels is not None
    if loss_outside:
        loss_fn = F.cross_entropy if loss == "cross_entropy" else loss
        model_output = _append_loss(gm, loss_fn)
        inputs = inputs + (labels,)
    records, out = record_forward_checked(gm, inputs)
    if not isinstance(out, torch.Tensor) or out.dim() != 0:
        raise CaptureError(f"{type(model).__name__}: the step's loss must be a scalar tensor; give labels= "
                           f"(and loss=) or make the model return its loss")
    if not loss_outside:
        model_output = next(n for n in gm.graph.nodes if n.op == "output").args[0].name
    builder, fx_order, fx_args = _map_forward(gm, records)
    forward, training = _training_graph(builder, spec, name or type(model).__name__, type(model).__name__)
    runner = NodeRunner(gm)
    skip = {LABELS, LOSS_NODE, "output"} if loss_outside else {"output"}
    model_nodes = [n for n in gm.graph.nodes if n.name not in skip and n.op != "output"]
    framework = cost_mod.framework_bytes(model, spec)
    captured = Captured(model, gm, runner, records, model_nodes, model_output, loss_outside, forward, training,
                        {}, Structure({}, {}, [], dict(builder.kiwi_of), [], None, None, set()), spec,
                        cluster if cluster is not None else cost_mod.local_cluster(_device(model)), costs,
                        Workspace(), framework,
                        fx_args, fx_order, builder.companions,
                        {"inputs": tuple(t for t in inputs[:len(inputs) - (1 if loss_outside else 0)]),
                         "labels": labels, "loss": loss, "optimizer": optimizer}, profile=profile)
    captured.rebuild(cost_mod.analytic_workspace(captured))
    if costs == "measured":
        cost_mod.calibrate(captured, inputs[:len(inputs) - (1 if loss_outside else 0)],
                           labels if loss_outside else None)
    return captured


def _map_forward(gm: torch.fx.GraphModule, records: Dict[str, NodeRecord]):
    """Maps every FX node to kiwi forward nodes (ops.py); returns the builder, the FX nodes that made a
    kiwi value of their own (in order) and the kiwi ids each of them reads."""
    builder = ForwardBuilder(gm, records)
    fx_order: List[str] = []
    fx_args: Dict[str, List[int]] = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            break
        kid = map_node(node, builder)
        if kid is None:
            continue
        builder.kiwi_of[node.name] = kid
        if node.op in ("call_module", "call_function", "call_method") and records[node.name].alias_of is None \
                and kid == len(builder.nodes) - 1:
            fx_order.append(node.name)
            fx_args[node.name] = sorted({builder.kiwi_of[a.name] for a in node.all_input_nodes
                                         if a.name in builder.kiwi_of})
    return builder, fx_order, fx_args


def _training_graph(builder: ForwardBuilder, spec: OptimizerSpec, name: str, model: str):
    """The forward graph verified and annotated, and kiwi's training graph of it."""
    forward = {"kiwi_graph_version": 1, "name": name, "nodes": builder.nodes}
    try:
        forward = kiwi.parse_graph(forward, "captured forward graph", annotate=True)
        return forward, kiwi.build_training_graph(forward, spec.kind)
    except kiwi.BadInputError as e:
        raise CaptureError(f"{model}: kiwi rejected the captured graph: {e}") from None


def _device(model: torch.nn.Module) -> str:
    p = next(iter(model.parameters()), None)
    return "cpu" if p is None or p.device.type != "cuda" else str(p.device)


def record_forward_checked(gm: torch.fx.GraphModule, inputs: Tuple[Any, ...]):
    try:
        return record_forward(gm, inputs)
    except (CaptureError, UnsupportedOpError):
        raise
    except Exception as e:  # the model failed on its example inputs
        raise CaptureError(f"{type(gm).__name__}: running the traced model on the example inputs failed: "
                           f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}") from None
