"""kiwi.torch.parallelize: applies a layer-level kiwi plan (`kiwi plan --out`, `kiwi hybrid --out`) to
a user's model with PyTorch 2's own building blocks (docs/distributed.md): a DeviceMesh of (pp, dp, 1,
tp) ranks, pipeline stages (pipeline.py), DTensor tensor and sequence parallelism per block
(tensor_parallel.py), activation checkpointing (checkpointing.py) and FSDP2 per block by its ZeRO stage
(data_parallel.py), in torchtitan's order (stages, TP, then checkpointing, then FSDP)."""
import dataclasses
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule

from kiwi.torch.distributed.plan import HybridPlan, LayerStrategy, PlanError, load_plan, parse_plan
from kiwi.torch.parallel.blocks import block_names, find_blocks, vocabulary_ends
from kiwi.torch.parallel.checkpointing import checkpoint_block
from kiwi.torch.parallel.recompute_sets import RecomputeSetPolicy, apply_recompute_set, check_recompute_set
from kiwi.torch.parallel.data_parallel import shard_layer, syncs_every_micro_batch
from kiwi.torch.parallel.pipeline import decoder_parts, final_norm as final_norm_of, loss_function, make_schedule, \
    stage_chunks
from kiwi.torch.parallel.slice_gather import boundary_mesh, relayout, relayout_rows
from kiwi.torch.parallel.tied_embedding import TiedEmbedding, tie_across_stages, tied_embedding
from kiwi.torch.parallel.tensor_parallel import (apply_tensor_parallel, apply_vocabulary_parallel,
                                                 check_block_splits, on_output, sequence_boundaries,
                                                 vocabulary_modules)


@dataclasses.dataclass
class ParallelModel:
    """A model parallelized by a plan: the model itself (changed in place), its mesh and what each of
    its layers does; `step` (training.py) runs one training step of the plan's micro-batches."""
    model: torch.nn.Module
    plan: HybridPlan
    mesh: Optional[DeviceMesh]          # ("pp", "dp", "one", "tp"); None on one process
    blocks_path: str
    dp: int
    tp: int
    dp_rank: int
    layers: List[FSDPModule] = dataclasses.field(default_factory=list)  # the blocks that FSDP2 wraps
    accumulating: List[FSDPModule] = dataclasses.field(default_factory=list)  # DP / ZeRO-1: sync on the last micro-batch
    unsharded: List[FSDPModule] = dataclasses.field(default_factory=list)  # ZeRO-1/2: gathered once per step
    roots: List[FSDPModule] = dataclasses.field(default_factory=list)  # the model's, or each pipeline chunk's
    stage: int = 0                      # this rank's pipeline stage
    stage_layers: List[int] = dataclasses.field(default_factory=list)  # of all its chunks (virtual_stages)
    schedule: Any = None                # torch.distributed.pipelining's, with pp_degree > 1
    groups: Dict[str, List[Any]] = dataclasses.field(default_factory=dict)  # "dp" / "tp": their process groups
    # the head's logits stay split by vocabulary: kp.step runs the loss under torch's loss_parallel
    vocabulary_parallel_loss: bool = False
    tied: Optional[TiedEmbedding] = None  # a tied embedding's copy on the first or last pipeline stage
    # block index -> its recompute set's policy (what it recomputes: RecomputeSetPolicy.marked)
    recompute_sets: Dict[int, RecomputeSetPolicy] = dataclasses.field(default_factory=dict)

    @property
    def micro_batch(self) -> int:
        """Samples per micro-batch on one DP rank."""
        return self.plan.global_batch // (self.dp * self.plan.micro_batches)


def _as_plan(plan: Union[HybridPlan, Dict[str, Any], str]) -> HybridPlan:
    if isinstance(plan, HybridPlan):
        return plan
    if isinstance(plan, str):
        return load_plan(plan)
    return parse_plan(plan, "plan")


def _layout(strategy: LayerStrategy) -> Tuple[int, int]:
    return strategy.dp, strategy.tp


def _check_layers(plan: HybridPlan, blocks_path: str, count: int, world: int, tied: bool,
                  has_head: bool) -> LayerStrategy:
    if len(plan.layers) != count:
        raise PlanError(f"{plan.source}: layer.layers: {len(plan.layers)} layers planned, the model has {count} "
                        f"blocks at {blocks_path!r}")
    plan.check_world(world)
    first = plan.layers[0]
    for i, s in enumerate(plan.layers):
        if s.recomputes_set:
            check_recompute_set(s.recompute, f"{plan.source}: layer.layers[{i}].recompute")
        if s.tp != first.tp and plan.pp_degree > 1:
            raise PlanError(f"{plan.source}: layer.layers[{i}].tp: {s.tp} where layers[0] has {first.tp}: "
                            "kiwi.torch.parallelize changes TP degrees between layers without pipeline stages only")
        if plan.global_batch % (s.dp * plan.micro_batches):
            raise PlanError(f"{plan.source}: layer.global_batch: {plan.global_batch} samples do not split into "
                            f"{plan.micro_batches} micro-batches over layers[{i}]'s {s.dp} data-parallel ranks")
    last = plan.layers[-1]
    if _layout(last) != _layout(first) and (tied or not has_head):
        why = "ties its head to its input embedding" if tied else "names no output embedding (get_output_embeddings)"
        raise PlanError(f"{plan.source}: layer.layers[{count - 1}].tp: the model {why}, so its last layer must lay out "
                        f"samples as its first (tp {first.tp} x dp {first.dp}), not tp {last.tp} x dp {last.dp}: the "
                        "head runs on the last layer's layout")
    return first


def _heads(model: torch.nn.Module) -> Dict[str, Optional[int]]:
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    return {"heads": heads, "key_value_heads": getattr(config, "num_key_value_heads", None) or heads}


def _relayout_labels(mesh: DeviceMesh, first: Tuple[int, int], last: Tuple[int, int]):
    """A forward pre-hook on the model giving its loss this rank's labels of the last layer's layout."""
    def hook(module, args, kwargs):
        if isinstance(kwargs.get("labels"), torch.Tensor):
            kwargs = {**kwargs, "labels": relayout_rows(kwargs["labels"], mesh, first, last)}
        return args, kwargs
    return hook


def _device_type() -> str:
    return "cuda" if torch.cuda.is_available() and dist.is_initialized() and dist.get_backend() == "nccl" else "cpu"


def check_plan(model: torch.nn.Module, plan: Union[HybridPlan, Dict[str, Any], str], world: int, *,
               blocks: Optional[str] = None, tp_plan: Optional[Dict[str, str]] = None) -> HybridPlan:
    """Everything parallelize checks before it changes the model, without a process group: the plan fits
    `world` ranks and the model's blocks (TP degrees changing between layers only without stages, the
    last layer laying out samples as the first where head and embedding are tied), and every block
    splits as its layer says.
    Returns the plan read; raises a PlanError naming the plan field or the module."""
    plan = _as_plan(plan)
    path, found = find_blocks(model, blocks)
    _, head, tied = vocabulary_ends(model)
    _check_layers(plan, path, len(found), world, tied=tied, has_head=isinstance(head, torch.nn.Module))
    heads = _heads(model)
    for name, block, strategy in zip(block_names(path, found), found, plan.layers):
        if strategy.tp > 1:
            check_block_splits(block, name, strategy.tp, tp_plan, **heads)
    for tp in {plan.layers[0].tp, plan.layers[-1].tp} - {1}:  # the input embedding's and the head's
        vocabulary_modules(model, tp)
    if plan.pp_degree > 1:
        decoder_parts(model, found, plan.source)
    return plan


def parallelize(model: torch.nn.Module, plan: Union[HybridPlan, Dict[str, Any], str],
                mesh: Optional[DeviceMesh] = None, *, blocks: Optional[str] = None,
                tp_plan: Optional[Dict[str, str]] = None) -> ParallelModel:
    """Applies `plan` (a HybridPlan, its JSON object, or a plan file) to `model` on this process's rank
    of the default process group: its blocks (found, or the nn.ModuleList at `blocks`) get their layer's
    TP (+ SP), checkpointing and ZeRO stage; with TP the input embedding and the head split by vocabulary
    (unless tied), the embedding and the final norm are data-parallel as the first layer, the head as the
    last; with pp_degree > 1 this rank keeps its stage's chunks (one, or `virtual_stages`) and
    `ParallelModel.schedule` runs them. `mesh`: a ("pp", "dp", "one", "tp") mesh to reuse (one is made
    otherwise); `tp_plan`: {linear's name in a block: "colwise" | "rowwise" | "replicate"} where kiwi
    cannot tell from the name. Errors are PlanErrors naming the plan field or the module."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    plan = check_plan(model, plan, world, blocks=blocks, tp_plan=tp_plan)  # nothing changes before this passes
    path, found = find_blocks(model, blocks)
    first = plan.layers[0]
    dp, tp = first.dp, first.tp
    names = block_names(path, found)
    device_type = _device_type()
    device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    model.to(device)
    pp = plan.pp_degree
    if world > 1 and mesh is None:
        mesh = init_device_mesh(device_type, (pp, dp, 1, tp), mesh_dim_names=("pp", "dp", "one", "tp"))
    stage = mesh["pp"].get_local_rank() if pp > 1 else 0
    mine = plan.stage_layers(stage) if pp > 1 else list(range(len(found)))
    out = ParallelModel(model=model, plan=plan, mesh=mesh, blocks_path=path, dp=dp, tp=tp,
                        dp_rank=mesh["dp"].get_local_rank() if mesh is not None else 0, stage=stage, stage_layers=mine)
    roots: List[torch.nn.Module] = [model]
    tied_group = None
    if pp > 1:  # this rank keeps its stage's chunks of blocks (and the embedding or the head)
        parts = decoder_parts(model, found, plan.source)
        if parts.tied:  # the last stage keeps a copy of the shared weight, equal to the first stage's
            tied_group = tie_across_stages(mesh, parts.embed.weight)
        roots = stage_chunks(model, parts, found, plan, stage)
    heads = _heads(model)
    # one (pp, dp, 1, tp) mesh per layout of the plan's layers (made on every rank in the same order)
    meshes = {_layout(first): mesh}
    for s in plan.layers:
        if _layout(s) not in meshes:
            meshes[_layout(s)] = init_device_mesh(device_type, (pp, s.dp, 1, s.tp), mesh_dim_names=("pp", "dp", "one", "tp"))
    last = plan.layers[-1]
    if tp > 1:  # the input embedding splits over the first layer's TP group
        apply_vocabulary_parallel(model, mesh["tp"], ends=("embedding",))
    if last.tp > 1:  # the head over the last's; a pipeline's last stage hands plain logits to its loss: gathered there
        out.vocabulary_parallel_loss = pp == 1 and any(isinstance(m, torch.nn.Linear) for m in
                                                       vocabulary_modules(model, last.tp).values())
        apply_vocabulary_parallel(model, meshes[_layout(last)]["tp"], parallel_loss=out.vocabulary_parallel_loss,
                                  ends=("head",))
    for i, (block, strategy) in enumerate(zip(found, plan.layers)):
        if i not in mine:
            continue
        own = meshes[_layout(strategy)]
        sp = strategy.tp > 1 and strategy.sequence_split
        if strategy.tp > 1:
            apply_tensor_parallel(block, names[i], own["tp"], sp, tp_plan=tp_plan, **heads)
        if strategy.recomputes_set or (strategy.recomputes_core and not strategy.checkpoint):
            # the set's ops and/or the attention core (selective recomputation), everything else kept as it is
            out.recompute_sets[i] = apply_recompute_set(block, frozenset(strategy.recompute),
                                                        core=strategy.recomputes_core)
        elif strategy.checkpoint:
            checkpoint_block(block)
        # a run of sequence-parallel layers of one layout passes sequence blocks; stages send whole
        # sequences (a stage's chunks are never adjacent: i - 1 in mine is this chunk)
        alike = lambda j: j in mine and plan.layers[j].sequence_split and _layout(plan.layers[j]) == _layout(strategy)  # noqa: E731
        if sp:
            sequence_boundaries(block, own["tp"], first_of_run=not alike(i - 1), last_of_run=not alike(i + 1))
        if i + 1 < len(found) and _layout(plan.layers[i + 1]) != _layout(strategy):  # Slice-Gather after it
            boundary = boundary_mesh(device_type, pp, _layout(strategy), _layout(plan.layers[i + 1]))
            block.register_forward_hook(on_output(lambda x, b=boundary, a=_layout(strategy),
                                                   n=_layout(plan.layers[i + 1]): relayout(x, b, a, n)))
            out.groups.setdefault("reshard", []).append(boundary.get_group("inner"))
    _, head, tied = vocabulary_ends(model)
    separate_head = isinstance(head, torch.nn.Module) and not tied
    final_norm = None
    if pp == 1 and _layout(last) != _layout(first):
        # the final norm and the head run on the last layer's layout: so do their FSDP2 units, and the loss
        # takes this rank's labels of it
        final_norm = final_norm_of(model, found)
        labels = boundary_mesh(device_type, pp, _layout(first), _layout(last))
        model.register_forward_pre_hook(_relayout_labels(labels, _layout(first), _layout(last)), with_kwargs=True)
        out.groups["labels"] = [labels.get_group("inner")]
    if any(s.dp > 1 for s in plan.layers):
        # the head (and the final norm) go with the last layer's strategy (as kiwi prices them), the rest
        # with the first's
        units = [(found[i], plan.layers[i]) for i in mine]
        units += [(head, last)] if separate_head else []
        units += [(final_norm, last)] if final_norm is not None else []
        # each root (the model, or a chunk: the embedding or the final norm) with its first layer's strategy
        firsts = [mine[0]] if pp == 1 else [plan.chunk_layers(c)[0] for c in plan.stage_chunks(stage)]
        for module, strategy in units + [(r, plan.layers[i]) for r, i in zip(roots, firsts)]:
            own = meshes[_layout(strategy)]
            wrapped = shard_layer(module, strategy, own["dp"], own["dp", "one"] if strategy.dp > 1 else None)
            if any(module is r for r in roots):
                out.roots.append(wrapped)
            elif module is not head and module is not final_norm:
                out.layers.append(wrapped)
            if not syncs_every_micro_batch(strategy):
                out.accumulating.append(wrapped)
            if strategy.zero_stage in (1, 2):
                out.unsharded.append(wrapped)
        # the (dp, 1) meshes' groups have the same ranks
        out.groups["dp"] = [m.get_group("dp") for (d, _), m in meshes.items() if d > 1]
    if any(s.tp > 1 for s in plan.layers):
        out.groups["tp"] = [m.get_group("tp") for (_, t), m in meshes.items() if t > 1]
    if pp > 1:
        out.groups["pp"] = [mesh.get_group("pp")]
        if tied_group is not None:  # after "pp": with 2 stages the pair's ranks are the pp group's
            out.tied = tied_embedding(plan, tied_group, parts.embed.weight)  # the parameter FSDP2 put there
            out.groups["tied"] = [tied_group]
        out.schedule = make_schedule(plan, roots, stage, mesh, loss_function(model), device, out.accumulating,
                                     out.unsharded)
    return out
