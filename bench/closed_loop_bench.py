"""Closed loop on this machine: kiwi's predicted step time and peak memory, with a device profile of this
machine (`kiwi profile`), against real training steps (forward, backward, Adam) of the same plans.

    .venv/bin/python bench/closed_loop_bench.py --profile cpu.json         # profile made beforehand
    .venv/bin/python bench/closed_loop_bench.py --grid small               # profiles first (~5 s)
    .venv/bin/python bench/closed_loop_bench.py --caching-allocator ...    # glibc keeps freed memory

For every model and budget (a fraction of the no-recomputation peak) it captures the model, plans with
kiwi (kiwi.torch, analytic costs priced by the profile), applies the plan and runs it: time is the median
wall time of --steps steps after two warm-up steps, memory the profiled peak of one step. The datasheet
column is the same plan priced without the profile (kiwi's roofline on a one-GEMM calibration).
--caching-allocator re-runs the bench with glibc's malloc told to keep freed memory (as PyTorch's CUDA
caching allocator does): by default glibc hands large freed blocks back to the OS and every step pays
page faults to get them again, a cost of the CPU's allocator that kiwi does not model.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

import kiwi
import kiwi.torch as kt
from kiwi import profile as kiwi_profile
from kiwi.torch import caching_allocator, measure
from kiwi.torch.costs import make_optimizer


class Mlp(nn.Module):
    """Four 1024-wide ReLU layers and a classifier."""

    def __init__(self, width: int = 1024, depth: int = 4, classes: int = 10):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


class Block(nn.Module):
    """A pre-norm transformer block (one attention head of the model's width, GELU MLP)."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.scale = dim ** -0.5

    def forward(self, x):
        h = self.norm1(x)
        att = torch.softmax(torch.matmul(self.q(h), self.k(h).transpose(1, 2)) * self.scale, dim=-1)
        x = x + self.o(torch.matmul(att, self.v(h)))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Gpt(nn.Module):
    """Token embedding, 4 blocks of width 256, a vocabulary head, mean over the sequence."""

    def __init__(self, vocab: int = 1000, dim: int = 256, depth: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x).mean(dim=1)


class Cnn(nn.Module):
    """VGG/ResNet ops: conv-bn-relu, a residual conv-bn, max pooling, dropout, a linear classifier."""

    def __init__(self, channels: int = 32, size: int = 64, classes: int = 10):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.pool, self.drop = nn.MaxPool2d(2), nn.Dropout(0.5)
        self.fc = nn.Linear(channels * (size // 2) ** 2, classes)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        z = self.bn2(self.conv2(y)) + y
        return self.fc(self.drop(torch.flatten(self.pool(torch.relu(z)), 1)))


def models(names: List[str]) -> List[tuple]:
    torch.manual_seed(0)
    made = {
        "mlp": lambda: (Mlp(), torch.randn(64, 1024), torch.randint(0, 10, (64,))),
        "gpt": lambda: (Gpt(), torch.randint(0, 1000, (8, 128)), torch.randint(0, 1000, (8,))),
        "cnn": lambda: (Cnn(), torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))),
    }
    out = []
    for name in names:
        if name not in made:
            raise SystemExit(f"closed_loop_bench: --models: unknown model '{name}' (one of {', '.join(made)})")
        out.append((name, *made[name]()))
    return out


def run_plan(model: nn.Module, plan, x, y, steps: int) -> Dict[str, float]:
    """Applies the plan and runs it: median wall time of `steps` steps, the profiled peak of one."""
    fast = kt.apply_remat(model, plan)
    opt = make_optimizer(kt.OptimizerSpec.of("adam"), [p for p in model.parameters() if p.requires_grad])
    measure.prime_optimizer(opt)
    step = lambda: fast.train_step((x,), y, opt)  # noqa: E731
    seconds = []
    for i in range(steps + 2):  # a training loop: gradients made afresh every step (zero_grad to None)
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        step()
        if i >= 2:
            seconds.append(time.perf_counter() - t0)
    opt.zero_grad(set_to_none=True)
    m = measure.measure_step(step, measure.step_tensors(model, opt, [x, y]))
    return {"seconds": statistics.median(seconds), "min": min(seconds), "max": max(seconds), "peak": m.peak_bytes}


def bench(args: argparse.Namespace, profile_path: str) -> List[Dict[str, Any]]:
    rows = []
    for name, model, x, y in models(args.models.split(",")):
        profiled = kt.capture(model, (x,), labels=y, profile=profile_path)
        datasheet = kt.capture(model, (x,), labels=y)
        for fraction in (float(f) for f in args.fractions.split(",")):
            try:
                plan = kt.plan_remat(profiled, fraction=fraction, time_limit=args.time_limit)
            except kiwi.InfeasibleError as e:  # parameter-heavy models stop above small fractions
                print(f"closed_loop_bench: {name} at {fraction:.0%}: skipped: {e}", file=sys.stderr, flush=True)
                continue
            roofline = kt.plan_from_dropped(datasheet.at_batch(plan.captured.batch), plan.dropped, config=plan.config)
            m = run_plan(model, plan, x, y, args.steps)
            row = {"model": name, "fraction": fraction, "recomputed": len(plan.dropped),
                   "predicted_seconds": plan.predicted_seconds, "datasheet_seconds": roofline.predicted_seconds,
                   "measured_seconds": m["seconds"], "measured_min": m["min"], "measured_max": m["max"],
                   "predicted_peak": plan.predicted_peak_bytes, "measured_peak": m["peak"]}
            rows.append(row)
            print(f"closed_loop_bench: {name} at {fraction:.0%}: predicted {row['predicted_seconds']:.4f} s, "
                  f"measured {row['measured_seconds']:.4f} s", file=sys.stderr, flush=True)
    return rows


def error(predicted: float, measured: float) -> str:
    return f"{(predicted - measured) / measured:+.1%}"


def table(rows: List[Dict[str, Any]]) -> str:
    lines = ["| model | budget | recomputed | predicted time | measured time (median; min-max) | error | "
             "datasheet prediction (error) | predicted peak | measured peak | error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['fraction']:.0%} | {r['recomputed']} | {r['predicted_seconds'] * 1e3:.1f} ms | "
            f"{r['measured_seconds'] * 1e3:.1f} ms; {r['measured_min'] * 1e3:.1f}-{r['measured_max'] * 1e3:.1f} | "
            f"{error(r['predicted_seconds'], r['measured_seconds'])} | {r['datasheet_seconds'] * 1e3:.1f} ms "
            f"({error(r['datasheet_seconds'], r['measured_seconds'])}) | {kiwi.format_bytes(r['predicted_peak'])} | "
            f"{kiwi.format_bytes(r['measured_peak'])} | {error(r['predicted_peak'], r['measured_peak'])} |")
    times = [abs(r["predicted_seconds"] - r["measured_seconds"]) / r["measured_seconds"] for r in rows]
    peaks = [abs(r["predicted_peak"] - r["measured_peak"]) / r["measured_peak"] for r in rows]
    lines.append("")
    lines.append(f"time: mean absolute error {statistics.mean(times):.1%}, worst {max(times):.1%}; "
                 f"peak memory: mean absolute error {statistics.mean(peaks):.2%}, worst {max(peaks):.2%}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", help="a profile from `kiwi profile` (default: profile this machine first)")
    parser.add_argument("--grid", default="default", choices=sorted(kiwi_profile.GRIDS),
                        help="the grid to profile with when --profile is not given")
    parser.add_argument("--models", default="mlp,gpt,cnn")
    parser.add_argument("--fractions", default="1.0,0.9,0.6",
                        help="budgets: fractions of the no-recomputation peak (those below a model's floor are skipped)")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--caching-allocator", action="store_true",
                        help="run with glibc's malloc keeping freed memory (re-executes with its tunables set)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    if args.caching_allocator and not caching_allocator.is_set():
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  {**os.environ, **caching_allocator.GLIBC_CACHING_ALLOCATOR})
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="kiwi-closed-loop-") as tmp:
        path = args.profile
        if path is None:  # in its own process, as a user runs it: profiling here would leave this
            path = os.path.join(tmp, "profile.json")  # process's allocator in another state
            made = subprocess.run([sys.executable, "-m", "kiwi.profile", "--grid", args.grid, "--out", path, "--quiet"])
            if made.returncode:
                return made.returncode
        rows = bench(args, path)
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
