"""DP, ZeRO-1, ZeRO-2, ZeRO-3, TP, PP (1F1B and GPipe) on 4 gloo processes: losses and parameters after 3 iterations
equal single-process training, and the bytes through each collective equal kiwi's cost model."""
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

from dist_helpers import check_bytes, check_matches_reference, make_plan, run  # noqa: E402

DP = [(1, 4, False, False)] * 4
SDP = [(1, 4, True, False), (1, 4, True, True), (1, 4, True, False), (1, 4, True, True)]
TP = [(4, 1, False, False), (4, 1, False, True), (4, 1, False, False), (4, 1, False, False)]
PP = [(1, 1, False, False), (1, 1, False, True), (1, 1, False, False), (1, 1, False, False)]
# ZeRO stages as integers; TP2 x ZeRO-2 over 2 ranks between, checkpointed layers among them
ZERO1 = [(1, 4, 1, False), (1, 4, 1, True), (1, 4, 1, False), (1, 4, 1, False)]
ZERO2 = [(1, 4, 2, False), (2, 2, 2, True), (1, 4, 2, False), (1, 4, 2, True)]


@pytest.fixture(scope="module")
def runs():
    plans = {
        "dp": make_plan(DP, micro_batches=2),
        "sdp": make_plan(SDP, micro_batches=1),
        "zero1": make_plan(ZERO1, micro_batches=2),
        "zero2": make_plan(ZERO2, micro_batches=2),
        "tp": make_plan(TP, micro_batches=2),
        "pp_1f1b": make_plan(PP, pp_partition=[1, 1, 1, 1], micro_batches=4),
        "pp_gpipe": make_plan(PP, pp_partition=[1, 1, 1, 1], micro_batches=4, pipeline="gpipe"),
    }
    out = run(list(plans.values()))
    return dict(zip(plans, out))


@pytest.mark.parametrize("name", ["dp", "sdp", "zero1", "zero2", "tp", "pp_1f1b", "pp_gpipe"])
def test_matches_single_process_training(runs, name):
    plan, results, reference = runs[name]
    check_matches_reference(results, reference)


def test_dp_bytes(runs):
    plan, results, _ = runs["dp"]
    predicted = check_bytes(plan, results)
    # every layer's gradients all-reduced once per iteration, not per micro-batch (2 here)
    assert predicted["dp_all_reduce"]["0"] == (12 * 32 * 32 + 13 * 32) * 4
    assert sum(r["comm"][-1]["calls"].get("tp_all_reduce", {}).get("0", 0) for r in results) == 0


def test_sdp_bytes(runs):
    plan, results, _ = runs["sdp"]
    predicted = check_bytes(plan, results)
    shard = (12 * 32 * 32 + 13 * 32) * 4
    assert predicted["sdp_all_gather"]["1"] == 2 * shard  # forward + backward, with or without CKPT
    assert predicted["sdp_reduce_scatter"]["1"] == shard
    for r in results:
        assert r["comm"][-1]["calls"]["sdp_all_gather"]["1"] == 2


def test_zero_one_and_two_bytes(runs):
    """ZeRO-1 reduce-scatters once per iteration, ZeRO-2 once per micro-batch (2 here); both all-gather
    the updated parameters once after the step and all-reduce nothing."""
    shard = (12 * 32 * 32 + 13 * 32) * 4
    for name, reduce_scatters in (("zero1", 1), ("zero2", 2)):
        plan, results, _ = runs[name]
        predicted = check_bytes(plan, results)
        assert predicted["sdp_reduce_scatter"]["0"] == reduce_scatters * shard, name
        assert predicted["step_all_gather"]["0"] == shard, name
        assert not predicted["dp_all_reduce"] and not predicted["sdp_all_gather"], name
        for r in results:
            assert r["comm"][-1]["calls"]["sdp_reduce_scatter"]["0"] == reduce_scatters, name
    # the optimizer steps a quarter of every unit (6: embeddings, 4 layers, head) where DP steps it all
    whole = runs["dp"][1][0]["parameter_count"]
    for r in runs["zero1"][1]:
        assert whole / 4 <= r["parameter_count"] <= whole / 4 + 6


def test_tp_bytes(runs):
    plan, results, _ = runs["tp"]
    predicted = check_bytes(plan, results)
    activation = 4 * 8 * 32 * 4  # micro-batch 4 x seq 8 x hidden 32, fp32
    tokens = 4 * 8 * 4  # one fp32 value per token of the micro-batch
    for r in results:
        calls = r["comm"][-1]["calls"]["tp_all_reduce"]
        assert calls["0"] == 2 * 4 and calls["1"] == 2 * 6  # per micro-batch: 2 + 2, +2 recomputed
        assert r["comm"][-1]["bytes"]["tp_all_reduce"]["0"] == 2 * 4 * activation
        # vocabulary-parallel embedding: its output all-reduced forward; cross-entropy: max, target
        # logit, sum of exps forward, the head's input gradient backward (2 micro-batches)
        assert calls["embed"] == 2 and calls["head"] == 2 * 4
        assert r["comm"][-1]["bytes"]["tp_all_reduce"]["embed"] == 2 * activation
        assert r["comm"][-1]["bytes"]["tp_all_reduce"]["head"] == 2 * (3 * tokens + activation)
    assert predicted["tp_all_reduce"]["head"] == 2 * (3 * tokens + activation)


def test_pp_bytes(runs):
    for name in ("pp_1f1b", "pp_gpipe"):
        plan, results, _ = runs[name]
        check_bytes(plan, results)
        sent = {r["rank"]: r["comm"][-1]["bytes"].get("send_forward", {}) for r in results}
        assert sent[0] == {"stage0": 4 * 2 * 8 * 32 * 4} and sent[3] == {}  # 4 micro-batches of 2 samples


def test_cpu_ranks_keep_freed_memory(runs):
    # kiwi models a caching allocator; glibc's default would page-fault every step's large tensors back
    for _, results, _ in runs.values():
        assert all(r["glibc_caching_allocator"] for r in results)


def test_rank_environment_is_restored_and_checked(monkeypatch):
    from kiwi.torch import caching_allocator
    from kiwi.torch.distributed.launcher import rank_environment
    for k in caching_allocator.GLIBC_CACHING_ALLOCATOR:
        monkeypatch.delenv(k, raising=False)
    with rank_environment("gloo", "caching"):
        assert caching_allocator.is_set()
    assert not caching_allocator.is_set()
    with rank_environment("gloo", "system"):
        assert not caching_allocator.is_set()
    with rank_environment("nccl", "caching"):  # a GPU's allocator is PyTorch's own
        assert not caching_allocator.is_set()
    with pytest.raises(ValueError, match="allocator: 'jemalloc'"):
        with rank_environment("gloo", "jemalloc"):
            pass


def test_the_vocabulary_that_runs_is_the_one_kiwi_prices(tmp_path):
    # `--vocab 1000` (or the plan's model_flags.vocab) sizes the runtime's embedding and head and kiwi's
    # model alike: the DP all-reduce of their gradients, measured on 4 gloo ranks, is kiwi's count. Before,
    # the runtime took --vocab and kiwi priced GPT-2's 50,257 words.
    import json
    import subprocess
    import sys

    from kiwi.torch.distributed import compare
    from kiwi.torch.distributed.comm_counter import DP_ALL_REDUCE
    from kiwi.torch.distributed.plan import load_plan
    path, out = tmp_path / "plan.json", tmp_path / "run.json"
    path.write_text(json.dumps(make_plan(DP, micro_batches=1).to_kiwi_plan()))
    run = subprocess.run([sys.executable, "-m", "kiwi.torch.distributed", "--plan", str(path), "--nproc", "4",
                          "--iterations", "2", "--vocab", "1000", "--optimizer", "sgd", "--no-memory",
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    plan = load_plan(str(path))
    predicted = compare.predicted_unit_bytes(doc["report"], plan)[DP_ALL_REDUCE]
    assert predicted["embed"] == (1000 + 8) * 32 * 4  # word and position embeddings, fp32
    assert predicted["head"] >= 32 * 1000 * 4  # the LM head's weights (and the final layernorm)
    for r in doc["results"]:
        measured = compare.measured_unit_bytes(r["comm"][-1])[DP_ALL_REDUCE]
        assert {u: measured[u] for u in ("embed", "head")} == {u: predicted[u] for u in ("embed", "head")}
