"""kiwi prices DP and ZeRO-1/2/3 layers as FSDP2 holds them (`--runtime fsdp2`, what
kiwi.torch.parallelize runs): each parameter's shard beside the whole copy gathered at the first forward
pass, the copies freed layer by layer as the reduced gradients come in a step of one micro-batch, the
whole gradients accumulated over several (DP, ZeRO-1); under ZeRO-3 the running layer's copy, the next
one's prefetched and the running layer's whole gradient, its gradient shards arriving as the activations
go; a layer without DP makes its gradient as its activations go in a step of one micro-batch; sequence
parallelism keeps each column-parallel group's gathered input whole. Measured on 4 gloo processes (FSDP2's
all-gathers and reduce-scatters run in place there, gloo_comms.py, and the measurement counts the frees
gloo's thread makes: every rank and run measures the same), every rank peaks within 5% of kiwi's count
(but UNDER_COUNTED's, an expected failure until explained); before,
kiwi counted no shard and always whole gradients: DP with two micro-batches peaked 42.6% above it, ZeRO-1
with one 17.6% below, TP2 x DP2 8-9% above, ZeRO-3 from 14.7% below to 41.9% above."""
import json
import os

import pytest

import parallel_helpers as h
from kiwi.torch.distributed.plan import load_plan
from kiwi.torch.parallel.job import predicted, run_rank
from kiwi.torch.parallel.local_run import run_local

CLUSTER = os.path.join(os.path.dirname(__file__), "data", "cpu4.json")

# (layers as parallel_helpers.plan takes them, micro-batches); measured error in docs/distributed.md
PLANS = {
    "DP x4, 1 micro-batch": ([(1, 4, 0, False)] * 4, 1),
    "DP x4, 2 micro-batches": ([(1, 4, 0, False)] * 4, 2),
    "ZeRO-1 x4, 1 micro-batch": ([(1, 4, 1, False)] * 4, 1),
    "ZeRO-1 x4, 2 micro-batches": ([(1, 4, 1, False)] * 4, 2),
    "ZeRO-2 x4, 1 micro-batch": ([(1, 4, 2, False)] * 4, 1),
    "ZeRO-2 x4, 2 micro-batches": ([(1, 4, 2, False)] * 4, 2),
    "ZeRO-3 x4, 1 micro-batch": ([(1, 4, 3, False)] * 4, 1),
    "ZeRO-3 x4, 2 micro-batches": ([(1, 4, 3, False)] * 4, 2),
    "TP2 x DP2": ([(2, 2, 0, False)] * 4, 1),
    # kiwi plan's plan of this config (the main job): the last stage keeps no logits of earlier micro-batches
    # (kp.step runs the schedule with return_outputs=False; it peaked 6.6-9.9% above kiwi's count before)
    "PP2 x ZeRO-1 DP2, 4 micro-batches, 1F1B": ([(1, 2, 1, False)] * 4, 4, dict(pp_degree=2, pp_partition=[2, 2],
                                                                          pipeline="1f1b")),
    "PP2: ZeRO-3 + checkpointing DP2, then ZeRO-1 DP2, 4 micro-batches": (
        [(1, 2, 3, True)] * 2 + [(1, 2, 1, False)] * 2, 4, dict(pp_degree=2, pp_partition=[2, 2], pipeline="1f1b")),
    "TP2 x DP2, then SP-TP2 x ZeRO-3 DP2": ([(2, 2, 0, False)] * 2 + [(2, 2, 3, False, True)] * 2, 1),
}
# GPT-2 (HuggingFace's, its "gelu_new" GELU as eager arithmetic: three tensors of the MLP's width more a
# layer than a fused GELU keeps, which kiwi priced as fused: 11.3-11.9% below the measured peak before)
GPT2_PLANS = {"GPT-2 TP2 x ZeRO-2": ([(2, 2, 2, False)] * 4, 2),
              # one micro-batch without DP: each gradient made as the activations go (GradientsComeAsActivationsGo)
              "GPT-2 TP4, 1 micro-batch": ([(4, 1, 0, False)] * 4, 1),
              # sequence parallelism: DTensor keeps each column-parallel group's gathered input whole
              "GPT-2 DP, SP-TP4 + checkpointing x2, DP": ([(1, 4, 0, False)] + [(4, 1, 0, True, True)] * 2 +
                                                          [(1, 4, 0, False)], 2)}


def _peaks(rank, world, plans):
    return [run_rank(rank, world, plan, 2, "sgd", h.LR)["peak_memory_bytes"] for plan in plans]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    where = tmp_path_factory.mktemp("fsdp2")
    config = h.write_llama_config(str(where / "llama.json"))
    gpt2 = h.write_gpt2_config(str(where / "gpt2.json"))
    plans = []
    for name, (layers, micro_batches, *stages) in {**PLANS, **GPT2_PLANS}.items():
        planned = h.plan(layers, micro_batches)
        planned["layer"].update(*stages)
        path = str(where / f"{len(plans)}.json")
        with open(path, "w") as f:
            json.dump({**planned, "hf_config": gpt2 if name in GPT2_PLANS else config, "cluster": CLUSTER,
                       "model_flags": {"seq": h.SEQ, "batch": h.BATCH, "dtype": "fp32", "optimizer": "sgd"}}, f)
        plans.append(load_plan(path))
    per_rank = run_local(_peaks, 4, plans, backend="gloo")
    stages = [predicted(plan)["stages"] for plan in plans]
    # each rank's peak beside kiwi's count for its pipeline stage
    return {name: [(peaks[i], stages[i][rank * plan.pp_degree // 4]["peak_memory_bytes"])
                   for rank, peaks in enumerate(per_rank)]
            for i, (name, plan) in enumerate(zip({**PLANS, **GPT2_PLANS}, plans))}


# GPT-2's SP-TP4 + checkpointing layers keep more than kiwi counts in a second micro-batch's backward pass
# (twice their weights' gradients alive; docs/distributed.md): +8.7% since kiwi counts a stage's peak at one
# layer's backward pass, where Galvatron-BMW's Eq. 1 (every layer's worst moment at once) hid it (+1.0%).
UNDER_COUNTED = {"GPT-2 DP, SP-TP4 + checkpointing x2, DP"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="kiwi under-counts"))
                                  if n in UNDER_COUNTED else n for n in list(PLANS) + list(GPT2_PLANS)])
def test_every_rank_peaks_within_5_percent_of_kiwis_fsdp2_count(measured, name):
    for peak, kiwi in measured[name]:
        assert peak == pytest.approx(kiwi, rel=0.05), (name, measured[name])
