"""python3 -m kiwi.torch.parallel --plan PLAN.json [--nproc 4] [--steps 5] [--optimizer sgd]

Runs a plan made for a HuggingFace config (`kiwi plan --hf-config CONFIG --seq N --out PLAN.json`) with
kiwi.torch.parallelize (FSDP2 + DTensor) on synthetic tokens and prints the iteration time, the peak
memory per rank (CUDA) and the bytes of every collective beside kiwi's predictions (docs/distributed.md).
Under torchrun (RANK, WORLD_SIZE, ... set) this process is one rank and --nproc is ignored."""
import argparse
import json
import os
import sys

from kiwi.torch.distributed.plan import PlanError, load_plan


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m kiwi.torch.parallel", description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="plan JSON of kiwi plan/kiwi hybrid --hf-config ... --out")
    p.add_argument("--nproc", type=int, default=4, help="local processes (ignored under torchrun)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--optimizer", default=None, choices=["adam", "fused_adam", "sgd"],
                   help="default: the plan's (model_flags.optimizer), else adam")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    p.add_argument("--cluster", default=None, help="cluster kiwi predicts for (default: the plan's)")
    p.add_argument("--profile", default=None, help="device profile kiwi predicts with (kiwi profile)")
    p.add_argument("--json", default=None, help="also write every rank's results and kiwi's predictions here")
    p.add_argument("--peak-composition", type=int, default=0, metavar="N",
                   help="CPU: after the measured steps, one more, and print the N largest groups of tensors alive "
                        "at its peak on the first rank of each stage (module, op; kiwi.torch.peak_composition)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.nproc < 1 or args.peak_composition < 0:
        p.error("--steps and --nproc must be at least 1, --peak-composition at least 0")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        plan = load_plan(args.plan)
        from kiwi.torch.parallel.apply import check_plan
        from kiwi.torch.parallel.job import build_model, predicted, run_rank, table
        optimizer = args.optimizer or plan.model_flags.get("optimizer") or "adam"
        world = int(os.environ.get("WORLD_SIZE", args.nproc))
        check_plan(build_model(plan), plan, world)  # one line before any process starts
        kiwi = predicted(plan, args.cluster, args.profile)
    except PlanError as e:
        print(f"kiwi: error: {e}", file=sys.stderr)
        return 2
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        import torch.distributed as dist
        from kiwi.torch.distributed.launcher import init_rank, pick_backend
        rank = int(os.environ["RANK"])
        init_rank(rank, world, pick_backend(args.backend), int(os.environ.get("LOCAL_RANK", "0")))
        mine = run_rank(rank, world, plan, args.steps, optimizer, args.lr, args.peak_composition)
        results = [None] * world
        dist.all_gather_object(results, mine)
        dist.destroy_process_group()
        if rank != 0:
            return 0
    else:
        from kiwi.torch.parallel.local_run import run_local
        results = run_local(run_rank, args.nproc, plan, args.steps, optimizer, args.lr, args.peak_composition,
                            backend=args.backend)
    print(table(results, kiwi))
    per_stage = len(results) // plan.pp_degree
    for r in results:
        if "peak_composition" in r and r["rank"] % per_stage == 0:
            print(f"\nrank {r['rank']} (stage {r['rank'] // per_stage}): what is alive at the peak of one more step")
            print(r["peak_composition"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"ranks": results, "kiwi": kiwi}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
