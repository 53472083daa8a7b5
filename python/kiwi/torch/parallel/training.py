"""One training step of a parallelized model as its plan says: this DP rank's share of the global
batch in the plan's micro-batches, gradients accumulated over them (DP and ZeRO-1 layers synchronise
only after the last one, ZeRO-2/3 layers after every one), then the optimizer step."""
import contextlib
import inspect
from typing import Any, Callable, Dict, Optional, Union

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel

from kiwi.torch.distributed.plan import PlanError
from kiwi.torch.parallel.apply import ParallelModel
from kiwi.torch.parallel.data_parallel import set_micro_batch_sync

Batch = Union[torch.Tensor, Dict[str, Any]]


def _rows(batch: Batch, start: int, stop: int) -> Batch:
    if isinstance(batch, torch.Tensor):
        return batch[start:stop]
    return {k: v[start:stop] if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in batch.items()}


def _samples(batch: Batch) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    sizes = {v.shape[0] for v in batch.values() if isinstance(v, torch.Tensor) and v.dim() > 0}
    if len(sizes) != 1:
        raise PlanError(f"batch: its tensors disagree on the number of samples ({sorted(sizes)})")
    return sizes.pop()


def local_batch(pm: ParallelModel, batch: Batch) -> Batch:
    """This DP rank's rows of a global batch (plan.global_batch samples, the same on every rank)."""
    if _samples(batch) != pm.plan.global_batch:
        raise PlanError(f"batch: {_samples(batch)} samples where the plan's global_batch is {pm.plan.global_batch}")
    share = pm.plan.global_batch // pm.dp
    return _rows(batch, pm.dp_rank * share, (pm.dp_rank + 1) * share)


def _no_cache(model: torch.nn.Module) -> Dict[str, bool]:
    """{"use_cache": False} for a model whose forward names use_cache (HuggingFace's decoders), else {}.
    Training needs no key/value cache, and HuggingFace's DynamicCache concatenates each layer's keys and
    values into tensors of its own that attention then saves for the backward pass: on GPT-2, whose keys
    and values are views of the fused q/k/v output that the query keeps anyway, two tensors a layer more
    than kiwi's graph counts."""
    try:
        named = "use_cache" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        named = False
    return {"use_cache": False} if named else {}



def _loss_of_output(output: Any) -> torch.Tensor:
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is None:
        raise PlanError("loss_fn: the model's output has no .loss; pass step(..., loss_fn=lambda output, batch: ...)")
    return loss


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _check_sequence(pm: ParallelModel, batch: Batch) -> None:
    degrees = {s.tp for s in pm.plan.layers if s.sequence_split}
    tensors = [batch] if isinstance(batch, torch.Tensor) else [v for v in batch.values() if isinstance(v, torch.Tensor)]
    for tp in sorted(degrees):
        for t in tensors:
            if t.dim() > 1 and t.shape[1] % tp:
                raise PlanError(f"batch: sequence parallelism: tp {tp} does not divide the sequence of {t.shape[1]} tokens")


def step(pm: ParallelModel, optimizer: torch.optim.Optimizer, batch: Batch,
         loss_fn: Optional[Callable[[Any, Batch], torch.Tensor]] = None) -> float:
    """One step on this DP rank's `batch` (plan.global_batch / dp samples): forward and backward of each
    micro-batch with the loss scaled by 1 / micro_batches, then `optimizer.step()`. The model is called
    as model(**batch) for a dict, model(batch) for a tensor; its loss is output.loss unless `loss_fn`
    says. Returns this rank's mean loss."""
    m = pm.plan.micro_batches
    if _samples(batch) != pm.plan.global_batch // pm.dp:
        raise PlanError(f"batch: {_samples(batch)} samples on this rank where the plan gives each of its {pm.dp} "
                        f"data-parallel ranks {pm.plan.global_batch // pm.dp} (kiwi.torch.parallel.local_batch)")
    _check_sequence(pm, batch)
    if loss_fn is not None and "labels" in pm.groups:
        raise PlanError("loss_fn: the plan's last layer lays out samples otherwise than its first, so the head's "
                        "output holds other rows than the batch: kiwi.torch.parallelize gives the model's own loss "
                        "its labels of that layout (pass them as model(..., labels=...) and no loss_fn)")
    if pm.schedule is not None:
        return _pipeline_step(pm, optimizer, batch)
    size = pm.micro_batch
    total = 0.0
    vocabulary_parallel = loss_parallel if pm.vocabulary_parallel_loss else contextlib.nullcontext
    for k in range(m):
        last = k == m - 1
        set_micro_batch_sync(pm.accumulating, pm.unsharded, last)
        micro = _rows(batch, k * size, (k + 1) * size)
        with vocabulary_parallel():  # forward and backward, as torch's loss_parallel requires
            output = pm.model(**micro, **_no_cache(pm.model)) if isinstance(micro, dict) else pm.model(micro)
            loss = loss_fn(output, micro) if loss_fn else _loss_of_output(output)
            del output  # its logits: the backward pass keeps what it needs, the step nothing more
            (loss / m).backward()
        total += float(_full(loss.detach()))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total / m


def _pipeline_step(pm: ParallelModel, optimizer: torch.optim.Optimizer, batch: Batch) -> float:
    """One step of the plan's pipeline schedule: the first stage feeds the token ids, the last computes
    the model's loss per micro-batch; every rank returns the last stage's mean loss."""
    if not isinstance(batch, dict) or "input_ids" not in batch or "labels" not in batch:
        raise PlanError("batch: a pipelined plan takes {'input_ids': ..., 'labels': ...}")
    first, last = pm.stage == 0, pm.stage == pm.plan.pp_degree - 1
    losses: list = []
    kwargs = {"target": batch["labels"], "losses": losses} if last else {}
    if last and "return_outputs" in inspect.signature(pm.schedule.step).parameters:
        kwargs["return_outputs"] = False  # else the last stage keeps every micro-batch's logits to the end
    if first:
        pm.schedule.step(batch["input_ids"], **kwargs)
    else:
        pm.schedule.step(**kwargs)
    if pm.tied is not None:  # the first and the last stage's copies of a tied embedding take one step
        pm.tied.sum_gradients()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    loss = torch.stack([l.detach().float() for l in losses]).mean() if last else torch.zeros(())
    group = pm.mesh.get_group("pp")
    dist.broadcast(loss, group=group, group_src=pm.plan.pp_degree - 1)
    return float(loss)
