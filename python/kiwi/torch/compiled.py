"""kiwi's rematerialization inside torch.compile: a partitioner for Inductor's joint graph.

torch.compile's AOTAutograd traces the training step as one functional joint graph (forward +
backward) and a partitioner splits it into the forward and backward graphs Inductor compiles: which
forward values are saved for the backward, and which the backward recomputes. By default that is the
min-cut partitioner, with `torch._functorch.config.activation_memory_budget` choosing what to
recompute by a knapsack. `KiwiPartitioner` (Inductor's `custom_partitioner_fn`) decides it with kiwi:

1. the joint graph becomes kiwi's graph of storages (kiwi.torch.joint_capture's builder: the graph is
   functional, so every op makes new storages), priced by kiwi's cost model for this device;
2. kiwi's rematerialization solver plans it at the budget (a fraction of its checkpoint-all peak, or
   bytes);
3. a compiled graph can only save a forward value or recompute it in the backward, so the plan is
   read as such: a forward op the plan computes more than once is recomputed in the backward
   (`CheckpointPolicy.MUST_RECOMPUTE`, as selective activation checkpointing tags it), and PyTorch's
   min-cut partitioner splits the graph with those tags. The other ops are left to it: it saves what
   the backward reads and recomputes what costs nothing once fused (an elementwise op whose output is
   larger than its inputs), which is why it is not told to save them;
4. that reading is not the plan itself: the compiled backward recomputes each tagged value once,
   just before its first reader, and keeps it to its last, where kiwi's schedule may recompute a
   value several times and keep it briefly; and the min-cut partitioner recomputes, fused and for
   free, the elementwise values kiwi's unfused graph counts as saved (on a GPU in bf16 that graph
   counts 2-9x what the partition saves). So each candidate recompute set (kiwi's plans at the
   budget, below it and, where none of those fits, above it) is priced by its partition
   (`partition_price`: PyTorch's min-cut on a copy of the tagged joint graph, then kiwi's storage
   model of the forward and backward graphs it returns, the backward freeing each saved tensor after
   its last reader and a pointwise value read only by pointwise ops never allocated, as Inductor
   fuses it into its readers), and the fastest whose peak fits is taken. `fraction` is of that price
   with nothing tagged: the compiled step as the min-cut partitioner alone makes it.

Inductor's other fusions and its scheduling are not modelled, so the price is a model of the compiled
step's memory: what a partition saves is exact, its peak within -14% to +8% of the measured one on
GPT-2, Llama and an MLP on a CPU (docs/pytorch.md)."""
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

import kiwi
from kiwi.torch.errors import PlanError
from kiwi.torch.joint_capture import StorageGraphBuilder
from kiwi.torch.joint_plan import check_fraction
from kiwi.torch.joint_run import recomputed_nodes


@dataclasses.dataclass
class PartitionReport:
    """What KiwiPartitioner decided for one joint graph."""
    nodes: int                  # kiwi nodes of the joint graph
    budget_bytes: int           # the budget kiwi planned for (a fraction of baseline_peak_bytes, or bytes)
    baseline_peak_bytes: int    # nothing tagged: the min-cut partition alone, priced (partition_price)
    planned_peak_bytes: int     # the partition of the recompute set, priced (partition_price)
    reached: bool               # False: the budget was below what kiwi can reach; planned at its smallest
    recomputed: List[str]       # forward ops tagged MUST_RECOMPUTE
    forward_ops: int            # forward ops of the joint graph
    planned_seconds: float = 0.0    # that partition's forward and backward in kiwi's cost model
    candidates: int = 0             # recompute sets priced (kiwi's plans at budgets around this one)
    planned_saved_bytes: int = 0    # what that priced partition saves for the backward
    saved_bytes: int = 0            # what the partition Inductor compiles saves (the same, unless it differs)


def _custom_partitioner_base():
    try:
        from torch._inductor.custom_graph_pass import CustomPartitionerFn
        return CustomPartitionerFn
    except ImportError:   # a PyTorch without Inductor's partitioner hook
        return object


class KiwiPartitioner(_custom_partitioner_base()):
    """Inductor's `custom_partitioner_fn` planned by kiwi: `fraction` of kiwi's checkpoint-all peak of
    the joint graph, or `budget` (bytes, or "2GiB"); `solver` any of kiwi.remat_solvers(). Each joint graph it
    partitions is reported in `reports`."""

    def __init__(self, fraction: Optional[float] = None, budget: Union[int, str, None] = None, solver: str = "heuristic",
                 time_limit: float = 30.0, cluster: Any = None):
        if (fraction is None) == (budget is None):
            raise PlanError("KiwiPartitioner: give exactly one of fraction= and budget=")
        if fraction is not None:
            check_fraction(fraction)
        self.budget = kiwi.parse_bytes(budget, "budget") if budget is not None else None
        self.fraction, self.solver, self.time_limit = fraction, solver, time_limit
        self.cluster = cluster
        self.reports: List[PartitionReport] = []

    def uuid(self) -> Any:
        """Inductor's cache key: this file and the plan's parameters."""
        from torch._inductor.custom_graph_pass import get_hash_for_files
        return (get_hash_for_files((__file__,)), self.fraction, self.budget, self.solver)

    def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
                 ) -> Tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
        from torch.utils.checkpoint import CheckpointPolicy
        report, recompute = self.plan(gm, kwargs)
        for n in recompute:
            n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        self.reports.append(report)
        forward, backward = _min_cut(gm, joint_inputs, kwargs)
        report.saved_bytes = saved_bytes(forward, kwargs.get("num_fwd_outputs", 0))
        return forward, backward

    def plan(self, gm: torch.fx.GraphModule, partition_kwargs: Optional[Dict[str, Any]] = None
             ) -> Tuple[PartitionReport, List[torch.fx.Node]]:
        """kiwi's plan of the joint graph, read as the forward ops to recompute in the backward. kiwi's
        plans at the budget and then at lower budgets (a tenth of the untagged partition's price at a
        time, five times at most, and the smallest budget kiwi reaches) are priced by their partitions
        (`partition_kwargs`: the min-cut partitioner's, as Inductor passes them), until one fits the
        budget; where none does, kiwi's plans at higher budgets too. The fastest that fits is taken,
        else the one that needs least."""
        from kiwi.torch.costs import local_cluster
        graph, produced, backward = joint_storage_graph(gm)
        cluster = self.cluster or local_cluster(_device_of(gm))
        forward_ops = list(dict.fromkeys(fx for fx in produced if fx is not None and fx not in backward))

        def priced(recompute: List[torch.fx.Node]) -> Tuple[int, float, int]:
            return partition_price(gm, {fx.name for fx in recompute}, partition_kwargs or {}, cluster)

        base, base_seconds, base_saved = priced([])
        budget = int(base * self.fraction) if self.fraction is not None else int(self.budget)
        # kiwi's plans are asked for on its unfused joint graph, whose checkpoint-all peak is larger
        joint = int(kiwi.simulate(graph, kiwi.make_plan([]), cluster)["peak_memory_bytes"])
        scale = joint / max(base, 1)
        candidates: Dict[Tuple[str, ...], Tuple[int, float, int, List[torch.fx.Node]]] = {
            (): (base, base_seconds, base_saved, [])}
        step = max(base // 10, 1)
        below = [budget - k * step for k in range(6) if budget - k * step > 0]   # plans for less first
        above = [budget + k * step for k in range(1, 10) if budget + k * step < base]   # when none of those fits
        smallest, tried = 0, set()

        def add(asked: int) -> bool:
            """kiwi's plan at `asked` bytes of its joint graph as a candidate; whether its partition fits."""
            nonlocal smallest
            r = kiwi.solve_remat(graph, asked, self.solver, cluster, self.time_limit, check=False)
            tried.add(asked)
            if not r.feasible:   # below what kiwi reaches: its plan at the smallest budget it knows
                smallest = max(smallest, r.smallest_known_budget_bytes)
                return smallest > 0 and smallest not in tried and add(smallest)
            again = {produced[v] for v in recomputed_nodes(r.schedule) if produced[v] is not None}
            recompute = [fx for fx in forward_ops if fx in again]
            key = tuple(fx.name for fx in recompute)
            if key not in candidates:
                candidates[key] = (*priced(recompute), recompute)
            return candidates[key][0] <= budget

        for target in below + above:
            asked = int(target * scale)
            if asked not in tried and asked >= smallest and add(asked) and target <= budget:
                break   # the most relaxed plan whose partition fits: plans for less recompute more
        fits = [c for c in candidates.values() if c[0] <= budget]
        peak, seconds, saved, recompute = min(fits, key=lambda c: (c[1], c[0])) if fits else \
            min(candidates.values(), key=lambda c: (c[0], c[1]))
        return (PartitionReport(len(graph["nodes"]), budget, base, peak, bool(fits), [fx.name for fx in recompute],
                                len(forward_ops), seconds, len(candidates) - 1, saved), recompute)


def partition_price(gm: torch.fx.GraphModule, recompute: set, partition_kwargs: Dict[str, Any],
                    cluster: Any) -> Tuple[int, float, int]:
    """The compiled step of the joint graph `gm` with the forward ops named in `recompute` tagged
    MUST_RECOMPUTE, as kiwi's storage model prices it: (peak bytes, seconds, bytes saved for the
    backward). PyTorch's min-cut partitioner splits a copy of `gm` (it edits the graph it is given);
    the forward graph runs with the step's inputs resident; then the backward, whose saved tensors are
    freed after their last reader, as Inductor's backward frees its inputs; in both, the values
    Inductor fuses into their readers (_fused) take no memory; the peak is the larger of the two
    above what is resident anyway (the parameters and the batch)."""
    from torch.utils.checkpoint import CheckpointPolicy
    graph = torch.fx.Graph()
    copies: Dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, copies))
    for old, new in copies.items():
        new.meta = dict(old.meta)
        if old.name in recompute:
            new.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        else:
            new.meta.pop("recompute", None)
    forward, backward = _min_cut(torch.fx.GraphModule(gm, graph), None, partition_kwargs)
    # AOTAutograd names the step's inputs primals_*: resident in both graphs, freed by neither.
    fw_graph, fw_resident = _partitioned_storage_graph(forward, lambda n: True)
    bw_graph, bw_resident = _partitioned_storage_graph(backward, lambda n: n.name.startswith("primals"))
    fw = kiwi.simulate(fw_graph, kiwi.make_plan([]), cluster)
    bw = kiwi.simulate(bw_graph, kiwi.make_plan([]), cluster)
    peak = fw_resident + max(int(fw["peak_memory_bytes"]) - fw_resident, int(bw["peak_memory_bytes"]) - bw_resident)
    saved = saved_bytes(forward, partition_kwargs.get("num_fwd_outputs", 0))
    return peak, float(fw["iteration_seconds"]) + float(bw["iteration_seconds"]), saved


def _min_cut(gm: torch.fx.GraphModule, joint_inputs: Any, partition_kwargs: Dict[str, Any]
             ) -> Tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """PyTorch's min-cut partition of a tagged joint graph (which it edits): kiwi's tags decide, so the
    knapsack of the activation memory budget is held at 1 and does not override them."""
    from torch._functorch import config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    with functorch_config.patch(activation_memory_budget=1.0):
        return min_cut_rematerialization_partition(gm, joint_inputs, **partition_kwargs)


def _partitioned_storage_graph(gm: torch.fx.GraphModule, resident: Callable[[torch.fx.Node], bool]
                               ) -> Tuple[Dict[str, Any], int]:
    """A partitioned forward or backward graph as kiwi's graph of storages, and the bytes of its
    `resident` inputs; its other inputs are freed after their last reader, its outputs held, and its
    fused values (_fused) one byte each."""
    b = StorageGraphBuilder(gm, "compiled_partition", {}, {})
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            if isinstance(n.meta.get("val"), torch.Tensor):
                keep = resident(n)
                b.placeholder(n, "input" if keep else "opaque", "input" if keep else "saved", persistent=keep)
        elif n.op == "get_attr":
            b.constant(n)
        elif n.op == "call_function":
            b.op(n, False)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = {a for a in pytree.tree_leaves(output.args) if isinstance(a, torch.fx.Node)}
    held = {b.storage_of[a] for a in outputs if b.storage_of.get(a) is not None}
    held |= {s for s, st in enumerate(b.storages) if st.persistent}
    graph, _ = b.finish(held, "a partitioned graph of torch.compile")
    for v, p in enumerate(b.produced):
        if p is not None and p.what == "output" and _fused(p.fx, outputs):
            graph["nodes"][v].update(dtype="u8", shape=[1])
    return graph, sum(st.nbytes for st in b.storages if st.persistent)


def _fused(n: torch.fx.Node, outputs: set) -> bool:
    """Whether Inductor computes `n` inside the kernels of its readers and never allocates it: a
    pointwise op that the graph does not return, all of whose readers are pointwise ops (or views
    of it that only pointwise ops read)."""
    if n in outputs or torch.Tag.pointwise not in getattr(n.target, "tags", ()):
        return False
    readers, seen = list(n.users), set()
    while readers:
        r = readers.pop()
        if r in seen:
            continue
        seen.add(r)
        if r.op != "call_function":
            return False
        if torch.Tag.pointwise in getattr(r.target, "tags", ()):
            continue
        if _is_view(r) and r not in outputs:   # a view the graph returns makes `n` a returned tensor
            readers.extend(r.users)
            continue
        return False
    return bool(seen)


def _is_view(n: torch.fx.Node) -> bool:
    schema = getattr(n.target, "_schema", None)
    return schema is not None and bool(schema.returns) and schema.returns[0].alias_info is not None and \
        not schema.returns[0].alias_info.is_write


def saved_bytes(forward: torch.fx.GraphModule, num_fwd_outputs: int) -> int:
    """Bytes of the tensors a partitioned forward graph saves for the backward: its outputs after the
    first `num_fwd_outputs` (the step's own) that it computes (not its inputs: parameters and the
    batch are resident anyway), one count per storage."""
    output = next(n for n in forward.graph.nodes if n.op == "output")
    outs = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    inputs = {StorageWeakRef(n.meta["val"].untyped_storage()) for n in forward.graph.nodes
              if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)}
    seen, total = set(inputs), 0
    for a in outs[num_fwd_outputs:]:
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            key = StorageWeakRef(val.untyped_storage())
            if key not in seen:
                seen.add(key)
                total += _hinted(val.untyped_storage().nbytes())
    return total


def _hinted(size: Any) -> int:
    """A size as a number: a symbolic one (dynamic shapes) by its example value, which adds no guard."""
    if isinstance(size, torch.SymInt):
        hint = getattr(size.node, "hint", None)
        return int(hint) if hint is not None else 0
    return int(size)


def _device_of(gm: torch.fx.GraphModule) -> str:
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.device.type
    return "cpu"


def joint_storage_graph(gm: torch.fx.GraphModule) -> Tuple[Dict[str, Any], List[Optional[torch.fx.Node]], set]:
    """AOTAutograd's joint graph as kiwi's graph of storages: every placeholder (parameters, inputs,
    the loss's tangent) resident, every op's new storages nodes, the graph's outputs held to the end.
    Returns the graph, the FX op of each kiwi node (None: placeholder, step.outputs) and the set of
    backward FX nodes (those that depend on a tangent, or that AOTAutograd tagged as backward)."""
    b = StorageGraphBuilder(gm, "compiled_joint", {}, {})
    backward: set = set()
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            if "tangents" in n.name:
                backward.add(n)
            b.placeholder(n, "input", "input")
        elif n.op == "get_attr":
            b.constant(n)
        elif n.op == "call_function":
            args = [a for a in pytree.tree_leaves((n.args, n.kwargs)) if isinstance(a, torch.fx.Node)]
            if n.meta.get("partitioner_tag") == "is_backward" or any(a in backward for a in args):
                backward.add(n)
            b.op(n, n in backward)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    held = {b.storage_of[a] for a in pytree.tree_leaves(output.args) if isinstance(a, torch.fx.Node)
            and a in b.storage_of}
    held |= {b.storage_of[n] for n in gm.graph.nodes if n.op == "placeholder" and n in b.storage_of}
    graph, _ = b.finish(held, "torch.compile's joint graph")
    return graph, [p.fx if p is not None else None for p in b.produced], backward


def compile_with_plan(model: torch.nn.Module, fraction: Optional[float] = None, budget: Union[int, str, None] = None,
                      solver: str = "heuristic", **compile_kwargs: Any) -> Tuple[Any, KiwiPartitioner]:
    """`torch.compile(model)` whose joint graphs kiwi partitions (KiwiPartitioner); returns the compiled
    model and the partitioner (its `reports` fill in as graphs compile, at the first call; a graph
    Inductor serves from its on-disk cache was partitioned by an earlier run and gets no report)."""
    partitioner = KiwiPartitioner(fraction=fraction, budget=budget, solver=solver)
    options = dict(compile_kwargs.pop("options", {}) or {})
    options["custom_partitioner_fn"] = partitioner
    return torch.compile(model, options=options, **compile_kwargs), partitioner
