"""Finds a model's layers generically: the repeated blocks of its module tree (the longest
nn.ModuleList of one class, most parameters first), or the ModuleList a user names."""
from typing import List, Optional, Tuple

import torch

from kiwi.torch.distributed.plan import PlanError


def vocabulary_ends(model: torch.nn.Module) -> Tuple[Optional[torch.nn.Module], Optional[torch.nn.Module], bool]:
    """(input embedding, output head, tied) as the model names them (HuggingFace's get_input_embeddings /
    get_output_embeddings; None where it names none); tied: both share one weight."""
    def found(getter: str) -> Optional[torch.nn.Module]:
        try:  # a pipeline stage may have dropped the module the getter walks through (BERT's cls)
            return getattr(model, getter)() if hasattr(model, getter) else None
        except AttributeError:
            return None
    embed, head = found("get_input_embeddings"), found("get_output_embeddings")
    weight = getattr(head, "weight", None)
    return embed, head, weight is not None and weight is getattr(embed, "weight", None)


def _parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def find_blocks(model: torch.nn.Module, path: Optional[str] = None) -> Tuple[str, torch.nn.ModuleList]:
    """(dotted path, ModuleList) of the model's repeated blocks: `path` when given, else the ModuleList
    whose children are all of one class with parameters, the longest (then the heaviest) one."""
    if path is not None:
        try:
            found = model.get_submodule(path)
        except AttributeError:
            raise PlanError(f"blocks: {path!r}: no such submodule of {type(model).__name__}") from None
        if not isinstance(found, torch.nn.ModuleList) or len(found) == 0:
            raise PlanError(f"blocks: {path!r}: a {type(found).__name__}, not a non-empty nn.ModuleList")
        return path, found
    best: Optional[Tuple[int, int, str, torch.nn.ModuleList]] = None
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) == 0:
            continue
        kinds = {type(child) for child in module}
        if len(kinds) != 1 or _parameters(module) == 0:
            continue
        key = (len(module), _parameters(module), name, module)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        raise PlanError(f"blocks: {type(model).__name__} has no nn.ModuleList of repeated blocks; name them "
                        "(parallelize(..., blocks='path.to.layers'))")
    return best[2], best[3]


def block_names(path: str, blocks: torch.nn.ModuleList) -> List[str]:
    """The dotted names of the blocks, for error messages."""
    return [f"{path}.{i}" if path else str(i) for i in range(len(blocks))]
