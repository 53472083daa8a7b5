"""FX node -> kiwi IR: a table of small handlers, one per operator family (DESIGN.md: no giant switch).
Each handler reads the node's arguments and recorded metadata and adds the kiwi forward nodes that
compute the same tensor, with the memory semantics kiwi's gradient rules give them (ir/backward.h).
A node with no handler raises UnsupportedOpError naming it."""
import dataclasses
import inspect
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from kiwi.torch.dtypes import KIWI_DTYPES
from kiwi.torch.errors import UnsupportedOpError
from kiwi.torch.tracing import NodeRecord


def kiwi_dtype(dtype: torch.dtype, what: str) -> str:
    if dtype not in KIWI_DTYPES:
        raise UnsupportedOpError(f"{what}: dtype {dtype} has no kiwi equivalent (f64, f32, bf16, f16, i64, i32, u8)")
    return KIWI_DTYPES[dtype]


class ForwardBuilder:
    """The kiwi forward graph under construction (kiwi graph JSON nodes) and the FX -> kiwi map."""

    def __init__(self, gm: torch.fx.GraphModule, records: Dict[str, NodeRecord]):
        self.gm = gm
        self.records = records
        self.nodes: List[Dict[str, Any]] = []
        self.kiwi_of: Dict[str, int] = {}       # FX node name -> kiwi node id of its value
        self.companions: Dict[str, List[int]] = {}  # FX node -> extra kiwi nodes it made (dropout masks)
        self.param_ids: Dict[int, int] = {}     # id(tensor) -> kiwi node
        self.param_names = {id(p): n for n, p in gm.named_parameters()}
        self.param_names.update({id(b): n for n, b in gm.named_buffers()})
        self.modules = dict(gm.named_modules())
        self.used_names: Dict[str, int] = {}

    def add(self, name: str, kind: str, op: str, dtype: str, shape: Sequence[int], inputs: Sequence[int] = (),
            attrs: Optional[Dict[str, Any]] = None, scope: str = "") -> int:
        count = self.used_names.get(name, 0)
        self.used_names[name] = count + 1
        if count:  # a module called twice (a reused ReLU): names stay unique for profiles and reports
            name = f"{name}#{count}"
        node = {"id": len(self.nodes), "name": name, "kind": kind, "op": op, "dtype": dtype,
                "shape": [int(d) for d in shape], "inputs": [int(i) for i in inputs]}
        if attrs:
            node["attrs"] = attrs
        if scope:
            node["scope"] = scope
        self.nodes.append(node)
        return node["id"]

    def param(self, tensor: torch.Tensor, what: str) -> int:
        """The kiwi node of a weight: a parameter if it trains, else a constant input."""
        key = id(tensor)
        if key not in self.param_ids:
            name = self.param_names.get(key, what)
            kind = "parameter" if isinstance(tensor, nn.Parameter) and tensor.requires_grad else "input"
            self.param_ids[key] = self.add(name, kind, kind, kiwi_dtype(tensor.dtype, name), tensor.shape)
        return self.param_ids[key]


@dataclasses.dataclass
class Call:
    """One FX node being mapped: its arguments bound to the called function's parameter names."""
    node: torch.fx.Node
    rec: NodeRecord
    builder: ForwardBuilder
    module: Optional[nn.Module]
    bound: Dict[str, Any]

    @property
    def name(self) -> str:
        return self.node.target if self.node.op == "call_module" else self.node.name

    @property
    def scope(self) -> str:
        return self.node.target if self.node.op == "call_module" else ""

    def meta(self):
        return self.rec.meta

    def tensor(self, key: str) -> int:
        arg = self.bound.get(key)
        if not isinstance(arg, torch.fx.Node) or self.builder.records[arg.name].meta is None:
            raise UnsupportedOpError(f"{describe(self.node, self.builder)}: argument '{key}' is not a tensor")
        return self.builder.kiwi_of[arg.name]

    def is_tensor(self, key: str) -> bool:
        arg = self.bound.get(key)
        return isinstance(arg, torch.fx.Node) and self.builder.records[arg.name].meta is not None

    def in_meta(self, key: str):
        return self.builder.records[self.bound[key].name].meta

    def value(self, key: str, default: Any = None) -> Any:
        v = self.bound.get(key, default)
        if isinstance(v, torch.fx.Node):
            rec = self.builder.records[v.name]
            if rec.meta is not None:
                raise UnsupportedOpError(f"{describe(self.node, self.builder)}: argument '{key}' must be a constant")
            return rec.value
        return v

    def out(self, kind: str, op: str, inputs: Sequence[int], attrs: Optional[Dict[str, Any]] = None) -> int:
        meta = self.rec.meta
        return self.builder.add(self.name, kind, op, kiwi_dtype(meta.dtype, self.name), meta.shape, inputs, attrs,
                                self.scope)

    def fail(self, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{describe(self.node, self.builder)}: {why}")


def describe(node: torch.fx.Node, builder: ForwardBuilder) -> str:
    if node.op == "call_module":
        return f"module '{node.target}' ({type(builder.modules[node.target]).__name__})"
    if node.op == "call_method":
        return f"method Tensor.{node.target} (node '{node.name}')"
    if node.op == "call_function":
        name = getattr(node.target, "__name__", str(node.target))
        mod = getattr(node.target, "__module__", None) or ""
        return f"function {mod + '.' if mod and mod != '_operator' else ''}{name} (node '{node.name}')"
    return f"{node.op} '{node.name}'"


def _pair(v: Any, what: str, call: Call) -> int:
    """A uniform spatial attribute: an int or an equal pair (kiwi's conv/pool attrs are scalars)."""
    if isinstance(v, (tuple, list)):
        if len(set(v)) != 1:
            raise call.fail(f"{what}={tuple(v)}: kiwi's IR has one {what} for both spatial dims")
        v = v[0]
    return int(v)


# ---- handlers: Call -> kiwi node id of the value ------------------------------------------------------

def conv2d(c: Call) -> int:
    w, b = c.bound.get("weight"), c.bound.get("bias")
    if _pair(c.value("dilation", 1), "dilation", c) != 1:
        raise c.fail("dilated convolution is not in kiwi's IR")
    if c.value("groups", 1) != 1:
        raise c.fail(f"grouped convolution (groups={c.value('groups')}) is not in kiwi's IR")
    if c.module is not None and c.module.padding_mode != "zeros":
        raise c.fail(f"padding_mode='{c.module.padding_mode}' is not in kiwi's IR")
    padding = c.value("padding", 0)
    if isinstance(padding, str):
        if padding != "valid":
            raise c.fail(f"padding='{padding}' is not in kiwi's IR (give the pad explicitly)")
        padding = 0
    inputs = [c.tensor("input"), c.builder.param(w, c.name + ".weight")]
    if b is not None:
        inputs.append(c.builder.param(b, c.name + ".bias"))
    attrs = {"stride": _pair(c.value("stride", 1), "stride", c), "padding": _pair(padding, "padding", c)}
    return c.out("conv", "conv2d", inputs, attrs)


def linear(c: Call) -> int:
    inputs = [c.tensor("input"), c.builder.param(c.bound["weight"], c.name + ".weight")]
    if c.bound.get("bias") is not None:
        inputs.append(c.builder.param(c.bound["bias"], c.name + ".bias"))
    return c.out("matmul", "matmul", inputs, {"transpose_b": True})


def _norm_inputs(c: Call) -> List[int]:
    """A norm's input, then its affine weight and bias when it has them (kiwi's layernorm operands)."""
    inputs = [c.tensor("input")]
    if c.bound.get("weight") is not None:
        inputs.append(c.builder.param(c.bound["weight"], c.name + ".weight"))
        if c.bound.get("bias") is not None:
            inputs.append(c.builder.param(c.bound["bias"], c.name + ".bias"))
    return inputs


def batch_norm(c: Call) -> int:
    if len(c.in_meta("input").shape) < 2:
        raise c.fail("batch norm of a rank-1 tensor is not in kiwi's IR")
    return c.out("layernorm", "batchnorm", _norm_inputs(c))


def layer_norm(c: Call) -> int:
    shape = c.value("normalized_shape")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if len(shape) != 1:
        raise c.fail(f"layer norm over {len(shape)} dims: kiwi's IR normalises the last dim only")
    return c.out("layernorm", "layernorm", _norm_inputs(c))


def unary(op: str) -> Callable[[Call], int]:
    def handler(c: Call) -> int:
        return c.out("elementwise", op, [c.tensor("input")])
    return handler


def _pool_attrs(c: Call, default_stride_is_kernel: bool) -> Dict[str, int]:
    if _pair(c.value("dilation", 1), "dilation", c) != 1:
        raise c.fail("dilated pooling is not in kiwi's IR")
    if c.value("ceil_mode", False):
        raise c.fail("ceil_mode=True is not in kiwi's IR")
    if c.value("return_indices", False):
        raise c.fail("return_indices=True is not in kiwi's IR")
    window = _pair(c.value("kernel_size"), "kernel_size", c)
    stride = c.value("stride", None)
    stride = window if stride in (None, [], ()) and default_stride_is_kernel else stride
    padding = _pair(c.value("padding", 0), "padding", c)
    return {"window": window, "stride": _pair(stride, "stride", c), "padding": padding}


def max_pool2d(c: Call) -> int:
    return c.out("pool", "max_pool", [c.tensor("input")], _pool_attrs(c, True))


def avg_pool2d(c: Call) -> int:
    return c.out("pool", "avg_pool", [c.tensor("input")], _pool_attrs(c, True))


def adaptive_avg_pool2d(c: Call) -> int:
    h, w = c.in_meta("input").shape[-2:]
    oh, ow = c.meta().shape[-2:]
    if h % oh or w % ow or h // oh != w // ow:
        raise c.fail(f"adaptive pooling {h}x{w} -> {oh}x{ow} is not a uniform window (kiwi's IR)")
    k = h // oh
    return c.out("pool", "avg_pool", [c.tensor("input")], {"window": k, "stride": k, "padding": 0})


def reshape(c: Call) -> int:
    """flatten / view / reshape: a kiwi reshape, or nothing when the shape does not change."""
    src = c.tensor("input")
    if tuple(c.in_meta("input").shape) == tuple(c.meta().shape):
        return src
    return c.out("reshape", "reshape", [src])


def alias(c: Call) -> int:
    """contiguous / identity / dropout in eval mode: the same tensor as far as kiwi is concerned."""
    return c.tensor("input")


def dropout(c: Call) -> int:
    training = c.module.training if c.module is not None else c.value("training", True)
    p = c.module.p if c.module is not None else c.value("p", 0.5)
    if not training or p == 0:
        return c.tensor("input")
    own = [s for s in c.rec.saved if s.kind == "own"]
    dtype = kiwi_dtype(own[0].dtype, c.name) if own else "u8"  # PyTorch's CPU dropout saves a float mask
    meta = c.meta()
    mask = c.builder.add(c.name + ".mask", "random", "dropout_mask", dtype, meta.shape, (), {"dropout_p": float(p)},
                         c.scope)
    c.builder.companions[c.node.name] = [mask]
    return c.out("elementwise", "mul", [c.tensor("input"), mask])


def binary(op: str, scalar_op: str = "scale") -> Callable[[Call], int]:
    """add/sub/mul/div of two tensors; with a python number the op is linear in its tensor ("scale")."""
    def handler(c: Call) -> int:
        a, b = c.is_tensor("input"), c.is_tensor("other")
        if a and b:
            return c.out("elementwise", op, [c.tensor("input"), c.tensor("other")])
        if (a or b) and op in ("add", "sub", "mul", "div"):
            if not a and op == "div":
                raise c.fail("a number divided by a tensor is not in kiwi's IR")
            return c.out("elementwise", scalar_op, [c.tensor("input" if a else "other")])
        raise c.fail("needs a tensor operand")
    return handler


def softmax(c: Call) -> int:
    rank = len(c.in_meta("input").shape)
    dim = c.value("dim", None)
    if dim is None or dim % rank != rank - 1:
        raise c.fail(f"softmax over dim {dim}: kiwi's IR takes the softmax over the last dim")
    return c.out("softmax", "softmax", [c.tensor("input")])


def embedding(c: Call) -> int:
    return c.out("embedding", "embedding", [c.builder.param(c.bound["weight"], c.name + ".weight"), c.tensor("input")])


def matmul(c: Call) -> int:
    a, b = c.in_meta("input").shape, c.in_meta("other").shape
    if len(b) == 2 and len(a) >= 2:
        return c.out("matmul", "matmul", [c.tensor("input"), c.tensor("other")])
    if len(a) == len(b) >= 3 and a[:-2] == b[:-2]:
        return c.out("batch_matmul", "batch_matmul", [c.tensor("input"), c.tensor("other")])
    raise c.fail(f"matmul of shapes {tuple(a)} x {tuple(b)} is not in kiwi's IR (needs [..., M, K] x [K, N] "
                 f"or equal batch dims)")


def transpose(c: Call) -> int:
    rank = len(c.in_meta("input").shape)
    if "dims" in c.bound:
        dims = c.value("dims")
        perm = [int(d) % rank for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    else:
        perm = list(range(rank))
        if rank >= 2:
            d0, d1 = int(c.value("dim0", 0)) % rank, int(c.value("dim1", 1)) % rank
            perm[d0], perm[d1] = perm[d1], perm[d0]
    if perm == list(range(rank)):
        return c.tensor("input")
    return c.out("transpose", "transpose", [c.tensor("input")], {"axes": perm})


def reduce(op: str) -> Callable[[Call], int]:
    def handler(c: Call) -> int:
        rank = len(c.in_meta("input").shape)
        dim = c.value("dim", None)
        axes = list(range(rank)) if dim is None else sorted({int(d) % rank for d in
                                                             (dim if isinstance(dim, (list, tuple)) else [dim])})
        return c.out("reduce", op, [c.tensor("input")], {"axes": axes})
    return handler


def scaled_dot_product_attention(c: Call) -> int:
    """F.scaled_dot_product_attention -> kiwi's fused attention: q [..., sq, d], k [..., sk, d],
    v [..., sk, dv] -> [..., sq, dv], with is_causal as attrs {"causal": true}. Dropout happens inside the
    kernel (no op of its own; attrs {"dropout_p": p}); `scale` changes no cost and is left out. A mask tensor, batch dims that
    broadcast and grouped-query attention with fewer key/value heads are not in kiwi's IR."""
    for key in ("query", "key", "value"):
        if not c.is_tensor(key):
            raise c.fail(f"argument '{key}' is not a tensor")
    q, k, v = (c.in_meta(key) for key in ("query", "key", "value"))
    if c.is_tensor("attn_mask") or c.value("attn_mask") is not None:
        raise c.fail("attn_mask: kiwi's fused attention takes no mask tensor (use is_causal=True for a causal "
                     "mask; other masks are not in kiwi's IR)")
    if len(q.shape) < 3 or not len(q.shape) == len(k.shape) == len(v.shape):
        raise c.fail(f"query/key/value of shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}: kiwi's "
                     f"attention needs tensors of equal rank >= 3 ([batch..., seq, head_dim])")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        if c.value("enable_gqa", False):
            raise c.fail(f"grouped-query attention (enable_gqa=True) with query {tuple(q.shape)} and key/value "
                         f"{tuple(k.shape)}, {tuple(v.shape)}: kiwi's attention needs as many key/value heads as "
                         f"query heads (repeat the key/value heads before the call)")
        raise c.fail(f"query/key/value batch dims {tuple(q.shape[:-2])}, {tuple(k.shape[:-2])}, "
                     f"{tuple(v.shape[:-2])} differ: kiwi's attention does not broadcast them")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise c.fail(f"query/key/value dtypes {q.dtype}, {k.dtype}, {v.dtype} differ")
    p = c.value("dropout_p", 0.0)
    if not 0.0 <= float(p) < 1.0:
        raise c.fail(f"dropout_p={p}: kiwi's IR takes a dropout probability in [0, 1)")
    attrs = {"causal": True} if c.value("is_causal", False) else {}
    if float(p) > 0.0:
        attrs["dropout_p"] = float(p)  # drawn inside the kernel, which it slows (a profile's samples)
    return c.out("attention", "attention", [c.tensor("query"), c.tensor("key"), c.tensor("value")], attrs)


def cross_entropy(c: Call) -> int:
    if c.value("reduction", "mean") not in ("mean", "sum"):
        raise c.fail("cross entropy without reduction is not a scalar loss")
    if c.bound.get("weight") is not None or c.value("label_smoothing", 0.0):
        raise c.fail("class weights and label smoothing are not in kiwi's IR")
    return c.out("loss", "cross_entropy", [c.tensor("input"), c.tensor("target")])


# ---- dispatch tables ------------------------------------------------------------------------------

Handler = Callable[[Call], int]


def _sig(*names: str, first: str = "input") -> Callable[..., Any]:
    """A stand-in signature naming a call's arguments: `first` (`input`), then `names` ("*dims": varargs).
    Many torch functions are builtins without an inspectable signature; these names are PyTorch's own."""
    def f(*args, **kwargs):  # pragma: no cover - only its signature is used
        return None
    params = [inspect.Parameter(first, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for n in names:
        if n.startswith("*"):
            params.append(inspect.Parameter(n[1:], inspect.Parameter.VAR_POSITIONAL))
        else:
            params.append(inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None))
    f.__signature__ = inspect.Signature(params)
    return f


CONV = _sig("weight", "bias", "stride", "padding", "dilation", "groups")
LINEAR = _sig("weight", "bias")
BATCH_NORM = _sig("running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
LAYER_NORM = _sig("normalized_shape", "weight", "bias", "eps")
UNARY = _sig("inplace")
MAX_POOL = _sig("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
AVG_POOL = _sig("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
ADAPTIVE = _sig("output_size")
FLATTEN = _sig("start_dim", "end_dim")
RESHAPE = _sig("*shape")
DROPOUT = _sig("p", "training", "inplace")
BINARY = _sig("other", "alpha")
SOFTMAX = _sig("dim", "_stacklevel", "dtype")
EMBEDDING = _sig("weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
MATMUL = _sig("other")
TRANSPOSE = _sig("dim0", "dim1")
PERMUTE = _sig("*dims")
REDUCE = _sig("dim", "keepdim", "dtype")
CROSS_ENTROPY = _sig("target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
SDPA = _sig("key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa", first="query")
NO_ARGS = _sig()

# Module types in lookup order (subclasses before their bases), with the signature of the functional
# form their forward calls; the module's own attributes fill the other arguments.
MODULES: List[Tuple[type, Handler, Callable[..., Any]]] = [
    (nn.Conv2d, conv2d, CONV),
    (nn.Linear, linear, LINEAR),
    (nn.modules.batchnorm._BatchNorm, batch_norm, BATCH_NORM),
    (nn.LayerNorm, layer_norm, LAYER_NORM),
    (nn.ReLU, unary("relu"), UNARY),
    (nn.GELU, unary("gelu"), UNARY),
    (nn.SiLU, unary("silu"), UNARY),
    (nn.Tanh, unary("tanh"), UNARY),
    (nn.Sigmoid, unary("sigmoid"), UNARY),
    (nn.MaxPool2d, max_pool2d, MAX_POOL),
    (nn.AvgPool2d, avg_pool2d, AVG_POOL),
    (nn.AdaptiveAvgPool2d, adaptive_avg_pool2d, ADAPTIVE),
    (nn.Flatten, reshape, FLATTEN),
    (nn.modules.dropout._DropoutNd, dropout, DROPOUT),
    (nn.Identity, alias, NO_ARGS),
    (nn.Softmax, softmax, SOFTMAX),
    (nn.LogSoftmax, softmax, SOFTMAX),
    (nn.Embedding, embedding, EMBEDDING),
    (nn.CrossEntropyLoss, cross_entropy, CROSS_ENTROPY),
]

FUNCTIONS: Dict[Any, Tuple[Handler, Callable[..., Any]]] = {
    F.conv2d: (conv2d, CONV), torch.conv2d: (conv2d, CONV),
    F.linear: (linear, LINEAR),
    F.batch_norm: (batch_norm, BATCH_NORM), F.layer_norm: (layer_norm, LAYER_NORM),
    F.relu: (unary("relu"), UNARY), torch.relu: (unary("relu"), UNARY), torch.relu_: (unary("relu"), UNARY),
    F.gelu: (unary("gelu"), UNARY), F.silu: (unary("silu"), UNARY),
    torch.tanh: (unary("tanh"), UNARY), torch.sigmoid: (unary("sigmoid"), UNARY),
    F.max_pool2d: (max_pool2d, MAX_POOL), F.avg_pool2d: (avg_pool2d, AVG_POOL),
    F.adaptive_avg_pool2d: (adaptive_avg_pool2d, ADAPTIVE),
    torch.flatten: (reshape, FLATTEN), torch.reshape: (reshape, RESHAPE),
    F.dropout: (dropout, DROPOUT),
    operator.add: (binary("add"), BINARY), torch.add: (binary("add"), BINARY), operator.iadd: (binary("add"), BINARY),
    operator.sub: (binary("sub"), BINARY), torch.sub: (binary("sub"), BINARY),
    operator.mul: (binary("mul"), BINARY), torch.mul: (binary("mul"), BINARY),
    operator.truediv: (binary("div"), BINARY), torch.div: (binary("div"), BINARY),
    F.softmax: (softmax, SOFTMAX), torch.softmax: (softmax, SOFTMAX),
    F.log_softmax: (softmax, SOFTMAX), torch.log_softmax: (softmax, SOFTMAX),
    F.embedding: (embedding, EMBEDDING),
    torch.matmul: (matmul, MATMUL), operator.matmul: (matmul, MATMUL),
    torch.mm: (matmul, MATMUL), torch.bmm: (matmul, MATMUL),
    torch.transpose: (transpose, TRANSPOSE), torch.permute: (transpose, PERMUTE),
    torch.mean: (reduce("mean"), REDUCE), torch.sum: (reduce("sum"), REDUCE),
    F.cross_entropy: (cross_entropy, CROSS_ENTROPY),
    F.scaled_dot_product_attention: (scaled_dot_product_attention, SDPA),
}

METHODS: Dict[str, Tuple[Handler, Callable[..., Any]]] = {
    "relu": (unary("relu"), NO_ARGS), "relu_": (unary("relu"), NO_ARGS),
    "sigmoid": (unary("sigmoid"), NO_ARGS), "tanh": (unary("tanh"), NO_ARGS),
    "flatten": (reshape, FLATTEN), "view": (reshape, RESHAPE), "reshape": (reshape, RESHAPE),
    "contiguous": (alias, NO_ARGS),
    "add": (binary("add"), BINARY), "add_": (binary("add"), BINARY),
    "sub": (binary("sub"), BINARY), "mul": (binary("mul"), BINARY), "div": (binary("div"), BINARY),
    "softmax": (softmax, SOFTMAX), "log_softmax": (softmax, SOFTMAX),
    "matmul": (matmul, MATMUL),
    "transpose": (transpose, TRANSPOSE), "permute": (transpose, PERMUTE), "t": (transpose, NO_ARGS),
    "mean": (reduce("mean"), REDUCE), "sum": (reduce("sum"), REDUCE),
}


def _bind(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    sig = inspect.signature(fn)
    try:
        bound_args = sig.bind_partial(*args, **kwargs)
    except TypeError as e:
        raise UnsupportedOpError(f"unexpected arguments {e}") from None
    out = {}
    for key, v in bound_args.arguments.items():
        if sig.parameters[key].kind == inspect.Parameter.VAR_POSITIONAL and len(v) == 1 and \
                isinstance(v[0], (list, tuple)):
            v = v[0]
        out[key] = v
    return out


def _module_call(mod: nn.Module, fn: Callable[..., Any], args: Tuple[Any, ...],
                 kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """A module call bound as its functional form: the tensor inputs, then the module's attributes."""
    bound = _bind(fn, args, kwargs)
    for key in ("weight", "bias", "stride", "padding", "dilation", "groups", "kernel_size", "ceil_mode",
                "return_indices", "normalized_shape", "output_size", "start_dim", "end_dim", "dim", "p",
                "reduction", "label_smoothing"):
        if key not in bound and hasattr(mod, key):
            bound[key] = getattr(mod, key)
    return bound


def lookup(node: torch.fx.Node, builder: ForwardBuilder) -> Tuple[Handler, Dict[str, Any], Optional[nn.Module]]:
    args, kwargs = tuple(node.args), dict(node.kwargs)
    if node.op == "call_module":
        mod = builder.modules[node.target]
        for cls, handler, fn in MODULES:
            if isinstance(mod, cls):
                return handler, _module_call(mod, fn, args, kwargs), mod
    elif node.op == "call_function" and node.target in FUNCTIONS:
        handler, fn = FUNCTIONS[node.target]
        return handler, _bind(fn, args, kwargs), None
    elif node.op == "call_method" and node.target in METHODS:
        handler, fn = METHODS[node.target]
        return handler, _bind(fn, args, kwargs), None
    raise UnsupportedOpError(f"{describe(node, builder)} has no kiwi IR mapping; supported: {supported_summary()}")


def supported_summary() -> str:
    return ("conv2d, linear, batch_norm, layer_norm, relu/gelu/silu/tanh/sigmoid, max/avg/adaptive-avg pool2d, "
            "flatten/view/reshape, dropout, add/sub/mul/div, softmax/log_softmax, embedding, matmul/bmm, "
            "transpose/permute, mean/sum, cross_entropy, scaled_dot_product_attention")


def map_node(node: torch.fx.Node, builder: ForwardBuilder) -> Optional[int]:
    """Adds the kiwi nodes of one FX node; returns the kiwi id of its value (None: not a tensor)."""
    rec = builder.records[node.name]
    if rec.meta is None:
        return None  # sizes, shapes and other python values: constants of the graph
    if node.op == "placeholder":
        return builder.add(node.name, "input", "input", kiwi_dtype(rec.meta.dtype, node.name), rec.meta.shape)
    if node.op == "get_attr":
        return builder.param(builder.gm.get_parameter(node.target) if node.target in dict(
            builder.gm.named_parameters()) else _fetch(builder.gm, node.target), node.target)
    if rec.alias_of is not None:
        return builder.kiwi_of[rec.alias_of]
    handler, bound, mod = lookup(node, builder)
    return handler(Call(node, rec, builder, mod, bound))


def _fetch(gm: torch.fx.GraphModule, target: str) -> torch.Tensor:
    obj: Any = gm
    for atom in target.split("."):
        obj = getattr(obj, atom)
    return obj
