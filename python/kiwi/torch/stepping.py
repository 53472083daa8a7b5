"""The training step a plan runs, beyond which tensors it keeps: how many micro-batches the batch is
split into (gradient accumulation) and whether the optimizer updates large parameters in chunks.

With k micro-batches of the captured model (captured at the micro-batch size), the step is k forward and
backward passes and one optimizer step. Each pass is the captured graph with what PyTorch keeps around it:
  * every pass: the rest of the batch's inputs (the caller holds the whole batch; a micro-batch is a view)
    and the whole batch's dropout masks (drawn once, as the unsplit model draws them);
  * pass 1: the gradients it makes stay to the end of the step (PyTorch stores a first gradient as is);
  * passes 2..k: the accumulated gradients are resident from the start, and each new gradient lives only
    until autograd adds it to them in place (AccumulateGrad's `grad += new`, whose time is added), once
    its autograd node has made all its outputs;
  * the last pass ends with the optimizer step; the others do not.
Each pass is a graph the simulator replays (the same node ids, a few input nodes added), so the step's
peak is the largest of theirs and its time their sum. A chunked optimizer step holds two chunk-sized
temporaries instead of two copies of the largest parameter (Adam's `denom`)."""
import copy
import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import kiwi
from kiwi.torch.capture import LOSS_NODE
from kiwi.torch.chunked_optimizer import chunked_workspace
from kiwi.torch.dtypes import node_bytes
from kiwi.torch.schedule import droppable, memory_floor, realize
from kiwi.torch.semantics import GraphEditor

@dataclasses.dataclass(frozen=True)
class StepConfig:
    micro_batches: int = 1
    optimizer_chunk_bytes: int = 0     # 0: optimizer.step() as PyTorch implements it

    def describe(self) -> str:
        parts = [f"{self.micro_batches} micro-batches"] if self.micro_batches > 1 else []
        if self.optimizer_chunk_bytes:
            parts.append(f"optimizer in {kiwi.format_bytes(self.optimizer_chunk_bytes)} chunks")
        return ", ".join(parts) or "one pass"


def micro_batch_obstacle(captured) -> Optional[str]:
    """Why splitting the batch would change what the step computes (None when it would not): the loss
    must be a mean over samples kiwi can rescale, and every op must treat samples independently."""
    if not captured.loss_outside:
        return "the model computes its own loss, which kiwi cannot rescale per micro-batch (give labels=)"
    loss = captured.source.get("loss")
    if loss != "cross_entropy" and getattr(loss, "reduction", None) != "mean":
        return "the loss must be 'cross_entropy' or a loss module with reduction='mean'"
    batch = captured.batch
    nodes = captured.graph["nodes"]
    for fx, k in captured.structure.value_of.items():
        node = nodes[k]
        if node["op"] == "batchnorm" and captured.model.training:
            return f"'{fx}' is a batch norm in training mode: its statistics depend on the whole batch"
        if fx in captured.fx_order and fx != LOSS_NODE and (not node["shape"] or node["shape"][0] != batch):
            return f"'{fx}' has shape {node['shape']}: not one row per sample, so samples may interact"
    return None


def lean_optimizer_possible(captured) -> bool:
    """Chunking helps Adam (its step's temporaries); SGD updates in place already."""
    return captured.optimizer.kind == "adam"


def pass_graph(captured, config: StepConfig, role: str) -> dict:
    """The captured graph as pass `role` ("only", "first", "middle", "last") of a step (module doc)."""
    st = captured.structure
    k = config.micro_batches
    if role == "only" and not config.optimizer_chunk_bytes:
        return captured.graph
    graph = copy.deepcopy(captured.graph)
    ed = GraphEditor(graph)
    nodes = ed.nodes
    added: List[int] = []

    def resident(name: str, nbytes: int) -> int:
        added.append(ed.add(name, "input", "input", nbytes, [], False, "framework"))
        return added[-1]

    if k > 1:
        data = [v for v in nodes if v["kind"] == "input" and v.get("scope") != "framework"
                and v["shape"] and v["shape"][0] == captured.batch]
        resident("inputs.other_micro_batches", (k - 1) * sum(node_bytes(v) for v in data))
        masks = sum(node_bytes(nodes[c]) for cs in captured.companions.values() for c in cs)
        if masks:
            resident("dropout.masks_of_the_batch", k * masks)
    ws = st.optimizer_workspace
    if ws is not None and config.optimizer_chunk_bytes:
        nodes[ws]["shape"] = [max(1, chunked_workspace(captured.model, config.optimizer_chunk_bytes))]
    opt = nodes[st.optimizer]
    if role in ("first", "middle"):  # no optimizer step after this pass
        opt.update(kind="opaque", op="step_end", dtype="u8", shape=[1], flops=0.0, bytes_accessed=0)
        opt.pop("cost", None)
        if ws is not None:
            nodes[ws]["shape"] = [1]
    if role in ("middle", "last"):  # gradients accumulate into .grad: each new one is transient
        grads = [i for i in opt["inputs"] if nodes[i].get("pass") == "backward" and nodes[i]["kind"] != "opaque"]
        transient = set(grads)
        acc = resident("gradients.accumulated", sum(node_bytes(nodes[i]) for i in grads))
        opt["inputs"] = [i for i in opt["inputs"] if i not in transient] + [acc]
        # Autograd adds a node's gradients after the node has made all its outputs: each new gradient
        # lives until its group's last backward node has run (AddmmBackward's weight gradient while it
        # sums the bias gradient), which a marker node reading them right after says.
        after: Dict[int, int] = {}
        for g in st.groups:
            early = [i for i in g.backward[:-1] if i in transient]
            if early:
                marker = ed.add(nodes[g.node]["name"] + ".accumulate_grad", "opaque", "accumulate_grad", 1, early, True)
                nodes[marker]["cost"] = 0.0
                after[g.backward[-1]] = marker
        graph["order"] = [w for v in graph["order"] for w in ([v, after[v]] if v in after else [v])]
    graph["order"] = added + graph["order"]
    if role in ("middle", "last"):
        _price_accumulation(graph, grads, captured.cluster, captured.profile)
    return graph


def _price_accumulation(graph: dict, grads: List[int], cluster: Any, profile: Any = None) -> None:
    """Each gradient also costs its `grad += new` (read two, write one gradient-sized tensor): the cost
    model's price of those bytes, added to the gradient's own (measured or roofline) cost."""
    nodes = graph["nodes"]
    probe = copy.deepcopy(graph)
    for i in grads:
        probe["nodes"][i].pop("cost", None)
    before = kiwi.graph_summary(probe, cluster, profile)["node_costs"]
    for i in grads:
        probe["nodes"][i]["bytes_accessed"] = probe["nodes"][i].get("bytes_accessed", 0) + 3 * node_bytes(nodes[i])
    after = kiwi.graph_summary(probe, cluster, profile)["node_costs"]
    for i in grads:
        nodes[i]["cost"] = float(nodes[i].get("cost", before[i])) + max(0.0, after[i] - before[i])


def _roles(k: int) -> List[Tuple[str, int]]:
    if k == 1:
        return [("only", 1)]
    return [("first", 1)] + ([("middle", k - 2)] if k > 2 else []) + [("last", 1)]


class StepModel:
    """A step configuration on a captured micro-batch: its passes' graphs, and the simulator's account
    of a keep set on them (every pass runs the same applied module, so the same schedule)."""

    def __init__(self, captured, config: StepConfig = StepConfig()):
        self.captured = captured
        self.config = config
        self.passes = [(role, count, pass_graph(captured, config, role)) for role, count in _roles(config.micro_batches)]

    def predict(self, dropped: List[int]) -> Dict[str, Any]:
        """The applied module's schedule of `dropped` and, over the step's passes, the simulated peak
        (the largest pass's) and time (their sum); `sims` per pass. `schedule` is the last pass's."""
        cap = self.captured
        keep = {t: t not in set(dropped) for t in droppable(cap.graph, cap.structure)}
        peak, seconds, sims, steps = 0, 0.0, [], []
        for role, count, graph in self.passes:
            steps = realize(graph, cap.structure, keep)
            sim = kiwi.simulate(graph, kiwi.make_plan(steps), cap.cluster, cap.profile)
            peak = max(peak, sim["peak_memory_bytes"])
            seconds += count * sim["iteration_seconds"]
            sims.append((role, graph, steps, sim))
        return {"schedule": steps, "peak": peak, "seconds": seconds, "sim": sims[-1][3], "sims": sims}

    def floor(self, base: Optional[Dict[str, Any]] = None) -> Tuple[int, str]:
        """No plan of this configuration peaks below the bytes returned (schedule.memory_floor on each pass).
        `base`: this model's predict([]) when the caller has it already."""
        base = base if base is not None else self.predict([])
        best, at = 0, -1
        for _, graph, steps, sim in base["sims"]:
            low, node = memory_floor(graph, self.captured.structure, steps, sim["timeline"])
            if low > best:
                best, at = low, node
        return best, self.captured.graph["nodes"][at]["name"] if at >= 0 else ""

    def search_graph(self) -> dict:
        """The pass the solvers plan on: the last (accumulated gradients resident, and the optimizer)."""
        return self.passes[-1][2]
