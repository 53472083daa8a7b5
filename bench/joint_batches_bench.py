"""Micro-batches on the generic path (kiwi.torch.plan_joint_batches) on the HuggingFace models of
kiwi.torch.hf_zoo, at fractions of the whole batch's checkpoint-all peak below what one batch can reach:
kiwi picks the number of micro-batches (1, 2, 4, ...) and each micro-batch's plan; the step is run and
measured against the prediction and against the whole batch's gradients.

    .venv/bin/python bench/joint_batches_bench.py [--models vit,convnext,gpt2] [--fractions 0.6,0.4] [--repeats 7]

The models run in eval mode (no dropout: a micro-batch's dropout mask is another random draw than the
whole batch's; none of them has batch norm, which kiwi refuses to split). Columns: the budget, kiwi's
choice of micro-batches (and the counts it tried, with their predicted step), predicted
and measured peak (profiler allocator events plus what is resident: parameters, the batch), the
largest gradient difference relative to the model's largest gradient against torch.autograd.grad of the
whole batch, predicted and measured step time (medians)."""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))

import torch  # noqa: E402

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402
from kiwi.torch import hf_zoo  # noqa: E402
from kiwi.torch.measure import measure_step  # noqa: E402


def _difference(grads, ref):
    """The largest gradient difference relative to the model's largest gradient (not each tensor's: a
    gradient that is zero in exact arithmetic, as attention's key bias, is all rounding)."""
    pairs = [(g, r) for g, r in zip(grads, ref) if r is not None]
    return max((g - r).abs().max().item() for g, r in pairs) / max(r.abs().max().item() for _, r in pairs)


def bench(name, fraction, repeats):
    import transformers
    transformers.logging.set_verbosity_error()
    model, inputs = hf_zoo.build(name)
    model.eval()   # no dropout: a micro-batch's mask is another draw than the batch's (no batch norm here)
    params = [p for p in model.parameters() if p.requires_grad]
    ref = torch.autograd.grad(model(**inputs).loss, params, allow_unused=True)
    try:
        plan = kt.plan_joint_batches(model, inputs, loss=None, fraction=fraction)
    except kiwi.InfeasibleError as e:
        return f"| {name} | {fraction:.0%} | infeasible: {e} |"
    step = kt.apply_joint_batches(plan)
    for p in params:
        p.grad = None
    m = measure_step(lambda: step(inputs), params + list(inputs.values()))
    grads = [p.grad for p in params]
    times = []
    for _ in range(repeats):
        for p in params:
            p.grad = None
        t = time.perf_counter()
        step(inputs)
        times.append(time.perf_counter() - t)
    measured = statistics.median(times)
    tried = ", ".join(f"{k}: {'no plan' if peak is None else f'{secs * 1e3:.1f} ms'}"
                      for k, peak, secs in plan.considered)
    err = (plan.predicted_peak_bytes - m.peak_bytes) / m.peak_bytes
    return (f"| {name} | {fraction:.0%} | {plan.budget_bytes / 2**20:.2f} | {plan.micro_batches} | "
            f"{tried} | {len(plan.plan.recomputed())} | {plan.predicted_peak_bytes / 2**20:.2f} | "
            f"{m.peak_bytes / 2**20:.2f} | {err:+.2%} | {_difference(grads, ref):.0e} | "
            f"{plan.predicted_seconds * 1e3:.1f} | {measured * 1e3:.1f} | {(plan.predicted_seconds - measured) / measured:+.1%} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vit,convnext,gpt2,llama")
    ap.add_argument("--fractions", default="0.6,0.4")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| model | budget | budget MiB | micro-batches | tried (predicted step) | recomputed (per micro-batch) | "
          "predicted MiB | measured MiB | error | gradients | predicted ms | measured ms | error |")
    print("|---" * 13 + "|")
    for name in args.models.split(","):
        for fraction in (float(f) for f in args.fractions.split(",")):
            print(bench(name, fraction, args.repeats), flush=True)


if __name__ == "__main__":
    main()
