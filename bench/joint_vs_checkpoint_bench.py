"""kiwi's plans against PyTorch's own activation checkpointing at equal memory, on this CPU.

For each model (GPT-2 and Llama from their HuggingFace configs, 4 layers), PyTorch's per-block
checkpointing (HuggingFace's `activation_checkpointing_enable(every_n_layers=k)`, i.e.
torch.utils.checkpoint around every k-th block, non-reentrant) is measured for its peak and step
time; kiwi then plans the same step (kt.capture_joint, no checkpointing in the model) with that
measured peak as its budget and runs it (kt.apply_joint). Both steps are forward + backward
(torch.autograd.grad), one intra-op thread; times are medians of interleaved repeats.

    .venv/bin/python bench/joint_vs_checkpoint_bench.py [--repeats 7] [--models gpt2,llama]"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))

import torch  # noqa: E402

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402
from kiwi.torch.joint_run import JointRunner  # noqa: E402
from kiwi.torch.measure import measure_step  # noqa: E402

LAYERS, HIDDEN, HEADS, SEQ, BATCH, VOCAB = 4, 256, 4, 256, 4, 1024


def build(name):
    import transformers as tf
    tf.logging.set_verbosity_error()
    torch.manual_seed(0)
    if name == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, vocab_size=VOCAB,
                                                 n_positions=SEQ))
    elif name == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                                   num_attention_heads=HEADS, num_key_value_heads=HEADS // 2,
                                                   intermediate_size=4 * HIDDEN, vocab_size=VOCAB,
                                                   max_position_embeddings=SEQ))
    else:
        raise SystemExit(f"--models: unknown model '{name}' (gpt2, llama)")
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return model.train(), {"input_ids": ids, "labels": ids}


def eager_step(model, batch):
    params = [p for p in model.parameters() if p.requires_grad]
    return lambda: torch.autograd.grad(model(**batch).loss, params)


def measure(step, resident, repeats):
    step()  # warm-up
    peak = measure_step(step, resident).peak_bytes
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return peak, statistics.median(times)


def bench(name, repeats):
    model, batch = build(name)
    resident = list(model.parameters()) + list(model.buffers()) + list(batch.values())
    cap = kt.capture_joint(model, batch, loss=None)
    runner = JointRunner(cap)
    rows = []
    configs = [("no checkpointing", None), ("checkpoint every 2 blocks", 2), ("checkpoint every block", 1)]
    for label, every in configs:
        if every is not None:
            model.activation_checkpointing_enable(every_n_layers=every)
        peak, secs = measure(eager_step(model, batch), resident, repeats)
        if every is not None:
            model.activation_checkpointing_disable()
        try:
            plan = kt.plan_joint(cap, budget=peak)
        except kiwi.InfeasibleError as e:
            rows.append(f"| {name} | {label} | {peak / 2**20:.1f} | {secs * 1e3:.0f} | infeasible: {e} | | | |")
            continue
        k_peak, k_secs = measure(lambda: runner.run(plan.schedule), resident, repeats)
        rows.append(f"| {name} | {label} | {peak / 2**20:.1f} | {secs * 1e3:.0f} | {k_peak / 2**20:.1f} | "
                    f"{k_secs * 1e3:.0f} | {len(plan.recomputed())} | {secs / k_secs:.2f}x |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| model | PyTorch | its peak MiB | its step ms | kiwi's peak MiB (budget: PyTorch's peak) | kiwi's step ms | "
          "kiwi recomputes | PyTorch's time / kiwi's |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for row in bench(name, args.repeats):
            print(row, flush=True)


if __name__ == "__main__":
    main()
