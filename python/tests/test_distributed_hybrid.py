"""Per-layer mixed plans on 4 gloo processes: the plan `kiwi hybrid` makes for a tiny GPT on a 4-CPU
cluster (python/tests/data/cpu4.json), and hand-made plans that cover what it does not pick (ZeRO-3
with micro-batches, Slice-Gather in both directions inside and across pipeline stages, GPipe). Losses
and parameters equal single-process training; bytes equal kiwi's count."""
import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

import kiwi  # noqa: E402
from dist_helpers import CLUSTER, check_bytes, check_matches_reference, make_plan, run  # noqa: E402


def hybrid_plan(tmp_path, memory):
    from kiwi.torch.distributed.plan import load_plan
    out = os.path.join(str(tmp_path), "plan.json")
    r = kiwi.cli("hybrid", "--model", "gpt", "--layers", "4", "--hidden", "32", "--heads", "4", "--seq", "8",
                 "--batch", "8", "--cluster", CLUSTER, "--memory", memory, "--no-recompute-sets", "--no-offload", "--out", out, "--json",
                 "--quiet")
    assert r.returncode == 0, r.stderr
    plan = load_plan(out)
    assert os.path.samefile(plan.cluster, CLUSTER)  # the cluster file by its path: loads back
    return plan, r.json()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    # at 24 MiB kiwi mixes TP4 (the vocabulary-parallel embedding and head, whose Adam step TP shards)
    # with DP4 in the middle: Slice-Gather both ways
    plan, printed = hybrid_plan(tmp_path_factory.mktemp("hybrid"), "24MiB")
    # at 15.5 MB kiwi pipelines: 2 stages of TP2 layers, the head (TP2) on the last stage (with 16 MiB a
    # TP4/TP2xDP2 plan of 15.65 MB fits, and is faster)
    piped_plan, _ = hybrid_plan(tmp_path_factory.mktemp("hybrid_pp"), "15500000")
    mixed = make_plan([(1, 4, True, False), (2, 2, True, True), (1, 4, False, False), (4, 1, False, True)],
                      micro_batches=2)
    two_stage = [(2, 1, False, False), (1, 2, True, False), (2, 1, False, True), (1, 2, False, False)]
    piped = make_plan(two_stage, pp_partition=[2, 2], micro_batches=2)
    gpipe = make_plan(two_stage, pp_partition=[1, 3], micro_batches=4, pipeline="gpipe")
    # interleaved 1F1B: stage 0 runs layers 0 and 2, stage 1 layers 1 and 3; layer 2 reshards what stage
    # 1's layer 1 (ZeRO-3 over DP2) sends back round to stage 0 (TP2)
    interleaved = make_plan(two_stage, pp_partition=[1, 1, 1, 1], micro_batches=4, virtual_stages=2)
    out = run([plan, piped_plan, mixed, piped, gpipe, interleaved])
    return {"hybrid": out[0], "hybrid_pp": out[1], "mixed": out[2], "piped": out[3], "gpipe": out[4],
            "interleaved": out[5], "printed": printed}


def test_kiwi_hybrid_plan_is_mixed(runs):
    plan = runs["hybrid"][0]
    # the tiny model's plan mixes strategies per layer (TP where the vocabulary is, DP between): a real
    # test of Slice-Gather and per-layer groups, not a uniform plan (the mixed plan below has CKPT, SDP)
    assert len({s for s in plan.layers}) >= 2, plan.layers
    assert plan.layers[0].tp > 1 and plan.layers[-1].tp > 1  # vocabulary-parallel embedding and head
    assert any(s.dp > 1 for s in plan.layers[1:-1]), plan.layers
    piped = runs["hybrid_pp"][0]
    assert piped.pp_degree == 2 and piped.micro_batches > 1 and piped.layers[-1].tp > 1, piped
    printed = runs["printed"]["layers"]
    assert [layer["name"] for layer in printed] == [s.name() for s in plan.layers]  # kiwi's names, as Python's
    assert [{k: v for k, v in layer.items() if k != "name"} for layer in printed] == [
        dict(tp=s.tp, dp=s.dp, sdp=s.zero_stage == 3, zero=s.zero_stage, checkpoint=s.checkpoint,
             sequence_parallel=s.sequence_parallel, selective_recompute=s.selective_recompute) for s in plan.layers]


@pytest.mark.parametrize("name", ["hybrid", "hybrid_pp", "mixed", "piped", "gpipe", "interleaved"])
def test_matches_single_process_training(runs, name):
    plan, results, reference = runs[name]
    check_matches_reference(results, reference)


@pytest.mark.parametrize("name", ["hybrid", "hybrid_pp", "mixed", "piped", "gpipe", "interleaved"])
def test_bytes_match_kiwi(runs, name):
    plan, results, _ = runs[name]
    predicted = check_bytes(plan, results)
    if name == "hybrid":  # dp 1 -> 4: forward slice, backward all-gather; 4 -> 1: forward all-gather
        assert predicted["slice_gather_backward"] == {"1": 4 * 8 * 32 * 8}
        assert predicted["slice_gather"] == {"3": 4 * 8 * 32 * 8}
        # the head on layer 3's TP4: vocabulary-parallel cross-entropy over TP4, the batch's 64 tokens
        # (3 fp32 all-reduces per token) and the head's input gradient
        assert predicted["tp_all_reduce"]["head"] == 3 * 4 * 8 * 8 + 4 * 8 * 32 * 8
    if name == "interleaved":  # 4 micro-batches: stage 0's two chunks (DP1) each send 2 samples forward,
        # stage 1's layer 1 (DP2) one sample per rank, its last chunk nothing
        assert predicted["send_forward"] == {"stage0": 4 * 2 * (2 * 8 * 32 * 4), "stage1": 4 * (1 * 8 * 32 * 4)}
    if name == "mixed":  # dp 4 -> 2 -> 4 -> 1
        assert set(predicted["slice_gather"]) == {"1", "3"} and set(predicted["slice_gather_backward"]) == {"2"}


def test_plan_errors_name_the_field(tmp_path):
    from kiwi.torch.distributed.plan import PlanError, load_plan, parse_plan
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"layers": [{"tp": 2, "dp": 0}], "global_batch": 8}))
    with pytest.raises(PlanError, match=r"^p.json: layers\[0\].dp: must be an integer >= 1, got 0$"):
        load_plan(str(bad))
    with pytest.raises(PlanError, match="pp_partition: covers 3 layers, the plan has 4"):
        parse_plan({"layers": [{}] * 4, "pp_degree": 2, "pp_partition": [1, 2]}, "x.json")
    with pytest.raises(PlanError, match=r"layers\[1\]: micro-batch of 2 samples is not divisible by dp 4"):
        parse_plan({"layers": [{"dp": 1}, {"dp": 4}], "global_batch": 4, "micro_batches": 2}, "x.json")
    plan = parse_plan({"layers": [{"tp": 2, "dp": 2}], "global_batch": 4}, "x.json")
    with pytest.raises(PlanError, match=r"x.json: layers\[0\]: tp 2 x dp 2 must equal the 2 processes"):
        plan.check_world(2)
    # the ZeRO stage: "zero" 0-3, or "sdp" (ZeRO-3's first spelling), which must agree beside it
    zeros = [{"dp": 4, "zero": 2}, {"dp": 4, "sdp": True}, {"dp": 4, "sdp": True, "zero": 3}, {"dp": 1, "zero": 1}]
    plan = parse_plan({"layers": zeros, "global_batch": 4}, "x.json")
    assert [s.zero for s in plan.layers] == [2, 3, 3, 1] and plan.layers[3].zero_stage == 0
    assert [s.name() for s in plan.layers] == ["ZeRO2-DP4", "SDP4", "SDP4", "single"]
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].sdp: true contradicts zero 1$"):
        parse_plan({"layers": [{"dp": 4, "sdp": True, "zero": 1}], "global_batch": 4}, "x.json")
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].zero: must be an integer from 0 to 3, got 4$"):
        parse_plan({"layers": [{"zero": 4}]}, "x.json")
    # Megatron sequence parallelism: read and named as kiwi does (run: test_distributed_sequence_parallel.py)
    plan = parse_plan({"layers": [{"tp": 2, "dp": 2, "zero": 1, "sequence_parallel": True}], "global_batch": 4}, "x.json")
    assert plan.layers[0].sequence_split and plan.layers[0].name() == "SP-TP2xZeRO1-DP2"
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].sequence_parallel: must be true or false, got 1$"):
        parse_plan({"layers": [{"sequence_parallel": 1}]}, "x.json")
    # selective recomputation: in effect without CKPT, named as kiwi does (run: test_distributed_sequence_parallel.py)
    plan = parse_plan({"layers": [{"tp": 2, "dp": 2, "selective_recompute": True},
                                  {"tp": 2, "dp": 2, "checkpoint": True, "selective_recompute": True}],
                       "global_batch": 4}, "x.json")
    assert [s.recomputes_core for s in plan.layers] == [True, False]
    assert [s.name() for s in plan.layers] == ["TP2xDP2+SEL", "TP2xDP2+CKPT"]
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].selective_recompute: must be true or false, got 'no'$"):
        parse_plan({"layers": [{"selective_recompute": "no"}]}, "x.json")
    # expert parallelism: kiwi's GPT has no experts; ep 1 (the default) reads as no field at all
    assert parse_plan({"layers": [{"tp": 2, "dp": 2, "ep": 1}], "global_batch": 4}, "x.json").layers[0].name() == "TP2xDP2"
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].ep: expert parallelism \(2\) is not run by kiwi.torch.distributed$"):
        parse_plan({"layers": [{"dp": 2, "ep": 2}]}, "x.json")
    # context parallelism: no ring attention in its GPT; cp 1 reads as no field at all
    assert parse_plan({"layers": [{"tp": 2, "dp": 2, "cp": 1}], "global_batch": 4}, "x.json").layers[0].name() == "TP2xDP2"
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].cp: context parallelism \(2\) is not run by kiwi.torch.distributed "
                       r"\(plan with kiwi hybrid --no-context-parallel\)$"):
        parse_plan({"layers": [{"dp": 2, "cp": 2}]}, "x.json")
    # optimizer offloading: its ranks step on their devices
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].offload: optimizer offloading \(True\) is not run by kiwi.torch.distributed "
                       r"\(plan with kiwi hybrid --no-offload\)$"):
        parse_plan({"layers": [{"dp": 2, "zero": 1, "offload": True}]}, "x.json")
    # recompute sets: it checkpoints whole blocks only; moot under CKPT, an empty set reads as no field at all
    with_set = parse_plan({"layers": [{"dp": 2, "recompute": ["mlp.act"]}], "global_batch": 2}, "x.json")
    assert with_set.layers[0].name() == "DP2+RC1" and with_set.to_kiwi_plan()["layer"]["layers"][0]["recompute"] == ["mlp.act"]
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].recompute: recompute sets \(\['mlp.act'\]\) are not run by "
                       r"kiwi.torch.distributed \(run the plan with python -m kiwi.torch.parallel, or plan with kiwi "
                       r"hybrid --no-recompute-sets\)$"):
        with_set.check_whole_layer_recomputation()
    with pytest.raises(PlanError, match=r"x.json: layers\[0\].recompute: must be a list of op names, got 'mlp.act'$"):
        parse_plan({"layers": [{"dp": 2, "recompute": "mlp.act"}]}, "x.json")
    assert parse_plan({"layers": [{"dp": 2, "recompute": []}], "global_batch": 2}, "x.json").layers[0].name() == "DP2"
    assert parse_plan({"layers": [{"dp": 2, "checkpoint": True, "recompute": ["mlp.act"]}], "global_batch": 2},
                      "x.json").layers[0].name() == "DP2+CKPT"
    # interleaved 1F1B: read (pp x v chunks) and written back for kiwi simulate, refused by this runtime
    plan = parse_plan({"layers": [{}] * 4, "pp_degree": 2, "virtual_stages": 2, "pp_partition": [1, 1, 1, 1],
                       "global_batch": 2, "micro_batches": 2}, "x.json")
    assert plan.virtual_stages == 2 and plan.to_kiwi_plan()["layer"]["virtual_stages"] == 2
    assert "virtual_stages" not in parse_plan({"layers": [{}]}, "x.json").to_kiwi_plan()["layer"]
    assert plan.stage_layers(0) == [0, 2] and plan.stage_of_layers() == [0, 1, 0, 1]
    plan.check_schedule(None)
    plan.check_schedule("1f1b")
    with pytest.raises(PlanError, match=r"^x.json: virtual_stages: 2 model chunks per stage run interleaved 1F1B, not gpipe$"):
        plan.check_schedule("gpipe")  # a --schedule override
    with pytest.raises(PlanError, match=r"^x.json: micro_batches: 1 is not a multiple of pp_degree 2, which interleaved"):
        parse_plan({"layers": [{}] * 4, "pp_degree": 2, "virtual_stages": 2, "pp_partition": [1, 1, 1, 1]}, "x.json")
    with pytest.raises(PlanError, match=r"pp_partition: has 2 chunks, pp_degree 2 x virtual_stages 2 is 4$"):
        parse_plan({"layers": [{}] * 4, "pp_degree": 2, "virtual_stages": 2, "pp_partition": [2, 2],
                    "micro_batches": 2}, "x.json")


def test_fused_adam_matches_single_process_training(runs):
    """The plan kiwi made, stepped by PyTorch's fused Adam on every rank and in the reference."""
    plan = runs["hybrid"][0]
    (_, results, reference), = run([plan], optimizer="fused_adam", lr=1e-3)
    # Adam's step is about lr whatever the gradient's size, so a near-zero gradient whose sign the
    # ranks' summation order flips moves a parameter by up to 2 lr: 9e-6 here, with the loop Adam too
    # (3 steps of lr 1e-3 move parameters by up to 3e-3).
    check_matches_reference(results, reference, param_atol=3e-5)
    assert all(len(r["optimizer_seconds"]) == 3 and min(r["optimizer_seconds"]) > 0 for r in results)


def test_the_runtime_steps_and_kiwi_prices_the_plans_optimizer(tmp_path):
    """`--optimizer` defaults to the plan's (its model_flags), else adam; the prediction prices the
    optimizer that runs, given or not."""
    from kiwi.torch.distributed.__main__ import model_config, parse_args
    from kiwi.torch.distributed.plan import parse_plan

    def chosen(plan_flags, argv):
        plan = parse_plan({"kiwi_plan_version": 1, "model": "gpt", "model_flags": plan_flags,
                           "layer": {"layers": [{"tp": 1, "dp": 1}] * 2, "global_batch": 8}}, "x.json")
        model_config(parse_args(["--plan", "x.json"] + argv), plan)
        return plan.model_flags["optimizer"]

    sizes = {"layers": 2, "hidden": 32, "heads": 4, "seq": 8}
    assert chosen(sizes, []) == "adam"
    assert chosen({**sizes, "optimizer": "fused_adam"}, []) == "fused_adam"
    assert chosen({**sizes, "optimizer": "fused_adam"}, ["--optimizer", "sgd"]) == "sgd"
    with pytest.raises(SystemExit):
        parse_args(["--plan", "x.json", "--optimizer", "lamb"])


def test_kiwi_prices_the_runtime_without_dropout():
    """The runtime's GPT has no dropout (model.py), whatever the plan says: kiwi prices the model that runs,
    without dropout masks saved for backward."""
    import json

    from kiwi import _kiwi
    from kiwi.torch.distributed.__main__ import model_config, parse_args
    from kiwi.torch.distributed.plan import parse_plan
    doc = {"kiwi_plan_version": 1, "model": "gpt", "model_flags": {"layers": 2, "hidden": 32, "heads": 4, "seq": 8,
                                                                   "dropout": 0.1},
           "layer": {"layers": [{"tp": 1, "dp": 4}] * 2, "global_batch": 8}}  # cpu4.json's 4 devices
    plan = parse_plan(doc, "x.json")
    model_config(parse_args(["--plan", "x.json"]), plan)
    assert plan.model_flags["dropout"] == 0.0

    def activations(flags):
        report = json.loads(_kiwi.layer_plan_report(json.dumps({**plan.to_kiwi_plan(), "model_flags": flags}),
                                                    CLUSTER, ""))
        return report["model"]["layers"][0]["activation_bytes_per_sample"]
    # A layer's three 1-byte masks per sample: two of [seq, hidden] and the probabilities' [heads, seq, seq],
    # and the dropped probabilities kept beside the softmax's output (fp32).
    assert activations(doc["model_flags"]) - activations(plan.model_flags) == 2 * 8 * 32 + 4 * 8 * 8 + 4 * (4 * 8 * 8)


def test_the_runtime_steps_the_optimizer_kiwi_prices():
    """Each name the runtime takes makes the optimizer kiwi models under that name: plain SGD has no
    momentum buffer (kiwi counts no state for "sgd"), Adam no multi-tensor temporaries."""
    import torch
    from kiwi.torch.capture import OptimizerSpec
    from kiwi.torch.distributed.trainer import TrainOptions, make_optimizer
    for name in ("adam", "fused_adam", "sgd"):
        params = [torch.zeros(4, requires_grad=True)]
        optimizer = make_optimizer(params, TrainOptions(optimizer=name))
        assert OptimizerSpec.of(optimizer) == OptimizerSpec.of(name), name
        params[0].grad = torch.ones(4)
        optimizer.step()
        states = sum(1 for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.numel() > 1)
        assert states == (2 if "adam" in name else 0), name  # Adam's two moments; none for SGD
    with pytest.raises(ValueError, match="optimizer: must be sgd, adam or fused_adam, got 'lamb'"):
        make_optimizer([torch.zeros(1, requires_grad=True)], TrainOptions(optimizer="lamb"))


def test_the_report_splits_measured_time_beside_kiwis():
    from kiwi.torch.distributed.compare import time_split_table
    report = {"simulated": {"iteration_seconds": 0.03, "compute_seconds": 0.01, "communication_seconds": 0.015,
                            "resharding_seconds": 0.005}}
    result = {"rank": 0, "seconds": [0.5, 0.040, 0.036, 0.038], "optimizer_seconds": [0.1, 0.002, 0.002, 0.002, 0.9],
              "comm_seconds": [{"tp_all_reduce": 0.3}, {"tp_all_reduce": 0.02, "recv": 0.004},
                               {"tp_all_reduce": 0.018}, {"tp_all_reduce": 0.02}, {"tp_all_reduce": 9.0}]}
    lines = time_split_table([result], report).splitlines()
    assert lines[2] == "| kiwi | 30.0 ms | 20.0 ms | (in compute) | 10.0 ms compute |"
    # medians of iterations 1-3 (the first and the memory-profiled last left out): 38, 20, 2, 16 ms
    assert lines[3] == "| 0 | 38.0 ms | 20.0 ms | 2.0 ms | 16.0 ms |"


def test_the_vocabulary_parallel_loss_is_cross_entropy_and_kiwi_prices_it_under_tp(runs):
    """On one rank, the runtime's Megatron loss (forward, and its backward made in the saved softmax's
    memory) gives F.cross_entropy's losses and logits' gradient (split over TP ranks, the runs above
    match single-process training). kiwi prices it, not F.cross_entropy's kernels, where the head runs
    under TP (the hybrid plan's head is TP4), at cpu4.json's bandwidth: a forward of 8 passes over the
    logits where F.cross_entropy's counts 1, a backward of 2 where its two kernels count 4."""
    import torch.nn.functional as F
    from kiwi.torch.distributed import compare
    from kiwi.torch.distributed.vocab_parallel_loss import vocab_parallel_loss_backward, vocab_parallel_loss_forward
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 11, generator=gen, requires_grad=True)
    target = torch.randint(0, 11, (6,), generator=gen)
    grad = torch.rand(6, generator=gen)
    F.cross_entropy(logits, target, reduction="none").mul(grad).sum().backward()

    def local(t, op):
        return t

    loss, saved = vocab_parallel_loss_forward(logits.detach(), target, 0, local)
    assert torch.allclose(loss, F.cross_entropy(logits.detach(), target, reduction="none"), atol=1e-6)
    assert torch.allclose(vocab_parallel_loss_backward(saved, grad), logits.grad, atol=1e-6)
    head = compare.plan_report(runs["hybrid"][0])["model"]["head"]
    assert head["tp_loss_forward_seconds_per_sample"] > 0 > head["tp_loss_backward_seconds_per_sample"]
