"""The generic capture (kiwi.torch.capture_joint) on one CUDA device: HuggingFace GPT-2 and Llama built
from their configs (random weights, dropout as configured), captured on the device, planned at 100%,
80% and 60% of the checkpoint-all peak and at the peak of HuggingFace's own per-block gradient
checkpointing, and each plan run and measured against its prediction, against eager training and
against that checkpointing (docs/pytorch.md, "On a GPU").

    python3 bench/joint_gpu_bench.py [--models gpt2,llama] [--dtype bf16|f32] [--layers 6] [--hidden 768]
                                     [--seq 1024] [--batch 8] [--repeats 10] [--profile h200.json]
                                     [--out results.json]
    .venv/bin/python bench/joint_gpu_bench.py --device cpu --tiny   # a rehearsal of every step, on a CPU

Columns: the configuration (eager; HuggingFace's gradient checkpointing of every block; kiwi's plan at
a fraction of the checkpoint-all peak, or at checkpointing's measured peak "= ckpt"); budget, kiwi's
predicted and the measured peak (torch.cuda.max_memory_allocated over the step, above what was
allocated before it, plus the parameters, buffers and inputs); recomputed ops; gradients against eager
("=" bit for bit, else the largest difference relative to the gradient's largest magnitude); predicted
step time (the simulator's, from each op's GPU time measured at capture) and measured median step
time (synchronized wall clock; runs go round-robin over the configurations); the same plan priced by
kiwi's analytic cost model (this device's GEMM and copy rates, `local_cluster`) and, with --profile,
by a `kiwi profile` device profile."""
import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))

import torch  # noqa: E402

import kiwi.torch as kt  # noqa: E402
from kiwi.torch.bench import gradient_agreement, modelled_seconds  # noqa: E402
from kiwi.torch.joint_plan import plan_joint_or_smallest  # noqa: E402
from kiwi.torch.joint_run import JointRunner  # noqa: E402
from kiwi.torch.measure import measure_step, step_tensors  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


def build(name, args):
    """(model on the device in training mode, keyword inputs with labels)."""
    import transformers as tf
    torch.manual_seed(0)
    h, heads = args.hidden, max(1, args.hidden // 64)
    if name == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=args.layers, n_embd=h, n_head=heads,
                                                 vocab_size=args.vocab or 50257, n_positions=args.seq))
    elif name == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(
            hidden_size=h, num_hidden_layers=args.layers, num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 4), intermediate_size=(8 * h // 3 + 255) // 256 * 256,
            vocab_size=args.vocab or 32000, max_position_embeddings=args.seq))
    else:
        raise KeyError(f"--models: '{name}' is not gpt2 or llama")
    model = model.to(device=args.device, dtype=DTYPES[args.dtype]).train()
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), device=args.device)
    return model, {"input_ids": ids, "labels": ids}


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bench(name, args, profile):
    import transformers
    transformers.logging.set_verbosity_error()
    model, inputs = build(name, args)
    params = [p for p in model.parameters() if p.requires_grad]
    resident = step_tensors(model, None, list(inputs.values()))
    say = lambda msg: print(f"[{name}] {msg}", file=sys.stderr, flush=True)  # noqa: E731

    def eager():
        torch.manual_seed(1)
        return torch.autograd.grad(model(**inputs).loss, params, allow_unused=True)

    def ckpt():
        torch.manual_seed(1)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        try:
            return torch.autograd.grad(model(**inputs).loss, params, allow_unused=True)
        finally:
            model.gradient_checkpointing_disable()

    box = {}
    configs = []   # (label, step, plan or None)
    for label, fn in (("eager", eager), ("HF checkpointing", ckpt)):
        fn()   # warm-up: kernels, cuBLAS's workspace, the allocator's pool
        m = measure_step(lambda: box.__setitem__("g", fn()), resident, args.device)
        configs.append([label, fn, None, m.peak_bytes, box.pop("g")])
    ref = configs[0][4]
    say(f"eager peak {configs[0][3] / 2**20:.0f} MiB, checkpointing {configs[1][3] / 2**20:.0f} MiB; capturing")
    t0 = time.perf_counter()
    cap = kt.capture_joint(model, inputs, loss=None)
    capture_s = time.perf_counter() - t0
    say(f"captured {len(cap.graph['nodes'])} nodes in {capture_s:.1f} s; planning")
    runner = JointRunner(cap)
    targets = [(f"kiwi {f:.0%}", dict(fraction=f)) for f in args.fractions] + \
              [("kiwi = ckpt", dict(budget=configs[1][3]))]
    for label, how in targets:
        t0 = time.perf_counter()
        plan, reached = plan_joint_or_smallest(cap, **how)
        solve_s = time.perf_counter() - t0
        label += "" if reached else " (smallest)"

        def step(plan=plan):
            torch.manual_seed(1)
            return runner.run(plan.schedule)[1]

        step()
        m = measure_step(lambda: box.__setitem__("g", step()), resident, args.device)
        configs.append([label, step, plan, m.peak_bytes, box.pop("g"), solve_s])
        say(f"{label}: budget {plan.budget_bytes / 2**20:.0f} MiB, predicted {plan.predicted_peak_bytes / 2**20:.0f}, "
            f"measured {m.peak_bytes / 2**20:.0f} MiB, solved in {solve_s:.1f} s")
    times = [[] for _ in configs]
    if args.gc_off:
        gc.collect()
        gc.disable()
    # round-robin: every configuration once per repeat, so that the device's clocks move every column
    # alike; blocks: each configuration's repeats together (after one more warm-up run)
    order = [k for _ in range(args.repeats) for k in range(len(configs))] if args.order == "round-robin" else \
        [k for k in range(len(configs)) for _ in range(args.repeats + 1)]
    for i, k in enumerate(order):
        _sync(args.device)
        t = time.perf_counter()
        configs[k][1]()
        _sync(args.device)
        if args.order == "round-robin" or i % (args.repeats + 1):
            times[k].append(time.perf_counter() - t)
    gc.enable()
    rows = []
    for k, c in enumerate(configs):
        label, plan, peak, grads = c[0], c[2], c[3], c[4]
        measured = statistics.median(times[k])
        row = {"model": name, "config": label, "measured_peak_bytes": peak, "measured_seconds": measured,
               "gradients": gradient_agreement(grads, ref), "nodes": len(cap.graph["nodes"]), "capture_seconds": capture_s}
        if plan is not None:
            row.update(budget_bytes=plan.budget_bytes, predicted_peak_bytes=plan.predicted_peak_bytes,
                       predicted_seconds=plan.predicted_seconds, recomputed=len(plan.recomputed()),
                       solve_seconds=c[5], analytic_seconds=modelled_seconds(cap, plan.schedule, None))
            if profile is not None:
                row["profile_seconds"] = modelled_seconds(cap, plan.schedule, profile)
        rows.append(row)
    return rows


def render(rows, with_profile):
    mib = lambda b: f"{b / 2**20:.1f}" if b is not None else ""  # noqa: E731
    out = ["| model | config | budget MiB | predicted MiB | measured MiB | error | recomputed | gradients | "
           "predicted ms | measured ms | error | analytic ms |" + (" profile ms |" if with_profile else ""),
           "|---" * (13 if with_profile else 12) + "|"]
    for r in rows:
        if "failed" in r:
            out.append(f"| {r['model']} | failed: {r['failed']} |")
            continue
        p = r.get("predicted_peak_bytes")
        cells = [r["model"], r["config"], mib(r.get("budget_bytes")), mib(p), mib(r["measured_peak_bytes"]),
                 f"{(p - r['measured_peak_bytes']) / r['measured_peak_bytes']:+.2%}" if p else "",
                 str(r.get("recomputed", "")), r["gradients"],
                 f"{r['predicted_seconds'] * 1e3:.1f}" if p else "", f"{r['measured_seconds'] * 1e3:.1f}",
                 f"{(r['predicted_seconds'] - r['measured_seconds']) / r['measured_seconds']:+.1%}" if p else "",
                 f"{r['analytic_seconds'] * 1e3:.1f}" if p else ""]
        if with_profile:
            cells.append(f"{r['profile_seconds'] * 1e3:.1f}" if p else "")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=None, help="default: the model's own (50257, 32000)")
    ap.add_argument("--fractions", default="1,0.8,0.6")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--profile", default=None, help="a `kiwi profile` device profile of this device")
    ap.add_argument("--order", choices=["round-robin", "blocks"], default="round-robin",
                    help="time the configurations in turn, or each one's repeats together")
    ap.add_argument("--gc-off", action="store_true", help="Python's garbage collector off while timing")
    ap.add_argument("--out", default=None, help="also write the rows as JSON here")
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 64, 128 tokens x 2, vocab 256")
    args = ap.parse_args()
    if args.tiny:
        args.layers, args.hidden, args.seq, args.batch, args.vocab = 2, 64, 128, 2, 256
    args.fractions = [float(f) for f in args.fractions.split(",")]
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("joint_gpu_bench: --device cuda, but torch sees no CUDA device (--device cpu rehearses on a CPU)")
    if args.device == "cpu":
        torch.set_num_threads(1)
    profile = args.profile
    rows = []
    for name in args.models.split(","):
        try:
            rows += bench(name, args, profile)
        except Exception as e:  # a row, not a crash: say which model and why
            rows.append({"model": name, "failed": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
            import traceback
            traceback.print_exc()
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"{device}, torch {torch.__version__}, {args.dtype}, {args.layers} layers, hidden {args.hidden}, "
          f"{args.batch} x {args.seq} tokens; timed {args.order}{', garbage collector off' if args.gc_off else ''}")
    print(render(rows, profile is not None))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": device, "torch": torch.__version__, "args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
