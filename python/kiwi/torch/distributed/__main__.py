"""python3 -m kiwi.torch.distributed --plan PLAN.json [--nproc 4] [--iterations 5] [model flags]

Runs a `kiwi hybrid` plan (its --json output or its --out plan file) on synthetic data and prints
per-iteration time, peak memory per rank and communication bytes per collective beside kiwi's
predictions (docs/distributed.md). Under torchrun-style variables (RANK, WORLD_SIZE, ...) this process
is one rank and --nproc is ignored."""
import argparse
import dataclasses
import json
import os
import sys

from kiwi.torch.distributed.plan import PlanError, load_plan


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m kiwi.torch.distributed", description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="kiwi hybrid --json output or --out plan JSON")
    p.add_argument("--nproc", type=int, default=4, help="local processes (ignored under torchrun variables)")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--model", default=None, help="kiwi model preset of the plan (default: the plan's; gpt only)")
    for flag in ("layers", "hidden", "heads", "seq", "ffn"):
        p.add_argument(f"--{flag}", type=int, default=None, help="model size (default: the plan's model_flags)")
    p.add_argument("--vocab", type=int, default=None,
                   help="vocabulary (default: the plan's model_flags, else kiwi's gpt: 50257)")
    p.add_argument("--cluster", default=None, help="cluster kiwi predicts for (default: the plan's)")
    p.add_argument("--profile", default=None,
                   help="device profile kiwi predicts with (`kiwi profile --processes N` on this machine)")
    p.add_argument("--optimizer", default=None, choices=["adam", "fused_adam", "sgd"],
                   help="default: the plan's (its model_flags), else adam; kiwi predicts the one that runs")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--schedule", default=None, choices=["1f1b", "gpipe"], help="override the plan's pipeline")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DP all-reduce bucket size")
    p.add_argument("--allocator", default="caching", choices=["caching", "system"],
                   help="CPU ranks: glibc keeps freed memory as the CUDA caching allocator does (caching, "
                        "what kiwi models) or returns it to the OS (system); torchrun-started ranks: set "
                        "the variables of kiwi/torch/caching_allocator.py yourself")
    p.add_argument("--no-memory", action="store_true", help="do not profile the last iteration's memory")
    p.add_argument("--json", default=None, help="also write every rank's results and kiwi's report here")
    return p.parse_args(argv)


def model_config(args, plan):
    from kiwi.torch.distributed.model import GptConfig
    model = args.model or plan.model or "gpt"
    if model != "gpt":
        raise PlanError(f"{plan.source}: model: '{model}': the distributed runtime builds kiwi's gpt only")
    plan.model = model
    flags = dict(plan.model_flags)
    for k in ("layers", "hidden", "heads", "seq", "ffn", "vocab"):  # kiwi predicts the model that runs
        if getattr(args, k) is not None:
            flags[k] = getattr(args, k)
    flags["optimizer"] = args.optimizer or flags.get("optimizer") or "adam"
    flags["dropout"] = 0.0  # the runtime's model has none (model.py): kiwi prices no dropout sites
    plan.model_flags = flags
    if "batch" not in flags:
        flags["batch"] = plan.global_batch
    defaults = GptConfig(layers=len(plan.layers), hidden=1024, heads=16, seq=1024)  # kiwi's gpt defaults
    config = GptConfig(layers=flags.get("layers", defaults.layers), hidden=flags.get("hidden", defaults.hidden),
                       heads=flags.get("heads", defaults.heads), seq=flags.get("seq", defaults.seq),
                       vocab=flags.get("vocab", defaults.vocab), ffn=flags.get("ffn", 0))
    config.check()
    if config.layers != len(plan.layers):
        raise PlanError(f"{plan.source}: layers: the plan has {len(plan.layers)} strategies, the model {config.layers} layers")
    return config


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from kiwi.torch.distributed import compare, launcher
    from kiwi.torch.distributed.trainer import TrainOptions
    try:
        plan = load_plan(args.plan)
        config = model_config(args, plan)
        if args.cluster:
            plan.cluster = args.cluster
    except (PlanError, ValueError) as e:
        print(f"kiwi: error: {e}", file=sys.stderr)
        return 2
    options = TrainOptions(iterations=args.iterations, optimizer=plan.model_flags["optimizer"], lr=args.lr,
                           bucket_bytes=int(args.bucket_mb * (1 << 20)), measure_memory=not args.no_memory,
                           schedule=args.schedule)
    report = None
    try:
        report = compare.plan_report(plan, args.cluster, args.profile)
    except Exception as e:  # noqa: BLE001  (predictions are optional: print why they are missing)
        print(f"kiwi: no prediction: {e}", file=sys.stderr)
    try:
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            results = launcher.launch_from_env(plan, config, options, args.backend)
        else:
            results = launcher.launch(plan, config, options, args.nproc, args.backend, allocator=args.allocator)
    except PlanError as e:
        print(f"kiwi: error: {e}", file=sys.stderr)
        return 2
    if results is None:  # not rank 0
        return 0
    print(f"plan {plan.source}: {len(plan.layers)} layers, pp {plan.pp_degree} {plan.pp_partition}, batch "
          f"{plan.global_batch} in {plan.micro_batches} micro-batches ({options.schedule or plan.pipeline}); "
          f"model gpt {dataclasses.asdict(config)}; {len(results)} ranks")
    print(compare.summary_table(plan, results, report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"results": results, "report": report}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
