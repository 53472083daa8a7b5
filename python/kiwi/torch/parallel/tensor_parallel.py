"""Megatron tensor (and sequence) parallelism of one block with DTensor's styles (ColwiseParallel,
RowwiseParallel, SequenceParallel, and linear_styles.py's for transposed and fused linears): which linear
is split how comes from its name in the block (q/k/v, fused q/k/v, gate/up and fc1-like column-parallel,
o/down and fc2-like row-parallel), or from the user's `tp_plan`; anything the block cannot split as the
plan says is a PlanError naming the module."""
import re
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

from kiwi.torch.distributed.plan import PlanError
from kiwi.torch.parallel.blocks import vocabulary_ends
from kiwi.torch.parallel.linear_styles import ColumnParallel, RowParallel, features, is_transposed

# Column-parallel linears read the block's (gathered) input; row-parallel ones end a column-parallel group.
_COLWISE = re.compile(r"(^|\.)(q_proj|k_proj|v_proj|query|key|value|gate_proj|up_proj|fc1|w1|w3|wq|wk|wv|c_fc|c_attn|"
                      r"intermediate\.dense|dense_h_to_4h|query_key_value)$")
_ROWWISE = re.compile(r"(^|\.)(o_proj|out_proj|down_proj|fc2|w2|wo|output\.dense|dense_4h_to_h|attention\.dense|"
                      r"attn\.c_proj|mlp\.c_proj)$")
# Fused projections of equal parts side by side (GPT-2's c_attn: q, k, v of the hidden size each, its
# cross-attention's k, v): each part splits by heads, so the parts are its outputs over its inputs.
_FUSED = re.compile(r"(^|\.)c_attn$")
# What the module around a fused projection cuts its output and heads by (GPT2Attention's split_size and
# num_heads): the rank's share once the projection is split.
_LOCAL_COUNTS = ("split_size", "num_heads")
_KEY_VALUE = re.compile(r"(^|\.)(k_proj|v_proj|key|value|wk|wv)$")
_NORM = re.compile(r"(norm|layernorm|ln_\d|ln)$", re.IGNORECASE)


def classify_linears(block: torch.nn.Module, where: str,
                     tp_plan: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """{name in the block: "colwise" | "rowwise" | "replicate"} for every weight-bearing linear of it."""
    styles: Dict[str, str] = {}
    for name, module in block.named_modules():
        if not name or not hasattr(module, "weight") or isinstance(module, torch.nn.Embedding):
            continue
        if tp_plan and name in tp_plan:
            if tp_plan[name] not in ("colwise", "rowwise", "replicate"):
                raise PlanError(f"tp_plan[{name!r}]: must be colwise, rowwise or replicate, got {tp_plan[name]!r}")
            styles[name] = tp_plan[name]
            continue
        if _NORM.search(name.split(".")[-1]) or module.weight is None or module.weight.dim() != 2:
            continue  # norms stay replicated (sequence-parallel with SP)
        if not isinstance(module, torch.nn.Linear) and not is_transposed(module):
            raise PlanError(f"{where}.{name}: a {type(module).__name__} (weight {tuple(module.weight.shape)}), neither "
                            "an nn.Linear nor a transposed one (Conv1D): kiwi cannot split it; name it "
                            "in parallelize(..., tp_plan={'" + name + "': 'replicate'}) or plan tp 1")
        if _COLWISE.search(name):
            styles[name] = "colwise"
        elif _ROWWISE.search(name):
            styles[name] = "rowwise"
        else:
            raise PlanError(f"{where}.{name}: cannot tell whether this linear is column- or row-parallel; name it "
                            "in parallelize(..., tp_plan={'" + name + "': 'colwise' | 'rowwise' | 'replicate'})")
    if "colwise" not in styles.values() or "rowwise" not in styles.values():
        raise PlanError(f"{where}: no column- and row-parallel linears to split (found {sorted(styles) or 'none'})")
    return styles


def fused_parts(name: str, module: torch.nn.Module) -> int:
    """How many equal parts a column-parallel linear's outputs are (1 unless a fused projection)."""
    if not _FUSED.search(name):
        return 1
    inputs, outputs = features(module)
    return outputs // inputs if outputs % inputs == 0 else 1


def check_block_splits(block: torch.nn.Module, where: str, tp: int, tp_plan: Optional[Dict[str, str]] = None,
                       key_value_heads: Optional[int] = None, heads: Optional[int] = None) -> Dict[str, str]:
    """The block's linears' styles (classify_linears) once every split is known to divide evenly over
    `tp` ranks: features, attention heads, grouped-query attention's key/value heads."""
    styles = classify_linears(block, where, tp_plan)
    for name, style in styles.items():
        linear = block.get_submodule(name)
        inputs, outputs = features(linear)
        parts = fused_parts(name, linear) if style == "colwise" else 1
        size, what = (outputs // parts, "output features" + (f" per part (of {parts})" if parts > 1 else "")) \
            if style == "colwise" else (inputs, "input features")
        if style != "replicate" and size % tp:
            raise PlanError(f"{where}.{name}: tp {tp} does not divide its {size} {what}")
        if parts > 1 and heads and heads % tp:  # each rank computes whole heads of q, k and v
            raise PlanError(f"{where}.{name}: tp {tp} does not divide its {heads} attention heads (a fused "
                            f"projection of {parts} parts splits each by heads)")
        if style == "colwise" and _KEY_VALUE.search(name) and key_value_heads and key_value_heads % tp:
            raise PlanError(f"{where}.{name}: tp {tp} does not divide its {key_value_heads} key/value heads "
                            "(grouped-query attention splits whole heads)")
        if style == "colwise" and name.endswith(("q_proj", "query", "wq")) and heads and heads % tp:
            raise PlanError(f"{where}.{name}: tp {tp} does not divide its {heads} attention heads")
    return styles


def _relayout(mesh: DeviceMesh, source, target, local: bool = True):
    """This rank's local tensor in `source` layout over the TP mesh, redistributed to `target` (a local
    tensor, or the DTensor when not `local`)."""
    def move(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or isinstance(x, DTensor):
            return x
        moved = DTensor.from_local(x, mesh, [source], run_check=False).redistribute(mesh, [target])
        return moved.to_local() if local else moved
    return move


def _on_hidden_states(move):
    """A forward pre-hook (with kwargs) applying `move` to the module's hidden states: its first
    argument, or its `hidden_states` keyword (HuggingFace's layers pass it either way)."""
    def hook(module, args, kwargs):
        if args:
            return (move(args[0]),) + tuple(args[1:]), kwargs
        if "hidden_states" in kwargs:
            return args, {**kwargs, "hidden_states": move(kwargs["hidden_states"])}
        return args, kwargs
    return hook


def on_output(move):
    """A forward hook applying `move` to the module's output (the first element of a tuple)."""
    def hook(module, args, output):
        return (move(output[0]),) + tuple(output[1:]) if isinstance(output, tuple) else move(output)
    return hook


def apply_tensor_parallel(block: torch.nn.Module, where: str, mesh: DeviceMesh, sequence_parallel: bool,
                          tp_plan: Optional[Dict[str, str]] = None, key_value_heads: Optional[int] = None,
                          heads: Optional[int] = None) -> List[str]:
    """Splits `block` over the TP `mesh`: column- then row-parallel linears (an all-reduce after each
    row-parallel one); with `sequence_parallel` its norms and residuals run on the rank's sequence block,
    the input of each column-parallel group is all-gathered and each row-parallel output reduce-scattered
    (Korthikanti et al. 2023 §4.2.2); `sequence_boundaries` then says what its input and output are.
    Returns the split linears' names."""
    styles = check_block_splits(block, where, mesh.size(), tp_plan, key_value_heads, heads)
    plan: Dict[str, Any] = {}
    fused: List[str] = []
    for name, style in styles.items():
        linear = block.get_submodule(name)
        parts = fused_parts(name, linear)
        if style == "colwise" and (parts > 1 or is_transposed(linear)):  # torch's splits nn.Linear only
            plan[name] = ColumnParallel(parts)
            fused += [name] if parts > 1 else []
        elif style == "colwise":
            plan[name] = ColwiseParallel()
        elif style == "rowwise":
            row = RowParallel if is_transposed(linear) else RowwiseParallel
            plan[name] = row(output_layouts=Shard(1)) if sequence_parallel else row()
    if sequence_parallel:
        for name, module in block.named_modules():
            if name and _NORM.search(name.split(".")[-1]) and any(True for _ in module.parameters(recurse=False)):
                plan[name] = SequenceParallel(use_local_output=True)
    # The module around each column-parallel group (attention, MLP) hands its linears one replicated
    # DTensor: their input gradients add up as partial sums and are all-reduced once per group, Megatron's
    # f (one all-reduce per linear otherwise); with SP it all-gathers the sequence blocks first (SP's g).
    source = Shard(1) if sequence_parallel else Replicate()
    for parent in sorted({n.rpartition(".")[0] for n, s in styles.items() if s == "colwise"}):
        if not parent:
            raise PlanError(f"{where}: its column-parallel linears must sit inside a submodule (attention, MLP) "
                            "whose input they share")
        block.get_submodule(parent).register_forward_pre_hook(
            _on_hidden_states(_relayout(mesh, source, Replicate(), local=False)), with_kwargs=True)
    parallelize_module(block, mesh, plan)
    for name in fused:  # the module around it now splits the rank's q_r, k_r, v_r into its heads
        parent = block.get_submodule(name.rpartition(".")[0])
        for attribute in _LOCAL_COUNTS:
            if isinstance(getattr(parent, attribute, None), int):
                setattr(parent, attribute, getattr(parent, attribute) // mesh.size())
    return sorted(n for n, s in styles.items() if s != "replicate")


def sequence_boundaries(block: torch.nn.Module, mesh: DeviceMesh, first_of_run: bool, last_of_run: bool) -> None:
    """Consecutive sequence-parallel blocks pass sequence blocks: the first of a run slices its input, the
    last all-gathers its output. Registered after checkpointing's hooks, so that a recomputation starts from
    the block's input as it came (and slices it once)."""
    if first_of_run:  # a slice, no communication
        block.register_forward_pre_hook(_on_hidden_states(_relayout(mesh, Replicate(), Shard(1))), with_kwargs=True)
    if last_of_run:
        block.register_forward_hook(on_output(_relayout(mesh, Shard(1), Replicate())))


def vocabulary_modules(model: torch.nn.Module, tp: int) -> Dict[str, torch.nn.Module]:
    """The input embedding and the output head the model names (HuggingFace's get_input_embeddings /
    get_output_embeddings) that split over `tp` ranks by vocabulary, as Megatron's are: {} when the model
    names none, or ties them (one weight: both stay replicated). A vocabulary `tp` does not divide is a
    PlanError naming the module."""
    found: Dict[str, torch.nn.Module] = {}
    embed, head, tied = vocabulary_ends(model)
    if tied:
        return found
    names = {id(m): n for n, m in model.named_modules()}
    for module, kind, size in ((embed, torch.nn.Embedding, "num_embeddings"), (head, torch.nn.Linear, "out_features")):
        if isinstance(module, kind) and id(module) in names:
            if getattr(module, size) % tp:
                raise PlanError(f"{names[id(module)]}: tp {tp} does not divide its vocabulary of "
                                f"{getattr(module, size)}")
            found[names[id(module)]] = module
    return found


def apply_vocabulary_parallel(model: torch.nn.Module, mesh: DeviceMesh, parallel_loss: bool = False,
                              ends: Tuple[str, ...] = ("embedding", "head")) -> List[str]:
    """Megatron's vocabulary-parallel embedding (each rank looks up its share of the table, the outputs
    all-reduced) and a column-parallel head whose logits are all-gathered for the model's own loss or,
    with `parallel_loss`, left split by vocabulary (a DTensor) for the loss to run under torch's
    loss_parallel (Megatron's vocabulary-parallel cross-entropy: three all-reduces of one value per
    token instead of gathering the logits); `ends` says which of the two to split. Returns the split
    modules' names."""
    split = {name: m for name, m in vocabulary_modules(model, mesh.size()).items()
             if ("embedding" if isinstance(m, torch.nn.Embedding) else "head") in ends}
    plan: Dict[str, Any] = {}
    for name, module in split.items():
        if isinstance(module, torch.nn.Embedding):
            plan[name] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
        elif parallel_loss:
            plan[name] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
        else:
            plan[name] = ColwiseParallel(output_layouts=Replicate())
    if plan:
        parallelize_module(model, mesh, plan)
    return sorted(split)
