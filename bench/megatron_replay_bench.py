"""Megatron-LM's GPT runs on DGX A100s (Korthikanti et al. 2023, Table 3: TP 8 with sequence
parallelism and selective recomputation, one micro-batch per sample) replayed as kiwi plans with
1F1B and interleaved 1F1B (v model chunks per stage), each simulated by `kiwi simulate`, beside the
plan `kiwi hybrid` finds for the same model, cluster and batch. Prints a markdown table (docs/hybrid.md,
"Interleaved 1F1B").

    python3 bench/megatron_replay_bench.py [--kiwi build/kiwi] [--time-limit 60]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# (name, layers, hidden, heads, DGX A100 nodes, pipeline stages, global batch, chunks per stage to try)
RUNS = [
    ("GPT-3 175B", 96, 12288, 96, 8, 8, 64, (1, 2, 4)),
    ("530B", 105, 20480, 128, 35, 35, 280, (1, 3)),
    ("1T", 128, 25600, 160, 64, 64, 512, (1, 2)),
]
FLAGS = {"seq": 2048, "vocab": 51200, "dtype": "bf16", "attention": "materialized"}  # Megatron's GPT, [s, s] scores


def megatron_plan(layers, hidden, heads, nodes, pp, batch, v):
    """TP 8 + SP + selective recomputation on every layer, `pp` stages of `v` chunks, micro-batches of 1."""
    strategy = {"tp": 8, "dp": 1, "zero": 0, "checkpoint": False, "sequence_parallel": True,
                "selective_recompute": True}
    chunks = pp * v
    partition = [layers // chunks + (1 if c < layers % chunks else 0) for c in range(chunks)]
    layer = {"layers": [strategy] * layers, "pp_degree": pp, "pp_partition": partition, "global_batch": batch,
             "micro_batches": batch, "pipeline": "1f1b"}
    if v > 1:
        layer["virtual_stages"] = v
    return {"kiwi_plan_version": 1, "model": "gpt",
            "model_flags": {"layers": layers, "hidden": hidden, "heads": heads, **FLAGS},
            "cluster": f"dgx-a100-80gb:{nodes}", "layer": layer}


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
    return json.loads(r.stdout), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiwi", default="build/kiwi")
    ap.add_argument("--time-limit", type=float, default=60.0, help="kiwi hybrid's search limit per run")
    a = ap.parse_args()
    print("| run | GPUs | plan | samples/s | iteration s | peak memory GiB | search s |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, layers, hidden, heads, nodes, pp, batch, chunks in RUNS:
            gpus = 8 * nodes
            for v in chunks:
                path = os.path.join(tmp, f"{layers}_{v}.json")
                with open(path, "w") as f:
                    json.dump(megatron_plan(layers, hidden, heads, nodes, pp, batch, v), f)
                j, err = run_json([a.kiwi, "simulate", path, "--json"])
                label = f"Megatron: TP8 SP+SEL, PP{pp}" + (f", interleaved v={v}" if v > 1 else ", 1F1B")
                if j is None:
                    print(f"| {name} | {gpus} | {label} | {err} | | | |")
                    continue
                print(f"| {name} | {gpus} | {label} | {j['throughput_samples_per_second']:.3f} | "
                      f"{j['iteration_seconds']:.2f} | {j['peak_memory_bytes'] / 2**30:.1f} | - |")
            t0 = time.perf_counter()
            j, err = run_json([a.kiwi, "hybrid", "--model", "gpt", "--layers", str(layers), "--hidden", str(hidden),
                               "--heads", str(heads), "--seq", str(FLAGS["seq"]), "--vocab", str(FLAGS["vocab"]),
                               "--dtype", FLAGS["dtype"], "--attention", FLAGS["attention"],
                               "--cluster", f"dgx-a100-80gb:{nodes}", "--batch", str(batch),
                               "--time-limit", str(a.time_limit), "--json", "--quiet"])
            seconds = time.perf_counter() - t0
            if j is None:
                print(f"| {name} | {gpus} | kiwi hybrid | {err} | | | {seconds:.1f} |")
                continue
            names = sorted({layer["name"] for layer in j["layers"]})
            shape = (f"kiwi hybrid: PP{j['pp_degree']}" +
                     (f" x v={j['virtual_stages']}" if j.get("virtual_stages", 1) > 1 else "") +
                     f", {j['micro_batches']} micro-batches, {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}")
            print(f"| {name} | {gpus} | {shape} | {j['throughput_samples_per_second']:.3f} | "
                  f"{j['iteration_seconds']:.2f} | {j['peak_memory_bytes'] / 2**30:.1f} | {seconds:.1f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
