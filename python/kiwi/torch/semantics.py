"""What really lives in memory during a PyTorch training step, written into kiwi's training graph.

kiwi derives the backward pass from its own gradient rules (ir::BuildTrainingGraph). PyTorch's autograd
keeps what each operator saved for its backward until that backward has run; capture observed exactly
which tensors those are (tracing.Saved). This module adds to the training graph, as opaque nodes
(which every planner and the simulator treat like any tensor), what the rules alone miss:

  X(n) "<op>.saved"            buffers an op makes for its backward (max-pool indices, batch-norm
                               statistics), computed right after the op from the op's inputs;
  U(n) "<op>.autograd_unpack"  reads everything autograd saved for op n, right before n's backward
                               nodes: a dropped tensor is recomputed before the backward that needs it;
  K(n) "<op>.autograd_release" reads the same after n's backward nodes: nothing saved for n is freed
                               before n's backward finishes (PyTorch frees them together);
  W(n) "<op>.workspace", "<op>.grad_workspace": the op's temporaries (measured or estimated), resident
                               while the op runs ("<op>.workspace_end" closes a forward workspace);
  "framework.buffers"          the model's buffers (batch-norm running statistics...), resident all step;
  "optimizer.workspace"        the optimizer step's temporaries; "<p>.momentum" SGD momentum states.

Parameters, gradients, optimizer states and inputs are in the graph already; the optimizer node also
reads the inputs and buffers, which the caller holds for the whole step."""
import dataclasses
from typing import Dict, List, Optional, Sequence, Set, Tuple

from kiwi.torch.dtypes import node_bytes
from kiwi.torch.tracing import NodeRecord


@dataclasses.dataclass
class Group:
    """The autograd work of one FX node n: its kiwi backward nodes B(n) and what they need."""
    fx: str                      # FX node name ("" for the loss when it is computed by the caller)
    node: int                    # k(n), the kiwi node of n's value
    backward: List[int]          # B(n), in execution order
    need: List[int]              # forward kiwi tensors resident while B(n) runs (saved by autograd)
    unpack: Optional[int] = None
    release: Optional[int] = None
    workspace: Optional[int] = None


@dataclasses.dataclass
class Bundle:
    """The kiwi forward nodes one FX node produces when it runs (once, or again when recomputed)."""
    fx: str
    node: int                              # k(n)
    companions: List[int]                  # computed before k(n) and read by it (dropout masks)
    saved: Optional[int] = None            # X(n)
    workspace: Optional[int] = None        # W_f(n)
    workspace_end: Optional[int] = None    # E(n)
    own: Dict[int, List[int]] = dataclasses.field(default_factory=dict)  # kiwi id -> own-buffer indices
    fx_inputs: List[int] = dataclasses.field(default_factory=list)       # kiwi ids of n's tensor arguments


@dataclasses.dataclass
class Structure:
    bundles: Dict[str, Bundle]            # FX node -> its bundle (nodes with their own kiwi value)
    bundle_of: Dict[int, str]             # kiwi id (k(n), companion, X(n)) -> FX node
    groups: List[Group]                   # in backward order
    value_of: Dict[str, int]              # FX node -> kiwi id of its value (aliases share)
    inputs: List[int]                     # kiwi inputs resident all step (data, labels, buffers)
    optimizer: Optional[int]
    optimizer_workspace: Optional[int]
    forced_keep: Set[int]                 # tensors the caller's loss holds (never dropped)


@dataclasses.dataclass
class Workspace:
    """Temporaries in bytes, per FX node: forward op, backward (autograd) node; and the optimizer step."""
    forward: Dict[str, int] = dataclasses.field(default_factory=dict)
    backward: Dict[str, int] = dataclasses.field(default_factory=dict)
    optimizer: int = 0


class GraphEditor:
    """Appends nodes to a training graph dict (ids stay dense: new nodes go at the end)."""

    def __init__(self, graph: dict):
        self.graph = graph
        self.nodes: List[dict] = graph["nodes"]

    def add(self, name: str, kind: str, op: str, nbytes: int, inputs: Sequence[int], backward: bool,
            scope: str = "", dtype: str = "u8", shape: Optional[Sequence[int]] = None) -> int:
        node = {"id": len(self.nodes), "name": name, "kind": kind, "op": op, "dtype": dtype,
                "shape": list(shape) if shape is not None else [max(1, int(nbytes))],
                "inputs": sorted(set(int(i) for i in inputs)), "pass": "backward" if backward else "forward"}
        if scope:
            node["scope"] = scope
        self.nodes.append(node)
        return node["id"]


def _saved(records: Dict[str, NodeRecord], fx: str, value_of: Dict[str, int], always: Set[int]):
    """Kiwi tensors autograd saved for FX node fx, and its own buffers (one entry per storage)."""
    tensors, own, seen = set(), [], set()
    for s in records[fx].saved:
        if s.kind == "own":
            if s.storage not in seen:
                seen.add(s.storage)
                own.append(s)
        elif s.kind in ("value", "view") and s.source in value_of and value_of[s.source] not in always:
            tensors.add(value_of[s.source])
    return tensors, own


def _forward_reads(nodes: List[dict], members: List[int], always: Set[int]) -> Set[int]:
    return {i for b in members for i in nodes[b]["inputs"]
            if nodes[i].get("pass", "forward") == "forward" and i not in always}


def augment(graph: dict, records: Dict[str, NodeRecord], fx_order: Sequence[str], value_of: Dict[str, int],
            companions: Dict[str, List[int]], fx_args: Dict[str, List[int]], workspace: Workspace,
            framework_bytes: int, momentum: bool, loss: Optional[int], loss_outside: bool) -> Structure:
    """Adds the nodes listed in the module docstring to `graph` (a training graph dict, modified in
    place, with an explicit order) and returns where they are."""
    ed = GraphEditor(graph)
    nodes = ed.nodes
    n_orig = len(nodes)
    persistent = {v["id"] for v in nodes if v["kind"] in ("parameter", "optimizer_state")}
    inputs = [v["id"] for v in nodes if v["kind"] == "input"]
    always = persistent | set(inputs)
    members_of: Dict[int, List[int]] = {}
    for v in nodes:
        if v.get("pass") == "backward" and v.get("grad_of", -1) >= 0:
            members_of.setdefault(v["grad_of"], []).append(v["id"])
    bundles: Dict[str, Bundle] = {}
    for fx in fx_order:
        reads = _forward_reads(nodes, members_of.get(value_of[fx], []), always)
        bundles[fx] = _bundle(ed, fx, records, value_of, companions, fx_args, workspace, always, reads)
    bundle_of = {v: b.fx for b in bundles.values() for v in [b.node] + b.companions + [b.saved] if v is not None}
    fx_of_node = {b.node: b.fx for b in bundles.values()}
    groups = []
    for k, members in sorted(members_of.items(), key=lambda kv: min(kv[1])):
        fx = fx_of_node.get(k, "")
        groups.append(_group(ed, fx, k, members, bundles.get(fx), records, value_of, always, workspace))
    extra_inputs = []
    if framework_bytes > 0:
        extra_inputs.append(ed.add("framework.buffers", "input", "input", framework_bytes, [], False, "framework"))
    held = inputs + extra_inputs + ([loss] if loss is not None else [])  # the caller holds them all step
    opt, opt_ws = _optimizer(ed, persistent, held, workspace.optimizer, momentum, n_orig)
    graph["order"] = _order(graph, n_orig, bundles, groups, extra_inputs, opt, opt_ws)
    forced = set()
    for g in groups:
        if loss_outside and g.node == loss:
            forced.update(g.need)
    return Structure(bundles, bundle_of, groups, dict(value_of), inputs + extra_inputs, opt, opt_ws, forced)


def _bundle(ed: GraphEditor, fx: str, records, value_of, companions, fx_args, workspace: Workspace, always: Set[int],
            reads: Set[int]) -> Bundle:
    """n's kiwi nodes. Own buffers are matched to dropout masks, then to tensors kiwi's rules read but
    autograd did not save (cross-entropy's log-probabilities stand for its logits), the rest is X(n)."""
    k = value_of[fx]
    name, scope = ed.nodes[k]["name"], ed.nodes[k].get("scope", "")
    b = Bundle(fx, k, list(companions.get(fx, [])), fx_inputs=[i for i in fx_args.get(fx, []) if i not in always])
    saved, own = _saved(records, fx, value_of, always)
    for comp in b.companions:
        match = next((s for s in own if s.nbytes == node_bytes(ed.nodes[comp])), None)
        if match is not None:
            own.remove(match)
            b.own[comp] = [match.index]
    for t in sorted(reads - saved - set(b.companions)):
        match = next((s for s in own if s.nbytes == node_bytes(ed.nodes[t])), None)
        if match is not None:
            own.remove(match)
    ws = workspace.forward.get(fx, 0)
    if ws > 0:
        b.workspace = ed.add(name + ".workspace", "opaque", "workspace", ws, [], False, scope)
    own_bytes = sum(s.nbytes for s in own)
    if own_bytes > 0:
        reads_x = b.fx_inputs + ([b.workspace] if b.workspace is not None else [])
        b.saved = ed.add(name + ".saved", "opaque", "saved_buffers", own_bytes, reads_x, False, scope)
        b.own[b.saved] = [s.index for s in own]
    elif b.workspace is not None:
        b.workspace_end = ed.add(name + ".workspace_end", "opaque", "workspace_end", 1, [b.workspace, k], False, scope)
    return b


def _group(ed: GraphEditor, fx: str, k: int, members: List[int], bundle: Optional[Bundle], records, value_of,
           always: Set[int], workspace: Workspace) -> Group:
    need = _forward_reads(ed.nodes, members, always)
    if fx:
        need.update(_saved(records, fx, value_of, always)[0])
        if bundle is not None:
            need.update(bundle.own)
    g = Group(fx, k, list(members), sorted(need))
    name, scope = ed.nodes[k]["name"], ed.nodes[k].get("scope", "")
    if g.need:
        g.unpack = ed.add(name + ".autograd_unpack", "opaque", "autograd_unpack", 1, g.need, True, scope)
    ws = workspace.backward.get(fx, 0) if fx else 0
    if ws > 0:
        g.workspace = ed.add(name + ".grad_workspace", "opaque", "workspace", ws, [], True, scope)
    last = members[-1]
    early = [t for t in g.need if t not in ed.nodes[last]["inputs"]]
    if early or g.workspace is not None:
        reads = [last] + g.need + ([g.workspace] if g.workspace is not None else [])
        g.release = ed.add(name + ".autograd_release", "opaque", "autograd_release", 1, reads, True, scope)
    return g


def _optimizer(ed: GraphEditor, persistent: Set[int], held: List[int], ws_bytes: int, momentum: bool,
               n_orig: int) -> Tuple[Optional[int], Optional[int]]:
    nodes = ed.nodes
    opt = next((v["id"] for v in nodes[:n_orig] if v["kind"] == "optimizer"), None)
    extra = list(held)
    if momentum:
        for p in [v for v in nodes[:n_orig] if v["kind"] == "parameter"]:
            extra.append(ed.add(p["name"] + ".momentum", "optimizer_state", "momentum", 0, [], False, "optimizer",
                                "f32", p["shape"]))
    ws = ed.add("optimizer.workspace", "opaque", "workspace", ws_bytes, [], True, "optimizer") if ws_bytes > 0 else None
    if ws is not None:
        extra.append(ws)
    if opt is None:  # no optimizer: gradients still stay (in .grad) until the step ends
        grads = [v["id"] for v in nodes[:n_orig] if v.get("pass") == "backward" and
                 any(nodes[i]["kind"] == "parameter" for i in [v.get("grad_of", -1)] if i >= 0)]
        opt = ed.add("step_end", "opaque", "step_end", 1, grads + extra, True, "optimizer")
        return opt, ws
    nodes[opt]["inputs"] = nodes[opt]["inputs"] + [i for i in extra if i not in nodes[opt]["inputs"]]
    return opt, ws


def _order(graph: dict, n_orig: int, bundles: Dict[str, Bundle], groups: List[Group], extra_inputs: List[int],
           opt: Optional[int], opt_ws: Optional[int]) -> List[int]:
    nodes = graph["nodes"]
    before: Dict[int, List[int]] = {}
    after: Dict[int, List[int]] = {}
    for b in bundles.values():
        if b.workspace is not None:
            before.setdefault(b.node, []).append(b.workspace)
        after.setdefault(b.node, []).extend(v for v in (b.saved, b.workspace_end) if v is not None)
    for g in groups:
        before.setdefault(g.backward[0], []).extend(v for v in (g.unpack, g.workspace) if v is not None)
        if g.release is not None:
            after.setdefault(g.backward[-1], []).append(g.release)
    # Optimizer state exists before the step starts (PyTorch keeps it between steps): first in the order,
    # as forward-pass nodes, so that every planner counts it during the whole step.
    states = [v["id"] for v in nodes if v["kind"] == "optimizer_state"]
    for v in states:
        nodes[v]["pass"] = "forward"
    if opt is not None and opt_ws is not None:
        before.setdefault(opt, []).append(opt_ws)
    order = list(extra_inputs) + states
    first = set(states)
    for v in range(n_orig):
        if v in first:
            continue
        order.extend(before.get(v, []))
        order.append(v)
        order.extend(after.get(v, []))
    if opt is not None and opt >= n_orig:  # a step_end node we added
        order.extend(before.get(opt, []))
        order.append(opt)
    return order
