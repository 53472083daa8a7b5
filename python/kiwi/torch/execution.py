"""Runs the nodes of a torch.fx GraphModule one at a time, out of place, and identifies the tensors
autograd saves while a node runs. Shared by capture (which records what is saved) and by the applied
module (which keeps or drops what is saved), so that both see exactly the same operations.

kiwi's IR has no aliasing: every op makes a new tensor. In-place variants (nn.ReLU(inplace=True),
`out += x`, `x.relu_()`) therefore run out of place; values are the same, gradients too."""
import copy
import operator
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.fx

_IN_PLACE_OPERATORS = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
}


def storage_ptr(t: torch.Tensor) -> int:
    """Address of the tensor's storage (version-tolerant: untyped_storage in 2.x, storage in 1.13)."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def storage_nbytes(t: torch.Tensor) -> int:
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().nbytes()
    return t.storage().nbytes()


def tensor_key(t: torch.Tensor) -> Tuple[int, Tuple[int, ...], Tuple[int, ...], torch.dtype]:
    """Identifies a tensor by what it reads: address, shape, strides, dtype."""
    return t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype


def _out_of_place_method(name: str) -> str:
    if name.endswith("_") and not name.startswith("_") and hasattr(torch.Tensor, name[:-1]):
        return name[:-1]
    return name


class NodeRunner:
    """Executes FX nodes of one GraphModule; in-place modules run as out-of-place copies."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.modules: Dict[str, torch.nn.Module] = dict(gm.named_modules())
        self._out_of_place: Dict[str, torch.nn.Module] = {}

    def module(self, target: str) -> torch.nn.Module:
        mod = self.modules[target]
        if getattr(mod, "inplace", False) is True:
            if target not in self._out_of_place:
                twin = copy.copy(mod)  # shares parameters and buffers
                twin.inplace = False
                self._out_of_place[target] = twin
            return self._out_of_place[target]
        return mod

    def fetch_attr(self, target: str) -> Any:
        obj: Any = self.gm
        for atom in target.split("."):
            obj = getattr(obj, atom)
        return obj

    def callable(self, node: torch.fx.Node) -> Callable[..., Any]:
        """What the node calls, out of place."""
        if node.op == "call_module":
            return self.module(node.target)
        if node.op == "call_function":
            return _IN_PLACE_OPERATORS.get(node.target, node.target)
        if node.op == "call_method":
            name = _out_of_place_method(node.target)
            return lambda obj, *a, **k: getattr(obj, name)(*a, **k)
        raise ValueError(f"node {node.name}: op {node.op} is not a call")

    def run(self, node: torch.fx.Node, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if node.op == "get_attr":
            return self.fetch_attr(node.target)
        if kwargs.get("inplace") is True:
            kwargs = dict(kwargs, inplace=False)
        return self.callable(node)(*args, **kwargs)


def load_args(node: torch.fx.Node, env: Dict[str, Any]) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    args = torch.fx.node.map_arg(node.args, lambda n: env[n.name])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n.name])
    return tuple(args), dict(kwargs)


def last_uses(gm: torch.fx.GraphModule) -> Dict[str, str]:
    """For each node, the name of the last node that reads it (torch.fx.Interpreter's rule)."""
    last: Dict[str, str] = {}
    for node in gm.graph.nodes:
        for arg in node.all_input_nodes:
            last[arg.name] = node.name
    return last


def is_random(runner: NodeRunner, node: torch.fx.Node) -> bool:
    """Ops that draw random numbers (dropout, attention with dropout_p > 0): recomputing them must replay
    the RNG state."""
    if node.op == "call_module":
        return isinstance(runner.modules[node.target], torch.nn.modules.dropout._DropoutNd)
    if node.op == "call_function" and node.target is torch.nn.functional.scaled_dot_product_attention:
        p = node.kwargs.get("dropout_p", node.args[4] if len(node.args) > 4 else 0.0)
        return isinstance(p, torch.fx.Node) or float(p) > 0  # a computed dropout_p: assume it may draw
    target = getattr(node.target, "__name__", str(node.target))
    return "dropout" in target or "bernoulli" in target or "rand" in target


def batchnorm_module(runner: NodeRunner, node: torch.fx.Node) -> Optional[torch.nn.Module]:
    if node.op == "call_module":
        mod = runner.modules[node.target]
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            return mod
    return None
