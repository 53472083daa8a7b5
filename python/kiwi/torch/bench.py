"""Predicted vs measured: for a torchvision model and a list of budgets (fractions of the
no-rematerialization peak), plan with kiwi, apply, run a real training step (forward, backward, Adam
step) and print kiwi's predicted peak memory and time next to the measured ones, the gradients'
largest difference from the unmodified model, and PyTorch's checkpoint_sequential for comparison.

    .venv/bin/python -m kiwi.torch.bench --model resnet50 --batch 32 \\
        --budgets 1.0,0.8,0.6 --segments 2,4,8 --costs measured
"""
import argparse
import dataclasses
import inspect
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential

import kiwi
import kiwi.torch as kt
from kiwi.torch import measure
from kiwi.torch.costs import make_optimizer, runner_profile


@dataclasses.dataclass
class Row:
    config: str
    budget_bytes: Optional[int]
    predicted_peak: Optional[int]
    measured_peak: Optional[int]
    predicted_seconds: Optional[float]
    measured_seconds: Optional[float]
    grad_max_abs_diff: Optional[float]
    grads_equal: Optional[bool]
    recomputed: Optional[int] = None
    note: str = ""
    analytic_peak: Optional[int] = None  # the same plan predicted with analytic costs (no profiling)
    step: str = ""                       # the plan's step: micro-batches, optimizer chunks


def sequential_form(model: nn.Module) -> nn.Sequential:
    """The model as one nn.Sequential for checkpoint_sequential (torchvision VGG and ResNet). An in-place
    activation stays with the module before it: a segment that began with one would modify its input,
    which PyTorch's reentrant checkpoint forbids."""
    if isinstance(model, nn.Sequential):
        modules = list(model)
    elif hasattr(model, "features") and hasattr(model, "classifier"):
        modules = [*model.features, model.avgpool, nn.Flatten(1), *model.classifier]
    elif hasattr(model, "layer4"):
        modules = [model.conv1, model.bn1, model.relu, model.maxpool]
        for name in ("layer1", "layer2", "layer3", "layer4"):
            modules.extend(getattr(model, name))
        modules += [model.avgpool, nn.Flatten(1), model.fc]
    else:
        raise kt.PlanError(f"{type(model).__name__}: no sequential form for checkpoint_sequential")
    merged: List[nn.Module] = []
    for m in modules:
        if getattr(m, "inplace", False) and merged:
            prev = merged.pop()
            m = nn.Sequential(*(list(prev) if isinstance(prev, nn.Sequential) else [prev]), m)
        merged.append(m)
    return nn.Sequential(*merged)


class Harness:
    """Runs training steps of variants of one model from identical parameters, inputs and RNG state."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float, seed: int, optimizer: str):
        self.model, self.x, self.y, self.lr, self.seed = model, x, y, lr, seed
        self.optimizer = kt.OptimizerSpec.of(optimizer)
        self.pristine = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.reference: Optional[List[torch.Tensor]] = None

    def run(self, forward: Callable[[torch.Tensor], torch.Tensor], repeat: int = 0, planned: Any = None):
        """One profiled step (peak memory, gradients) from the pristine state, then `repeat` unprofiled
        steps; the time is the fastest of them all (on the CPU, the process's CPU time). `planned`: a
        RematModule whose train_step runs the step (micro-batches, chunked optimizer) instead."""
        self.model.load_state_dict(self.pristine)
        params = [p for p in self.model.parameters() if p.requires_grad]
        opt = make_optimizer(self.optimizer, params, lr=self.lr)
        measure.prime_optimizer(opt)
        for p in params:
            p.grad = None
        torch.manual_seed(self.seed)
        if planned is not None:
            step = lambda: planned.train_step((self.x,), self.y, opt)  # noqa: E731
        else:
            step = lambda: measure.training_step(forward, (self.x,), self.y, F.cross_entropy, opt)  # noqa: E731
        m = measure.measure_step(step, measure.step_tensors(self.model, opt, [self.x, self.y]))
        grads = [p.grad.detach().clone() for p in params]
        if m.device == "cpu":  # CPU time of this process: other processes' load does not inflate it
            m.seconds = m.cpu_seconds
        for _ in range(repeat):
            for p in params:
                p.grad = None
            t0, c0 = time.perf_counter(), time.process_time()
            step()
            m.seconds = min(m.seconds, time.process_time() - c0 if m.device == "cpu" else time.perf_counter() - t0)
        return m, grads

    def compare(self, grads: List[torch.Tensor]) -> float:
        """The largest difference from the unmodified model's gradients, relative to each gradient's
        largest magnitude (float32 sums in another order differ by ~1e-7 of it)."""
        if self.reference is None:
            self.reference = [g.detach().clone() for g in grads]
            return 0.0
        return largest_relative_difference(grads, self.reference)


def largest_relative_difference(grads: Sequence[Optional[torch.Tensor]], reference: Sequence[torch.Tensor]) -> float:
    """The largest difference of a gradient from its reference, relative to the reference's largest
    magnitude: 0.0 is bit for bit (gradients that are None are skipped)."""
    return max((float((a - b).abs().max()) / max(float(b.abs().max()), 1e-30)
                for a, b in zip(grads, reference) if a is not None), default=0.0)


def gradient_agreement(grads: Sequence[Optional[torch.Tensor]], reference: Sequence[torch.Tensor]) -> str:
    """A bench's gradients column: "=" bit for bit, else largest_relative_difference as 1e-06."""
    worst = largest_relative_difference(grads, reference)
    return "=" if worst == 0.0 else f"{worst:.0e}"


def modelled_seconds(cap: Any, schedule: List[Dict[str, Any]], profile: Any = None) -> float:
    """A generic capture's schedule priced by kiwi's cost model (analytic, or with a `kiwi profile`
    device profile) instead of the op times measured at capture."""
    graph = dict(cap.graph, nodes=[{k: v for k, v in n.items() if k != "cost"} for n in cap.graph["nodes"]])
    return kiwi.simulate(graph, kiwi.make_plan(schedule), cap.cluster, runner_profile(profile))["iteration_seconds"]


def _ckpt_forward(seq: nn.Sequential, segments: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """checkpoint_sequential; PyTorch 1.x's (reentrant) checkpoint gives parameters no gradient unless
    its input requires one, so there the input does (its gradient: one input-sized tensor more)."""
    if "use_reentrant" in inspect.signature(checkpoint_sequential).parameters:
        return lambda x: checkpoint_sequential(seq, segments, x, use_reentrant=False)
    return lambda x: checkpoint_sequential(seq, segments, x.detach().requires_grad_(True))


def _kiwi_row(h: Harness, cap, model: nn.Module, args: argparse.Namespace, config: str,
              fraction: Optional[float] = None, budget: Optional[int] = None) -> Row:
    """Plans for a budget (a fraction of the no-remat peak, or bytes), applies, runs and compares."""
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if not args.quiet else (lambda *a: None)
    try:
        plan = kt.plan_remat(cap, budget=budget, fraction=fraction, solver=args.solver, time_limit=args.time_limit)
    except kiwi.InfeasibleError as e:
        limit = budget if budget is not None else int(fraction * kt.predict(cap, [])["peak"])
        log(f"{config}: {e}")
        return Row(config, limit, None, None, None, None, None, None, note=f"infeasible: {e}")
    module = kt.apply_remat(model, plan)
    m, grads = h.run(module, args.repeat, planned=module)
    diff = h.compare(grads)
    log(f"{config}: predicted {kiwi.format_bytes(plan.predicted_peak_bytes)}, measured "
        f"{kiwi.format_bytes(m.peak_bytes)}, {m.seconds:.1f} s, grad diff {diff:.2e}")
    return Row(config, plan.budget_bytes, plan.predicted_peak_bytes, m.peak_bytes, plan.predicted_seconds, m.seconds,
               diff, diff <= args.tolerance, len(plan.dropped),
               f"{plan.solver}, {module.last_step.fallbacks} unplanned recomputations",
               _analytic_peak(getattr(h, "analytic", None), plan), plan.config.describe())


def _analytic_peak(analytic, plan) -> Optional[int]:
    """The plan's dropped tensors (by name) predicted on an analytically costed capture."""
    if analytic is None:
        return None
    analytic = analytic.at_batch(analytic.batch // plan.micro_batches)
    ids = {n["name"]: n["id"] for n in analytic.graph["nodes"]}
    return kt.predict(analytic, [ids[name] for name in plan.names()], plan.config)["peak"]


def run_bench(args: argparse.Namespace) -> Dict[str, Any]:
    import torchvision
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, args.model)(num_classes=args.classes).train()
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, args.classes, (args.batch,))
    h = Harness(model, x, y, args.lr, args.seed, args.optimizer)
    rows: List[Row] = []
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if not args.quiet else (lambda *a: None)
    m, grads = h.run(model, args.repeat)
    h.compare(grads)
    rows.append(Row("unmodified model", None, None, m.peak_bytes, None, m.seconds, 0.0, True, note="in-place ops"))
    log(f"unmodified: peak {kiwi.format_bytes(m.peak_bytes)}, {m.seconds:.1f} s")
    del grads
    h.model.load_state_dict(h.pristine)
    t0 = time.perf_counter()
    cap = kt.capture(model, (x,), labels=y, optimizer=args.optimizer, costs=args.costs)
    log(f"captured {len(cap.graph['nodes'])} kiwi nodes in {time.perf_counter() - t0:.1f} s ({args.costs} costs)")
    if args.costs == "measured":  # also predict each plan from analytic costs: what profiling adds
        h.analytic = kt.capture(model, (x,), labels=y, optimizer=args.optimizer, costs="analytic")
        h.model.load_state_dict(h.pristine)
    for fraction in args.budgets:
        rows.append(_kiwi_row(h, cap, model, args, f"kiwi {fraction:.0%}", fraction=fraction))
    seq = sequential_form(model)
    for s in args.segments:
        m, grads = h.run(_ckpt_forward(seq, s), args.repeat)
        diff = h.compare(grads)
        del grads
        rows.append(Row(f"checkpoint_sequential {s}", None, None, m.peak_bytes, None, m.seconds, diff,
                        diff <= args.tolerance))
        log(f"checkpoint_sequential {s}: {kiwi.format_bytes(m.peak_bytes)}, {m.seconds:.1f} s, grad diff {diff:.2e}")
        if args.equal_memory:
            rows.append(_kiwi_row(h, cap, model, args, f"kiwi at checkpoint_sequential {s}'s peak",
                                  budget=m.peak_bytes))
    return {"model": args.model, "batch": args.batch, "size": args.size, "costs": args.costs,
            "optimizer": args.optimizer,
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "rows": [dataclasses.asdict(r) for r in rows]}


def _gib(v: Optional[int]) -> str:
    return "" if v is None else f"{v / (1 << 30):.2f} GiB"


def _secs(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.1f} s"


def render(result: Dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [f"{result['model']}, batch {result['batch']}, {result['size']}x{result['size']}, "
             f"{result['optimizer']}, torch {result['torch']}, {result['threads']} thread(s), {result['costs']} costs",
             "", "| configuration | step | budget | predicted peak | measured peak | error | within budget "
             "| predicted time | measured time | recomputed tensors | max grad diff (relative) "
             "| analytic prediction (error) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pred, meas = r["predicted_peak"], r["measured_peak"]
        err = f"{(meas - pred) / pred:+.2%}" if pred and meas else ""
        within = "" if r["budget_bytes"] is None or meas is None else ("yes" if meas <= r["budget_bytes"] else "NO")
        diff = "" if r["grad_max_abs_diff"] is None else f"{r['grad_max_abs_diff']:.1e}"
        config = r["config"] if not r["note"].startswith("infeasible") else r["config"] + " (infeasible)"
        ana = r.get("analytic_peak")
        ana_text = f"{_gib(ana)} ({(meas - ana) / ana:+.1%})" if ana and meas else ""
        lines.append(f"| {config} | {r.get('step', '')} | {_gib(r['budget_bytes'])} | {_gib(pred)} | {_gib(meas)} | {err} | {within} | "
                     f"{_secs(r['predicted_seconds'])} | {_secs(r['measured_seconds'])} | "
                     f"{'' if r['recomputed'] is None else r['recomputed']} | {diff} | {ana_text} |")
    pairs = [(c, r) for c in rows for r in rows if r["config"] == f"kiwi at {c['config']}'s peak"]
    if pairs:
        lines += ["", "At equal memory: kiwi planned for each checkpoint_sequential configuration's measured peak.", "",
                  "| checkpoint_sequential | its peak | its time | kiwi peak | kiwi time "
                  "| kiwi time vs checkpoint_sequential |",
                  "|---|---|---|---|---|---|"]
        for c, r in pairs:
            ratio = (f"{r['measured_seconds'] / c['measured_seconds'] - 1:+.1%}" if r["measured_seconds"]
                     else "infeasible")
            lines.append(f"| {c['config']} | {_gib(c['measured_peak'])} | {_secs(c['measured_seconds'])} | "
                         f"{_gib(r['measured_peak'])} | {_secs(r['measured_seconds'])} | {ratio} |")
    for r in rows:
        if r["note"].startswith("infeasible"):
            lines.append(f"\n{r['config']}: {r['note']}")
    return "\n".join(lines)


def _floats(text: str) -> List[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def _ints(text: str) -> List[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kiwi.torch.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="a torchvision.models constructor (vgg16, resnet50...)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--budgets", type=_floats, default=[1.0, 0.8, 0.6], help="fractions of the no-remat peak")
    ap.add_argument("--segments", type=_ints, default=[2, 4, 8], help="checkpoint_sequential segment counts")
    ap.add_argument("--solver", default="auto", choices=kiwi.remat_solvers())
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--costs", default="measured", choices=["analytic", "measured"])
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd", "sgd-momentum"])
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--tolerance", type=float, default=1e-5, help="largest relative gradient difference called "
                    "equal")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=0, help="extra unprofiled steps per configuration; the time "
                    "reported is the fastest step")
    ap.add_argument("--equal-memory", action="store_true", help="also plan kiwi at each checkpoint_sequential "
                    "configuration's measured peak")
    ap.add_argument("--json", default="", help="also write the results to this JSON file")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        result = run_bench(args)
    except kiwi.KiwiError as e:
        print(f"kiwi: error: {e}", file=sys.stderr)
        return 3 if isinstance(e, kiwi.InfeasibleError) else 2
    print(render(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
