"""Coverage of the generic capture on torchvision's classification models: each is captured
(kt.capture_joint), planned at a fraction of its checkpoint-all peak (or the smallest budget kiwi
knows) and run by the plan; the row says whether the measured peak stayed within the budget, how far
the prediction was, and whether the gradients equal torch.autograd.grad of the unmodified model.

torchvision does not import beside this project's torch 2.13 CPU build; run this in an environment
with the pair torch 2.14.1 + torchvision 0.29.1 (a 5.5 GB CUDA build that runs on the CPU) and the
same CPython as kiwi's build:

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 numpy
    PYTHONPATH=build/python /tmp/tv/bin/python bench/torchvision_coverage_bench.py [--models resnet18,vgg11]
        [--fraction 0.6] [--batch 2] [--max-params 100e6]

Op times come from kiwi's cost model (times="model": a coverage bench of memory and gradients; measuring
every op's time would run each model's step 13 times at capture). Models above --max-params parameters
are captured without running anything (workspaces="none") and planned, not run (their steps take minutes on a 2-core CPU). Images are 128 x 128 (224 x 224 where a
model fixes its input size: ViT, MaxViT; 299 x 299 for Inception v3)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiwi.torch as kt  # noqa: E402
from kiwi.torch.bench import largest_relative_difference  # noqa: E402
from kiwi.torch.joint_plan import plan_joint_or_smallest  # noqa: E402
from kiwi.torch.joint_run import JointRunner  # noqa: E402
from kiwi.torch.measure import measure_step  # noqa: E402


def _size(name: str) -> int:
    if name == "inception_v3":
        return 299   # its auxiliary classifier's 5x5 convolution needs at least 299 x 299
    return 224 if name.startswith(("vit_", "maxvit")) else 128


def _logits(out):
    return out.logits if hasattr(out, "logits") else out


def _plan(cap, fraction):
    plan, reached = plan_joint_or_smallest(cap, fraction)
    return plan, "" if reached else " (smallest)"


def row(name, args):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).train()
    size = _size(name)
    x, y = torch.randn(args.batch, 3, size, size), torch.randint(0, 1000, (args.batch,))
    params = [p for p in model.parameters() if p.requires_grad]
    count = sum(p.numel() for p in params)
    t0 = time.perf_counter()
    run = count <= args.max_params
    cap = kt.capture_joint(model, (x,), labels=y, workspaces="measured" if run else "none", times="model")
    plan, note = _plan(cap, args.fraction)
    seconds = time.perf_counter() - t0
    head = f"| {name} | {count / 1e6:.1f} | {len(cap.graph['nodes'])} | {seconds:.1f} | {args.fraction:.0%}{note} |"
    if not run:
        return head + f" {plan.predicted_peak_bytes / 2**20:.1f} | not run | | | planned only |"
    saved = {k: v.clone() for k, v in model.named_buffers()}
    torch.manual_seed(1)
    ref = torch.autograd.grad(F.cross_entropy(_logits(model(x)), y), params, allow_unused=True)
    with torch.no_grad():
        for k, v in model.named_buffers():
            v.copy_(saved[k])
    runner, box = JointRunner(cap), {}

    def step():
        torch.manual_seed(1)
        box["out"] = runner.run(plan.schedule)

    m = measure_step(step, list(model.parameters()) + list(model.buffers()) + [x, y])
    _, grads = box["out"]
    worst = largest_relative_difference(grads, ref)
    within = m.peak_bytes <= plan.budget_bytes
    err = (plan.predicted_peak_bytes - m.peak_bytes) / m.peak_bytes
    ok = "ok" if within and abs(err) <= 0.03 and worst <= 1e-5 else "CHECK"
    return head + (f" {plan.predicted_peak_bytes / 2**20:.1f} | {m.peak_bytes / 2**20:.1f} | {err:+.2%} | "
                   f"{'=' if worst == 0 else f'{worst:.0e}'} | {ok} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--fraction", type=float, default=0.6)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--max-params", type=float, default=100e6)
    args = ap.parse_args()
    torch.set_num_threads(1)   # oneDNN's per-thread scratch varies with the thread count
    import torchvision
    import torchvision.models as tvm
    names = args.models.split(",") if args.models else sorted(tvm.list_models(module=tvm))
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, {torch.get_num_threads()} threads")
    print("| model | parameters (M) | nodes | capture + plan s | budget | predicted MiB | measured MiB | error | "
          "gradients | result |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    good = 0
    for name in names:
        try:
            line = row(name, args)
            good += line.endswith("ok |") or line.endswith("planned only |")
        except Exception as e:  # one row per model: say why it failed
            line = f"| {name} | failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:160]} |"
        print(line, flush=True)
    print(f"\n{good} of {len(names)} models captured, planned and (up to --max-params) run within budget and prediction")


if __name__ == "__main__":
    main()
