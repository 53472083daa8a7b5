"""One rank's training run of a plan (build the stage, N iterations on synthetic data, measure), and
the single-process reference the tests compare it with."""
import dataclasses
import statistics
import time
from typing import Any, Dict, List, Optional

import torch

from kiwi.torch import caching_allocator
from kiwi.torch.capture import OptimizerSpec
from kiwi.torch.costs import make_optimizer as make_torch_optimizer
from kiwi.torch.distributed import model as gpt
from kiwi.torch.distributed.comm_counter import CommCounter
from kiwi.torch.distributed.data_parallel import GradSync
from kiwi.torch.distributed.groups import GroupPool, Layout
from kiwi.torch.distributed.pipeline import PipelineRunner, Stage
from kiwi.torch.distributed.plan import HybridPlan
from kiwi.torch.distributed.units import Unit


@dataclasses.dataclass
class TrainOptions:
    iterations: int = 3
    optimizer: str = "sgd"        # "sgd" (plain, no momentum), "adam" or "fused_adam" (Adam(fused=True))
    lr: float = 0.05
    seed: int = 0
    bucket_bytes: int = 25 << 20  # DP all-reduce buckets (PyTorch DDP's default size)
    measure_memory: bool = False  # profile the last iteration's memory (CPU: torch.profiler events)
    schedule: Optional[str] = None  # override the plan's pipeline ("1f1b" / "gpipe")


def median_after_first(values: List[float]) -> float:
    """The median of per-iteration figures without the first iteration (warm-up) when there are more."""
    rest = values[1:] or values
    return statistics.median(rest) if rest else 0.0


def make_optimizer(params: List[torch.Tensor], o: TrainOptions) -> torch.optim.Optimizer:
    """The optimizer kiwi prices for the plan's name, made as kiwi.torch makes it (plain SGD is kiwi's
    "sgd": no momentum state)."""
    if o.optimizer not in ("adam", "fused_adam", "sgd"):
        raise ValueError(f"optimizer: must be sgd, adam or fused_adam, got {o.optimizer!r}")
    return make_torch_optimizer(OptimizerSpec.of(o.optimizer), params, lr=o.lr)


def _strategies(plan: HybridPlan, stage: int):
    return [plan.layers[i] for i in plan.stage_layers(stage)]


def _transitions(plan: HybridPlan, stage: int):
    """(previous, next) strategies of each layer of the stage after the model's first (the previous one
    may run on the stage before: the stage reshards what it receives)."""
    return [(plan.layers[i - 1], plan.layers[i]) for i in plan.stage_layers(stage) if i >= 1]


def build_stage(plan: HybridPlan, config: gpt.GptConfig, layout: Layout, counter: CommCounter, o: TrainOptions):
    pool = GroupPool(layout, {s: _strategies(plan, s) for s in range(plan.pp_degree)},
                     {s: _transitions(plan, s) for s in range(plan.pp_degree)})
    full = gpt.full_parameters(config, o.seed)
    grad_sync = GradSync(counter, o.bucket_bytes)
    keys = [str(i) for i in plan.stage_layers(layout.stage)]
    if layout.stage == 0:
        keys = ["embed"] + keys
    if layout.stage == plan.pp_degree - 1:
        keys = keys + ["head"]
    units = []
    for key in keys:  # the embeddings run with the first layer's strategy, the head with the last's
        s = plan.layers[0 if key == "embed" else -1 if key == "head" else int(key)]
        units.append(Unit(key, s, full[key], config, layout, pool, counter, grad_sync))
    grad_sync.build()
    return Stage(plan, config, layout, pool, units, counter), grad_sync


def train_rank(plan: HybridPlan, config: gpt.GptConfig, o: TrainOptions, rank: int, world: int,
               reference: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Runs o.iterations iterations of `plan` on this rank (torch.distributed already initialised)."""
    plan.check_world(world)
    plan.check_whole_layer_recomputation()
    plan.check_sequence(config.seq)
    layout = Layout(plan, world, rank)
    counter = CommCounter()
    stage, grad_sync = build_stage(plan, config, layout, counter, o)
    runner = PipelineRunner(stage, layout, counter, grad_sync)
    params = [p for u in stage.units for p in u.parameters()]
    optimizer = make_optimizer(params, o)
    plan.check_schedule(o.schedule)
    schedule = o.schedule or plan.pipeline
    result: Dict[str, Any] = {"rank": rank, "stage": layout.stage, "losses": [], "seconds": [], "comm": [],
                              "optimizer_seconds": [], "comm_seconds": []}
    head = [u for u in stage.units if u.key == "head"]
    result["reports_loss"] = bool(head) and head[0].tp_rank == 0

    def step(iteration: int):
        ids, labels = gpt.synthetic_batch(config, plan.global_batch, iteration, o.seed)
        stage.set_batch(ids, labels)
        for p in params:
            p.grad = None
        runner.run(schedule, plan.micro_batches)
        grad_sync.finish()
        for unit in stage.units:
            unit.before_step()
        t0 = time.perf_counter()
        optimizer.step()
        result["optimizer_seconds"].append(time.perf_counter() - t0)
        for unit in stage.units:
            unit.after_step()

    for it in range(o.iterations):
        counter.reset()
        last = it == o.iterations - 1
        if last and o.measure_memory:
            from kiwi.torch.measure import measure_step, optimizer_tensors
            resident = [t for u in stage.units for t in u.resident()]
            m = measure_step(lambda: step(it), resident + optimizer_tensors(optimizer))
            result["peak_memory_bytes"] = m.peak_bytes
            result["resident_bytes"] = m.resident_bytes
        else:
            t0 = time.perf_counter()
            step(it)
            result["seconds"].append(time.perf_counter() - t0)
        result["losses"].append(sum(runner.losses))
        result["comm"].append(counter.snapshot())
        result["comm_seconds"].append(dict(counter.seconds))
    result["glibc_caching_allocator"] = caching_allocator.is_set()
    result["iteration_seconds"] = median_after_first(result["seconds"]) if result["seconds"] else None
    result["parameter_count"] = sum(p.numel() for p in params)
    if reference is not None:
        result["max_parameter_difference"] = max(u.max_difference(reference["parameters"][u.key]) for u in stage.units)
    return result


def reference_training(plan: HybridPlan, config: gpt.GptConfig, o: TrainOptions) -> Dict[str, Any]:
    """The same model, data and optimizer on one process, whole batch at once: losses per iteration and
    the parameters after the last one."""
    full = gpt.full_parameters(config, o.seed)
    leaves = {k: {n: t.clone().requires_grad_(True) for n, t in unit.items()} for k, unit in full.items()}
    optimizer = make_optimizer([t for unit in leaves.values() for t in unit.values()], o)
    losses = []
    tokens = plan.global_batch * config.seq
    for it in range(o.iterations):
        ids, labels = gpt.synthetic_batch(config, plan.global_batch, it, o.seed)
        optimizer.zero_grad(set_to_none=True)
        x = gpt.embed_forward(leaves["embed"], ids)
        for i in range(config.layers):
            x = gpt.layer_forward(leaves[str(i)], x, config.heads)
        loss = gpt.head_forward(leaves["head"], x, labels, tokens)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return {"losses": losses,
            "parameters": {k: {n: t.detach().clone() for n, t in unit.items()} for k, unit in leaves.items()}}
