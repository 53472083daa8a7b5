"""Megatron sequence parallelism on 4 gloo processes (docs/distributed.md): layers whose TP group also
splits the layernorms, residuals and the activation between layers over the sequence, beside DP,
ZeRO-1/2/3, checkpointing, selective recomputation of the attention core, layers without it, DP
changes and pipeline stages. Losses and parameters equal single-process training; every collective's
bytes equal kiwi's count (sim::LayerPlanTraffic)."""
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

from dist_helpers import check_bytes, check_matches_reference, make_plan, run  # noqa: E402

# (tp, dp, zero, checkpoint, sequence_parallel[, selective_recompute])
MIXED = [(2, 2, 0, False, True), (2, 2, 1, True, True), (2, 2, 2, False, True), (4, 1, 0, False, False)]
ZERO3 = [(2, 2, 3, False, True), (2, 2, 3, True, True), (4, 1, 0, False, True), (4, 1, 0, True, True)]
PIPED = [(2, 1, 0, False, True), (2, 1, 0, True, True), (1, 2, 0, False, False), (2, 1, 0, False, True)]
# Megatron's selective recomputation beside SP, ZeRO-3, plain TP and CKPT (which makes it moot)
SELECTIVE = [(2, 2, 0, False, True, True), (2, 2, 3, False, False, True), (4, 1, 0, False, True, True),
             (4, 1, 0, True, True, True)]
NAMES = ["mixed", "zero3", "piped", "selective"]


@pytest.fixture(scope="module")
def runs():
    plans = {"mixed": make_plan(MIXED, micro_batches=2), "zero3": make_plan(ZERO3, micro_batches=2),
             "piped": make_plan(PIPED, pp_partition=[2, 2], micro_batches=2),
             "selective": make_plan(SELECTIVE, micro_batches=2)}
    return dict(zip(plans, run(list(plans.values()))))


@pytest.mark.parametrize("name", NAMES)
def test_matches_single_process_training(runs, name):
    _, results, reference = runs[name]
    check_matches_reference(results, reference)


@pytest.mark.parametrize("name", NAMES)
def test_bytes_match_kiwi(runs, name):
    plan, results, _ = runs[name]
    predicted = check_bytes(plan, results)
    # what sequence parallelism moves per device, 2 micro-batches of 4 samples (8 tokens, hidden 32, fp32)
    sample = 8 * 32 * 4
    if name == "mixed":  # dp 2: 2 samples per device; a layer gathers 6 times (4 + the column-parallel
        # linears' inputs again for their weight gradients) and scatters 4 times
        assert predicted["sp_all_gather"]["0"] == 2 * 6 * 2 * sample
        assert predicted["sp_reduce_scatter"]["0"] == 2 * 4 * 2 * sample
        assert predicted["sp_all_gather"]["1"] == 2 * (6 + 2) * 2 * sample  # + the recomputed forward's 2
        assert predicted["sp_grad_all_reduce"]["0"] == 6 * 32 * 4  # once (DP)
        assert predicted["sp_grad_all_reduce"]["2"] == 2 * 6 * 32 * 4  # every micro-batch (ZeRO-2)
        assert predicted["sequence_gather"]["3"] == 2 * 2 * sample  # into TP4 (dp 2 -> 1): made whole first
        assert "0" not in predicted["tp_all_reduce"]
    if name == "selective":  # the core runs again without a collective: the layers' traffic is SP's
        assert [s.name() for s in plan.layers] == ["SP-TP2xDP2+SEL", "TP2xSDP2+SEL", "SP-TP4+SEL", "SP-TP4+CKPT"]
        assert predicted["sp_all_gather"]["0"] == 2 * 6 * 2 * sample
        assert predicted["sp_all_gather"]["3"] == 2 * (6 + 2) * 4 * sample  # CKPT's forward again, not SEL's
    if name == "piped":  # dp 1 on the SP layers: 4 samples per device
        assert predicted["send_forward"]["stage0"] == 2 * 4 * sample // 2  # the sequence block
        assert predicted["sequence_gather"]["2"] == 2 * 4 * sample
        assert predicted["sequence_gather_backward"]["3"] == 2 * 4 * sample


def test_a_sequence_the_tp_degree_does_not_divide_is_refused():
    from kiwi.torch.distributed.plan import PlanError
    plan = make_plan([(4, 1, 0, False, True)] * 4)
    with pytest.raises(PlanError, match=r"layers\[0\]: sequence_parallel: tp 4 does not divide the sequence of 6"):
        plan.check_sequence(6)
