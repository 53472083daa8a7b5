"""Shared helpers of the test_distributed_* tests: tiny GPT plans run on 4 gloo processes and compared
with single-process training and with kiwi's per-collective byte counts."""
import os
from typing import Dict, List

DATA = os.path.join(os.path.dirname(__file__), "data")
CLUSTER = os.path.join(DATA, "cpu4.json")
WORLD = 4
MODEL_FLAGS = {"layers": 4, "hidden": 32, "heads": 4, "seq": 8, "batch": 8}


def config():
    from kiwi.torch.distributed.model import GptConfig
    return GptConfig(layers=4, hidden=32, heads=4, seq=8)  # kiwi's gpt vocabulary (50257)


def make_plan(layers, pp_partition=None, global_batch=8, micro_batches=2, pipeline="1f1b", virtual_stages=1):
    """layers: (tp, dp, zero (True: 3), checkpoint[, sequence_parallel[, selective_recompute]]) per layer;
    with virtual_stages > 1, pp_partition lists the chunks."""
    from kiwi.torch.distributed.plan import parse_plan
    pp_partition = pp_partition or [len(layers)]
    obj = {"kiwi_plan_version": 1, "model": "gpt", "model_flags": MODEL_FLAGS, "cluster": CLUSTER,
           "layer": {"layers": [dict(tp=t, dp=d, zero=3 if z is True else int(z), checkpoint=c,
                                     sequence_parallel=bool(rest[:1] and rest[0]),
                                     selective_recompute=bool(rest[1:] and rest[1]))
                                for t, d, z, c, *rest in layers],
                     "pp_degree": len(pp_partition) // virtual_stages, "pp_partition": pp_partition,
                     "global_batch": global_batch, "micro_batches": micro_batches, "pipeline": pipeline,
                     "virtual_stages": virtual_stages}}
    return parse_plan(obj, "test-plan")


def run(plans: List, iterations: int = 3, optimizer: str = "sgd", lr: float = 0.05):
    """Runs every plan in one launch of 4 processes; returns [(plan, results, reference)]."""
    from kiwi.torch.distributed.launcher import launch_jobs
    from kiwi.torch.distributed.trainer import TrainOptions, reference_training
    options = TrainOptions(iterations=iterations, optimizer=optimizer, lr=lr, bucket_bytes=64 << 10)
    jobs, refs = [], []
    for plan in plans:
        ref = reference_training(plan, config(), options)
        refs.append(ref)
        jobs.append((plan, config(), options, ref))
    results = launch_jobs(jobs, WORLD, backend="gloo")
    return list(zip(plans, results, refs))


def check_matches_reference(results, reference, rtol=1e-5, param_atol=2e-6):
    iters = len(reference["losses"])
    losses = [sum(r["losses"][i] for r in results if r["reports_loss"]) for i in range(iters)]
    for got, want in zip(losses, reference["losses"]):
        assert abs(got - want) <= rtol * abs(want), (losses, reference["losses"])
    worst = max(r["max_parameter_difference"] for r in results)
    assert worst <= param_atol, worst
    # training moved the parameters (a no-op run would "match" trivially)
    assert reference["losses"][-1] < reference["losses"][0]


def check_bytes(plan, results) -> Dict[str, Dict[str, int]]:
    """Every rank's measured bytes per (purpose, unit) of the last iteration equal kiwi's count for its
    stage (sim::LayerPlanTraffic), exactly: every layer, the embeddings (first stage, first layer's
    strategy) and the head + loss (last stage, last layer's), every collective and send. One
    exception, per rank only: the vocabulary (50257) does not divide by tp, so TP ranks hold
    ceil(V / tp) rows but the last; kiwi counts ceil(V * h * 4 / tp) bytes per rank. The embeddings'
    and head's DP/SDP collectives are compared summed over each stage's ranks (exact there).
    Returns kiwi's bytes."""
    from kiwi.torch.distributed import comm_counter as cc
    from kiwi.torch.distributed import compare
    report = compare.plan_report(plan)
    layer0 = report["model"]["layers"][0]
    assert layer0["parameter_bytes"] == (12 * 32 * 32 + 13 * 32) * 4  # kiwi's IR = this GPT
    assert layer0["replicated_parameter_bytes"] == 6 * 32 * 4  # 2 layernorms, out and fc2 biases
    predicted = compare.predicted_unit_bytes(report, plan)
    per_parameter = {cc.DP_ALL_REDUCE, cc.SDP_ALL_GATHER, cc.SDP_REDUCE_SCATTER}
    summed: Dict[tuple, int] = {}
    for r in results:
        measured = compare.measured_unit_bytes(r["comm"][-1])
        assert r["comm"][-1] == r["comm"][0], "traffic differs between iterations"
        units = compare.stage_units(plan, r["stage"])
        for purpose in compare.PURPOSES:
            vocab = {u for u in ("embed", "head") if purpose in per_parameter}
            got = {u: b for u, b in measured.get(purpose, {}).items() if u not in vocab}
            want = {u: b for u, b in predicted[purpose].items() if u in units and u not in vocab}
            assert got == want, (r["rank"], purpose, got, want)
            assert not (set(measured.get(purpose, {})) & (vocab - units)), (r["rank"], purpose)
            for u in vocab & units:
                key = (r["stage"], purpose, u)
                got_u, want_u = measured.get(purpose, {}).get(u, 0), predicted[purpose].get(u, 0)
                summed[key] = (summed.get(key, (0, 0))[0] + got_u, summed.get(key, (0, 0))[1] + want_u)
    for key, (got, want) in summed.items():
        assert got == want, (key, got, want)
    return predicted
