"""An FX node's arguments as a template with numbered slots for its tensor arguments, filled for each
run without torch's pytree (which costs more than most small ops: 70% of the runner's time before)."""
from typing import Any, Dict, List, Tuple

import torch.fx


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _compile(value: Any, nodes: List[torch.fx.Node]) -> Any:
    if isinstance(value, torch.fx.Node):
        nodes.append(value)
        return _Slot(len(nodes) - 1)
    if isinstance(value, list):   # FX's immutable_list too: ATen wants a plain list
        return [_compile(v, nodes) for v in value]
    if isinstance(value, tuple):
        return tuple(_compile(v, nodes) for v in value)
    if isinstance(value, dict):
        return {k: _compile(v, nodes) for k, v in value.items()}
    return value


def _has_slot(value: Any) -> bool:
    if isinstance(value, _Slot):
        return True
    if type(value) in (list, tuple):
        return any(_has_slot(v) for v in value)
    if type(value) is dict:
        return any(_has_slot(v) for v in value.values())
    return False


def _fill(value: Any, values: List[Any]) -> Any:
    t = type(value)
    if t is _Slot:
        return values[value.index]
    if t is list:
        return [_fill(v, values) for v in value]
    if t is tuple:
        return tuple(_fill(v, values) for v in value)
    if t is dict:
        return {k: _fill(v, values) for k, v in value.items()}
    return value


class ArgTemplate:
    """node.args/kwargs with each FX node argument a slot: `nodes[i]` fills slot i."""

    def __init__(self, node: torch.fx.Node):
        self.nodes: List[torch.fx.Node] = []
        self._args = _compile(tuple(node.args), self.nodes)
        self._kwargs = _compile(dict(node.kwargs), self.nodes)
        # Most ops: tensors at the top level of the positional arguments, constants elsewhere.
        self._flat = [(i, a.index) for i, a in enumerate(self._args) if isinstance(a, _Slot)]
        nested = any(_has_slot(a) for a in self._args if not isinstance(a, _Slot)) or _has_slot(self._kwargs)
        self._flat_only = not nested

    def fill(self, values: List[Any]) -> Tuple[tuple, Dict[str, Any]]:
        if self._flat_only:
            args = list(self._args)
            for position, slot in self._flat:
                args[position] = values[slot]
            return tuple(args), self._kwargs
        return _fill(self._args, values), _fill(self._kwargs, values)
