"""The generic capture (kiwi.torch.capture_joint) on the HuggingFace models of kiwi.torch.hf_zoo: for each
model and each budget (100%, 80%, 60% of the checkpoint-all peak, or the smallest budget kiwi knows
works when that is higher), kiwi's plan is run and measured against its prediction and against
unmodified training.

    .venv/bin/python bench/joint_capture_bench.py [--models gpt2,llama] [--repeats 5] [--profile cpu.json]
                                                  [--optimizer adam|sgd]

Columns: capture seconds (trace + the steps that measure each op's temporaries and time), nodes of kiwi's graph, the
budget, predicted and measured peak (torch.profiler's CPU allocator events over the step, plus what is
resident), recomputations, gradients against torch.autograd.grad of the unmodified model ("=" bit for
bit, else the largest difference relative to the gradient's largest magnitude), the predicted step
time (the simulator's, from each op's time measured at capture) against the plan's measured median
time (runner) and its error, how much slower than the model's 100% plan the plan is predicted and
measured to be, the same plan priced by kiwi's cost model instead (analytic, and with --profile a
`kiwi profile` device profile), and an eager forward + backward of the model for scale. The timed
runs go round-robin (eager, then each plan, per repeat) so that the machine's drift moves them alike.
With --optimizer the optimizer's step is part of the captured step (its state resident, its step run
by the plan); the gradients column is then "-" (they go into the optimizer) and "eager" is
forward + backward + optimizer step."""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))

import torch  # noqa: E402

import kiwi.torch as kt  # noqa: E402
from kiwi.torch import hf_zoo  # noqa: E402
from kiwi.torch.bench import gradient_agreement, modelled_seconds  # noqa: E402
from kiwi.torch.joint_plan import plan_joint_or_smallest  # noqa: E402
from kiwi.torch.joint_run import JointRunner  # noqa: E402
from kiwi.torch.measure import measure_step  # noqa: E402


def _plan(cap, fraction):
    plan, reached = plan_joint_or_smallest(cap, fraction)
    return plan, "" if reached else " (smallest)"


def bench(name, repeats, profile, optimizer):
    import transformers
    from kiwi.torch.measure import step_tensors
    transformers.logging.set_verbosity_error()
    model, inputs = hf_zoo.build(name)
    opt = None
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    t0 = time.perf_counter()
    cap = kt.capture_joint(model, inputs, loss=None, optimizer=opt)
    capture_s = time.perf_counter() - t0
    params = [p for p in model.parameters() if p.requires_grad]
    saved = {k: v.clone() for k, v in model.named_buffers()}

    def restore():
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(saved[k])

    torch.manual_seed(1)
    ref = torch.autograd.grad(model(**inputs).loss, params, allow_unused=True)
    restore()

    def eager():
        if opt is None:
            torch.autograd.grad(model(**inputs).loss, params, allow_unused=True)
        else:
            model(**inputs).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    resident = step_tensors(model, opt, list(inputs.values()))
    runner = JointRunner(cap)
    plans, memory = [], []
    for fraction in (1.0, 0.8, 0.6):
        plan, note = _plan(cap, fraction)
        box = {}

        def step():
            torch.manual_seed(1)
            box["out"] = runner.run(plan.schedule)

        m = measure_step(step, resident)
        restore()
        plans.append((fraction, note, plan))
        memory.append((m.peak_bytes, box.pop("out")[1]))
    # Timed round-robin (eager, then each plan, per repeat): the machine's speed drifts by 10-20% over
    # seconds here, and drift then moves every column alike.
    times = [[] for _ in range(len(plans) + 1)]
    for _ in range(repeats):
        for k, run in enumerate([eager] + [lambda p=p: runner.run(p.schedule) for _, _, p in plans]):
            t = time.perf_counter()
            run()
            times[k].append(time.perf_counter() - t)
    restore()
    medians = [statistics.median(t) for t in times]
    rows = []
    for k, ((fraction, note, plan), (peak, grads)) in enumerate(zip(plans, memory)):
        measured = medians[k + 1]
        modelled = modelled_seconds(cap, plan.schedule, None)
        with_profile = f" {modelled_seconds(cap, plan.schedule, profile) * 1e3:.1f} |" if profile else ""
        err = (plan.predicted_peak_bytes - peak) / peak
        slower = (plan.predicted_seconds / plans[0][2].predicted_seconds - 1, measured / medians[1] - 1)
        rows.append(f"| {name} | {len(cap.graph['nodes'])} | {capture_s:.1f} | {fraction:.0%}{note} | "
                    f"{plan.budget_bytes / 2**20:.2f} | {plan.predicted_peak_bytes / 2**20:.2f} | "
                    f"{peak / 2**20:.2f} | {err:+.2%} | {len(plan.recomputed())} | "
                    f"{gradient_agreement(grads, ref) if opt is None else '-'} | "
                    f"{plan.predicted_seconds * 1e3:.1f} | {measured * 1e3:.1f} | "
                    f"{(plan.predicted_seconds - measured) / measured:+.1%} | {slower[0]:+.1%} / {slower[1]:+.1%} | "
                    f"{modelled * 1e3:.1f} |{with_profile} {medians[0] * 1e3:.1f} |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(hf_zoo.names()))
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--profile", default=None, help="a `kiwi profile` device profile of this machine")
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default=None,
                    help="make the optimizer's step part of the captured step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    prof = " cost model ms (profile) |" if args.profile else ""
    print("| model | nodes | capture s | budget | budget MiB | predicted MiB | measured MiB | error | recomputed | "
          f"gradients | predicted ms | measured ms | error | slower than 100%, predicted / measured | "
          f"cost model ms (analytic) |{prof} eager fwd+bwd ms |")
    print("|---" * (17 if args.profile else 16) + "|")
    for name in args.models.split(","):
        try:
            for row in bench(name, args.repeats, args.profile, args.optimizer):
                print(row, flush=True)
        except Exception as e:  # a bench row, not a crash: say which model and why
            print(f"| {name} | failed: {type(e).__name__}: {str(e).splitlines()[0][:200]} |", flush=True)


if __name__ == "__main__":
    main()
