"""kiwi's plans against PyTorch's own memory-saving tools at equal memory, on this CPU.

For each model (GPT-2 and Llama from their HuggingFace configs, 4 layers; ResNet-50 from its config),
each of PyTorch's configurations is measured for its peak and step time:
- "checkpoint": per-block checkpointing (HuggingFace's `activation_checkpointing_enable(every_n_layers=k)`,
  i.e. torch.utils.checkpoint around every k-th block, non-reentrant), k = none, 2, 1;
- "compile": `torch.compile(model)` (Inductor) with `torch._functorch.config.activation_memory_budget`
  at each of --budgets (its min-cut partitioner recomputes what its knapsack picks);
- "kiwi-compile": `torch.compile(model)` with kiwi's partitioner (kiwi.torch.compiled.KiwiPartitioner)
  at each of --fractions of kiwi's checkpoint-all peak of the joint graph: kiwi's plan decides what the
  compiled backward recomputes (the row says what the partitioned forward saves for the backward and
  what kiwi's model of the compiled step said it would, and that model's peak).
kiwi then plans the same step (kt.capture_joint of the unmodified model) with that measured peak as its
budget (or the smallest budget kiwi knows, when that is higher) and runs it eagerly (kt.apply_joint).
Every step is forward + backward (torch.autograd.grad), one intra-op thread on a CPU; times are
medians of repeats that alternate PyTorch's step and kiwi's.

    .venv/bin/python bench/joint_vs_pytorch_bench.py [--repeats 7] [--models gpt2,llama,resnet50]
                                                     [--tools checkpoint,compile,kiwi-compile]
                                                     [--budgets 1,0.6,0.3,0] [--fractions 0.8,0.6,0.4]
    python3 bench/joint_vs_pytorch_bench.py --device cuda --dtype bf16 --layers 6 --hidden 768 --seq 1024 \
                                            --batch 8 --vocab 32000 ...   # on a GPU"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))

import torch  # noqa: E402

import kiwi.torch as kt  # noqa: E402
from kiwi.torch.joint_run import JointRunner  # noqa: E402
from kiwi.torch.measure import measure_step  # noqa: E402

IMAGE = 64
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def build(name, a):
    """(model on a.device in a.dtype, training mode; its batch with labels)."""
    import transformers as tf
    tf.logging.set_verbosity_error()
    torch.manual_seed(0)
    heads = max(1, a.hidden // 64)
    if name == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=a.layers, n_embd=a.hidden, n_head=heads, vocab_size=a.vocab,
                                                 n_positions=a.seq))
    elif name == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=a.hidden, num_hidden_layers=a.layers,
                                                   num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                                                   intermediate_size=4 * a.hidden, vocab_size=a.vocab,
                                                   max_position_embeddings=a.seq))
    elif name == "resnet50":
        model = tf.ResNetForImageClassification(tf.ResNetConfig(num_labels=10))   # ResNet-50's layers
        batch = {"pixel_values": torch.randn(a.batch, 3, IMAGE, IMAGE, dtype=DTYPES[a.dtype]),
                 "labels": torch.randint(0, 10, (a.batch,))}
        return model.to(a.device, DTYPES[a.dtype]).train(), {k: v.to(a.device) for k, v in batch.items()}
    else:
        raise SystemExit(f"--models: unknown model '{name}' (gpt2, llama, resnet50)")
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device)
    return model.to(a.device, DTYPES[a.dtype]).train(), {"input_ids": ids, "labels": ids}


def eager_step(model, batch):
    params = [p for p in model.parameters() if p.requires_grad]
    return lambda: torch.autograd.grad(model(**batch).loss, params)


def compiled_step(model, batch, budget=1.0, fraction=None):
    """torch.compile's step, with the activation memory budget or, given a fraction, kiwi's partitioner;
    compiled (the first call) here. Returns the step, the compile seconds and kiwi's partitioner."""
    import torch._functorch.config as functorch_config
    from kiwi.torch.compiled import compile_with_plan
    torch._dynamo.reset()
    partitioner = None
    if fraction is None:
        compiled = torch.compile(model)
    else:
        compiled, partitioner = compile_with_plan(model, fraction=fraction)
    params = [p for p in model.parameters() if p.requires_grad]
    step = lambda: torch.autograd.grad(compiled(**batch).loss, params)   # noqa: E731
    with functorch_config.patch(activation_memory_budget=budget):
        t = time.perf_counter()
        step()
        return step, time.perf_counter() - t, partitioner


def measure_peak(step, resident, device):
    """The step's peak, after a warm-up run."""
    step()
    return measure_step(step, resident, device).peak_bytes


def alternated_times(theirs, ours, repeats, device):
    """Median times of `repeats` alternating runs of the two steps (synchronized on a GPU)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    times = ([], [])
    for _ in range(repeats):
        for k, step in enumerate((theirs, ours)):
            sync()
            t = time.perf_counter()
            step()
            sync()
            times[k].append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def configurations(model, batch, tools, budgets, fractions):
    """(label, PyTorch's step, setup seconds) per configuration, set up just before it is measured."""
    if "checkpoint" in tools and getattr(model, "supports_gradient_checkpointing", False):
        for label, every in [("no checkpointing", None), ("checkpoint every 2 blocks", 2),
                             ("checkpoint every block", 1)]:
            if every is not None:
                model.activation_checkpointing_enable(every_n_layers=every)
            yield label, eager_step(model, batch), 0.0
            if every is not None:
                model.activation_checkpointing_disable()
    if "compile" in tools:
        for budget in budgets:
            step, seconds, _ = compiled_step(model, batch, budget)
            yield f"torch.compile, memory budget {budget:g}", step, seconds
    if "kiwi-compile" in tools:
        for fraction in fractions:
            step, seconds, partitioner = compiled_step(model, batch, fraction=fraction)
            reports = partitioner.reports
            recomputed = sum(len(r.recomputed) for r in reports)
            mib = lambda field: sum(getattr(r, field) for r in reports) / 2**20   # noqa: E731
            yield (f"torch.compile, kiwi's partition at {fraction:.0%} ({recomputed} ops recomputed; saves "
                   f"{mib('saved_bytes'):.1f} MiB for the backward, kiwi's model {mib('planned_saved_bytes'):.1f}; "
                   f"peak in kiwi's model {mib('planned_peak_bytes'):.1f})"), step, seconds


def bench(name, args, tools, budgets, fractions):
    repeats, device = args.repeats, args.device
    model, batch = build(name, args)
    resident = list(model.parameters()) + list(model.buffers()) + list(batch.values())
    saved = {k: v.clone() for k, v in model.named_buffers()}
    cap = kt.capture_joint(model, batch, loss=None)
    runner = JointRunner(cap)
    rows = []
    for label, theirs, setup in configurations(model, batch, tools, budgets, fractions):
        peak = measure_peak(theirs, resident, device)
        plan, reached = kt.plan_joint_or_smallest(cap, budget=peak)
        ours = lambda: runner.run(plan.schedule)   # noqa: E731
        k_peak = measure_peak(ours, resident, device)
        secs, k_secs = alternated_times(theirs, ours, repeats, device)
        with torch.no_grad():   # batch-norm statistics as captured
            for k, v in model.named_buffers():
                v.copy_(saved[k])
        note = "" if reached else " (smallest kiwi knows)"
        rows.append(f"| {name} | {label} | {setup:.0f} | {peak / 2**20:.1f} | {secs * 1e3:.0f} | "
                    f"{k_peak / 2**20:.1f}{note} | {k_secs * 1e3:.0f} | {len(plan.recomputed())} | "
                    f"{secs / k_secs:.2f}x |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama,resnet50")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tools", default="checkpoint,compile,kiwi-compile")
    ap.add_argument("--budgets", default="1,0.6,0.3,0", help="torch.compile's activation memory budgets")
    ap.add_argument("--fractions", default="0.8,0.6,0.4", help="kiwi's partition: of its checkpoint-all peak")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=1024)
    args = ap.parse_args()
    # Every compile partitions anew: a graph served from Inductor's or AOTAutograd's on-disk cache is
    # not partitioned again (kiwi's partitioner then reports nothing) and its compile time is not one.
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
    if args.device == "cpu":
        torch.set_num_threads(1)
    tools = args.tools.split(",")
    budgets = [float(b) for b in args.budgets.split(",")]
    fractions = [float(f) for f in args.fractions.split(",")]
    print("| model | configuration | compile s | its peak MiB | its step ms | kiwi eager: peak MiB (budget: that peak) | "
          "kiwi eager: step ms | kiwi eager recomputes | its time / kiwi eager's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for row in bench(name, args, tools, budgets, fractions):
            print(row, flush=True)


if __name__ == "__main__":
    main()
