"""Which kiwi op kind prices an ATen operator: what the cost model needs of it, not one handler per op.

kiwi's cost model treats GEMM-like kinds (matmul, batch_matmul, conv, attention) on the compute roof
with their efficiency and measured tables, and every other kind as memory-bound (bytes over bandwidth,
docs/cost-model.md). So an ATen op needs only its family; an op this table has never seen is priced as
memory-bound by its bytes and FLOPs (torch's FLOP counter), never refused."""
from typing import Dict, Optional

import torch

_KIND_OF_PACKET: Dict[str, str] = {}


def _register(kind: str, *names: str) -> None:
    for name in names:
        _KIND_OF_PACKET[name] = kind


_register("matmul", "mm", "addmm", "matmul", "linear", "_addmm_activation", "addmv", "mv", "dot", "_int_mm")
_register("batch_matmul", "bmm", "baddbmm")
_register("conv", "convolution", "convolution_backward", "_convolution", "conv2d", "conv1d", "conv3d",
          "mkldnn_convolution", "cudnn_convolution", "_slow_conv2d_forward", "_slow_conv2d_backward",
          "slow_conv3d_forward", "_conv_depthwise2d", "conv_depthwise3d")
_register("attention", "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
          "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
          "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
          "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
          "_flash_attention_forward", "_flash_attention_backward", "_efficient_attention_forward",
          "_efficient_attention_backward")
_register("softmax", "_softmax", "_log_softmax", "_safe_softmax", "_softmax_backward_data",
          "_log_softmax_backward_data")
_register("layernorm", "native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
          "native_batch_norm_backward", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
          "_native_batch_norm_legit_no_training", "native_group_norm", "native_group_norm_backward",
          "_fused_rms_norm", "_fused_rms_norm_backward", "batch_norm_backward")
_register("pool", "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
          "avg_pool2d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "adaptive_max_pool2d",
          "adaptive_max_pool2d_backward", "max_pool3d_with_indices", "avg_pool3d", "_adaptive_avg_pool3d")
_register("embedding", "embedding", "embedding_dense_backward", "_embedding_bag", "index_select")
_register("reduce", "sum", "mean", "amax", "amin", "max", "min", "var_mean", "var", "std", "norm",
          "linalg_vector_norm", "prod", "argmax", "argmin", "logsumexp", "cumsum", "any", "all")
_register("loss", "nll_loss_forward", "nll_loss2d_forward", "mse_loss", "binary_cross_entropy",
          "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss", "l1_loss")
_register("random", "bernoulli", "bernoulli_", "rand", "rand_like", "randn", "randn_like", "randint",
          "native_dropout", "normal", "normal_", "uniform_", "randperm", "multinomial")
_register("transpose", "permute", "transpose", "t")
_register("reshape", "view", "_unsafe_view", "reshape", "clone", "contiguous", "_to_copy", "copy", "copy_",
          "expand", "cat", "stack", "split", "slice", "select", "index", "gather", "scatter", "constant_pad_nd",
          "new_zeros", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "empty", "empty_like",
          "arange", "lift_fresh_copy", "slice_backward", "select_backward", "index_put", "index_put_",
          "scatter_add", "new_empty", "new_ones", "fill", "fill_", "zero_", "masked_fill", "masked_fill_",
          "where", "tril", "triu", "roll", "flip", "repeat", "unfold", "im2col", "col2im")


# The name kiwi's own operators have where a device profile measured the ATen op's bandwidth
# (`op_bandwidth_gbps` of `kiwi profile`); other ops keep their ATen name and the profile's default rate.
_KIWI_OP: Dict[str, str] = {
    "relu": "relu", "threshold_backward": "relu_grad", "gelu": "gelu", "gelu_backward": "gelu_grad", "add": "add",
    "mul": "mul", "_softmax": "softmax", "_safe_softmax": "safe_softmax", "_softmax_backward_data": "softmax_grad",
    "_log_softmax": "log_softmax", "tanh": "tanh", "tanh_backward": "tanh_grad", "silu": "silu",
    "silu_backward": "silu_grad", "exp": "exp",
    "native_layer_norm": "layernorm", "native_layer_norm_backward": "layernorm_grad_x",
    "native_batch_norm": "batchnorm", "native_batch_norm_backward": "batchnorm_grad_x", "sum": "sum",
    "max_pool2d_with_indices": "max_pool", "max_pool2d_with_indices_backward": "max_pool_grad",
    "nll_loss_backward": "nll_loss_grad", "_log_softmax_backward_data": "cross_entropy_grad",
    "bernoulli_": "dropout_mask", "bernoulli": "dropout_mask",
}


# In-place ops that overwrite the tensor they write without reading it (a random fill, `fill_`,
# `zero_`, `copy_`'s destination): their bytes are what they write, plus their other arguments.
_OVERWRITES = frozenset({"bernoulli_", "uniform_", "normal_", "random_", "exponential_", "geometric_", "cauchy_",
                         "log_normal_", "fill_", "zero_", "copy_"})


def overwrites(op: torch._ops.OpOverload) -> bool:
    """Whether `op` writes its in-place argument without reading it first (see _OVERWRITES)."""
    return getattr(getattr(op, "overloadpacket", None), "__name__", "") in _OVERWRITES


# convolution_backward's output mask (input, weight, bias) -> the gradients it runs, named as the
# profile's convolution samples; both in one call is cost's kConvBothGradients suffix (two kernels).
_CONV_GRADIENTS = {(True, False): "_grad_x", (False, True): "_grad_w", (True, True): "_grad_xw"}


def _convolution(args: tuple, weight: int, groups: int) -> str:
    """The op name of a convolution: conv2d_depthwise for one input channel per group (MobileNet's,
    ConvNeXt's), which a device runs at rates of its own, else conv2d. `weight`, `groups`: the indices
    of those arguments in `args`."""
    if len(args) <= max(weight, groups) or not isinstance(args[groups], int) or args[groups] <= 1:
        return "conv2d"
    w = getattr(args[weight], "meta", {}).get("val")
    depthwise = isinstance(w, torch.Tensor) and w.dim() > 2 and w.shape[1] == 1
    return "conv2d_depthwise" if depthwise else "conv2d"


def kiwi_op(op: torch._ops.OpOverload, backward: bool, args: tuple = ()) -> str:
    """The node's `op`: kiwi's name where the cost model keys on one (attention's direction, a
    profile's per-op bandwidth, a convolution's kind and the gradients in its output mask, from its
    fx `args`), else the ATen op's name."""
    name = getattr(getattr(op, "overloadpacket", None), "__name__", str(op))
    if kiwi_kind(op) == "attention":
        return "attention_grad_q" if backward else "attention"
    if name == "convolution":   # (input, weight, bias, stride, padding, dilation, transposed, out padding, groups)
        return _convolution(args, 1, 8)
    if name == "convolution_backward" and len(args) > 10 and isinstance(args[10], (list, tuple)):
        grads = _CONV_GRADIENTS.get(tuple(bool(m) for m in args[10][:2]))   # (grad_out, input, weight, ..., groups, mask)
        return _convolution(args, 2, 9) + grads if grads else name
    return _KIWI_OP.get(name, name)


def kiwi_kind(op: torch._ops.OpOverload) -> str:
    """The kiwi op kind that prices `op` (ir::OpKindName); "elementwise" for everything else."""
    packet = getattr(op, "overloadpacket", None)
    name = getattr(packet, "__name__", "")
    return _KIND_OF_PACKET.get(name, "elementwise")


def is_random(op: torch._ops.OpOverload, args: tuple = (), kwargs: Optional[dict] = None) -> bool:
    """An op whose values come from the random-number generator (replayed under its state when
    recomputed). An op that only may draw (attention with a dropout_p argument) does not when it is 0."""
    tags = getattr(op, "tags", ())
    if not (torch.Tag.nondeterministic_seeded in tags or kiwi_kind(op) == "random"):
        return False
    schema = getattr(op, "_schema", None)
    for i, arg in enumerate(schema.arguments if schema is not None else ()):
        if arg.name == "dropout_p":
            value = args[i] if i < len(args) else (kwargs or {}).get(arg.name, arg.default_value)
            return not (isinstance(value, (int, float)) and value == 0)
    return True
