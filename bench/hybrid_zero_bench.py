"""kiwi's hybrid search with ZeRO-1, ZeRO-2 and sequence parallelism per layer (`--method kiwi`) beside
Galvatron-BMW's space (`--method bmw`) on the same cost model: throughput, the plan's commonest layer
strategy (kiwi hybrid --json names each layer's) and the search time, one row per (model, cluster,
budget). Prints a markdown table (docs/hybrid.md, "ZeRO-1 and ZeRO-2").

    python3 bench/hybrid_zero_bench.py [--kiwi build/kiwi] [--repeats 3]
"""
import argparse
import collections
import json
import statistics
import subprocess
import sys
import time

CASES = [  # (model, cluster, memory per device)
    ("bert-huge-32", "rtx-titan-pcie-8", "8GiB"),
    ("t5-large-32", "rtx-titan-pcie-8", "12GiB"),
    ("llama2-7b", "dgx-a100-80gb", "24GB"),
    ("llama2-7b", "dgx-a100-80gb", "40GB"),
    ("gpt3-13b", "h100-nvlink-8", "40GB"),
    ("llama2-70b", "a100-nvlink-ib-64", "40GiB"),
]


def run(kiwi, model, cluster, memory, method, repeats):
    seconds, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run([kiwi, "hybrid", "--model", model, "--cluster", cluster, "--memory", memory,
                            "--method", method, "--json", "--quiet"], capture_output=True, text=True)
        seconds.append(time.perf_counter() - t0)
        if r.returncode != 0:
            return None, statistics.median(seconds)
        out = json.loads(r.stdout)
    return out, statistics.median(seconds)


def describe(j):
    if j is None:
        return "OOM", "-"
    common = collections.Counter(layer["name"] for layer in j["layers"]).most_common(1)[0]
    shape = f"PP{j['pp_degree']}, {j['micro_batches']} micro-batches, {common[1]}/{len(j['layers'])} layers {common[0]}"
    return f"{j['throughput_samples_per_second']:.2f} ({j['global_batch']})", shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiwi", default="build/kiwi")
    ap.add_argument("--repeats", type=int, default=3, help="runs per cell; the search time is their median")
    a = ap.parse_args()
    print("| model | cluster | memory | bmw samples/s (batch) | bmw plan | kiwi samples/s (batch) | kiwi plan | "
          "kiwi / bmw | search s (bmw / kiwi) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model, cluster, memory in CASES:
        bmw, bmw_s = run(a.kiwi, model, cluster, memory, "bmw", a.repeats)
        kiwi, kiwi_s = run(a.kiwi, model, cluster, memory, "kiwi", a.repeats)
        ratio = (f"{kiwi['throughput_samples_per_second'] / bmw['throughput_samples_per_second']:.3f}"
                 if bmw and kiwi else "-")
        print(f"| {model} | {cluster} | {memory} | {' | '.join(describe(bmw))} | {' | '.join(describe(kiwi))} | "
              f"{ratio} | {bmw_s:.2f} / {kiwi_s:.2f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
