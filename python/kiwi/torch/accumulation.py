"""Runs a planned training step (RematModule.train_step): the batch as k micro-batches whose gradients
accumulate in .grad, each micro-batch's loss scaled by 1/k (a mean over the batch is the mean of the
micro-batches' means), dropout masks drawn once for the whole batch as the unsplit model draws them,
then the optimizer step, in chunks when the plan says (chunked_optimizer)."""
from typing import Any, Callable, Dict, Optional

import torch
import torch.fx
import torch.nn.functional as F
from torch.autograd.profiler import record_function

from kiwi.torch.chunked_optimizer import chunked_step
from kiwi.torch.errors import PlanError

_DROPOUT_MODULES = tuple(getattr(torch.nn, n) for n in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d")
                         if hasattr(torch.nn, n))
_DROPOUT_FUNCTIONS = tuple(f for f in (F.dropout, getattr(F, "dropout1d", None), F.dropout2d, F.dropout3d,
                                       torch.dropout) if f is not None)


def captured_loss(captured) -> Optional[Callable[..., Any]]:
    """The loss capture appended (None when the model returns its loss)."""
    if not captured.loss_outside:
        return None
    loss = captured.source.get("loss", "cross_entropy")
    return F.cross_entropy if loss == "cross_entropy" else loss


def run_step(module, inputs: Any, labels: Optional[torch.Tensor], optimizer: Optional[torch.optim.Optimizer]):
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    k = module.config.micro_batches
    if module.loss_fn is not None and labels is None:
        raise PlanError("train_step: the model was captured with labels=; give the step's labels")
    batch = inputs[0].shape[0] if inputs and isinstance(inputs[0], torch.Tensor) else 0
    if k > 1 and batch % k:
        raise PlanError(f"train_step: the plan splits the batch into {k} micro-batches; {batch} samples do not")
    rows_of = batch // k if k > 1 else batch
    masks = _batch_masks(module, batch) if k > 1 else {}
    total = None
    try:
        for j in range(k):
            rows = slice(j * rows_of, (j + 1) * rows_of) if k > 1 else slice(None)
            module._batch = (masks, rows)
            out = module(*[t[rows] if isinstance(t, torch.Tensor) else t for t in inputs])
            with record_function("kiwi::loss"):
                loss = module.loss_fn(out, labels[rows]) if module.loss_fn is not None else out
                if k > 1:
                    loss = loss * (1.0 / k)
            del out
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
            del loss
    finally:
        module._batch = None
    if optimizer is not None:
        with record_function("kiwi::optimizer"):
            if module.config.optimizer_chunk_bytes:
                chunked_step(optimizer, module.config.optimizer_chunk_bytes)
            else:
                optimizer.step()
    return total


def _batch_masks(module, batch: int) -> Dict[str, torch.Tensor]:
    """Each dropout's mask for the whole batch, in forward order: dropout applied to ones (its mask,
    scaled), drawing from the generator exactly what the unsplit forward pass draws."""
    p = module._program
    masks: Dict[str, torch.Tensor] = {}
    for node in p.nodes:
        if node.name not in p.random or not _is_dropout(p.runner, node) or node.name not in p.meta:
            continue
        if _has_node((node.args[1:], node.kwargs)):
            continue  # p or training computed by the model: it draws per micro-batch
        meta = p.meta[node.name]
        ones = torch.ones((batch,) + tuple(meta.shape[1:]), dtype=meta.dtype, device=_device(module))
        with torch.no_grad():
            masks[node.name] = p.runner.run(node, (ones,) + tuple(node.args[1:]), dict(node.kwargs))
    return masks


def _has_node(value: Any) -> bool:
    found = []
    torch.fx.node.map_arg(value, lambda n: found.append(n) or n)
    return bool(found)


def _is_dropout(runner, node: torch.fx.Node) -> bool:
    if node.op == "call_module":
        return type(runner.modules[node.target]) in _DROPOUT_MODULES
    return node.op == "call_function" and node.target in _DROPOUT_FUNCTIONS


def _device(module) -> torch.device:
    p = next(iter(module.graph_module.parameters()), None)
    return p.device if p is not None else torch.device("cpu")
