"""Rematerialization of captured training steps with thousands of nodes (issue 23): HF GPT-2 and
Llama built from configs (random weights), captured generically (kiwi.torch.capture_joint: the loss
and its backward pass; no optimizer step), planned by `kiwi remat` at fractions of their checkpoint-all peak.

    PYTHONPATH=build/python .venv/bin/python bench/captured_remat_bench.py [--layers 16] [--time-limit 60]
        [--fractions 0.8,0.6] [--models gpt2,llama]

The graph kiwi searches is `planning_graph(capture)`, where an op's second output alone costs ten
forward passes (kiwi computes it with the op or keeps it); those never-recomputed surcharges are
taken out of cost and bound for the `gap` column (a gap over the step's real compute), and printed
apart. A budget no schedule fits prints the smallest one kiwi knows.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers as tf

import kiwi
import kiwi.torch as kt
from kiwi.torch.joint_plan import planning_graph

SEQ, VOCAB, BATCH = 32, 256, 4


def build(name: str, layers: int) -> torch.nn.Module:
    if name == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=layers, n_embd=128, n_head=4, vocab_size=VOCAB,
                                                n_positions=2 * SEQ))
    if name == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=128, num_hidden_layers=layers, num_attention_heads=4,
                                                  num_key_value_heads=2, intermediate_size=256, vocab_size=VOCAB,
                                                  max_position_embeddings=2 * SEQ))
    raise SystemExit(f"captured_remat_bench: --models: unknown model {name!r} (gpt2, llama)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--fractions", default="0.8,0.6")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--kiwi", default=os.path.join(os.path.dirname(__file__), "..", "build", "kiwi"))
    ap.add_argument("--keep", metavar="DIR", help="also write the planning graphs here (MODEL-LAYERS.json, for `kiwi "
                    "remat`) with their surcharge (MODEL-LAYERS.surcharge)")
    args = ap.parse_args()
    rows = ["| model | nodes | budget | cost over every node once | residency bound over it | gap | time | note |",
            "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            torch.manual_seed(0)
            model = build(name, args.layers)
            ids = torch.randint(0, VOCAB, (BATCH, SEQ))
            cap = kt.capture_joint(model, {"input_ids": ids}, labels=ids)
            graph = planning_graph(cap)
            real = kiwi.graph_summary(cap.graph, cap.cluster, cap.profile)["node_costs"]
            surcharge = sum(n["cost"] - c for n, c in zip(graph["nodes"], real))
            path = os.path.join(tmp, f"{name}.json")
            with open(path, "w") as f:
                json.dump(graph, f)
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                shutil.copy(path, os.path.join(args.keep, f"{name}-{args.layers}.json"))
                with open(os.path.join(args.keep, f"{name}-{args.layers}.surcharge"), "w") as f:
                    f.write(f"{surcharge!r}\n")  # to take out of `kiwi remat`'s cost and bound, as below
            budgets = [["--budget-fraction", f] for f in args.fractions.split(",")]
            while budgets:
                budget = budgets.pop(0)
                label = budget[1] if budget[0] == "--budget-fraction" else f"{budget[1]} B"
                print(f"captured_remat_bench: {name} ({len(graph['nodes'])} nodes) at {label}", file=sys.stderr)
                run = subprocess.run([args.kiwi, "remat", path, *budget, "--time-limit", str(args.time_limit), "--json",
                                      "--quiet"], capture_output=True, text=True)
                if run.returncode == 3:  # then the smallest budget kiwi knows a schedule for
                    smallest = run.stderr.split("use --budget ")[-1].split()[0]
                    rows.append(f"| {name}-{args.layers} | {len(graph['nodes'])} | {label} | no schedule fits | | | | "
                                f"smallest known: {smallest} B |")
                    if ["--budget", smallest] not in budgets:
                        budgets.append(["--budget", smallest])
                    continue
                if run.returncode != 0:
                    raise SystemExit(f"captured_remat_bench: kiwi remat exited {run.returncode}: {run.stderr.strip()}")
                r = json.loads(run.stdout)
                base = r["baseline_cost"] - surcharge
                cost, bound = r["compute_cost"] - surcharge, r["lower_bound"] - surcharge
                rows.append(f"| {name}-{args.layers} | {len(graph['nodes'])} | {label} | {100 * (cost / base - 1):+.3f}% | "
                            f"{100 * (bound / base - 1):+.3f}% | {100 * (cost - bound) / cost:.2f}% | "
                            f"{r['solve_seconds']:.1f} s | {r['note'].split(';')[0]} |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
