"""kiwi's recompute sets (plan::LayerStrategy::recompute, cost/recompute_set.h) on a user's block, as
kiwi prices them: the outputs of the set's ops are not kept for the backward pass but recomputed from
their inputs when it needs them; an input of a set's op that is not itself in the set is kept instead;
everything else is kept as without recomputation. Autograd's saved-tensor hooks do it: while the block
runs forward, a dispatch mode records how each op of the set made its outputs (the op and its inputs,
an input made by the set's ops by its own recipe), and a saved output of the set is packed as that
recipe and recomputed, once, when the backward pass unpacks it.

Each ATen op the block runs is named as kiwi's layer graph names its op ("attn.norm", "mlp.act",
"mlp.gated", ...), by where it runs, found with module hooks as the block's forward goes: inside the
n-th norm module ("attn.norm", then "mlp.norm": pre-norm and post-norm blocks alike run them in kiwi's
order; in a norm with a weight, the ops before the one that reads it are "attn.norm_normalized": the
normalized input HuggingFace's eager RMSNorm keeps beside its output, as kiwi's Llama graph has it; a norm between the attention's projections and its output is a head norm, Qwen3's "attn.q_norm"
then "attn.k_norm"), the activation module ("mlp.act"), the attention core (fused scaled dot-product attention or the
eager scores/softmax/context: "attn.attention", kiwi's fused op, or "attn.softmax" of its materialized
core), and between the landmarks: the rotary embedding's elementwise ops after the q/k/v projections
(q's up to its first add, then k's: HuggingFace's apply_rotary_pos_emb), the gating product between the
activation and the down projection, the residual adds after each section's output projection. Linears
are never recomputed (kiwi never offers them), nor random ops (dropout: a second draw would differ); an
op this naming does not place is kept."""
import re
from collections import Counter
from typing import FrozenSet, Iterable, List

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from kiwi.torch.distributed.plan import PlanError
from kiwi.torch.parallel.checkpointing import ATTENTION_CORE

# The names of kiwi's transformer layer ops (models/transformer_blocks.cpp) a recompute set may hold;
# linears are not among them (never recomputable).
KNOWN = frozenset({
    "attn.norm", "mlp.norm", "attn.norm_normalized", "mlp.norm_normalized", "attn.q_norm", "attn.k_norm", "mlp.act", "mlp.gated", "attn.residual", "mlp.residual",
    "attn.q_rotary", "attn.k_rotary", "attn.attention", "attn.scores", "attn.softmax", "attn.attn_dropout_mask",
    "attn.attn_dropout", "attn.context", "attn.out_dropout_mask", "attn.out_dropout", "mlp.dropout_mask",
    "mlp.dropout"})
# Reshapes (the model builder's "<op>_split", "_heads", "_groups", "_merge", "_merged", a name's second op
# "#1"): views of their input, nothing of their own to keep or recompute.
_VIEW_NAME = re.compile(r"^attn\.[a-z_]+(_split|_heads|_groups|_merge|_merged|#\d+)$")
# The attention core is one fused kernel at run time: recomputed when the set names kiwi's fused op or
# its materialized core's softmax (what the core keeps).
_CORE = frozenset({"attn.attention", "attn.softmax"})
_MLP_IN = re.compile(r"(^|\.)(gate_proj|up_proj|fc1|w1|w3|c_fc|intermediate\.dense|dense_h_to_4h)$")
_OUT = re.compile(r"(^|\.)(o_proj|out_proj|down_proj|fc2|w2|wo|output\.dense|dense_4h_to_h|attention\.dense|c_proj)$")
_NORM_CLASS = re.compile(r"norm$", re.IGNORECASE)
_ACTIVATION = (torch.nn.SiLU, torch.nn.GELU, torch.nn.ReLU, torch.nn.Tanh, torch.nn.Sigmoid)
_ADD = frozenset({torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor})
_MUL = frozenset({torch.ops.aten.mul.Tensor})
_BLOCK_NORMS = frozenset({"attn.norm", "mlp.norm"})


def _has_vector_weight(module: torch.nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and weight.dim() == 1


def _reads_vector(args) -> bool:
    """Whether an op reads a 1-D tensor: a norm's weight (its other operands are [..., hidden] or the
    [..., 1] statistics)."""
    return any(isinstance(a, torch.Tensor) and a.dim() == 1 for a in args)


def _is_activation(module: torch.nn.Module) -> bool:
    return isinstance(module, _ACTIVATION) or (type(module).__name__.endswith("Activation") and
                                               not any(True for _ in module.parameters()))


class BlockOpNames:
    """Follows one block's forward pass (hooks on it and its submodules) and names its ATen ops."""

    def __init__(self, block: torch.nn.Module):
        self.roles = {}  # submodule -> "norm" | "act" | "dropout" | "mlp_in" | "out" | "linear"
        for name, module in block.named_modules():
            if not name:
                continue
            if _NORM_CLASS.search(type(module).__name__) or isinstance(module, torch.nn.LayerNorm):
                role = "norm"
            elif isinstance(module, torch.nn.Dropout):
                role = "dropout"
            elif _is_activation(module):
                role = "act"
            elif hasattr(module, "weight") and getattr(module, "weight", None) is not None and module.weight.dim() == 2:
                role = "mlp_in" if _MLP_IN.search(name) else "out" if _OUT.search(name) else "linear"
            else:
                continue
            self.roles[module] = role
            module.register_forward_pre_hook(self._enter, prepend=True)
            module.register_forward_hook(self._leave, always_call=True)
        block.register_forward_pre_hook(self._reset, prepend=True)
        self._reset()

    def _reset(self, *_) -> None:
        self.stack: List[str] = []
        self.weighted: List[bool] = []  # per stack entry: a norm module with a weight
        self.norms = 0
        self.head_norms = 0     # norms inside the attention, between its projections and its output
        self.mlp = False        # an MLP input projection has run: the MLP section
        self.after_out = False  # the section's output projection has run
        self.core = False       # the attention core has run
        self.projected = False  # a q/k/v projection has run
        self.rotary = False     # the rotary embedding's first product has run
        self.rotary_adds = 0
        self.act_done = False

    def _enter(self, module, _args) -> None:
        role = self.roles[module]
        if role == "norm":
            if self.projected and not self.after_out and not self.mlp:  # Qwen3's query, then key head norm
                self.stack.append(("attn.q_norm", "attn.k_norm")[self.head_norms] if self.head_norms < 2 else "")
                self.weighted.append(False)
                self.head_norms += 1
                return
            self.stack.append("attn.norm" if self.norms == 0 else "mlp.norm" if self.norms == 1 else "")
            self.weighted.append(_has_vector_weight(module))
            self.norms += 1
            return
        if role == "mlp_in" and not self.mlp:
            self.mlp, self.after_out = True, False
        if role == "dropout":
            self.stack.append("mlp.dropout" if self.mlp else "attn.out_dropout" if self.after_out else "attn.attn_dropout")
            self.weighted.append(False)
            return
        self.stack.append({"act": "mlp.act"}.get(role, ""))  # linears: nothing of theirs is recomputed
        self.weighted.append(False)

    def _leave(self, module, _args, _output) -> None:
        role = self.roles[module]
        if self.stack:
            self.stack.pop()
            self.weighted.pop()
        if role == "out":
            self.after_out = True
        elif role == "linear":
            self.projected = True
        elif role == "act":
            self.act_done = True

    def name(self, op, args=()) -> str:
        """kiwi's name of the op now running with `args` ("" where it has none here)."""
        if self.stack:
            top = self.stack[-1]
            if top in _BLOCK_NORMS and self.weighted[-1] and not _reads_vector(args):
                return top + "_normalized"
            return top
        if op in ATTENTION_CORE:
            self.core = True
            return "attn.attention"
        if op in _ADD and self.after_out:
            return "mlp.residual" if self.mlp else "attn.residual"
        if self.mlp:
            return "mlp.gated" if op in _MUL and self.act_done and not self.after_out else ""
        # The rotary embedding: q * cos + rotate_half(q) * sin, then k's alike; it starts with a product.
        if self.projected and not self.core and not self.after_out and self.rotary_adds < 2 and \
                (self.rotary or op in _MUL) and op.overloadpacket in _ROTARY:
            self.rotary = True
            name = ("attn.q_rotary", "attn.k_rotary")[self.rotary_adds]
            self.rotary_adds += op in _ADD
            return name
        return ""


_ROTARY = frozenset(getattr(torch.ops.aten, n) for n in ("mul", "neg", "cat", "add", "slice"))


def check_recompute_set(names: Iterable[str], where: str) -> FrozenSet[str]:
    """The set, its names checked against what this naming places (a PlanError names the first other)."""
    names = frozenset(names)
    unknown = sorted(n for n in names - KNOWN if not _VIEW_NAME.match(n))
    if unknown:
        raise PlanError(f"{where}: {unknown[0]!r} is not an op kiwi.torch.parallelize can recompute in a block "
                        f"(it names {', '.join(sorted(KNOWN))} and reshapes)")
    return names


class _Recipe:
    """How one output of a set's op is made again: the op, its inputs (recipes for those of the set), and
    which of its outputs; the value, once made, until the backward pass lets go of the recipe."""
    __slots__ = ("func", "args", "kwargs", "index", "value")

    def __init__(self, func, args, kwargs, index):
        self.func, self.args, self.kwargs, self.index, self.value = func, args, kwargs, index, None

    def make(self) -> torch.Tensor:
        if self.value is None:
            run = lambda x: x.make() if isinstance(x, _Recipe) else x  # noqa: E731
            with torch.no_grad():
                out = self.func(*tree_map(run, self.args), **tree_map(run, self.kwargs))
            self.value = out if self.index is None else out[self.index]
        return self.value


def _draws(func, args, kwargs) -> bool:
    """The op draws random numbers (a second run would differ): dropout, an attention core with dropout."""
    if torch.Tag.nondeterministic_seeded not in func.tags:
        return False
    if func in ATTENTION_CORE:  # scaled dot-product attention: (query, key, value, dropout_p, ...)
        p = kwargs.get("dropout_p", args[3] if len(args) > 3 and isinstance(args[3], float) else 0.0)
        return p != 0.0
    return True


class _RecordSet(TorchDispatchMode):
    """Runs the block's ops, recording a recipe for each tensor output of the set's ops."""

    def __init__(self, policy: "RecomputeSetPolicy"):
        super().__init__()
        self.policy = policy

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = self.policy.ops.name(func, args)
        recipes = self.policy.recipes
        ours = name in self.policy.names and not _draws(func, args, kwargs)
        # a view of a set's output (a linear's 2-D view of its input) is saved for its backward: made again too
        view = func.is_view and any(isinstance(a, torch.Tensor) and id(a) in recipes for a in args)
        if ours or view:
            as_recipe = lambda x: recipes.get(id(x), (None, x))[1] if isinstance(x, torch.Tensor) else x  # noqa: E731
            rargs, rkwargs = tree_map(as_recipe, args), tree_map(as_recipe, kwargs)
            outputs = [(None, out)] if isinstance(out, torch.Tensor) else list(enumerate(out))
            for index, t in outputs:
                if isinstance(t, torch.Tensor):
                    recipes[id(t)] = (t, _Recipe(func, rargs, rkwargs, index))
            if ours:
                self.policy.marked[name] += 1
        return out


class RecomputeSetPolicy:
    """A block's recompute set `names` (with the attention core when `core`) as saved-tensor hooks over
    its forward pass; `marked` counts the ops recorded for recomputation by kiwi name, `recomputed` the
    outputs the backward passes made again."""

    def __init__(self, block: torch.nn.Module, names: FrozenSet[str], core: bool = False):
        self.ops = BlockOpNames(block)
        self.names = set(names) | ({"attn.attention"} if core or names & _CORE else set())
        self.marked: Counter = Counter()
        self.recomputed = 0
        self.recipes = {}  # id(tensor) -> (tensor, recipe), during one forward pass of the block
        self._contexts = []
        block.register_forward_pre_hook(self._enter)
        block.register_forward_hook(self._leave, always_call=True)

    def _pack(self, t: torch.Tensor):
        entry = self.recipes.get(id(t))
        return entry[1] if entry is not None and entry[0] is t else t

    def _unpack(self, packed):
        if isinstance(packed, _Recipe):
            if packed.value is None:
                self.recomputed += 1
            return packed.make()
        return packed

    def _enter(self, *_) -> None:
        hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        mode = _RecordSet(self)
        hooks.__enter__()
        mode.__enter__()
        self._contexts.append((hooks, mode))

    def _leave(self, *_) -> None:
        hooks, mode = self._contexts.pop()
        mode.__exit__(None, None, None)
        hooks.__exit__(None, None, None)
        self.recipes = {}  # the packed recipes live on in the autograd graph; the tensors are let go


def apply_recompute_set(block: torch.nn.Module, names: FrozenSet[str], core: bool = False) -> RecomputeSetPolicy:
    """Recompute the block's ops of `names` (kiwi's names) for its backward pass, and its attention core
    too when `core` (selective recomputation beside the set); every other activation is kept."""
    return RecomputeSetPolicy(block, names, core)
