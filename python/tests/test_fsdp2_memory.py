"""kiwi prices DP, ZeRO-1 and ZeRO-2 layers as FSDP2 holds them (`--runtime fsdp2`, what
kiwi.torch.parallelize runs): each parameter's shard beside the whole copy gathered at the first forward
pass, the copies freed layer by layer as the reduced gradients come in a step of one micro-batch, the
whole gradients accumulated over several (DP, ZeRO-1). Measured on 4 gloo processes, every rank peaks
within 5% of kiwi's count; before, kiwi counted no shard and always whole gradients: DP with two
micro-batches peaked 42.6% above it, ZeRO-1 with one 17.6% below, TP2 x DP2 8-9% above."""
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
    "TP2 x DP2": ([(2, 2, 0, False)] * 4, 1),
}


def _peaks(rank, world, plans):
    return [run_rank(rank, world, plan, 2, "sgd", h.LR)["peak_memory_bytes"] for plan in plans]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    import transformers as tf
    where = tmp_path_factory.mktemp("fsdp2")
    config = str(where / "llama.json")
    tf.LlamaConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, vocab_size=h.VOCAB, max_position_embeddings=2 * h.SEQ).to_json_file(config)
    plans = []
    for name, (layers, micro_batches) in PLANS.items():
        path = str(where / f"{len(plans)}.json")
        with open(path, "w") as f:
            json.dump({**h.plan(layers, micro_batches), "hf_config": config, "cluster": CLUSTER,
                       "model_flags": {"seq": h.SEQ, "batch": h.BATCH, "dtype": "fp32", "optimizer": "sgd"}}, f)
        plans.append(load_plan(path))
    per_rank = run_local(_peaks, 4, plans, backend="gloo")
    return {name: ([peaks[i] for peaks in per_rank], predicted(plan)["stages"][0]["peak_memory_bytes"])
            for i, (name, plan) in enumerate(zip(PLANS, plans))}


@pytest.mark.parametrize("name", list(PLANS))
def test_every_rank_peaks_within_5_percent_of_kiwis_fsdp2_count(measured, name):
    ranks, kiwi = measured[name]
    for peak in ranks:
        assert peak == pytest.approx(kiwi, rel=0.05), (name, ranks, kiwi)

