"""kiwi.torch.parallelize (python/kiwi/torch/parallel/): kiwi's layer plans applied to HuggingFace models
with FSDP2, DTensor tensor/sequence parallelism and activation checkpointing on 4 gloo processes train
exactly as one process does; what cannot run as planned is a PlanError naming the field or the module,
raised before the model is changed."""
import json
import os

import pytest
import torch

import kiwi
import parallel_helpers as h

CLUSTER = os.path.join(os.path.dirname(__file__), "data", "cpu4.json")
WORLD = 4
# (model, layers as (tp, dp, zero, checkpoint[, sequence_parallel[, selective]]), micro-batches)
JOBS = {
    "llama DP": ("llama", [(1, 4, 0, False)] * 4, 2),
    "llama ZeRO-3": ("llama", [(1, 4, 3, False)] * 4, 2),
    "llama TP2 x ZeRO-2": ("llama", [(2, 2, 2, False)] * 4, 2),
    "llama SP-TP2 ZeRO-1+CKPT, then SP-TP2 ZeRO-3+SEL": ("llama", [(2, 2, 1, True, True)] * 2 +
                                                        [(2, 2, 3, False, True, True)] * 2, 2),
    "llama TP2 x DP, then SP-TP2 x ZeRO-3": ("llama", [(2, 2, 0, False)] * 2 + [(2, 2, 3, False, True)] * 2, 1),
    "qwen2 SP-TP2 x ZeRO-2+CKPT": ("qwen2", [(2, 2, 2, True, True)] * 4, 2),
    "gpt2 DP+CKPT, then ZeRO-3+SEL": ("gpt2", [(1, 4, 0, True)] * 2 + [(1, 4, 3, False, False, True)] * 2, 2),
    "gpt2 ZeRO-2": ("gpt2", [(1, 4, 2, False)] * 4, 1),
    "gpt2 TP2 x ZeRO-2": ("gpt2", [(2, 2, 2, False)] * 4, 2),      # Conv1D, fused q/k/v split by heads
    "gpt2 SP-TP4+CKPT": ("gpt2", [(4, 1, 0, True, True)] * 4, 2),   # one head per rank, no FSDP
    "bert TP2 x DP": ("bert", [(2, 2, 0, False)] * 4, 2),
    "bert SP-TP2 x ZeRO-3+CKPT": ("bert", [(2, 2, 3, True, True)] * 4, 2),
    # per-layer TP degrees (Slice-Gather, slice_gather.py) beside checkpointing, SP and a tied head
    "llama DP, TP2 x ZeRO-2+CKPT x2, DP": ("llama", [(1, 4, 0, False)] + [(2, 2, 2, True)] * 2 + [(1, 4, 0, False)], 2),
    "llama SP-TP2 x ZeRO-2, then ZeRO-3": ("llama", [(2, 2, 2, False, True)] * 2 + [(1, 4, 3, False)] * 2, 2),
    "gpt2 DP, SP-TP4+CKPT x2, DP": ("gpt2", [(1, 4, 0, False)] + [(4, 1, 0, True, True)] * 2 + [(1, 4, 0, False)], 2),
    # kiwi's recompute sets (recompute_sets.py) under SP-TP and FSDP2: a set, then a set beside the core
    "llama SP-TP2 x ZeRO-3 + a recompute set, then TP2 x ZeRO-2 + SEL and a set": (
        "llama", [(2, 2, 3, False, True, False, ["attn.norm", "mlp.norm", "mlp.act", "mlp.gated"])] * 2 +
        [(2, 2, 2, False, False, True, ["attn.q_rotary", "attn.k_rotary", "attn.residual"])] * 2, 2),
}
# Pipelined (model, layers, micro-batches, partition, schedule[, virtual stages])
ZERO3_PIPELINED = "llama PP2 x ZeRO-3+CKPT, ZeRO-1 (1F1B)"
GPT2_PIPELINED = ["gpt2 PP2 x ZeRO-2 (1F1B)", "gpt2 PP2 x ZeRO-3, DP (1F1B)", "gpt2 PP4 (GPipe)"]
BERT_PIPELINED = "bert PP2 x ZeRO-2+CKPT, ZeRO-1 (1F1B)"
INTERLEAVED = "llama PP2 x 2 chunks, ZeRO-1+CKPT, DP, DP, ZeRO-1 (interleaved 1F1B)"
PIPELINED = {
    ZERO3_PIPELINED: ("llama", [(1, 2, 3, True)] * 2 + [(1, 2, 1, False)] * 2, 4, [2, 2], "1f1b"),
    "llama PP4 (GPipe)": ("llama", [(1, 1, 0, False)] * 4, 4, [1, 1, 1, 1], "gpipe"),
    "mistral PP2 x SP-TP2 (GPipe)": ("mistral", [(2, 1, 0, False, True)] * 4, 2, [2, 2], "gpipe"),
    "qwen2 PP2 x SP-TP2+CKPT, TP2+SEL (1F1B)": ("qwen2", [(2, 1, 0, True, True)] + [(2, 1, 0, False, False, True)] * 3,
                                               2, [1, 3], "1f1b"),
    # chunks 0, 2 (layers 0, 2) on stage 0 and 1, 3 on stage 1: each stage sends 3 boundaries per micro-batch
    INTERLEAVED: ("llama", [(1, 2, 1, True), (1, 2, 0, False), (1, 2, 0, False), (1, 2, 1, False)], 4, [1, 1, 1, 1],
                  "1f1b", 2),
    # tied wte / lm_head: the last stage's copy and the first's sum their gradients (same ZeRO-2 rows; ZeRO-3
    # rows and DP's whole weight; a pair of stages 0 and 3 that is not the pp group)
    GPT2_PIPELINED[0]: ("gpt2", [(1, 2, 2, False)] * 4, 4, [2, 2], "1f1b"),
    GPT2_PIPELINED[1]: ("gpt2", [(1, 2, 3, False)] * 2 + [(1, 2, 0, False)] * 2, 2, [2, 2], "1f1b"),
    GPT2_PIPELINED[2]: ("gpt2", [(1, 1, 0, False)] * 4, 4, [1, 1, 1, 1], "gpipe"),
    # an encoder: BERT's embeddings module on the first stage, its MLM head (decoder tied to the word
    # embedding) on the last
    BERT_PIPELINED: ("bert", [(1, 2, 2, True)] * 2 + [(1, 2, 1, False)] * 2, 4, [2, 2], "1f1b"),
}


def _pipelined(layers, micro_batches, partition, schedule, virtual_stages=1):
    p = h.plan(layers, micro_batches)
    p["layer"].update(pp_degree=len(partition) // virtual_stages, pp_partition=partition, pipeline=schedule)
    if virtual_stages > 1:
        p["layer"]["virtual_stages"] = virtual_stages
    return p


@pytest.fixture(scope="module")
def llama_config(tmp_path_factory):
    return h.write_llama_config(str(tmp_path_factory.mktemp("hf") / "config.json"))


def _planned(command, llama_config, tmp_path_factory, *flags):
    """The plan file `kiwi COMMAND` writes for the Llama config on 4 CPU processes (8 samples of 16 tokens,
    fp32, SGD) with `flags`."""
    out = str(tmp_path_factory.mktemp("plan") / "plan.json")
    r = kiwi.cli(command, "--hf-config", llama_config, "--cluster", CLUSTER, "--batch", str(h.BATCH), "--seq",
                 str(h.SEQ), "--dtype", "fp32", "--optimizer", "sgd", *flags, "--quiet", "--out", out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def kiwi_plan(llama_config, tmp_path_factory):
    """kiwi hybrid's plan of the Llama config for 4 CPU processes in the space parallelize runs (DP x TP)."""
    return _planned("hybrid", llama_config, tmp_path_factory, "--method", "dp+tp", "--memory", "1500KiB")


# Plans of the Llama config whose collectives are counted against kiwi's (the final norm goes with the
# first layer's strategy where the last layer shares its layout, kiwi prices it with the head's: their
# first and last layers share a strategy, or a layout no more).
COUNTED = {
    "ZeRO-3, ZeRO-1, ZeRO-2, ZeRO-3": [(1, 4, 3, False), (1, 4, 1, False), (1, 4, 2, False), (1, 4, 3, False)],
    "TP2 x ZeRO-2, DP, ZeRO-1, ZeRO-2": [(2, 2, 2, False), (2, 2, 0, False), (2, 2, 1, False), (2, 2, 2, False)],
    # per-layer TP degrees: Slice-Gather between the layouts (a forward gather into TP2 x DP2, a backward
    # gather out of it), and one ending on another layout (the final norm and the head go with the last)
    "DP, TP2 x ZeRO-2, TP2 x ZeRO-1, DP": [(1, 4, 0, False), (2, 2, 2, False), (2, 2, 1, False), (1, 4, 0, False)],
    "TP2 x ZeRO-1 x2, then ZeRO-3 x2": [(2, 2, 1, False)] * 2 + [(1, 4, 3, False)] * 2,
}
MIXED_TP = [name for name, layers in COUNTED.items() if len({t for t, *_ in layers}) > 1]


def _config_fields(llama_config):
    return dict(hf_config=llama_config, cluster=CLUSTER, model_flags={"seq": h.SEQ, "batch": h.BATCH, "dtype": "fp32"})


def _config_plan(llama_config, layers, micro_batches=2):
    return {**h.plan(layers, micro_batches), **_config_fields(llama_config)}


@pytest.fixture(scope="module")
def main_job_plan(llama_config, tmp_path_factory):
    """kiwi plan's (the main job's) best plan of the Llama config for 4 CPU processes, planned for FSDP2
    (--runtime fsdp2: only what parallelize runs, memory as FSDP2 holds it): it pipelines."""
    return _planned("plan", llama_config, tmp_path_factory, "--runtime", "fsdp2", "--no-refine")


@pytest.fixture(scope="module")
def recompute_set_plan(llama_config, tmp_path_factory):
    """kiwi hybrid's plan of the Llama config for FSDP2 where memory is short: a recompute set on a stage."""
    out = _planned("hybrid", llama_config, tmp_path_factory, "--runtime", "fsdp2", "--memory", "1050KiB")
    assert any(layer.get("recompute") for layer in json.load(open(out))["layer"]["layers"]), open(out).read()
    return out


KIWI_PLANS = ["kiwi hybrid's plan of a Llama config", "kiwi plan's plan of a Llama config",
              "kiwi hybrid's plan of a Llama config with a recompute set"]


@pytest.fixture(scope="module")
def runs(llama_config, kiwi_plan, main_job_plan, recompute_set_plan):
    from kiwi.torch.parallel.local_run import run_local
    jobs = [(model, h.plan(layers, micro_batches=m)) for model, layers, m in JOBS.values()]
    jobs += [(model, _pipelined(*rest)) for model, *rest in PIPELINED.values()]
    jobs += [(f"config:{llama_config}", json.load(open(path))) for path in (kiwi_plan, main_job_plan,
                                                                           recompute_set_plan)]
    jobs += [(f"config:{llama_config}", _config_plan(llama_config, layers)) for layers in COUNTED.values()]
    per_rank = run_local(h.train, WORLD, jobs)
    names = list(JOBS) + list(PIPELINED) + KIWI_PLANS + list(COUNTED)
    return {name: (model, plan, h.merged([r[k] for r in per_rank]))
            for k, (name, (model, plan)) in enumerate(zip(names, jobs))}


@pytest.mark.parametrize("name", list(JOBS) + list(PIPELINED) + KIWI_PLANS)
def test_trains_as_one_process(runs, name):
    model, _, (losses, params, _) = runs[name]
    ref_losses, ref_params, initial = h.reference(model)
    assert losses == pytest.approx(ref_losses, rel=1e-5)
    assert set(params) == set(ref_params)
    moved = max(float((ref_params[n] - initial[n]).abs().max()) for n in ref_params)
    worst = max(float((params[n] - ref_params[n]).abs().max()) for n in ref_params)
    assert moved > 1e-3  # the steps changed the parameters, so equal parameters mean equal updates
    assert worst <= 1e-5, f"{name}: parameters differ by {worst} (the steps moved them by {moved})"


@pytest.mark.parametrize("name", list(COUNTED))
def test_collective_bytes_are_kiwis(runs, name):
    """DP / ZeRO all-reduce, all-gather and reduce-scatter bytes equal kiwi's count (sim::LayerPlanTraffic);
    TP all-reduces equal it too, the head's included: the logits are not gathered, HuggingFace's own loss
    runs vocabulary-parallel under torch's loss_parallel (three all-reduces of one value per token, issued
    inside DTensor's ops, which CollectiveBytes counts) as kiwi prices Megatron's."""
    from kiwi import _kiwi
    _, plan, (_, _, per_rank) = runs[name]
    measured = per_rank[0]
    traffic = json.loads(_kiwi.layer_plan_report(json.dumps(plan), "", ""))["traffic"]
    units = traffic["layers"] + [traffic["embedding"], traffic["head"]]

    def kiwi(*fields, among=units):
        return sum(u[f] for u in among for f in fields)
    assert measured.get(("dp", "all_reduce"), 0) == kiwi("dp_all_reduce_bytes")
    assert measured.get(("dp", "all_gather"), 0) == kiwi("sdp_all_gather_bytes", "step_all_gather_bytes")
    assert measured.get(("dp", "reduce_scatter"), 0) == kiwi("sdp_reduce_scatter_bytes")
    assert measured.get(("tp", "all_reduce"), 0) == kiwi("tp_all_reduce_bytes")  # the head's loss's included
    assert measured.get(("tp", "all_gather"), 0) == 0  # the logits stay split by vocabulary for the loss
    assert (kiwi("dp_all_reduce_bytes") + kiwi("sdp_reduce_scatter_bytes")) > 0  # a count that could differ
    # Slice-Gather between layers of different layouts (slice_gather.py), kiwi's cost::SliceGatherBytes
    assert measured.get(("reshard", "all_gather"), 0) == kiwi("slice_gather_bytes", "slice_gather_backward_bytes")
    assert (measured.get(("reshard", "all_gather"), 0) > 0) == (name in MIXED_TP)


def test_gpt2_tp_all_reduces_are_kiwis(runs, tmp_path):
    """GPT-2 under TP2: the layers' TP all-reduces (Megatron's f and g around the fused q/k/v and the MLP)
    equal kiwi's count for a GPT-2 config of the same sizes; its tied embedding and head stay replicated, so
    they all-reduce nothing where kiwi prices them vocabulary-parallel."""
    from kiwi import _kiwi
    _, plan, (_, _, per_rank) = runs["gpt2 TP2 x ZeRO-2"]
    plan = dict(plan, **_gpt2_fields(tmp_path))
    traffic = json.loads(_kiwi.layer_plan_report(json.dumps(plan), "", ""))["traffic"]
    layers = sum(u["tp_all_reduce_bytes"] for u in traffic["layers"])
    assert per_rank[0].get(("tp", "all_reduce"), 0) == layers > 0


def _vision_encoder():
    import transformers as tf
    torch.manual_seed(0)
    return tf.ViTForImageClassification(tf.ViTConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                                                     intermediate_size=128, image_size=32, patch_size=8))


def _gpt2_fields(tmp_path):
    import transformers as tf
    config = str(tmp_path / "gpt2.json")
    tf.GPT2Config(**h.GPT2).to_json_file(config)
    return dict(hf_config=config, cluster=CLUSTER, model_flags={"seq": h.SEQ, "batch": h.BATCH, "dtype": "fp32"})


@pytest.mark.parametrize("name", ["kiwi plan's plan of a Llama config", INTERLEAVED, ZERO3_PIPELINED])
def test_pipeline_sends_and_stage_bytes_are_kiwis(runs, llama_config, name):
    """kiwi plan's pipelined plan, an interleaved 1F1B plan and a ZeRO-3 then ZeRO-1 pipeline of the same
    model (priced with its config): each stage's point-to-point bytes and its DP/ZeRO collectives equal
    kiwi's count for that stage's units (with interleaving, its chunks' layers and every chunk's sends; ZeRO-3
    reduce-scatters every micro-batch, where torch.distributed.pipelining alone would once a step)."""
    from kiwi import _kiwi
    from kiwi.torch.distributed.plan import parse_plan
    _, plan, (_, _, per_rank) = runs[name]
    if "hf_config" not in plan:  # PIPELINED's plan ran h.build("llama"): the model of llama_config
        plan = {**plan, **_config_fields(llama_config)}
    layer = plan["layer"]
    assert layer["pp_degree"] > 1  # the main job pipelines on this cluster: what this test is about
    traffic = json.loads(_kiwi.layer_plan_report(json.dumps(plan), "", ""))["traffic"]
    parsed = parse_plan(plan, name)
    ranks_per_stage = WORLD // layer["pp_degree"]
    for stage in range(layer["pp_degree"]):
        measured = per_rank[stage * ranks_per_stage]
        sent = traffic["send_forward_bytes"][stage] + traffic["send_backward_bytes"][stage]
        assert measured.get(("pp", "send"), 0) == sent > 0
        units = [traffic["layers"][i] for i in parsed.stage_layers(stage)]
        units += [traffic["embedding"]] if stage == 0 else []
        units += [traffic["head"]] if stage == layer["pp_degree"] - 1 else []
        for kind, fields in ((("dp", "reduce_scatter"), ("sdp_reduce_scatter_bytes",)),
                             (("dp", "all_reduce"), ("dp_all_reduce_bytes",)),
                             (("dp", "all_gather"), ("sdp_all_gather_bytes", "step_all_gather_bytes"))):
            assert measured.get(kind, 0) == sum(u[f] for u in units for f in fields), (stage, kind)


@pytest.mark.parametrize("name", GPT2_PIPELINED)
def test_gpt2_pipeline_sends_are_kiwis_and_the_tied_copies_sum_once(runs, tmp_path, name):
    """GPT-2's stages send what kiwi counts for a GPT-2 config of the same sizes; the first and the last stage
    (only they) each all-reduce the tied weight's gradient (its rows on this rank) once a step, as kiwi counts
    it (tied_all_reduce_bytes), except where one end shards the weight and the other does not: there the
    run sums whole gradients, kiwi each end's own rows."""
    from kiwi import _kiwi
    _, plan, (_, _, per_rank) = runs[name]
    layer = plan["layer"]
    traffic = json.loads(_kiwi.layer_plan_report(json.dumps(dict(plan, **_gpt2_fields(tmp_path))), "", ""))["traffic"]
    ranks_per_stage = WORLD // layer["pp_degree"]
    dp = layer["layers"][0]["dp"]
    for stage in range(layer["pp_degree"]):
        measured = per_rank[stage * ranks_per_stage]
        sent = traffic["send_forward_bytes"][stage] + traffic["send_backward_bytes"][stage]
        assert measured.get(("pp", "send"), 0) == sent > 0
        strategy = layer["layers"][0 if stage == 0 else -1]
        rows = h.VOCAB // dp if strategy["zero"] and dp > 1 else h.VOCAB
        if name == GPT2_PIPELINED[1]:  # ZeRO-3 rows beside DP's whole weight: whole gradients add up
            rows = h.VOCAB
        ends = stage in (0, layer["pp_degree"] - 1)
        assert measured.get(("tied", "all_reduce"), 0) == (rows * 64 * 4 if ends else 0), stage
        units = ([traffic["embedding"]] if stage == 0 else []) + \
                ([traffic["head"]] if stage == layer["pp_degree"] - 1 else [])
        counted = sum(u["tied_all_reduce_bytes"] for u in units)
        if name == GPT2_PIPELINED[1]:  # kiwi: this end's own rows (ZeRO-3 over dp on stage 0, whole on DP's)
            own = h.VOCAB // dp if strategy["zero"] else h.VOCAB
            assert counted == (own * 64 * 4 if ends else 0), stage
        else:
            assert counted == measured.get(("tied", "all_reduce"), 0), stage


def test_bert_pipeline_sends_and_tied_copies_are_kiwis(runs, tmp_path):
    """BERT in two stages (its embeddings module on the first, its MLM head on the last): each stage's sends,
    its DP/ZeRO collectives and the tied word embedding's all-reduce (ZeRO-2's rows on the first stage,
    ZeRO-1's on the last: both shard it) equal kiwi's count for a BERT config of the same sizes (its position
    table of max_position_embeddings = 32 rows, of which the 16-token sequence looks up the first 16)."""
    import transformers as tf
    from kiwi import _kiwi
    _, plan, (_, _, per_rank) = runs[BERT_PIPELINED]
    config = str(tmp_path / "bert.json")
    tf.BertConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
                  vocab_size=h.VOCAB, max_position_embeddings=2 * h.SEQ).to_json_file(config)
    fields = dict(hf_config=config, cluster=CLUSTER, model_flags={"seq": h.SEQ, "batch": h.BATCH, "dtype": "fp32"})
    traffic = json.loads(_kiwi.layer_plan_report(json.dumps(dict(plan, **fields)), "", ""))["traffic"]
    layer = plan["layer"]
    ranks_per_stage = WORLD // layer["pp_degree"]
    for stage in range(layer["pp_degree"]):
        measured = per_rank[stage * ranks_per_stage]
        assert measured.get(("pp", "send"), 0) == \
            traffic["send_forward_bytes"][stage] + traffic["send_backward_bytes"][stage] > 0
        units = [traffic["layers"][i] for i in range(2 * stage, 2 * stage + 2)]
        units += [traffic["embedding"]] if stage == 0 else [traffic["head"]]
        for kind, fields_ in ((("dp", "reduce_scatter"), ("sdp_reduce_scatter_bytes",)),
                              (("dp", "all_gather"), ("sdp_all_gather_bytes", "step_all_gather_bytes")),
                              (("tied", "all_reduce"), ("tied_all_reduce_bytes",))):
            assert measured.get(kind, 0) == sum(u[f] for u in units for f in fields_) > 0, (stage, kind)


def test_the_job_command_prints_measured_beside_kiwi(kiwi_plan, tmp_path, capsys):
    from kiwi.torch.parallel.__main__ import main
    out = str(tmp_path / "run.json")
    assert main(["--plan", kiwi_plan, "--nproc", str(WORLD), "--steps", "2", "--optimizer", "sgd", "--json", out,
                 "--peak-composition", "6"]) == 0
    printed = capsys.readouterr().out
    assert "bytes, dp all_reduce" in printed and "iteration (median after the first)" in printed
    # what is alive at the peak (by module and op: test_peak_composition.py), on each stage's first rank
    assert printed.count("what is alive at the peak") == json.load(open(kiwi_plan))["layer"]["pp_degree"]
    assert printed.count("B at the peak") == json.load(open(kiwi_plan))["layer"]["pp_degree"]
    run = json.load(open(out))
    assert len(run["ranks"]) == WORLD and run["kiwi"]["iteration_seconds"] > 0
    assert all("B at the peak" in r["peak_composition"] for r in run["ranks"])
    assert run["ranks"][0]["bytes"]["dp all_reduce"] == run["kiwi"]["stages"][0]["bytes"]["dp all_reduce"] > 0


def test_the_job_command_refuses_what_it_cannot_run(kiwi_plan, tmp_path, capsys):
    from kiwi.torch.parallel.__main__ import main
    mixed = json.load(open(kiwi_plan))  # TP degrees that change between layers of a pipeline
    mixed["layer"].update(pp_degree=2, pp_partition=[2, 2], micro_batches=2,
                          layers=[dict(tp=2, dp=1)] * 3 + [dict(tp=1, dp=2)])
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(mixed))
    assert main(["--plan", str(path), "--nproc", str(WORLD)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "layers[3].tp" in err and "without pipeline stages" in err
    no_config = json.load(open(kiwi_plan))
    del no_config["hf_config"]
    no_config["model"] = "gpt"
    path.write_text(json.dumps(no_config))
    assert main(["--plan", str(path), "--nproc", str(WORLD)]) == 2
    assert "hf_config" in capsys.readouterr().err


def test_kiwi_plan_records_its_config_and_replays(kiwi_plan, llama_config):
    plan = json.load(open(kiwi_plan))
    assert plan["hf_config"] == os.path.abspath(llama_config)
    layouts = {(s["tp"], s["dp"]) for s in plan["layer"]["layers"]}
    assert layouts <= {(1, 4), (2, 2), (4, 1)} and any(tp > 1 for tp, _ in layouts), layouts  # TP among them
    r = kiwi.cli("simulate", kiwi_plan, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["claims"]["iteration_seconds_matches"]


def _check(model_name, layers, world=WORLD, **kwargs):
    from kiwi.torch.parallel import check_plan
    return check_plan(h.build(model_name), h.plan(layers), world, **kwargs)


def _error(model_name, layers, world=WORLD, **kwargs) -> str:
    from kiwi.torch.distributed.plan import PlanError
    with pytest.raises(PlanError) as e:
        _check(model_name, layers, world, **kwargs)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_blocks_are_found_generically():
    from kiwi.torch.parallel import find_blocks
    assert find_blocks(h.build("llama"))[0] == "model.layers"
    assert find_blocks(h.build("gpt2"))[0] == "transformer.h"
    assert find_blocks(h.build("bert"))[0] == "bert.encoder.layer"


def test_tensor_parallel_splits_by_the_linears_names():
    from kiwi.torch.parallel import classify_linears
    llama = classify_linears(h.build("llama").model.layers[0], "model.layers.0")
    assert llama == {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
                     "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
                     "mlp.down_proj": "rowwise"}
    gpt2 = classify_linears(h.build("gpt2").transformer.h[0], "transformer.h.0")  # Conv1D: weight [in, out]
    assert gpt2 == {"attn.c_attn": "colwise", "attn.c_proj": "rowwise", "mlp.c_fc": "colwise",
                    "mlp.c_proj": "rowwise"}
    bert = classify_linears(h.build("bert").bert.encoder.layer[0], "bert.encoder.layer.0")
    assert bert["attention.output.dense"] == "rowwise" and bert["intermediate.dense"] == "colwise"


def test_what_cannot_run_as_planned_names_the_module_or_field():
    assert "key/value heads" in _error("llama", [(4, 1, 0, False)] * 4)          # 2 KV heads over 4 ranks
    assert "model.layers.0.self_attn.k_proj" in _error("llama", [(4, 1, 0, False)] * 4)
    fused = _error("gpt2", [(8, 1, 0, False)] * 4, world=8)                      # 4 heads over 8 ranks
    assert "transformer.h.0.attn.c_attn" in fused and "4 attention heads" in fused
    tied = _error("gpt2", [(2, 2, 0, False)] * 2 + [(1, 4, 0, False)] * 2)        # tied ends, other layouts
    assert "layers[3].tp" in tied and "ties its head" in tied and "tp 2 x dp 2" in tied
    assert "4 blocks" in _error("llama", [(1, 4, 0, False)] * 3)
    assert "tp 1 x dp 2" in _error("llama", [(1, 2, 0, False)] * 4)              # 2 ranks' plan on 4
    from kiwi.torch.distributed.plan import PlanError
    with pytest.raises(PlanError, match="no such submodule"):
        _check("llama", [(1, 4, 0, False)] * 4, blocks="model.blocks")
    from kiwi.torch.parallel import check_plan
    pipelined = _pipelined([(1, 2, 0, False)] * 4, 2, [2, 2], "1f1b")
    check_plan(h.build("gpt2"), pipelined, WORLD)                                # tied, learned positions: runs
    check_plan(h.build("bert"), pipelined, WORLD)                                # an encoder: runs (PIPELINED)
    vit = _vision_encoder()
    with pytest.raises(PlanError, match=r"layer.pp_degree: .*ViTForImageClassification has no output embedding"):
        check_plan(vit, pipelined, WORLD)                                        # no vocabulary: no stages
    with pytest.raises(PlanError, match=r"layer.layers\[3\].tp: the model names no output embedding"):
        check_plan(vit, h.plan([(2, 2, 0, False)] * 2 + [(1, 4, 0, False)] * 2), WORLD)  # its head's layout?
    eager = h.build("gpt2")
    eager.config._attn_implementation = "eager"
    with pytest.raises(PlanError, match="layer.pp_degree: .*not 'eager'"):      # unmasked eager is not causal
        check_plan(eager, pipelined, WORLD)
    interleaved = _pipelined([(1, 2, 0, False)] * 4, 4, [1, 1, 1, 1], "1f1b", virtual_stages=2)
    check_plan(h.build("llama"), interleaved, WORLD)                             # runs (PIPELINED)
    with pytest.raises(PlanError, match=r"virtual_stages: .*need pipeline \"1f1b\""):  # interleaving is 1F1B only
        check_plan(h.build("llama"), _pipelined([(1, 2, 0, False)] * 4, 4, [1, 1, 1, 1], "gpipe", 2), WORLD)


def test_a_linear_kiwi_cannot_place_is_named_and_the_user_can_place_it():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.Module()
            self.attn.q_proj = torch.nn.Linear(8, 8)
            self.attn.mix = torch.nn.Linear(8, 8)
            self.attn.o_proj = torch.nn.Linear(8, 8)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])

    from kiwi.torch.distributed.plan import PlanError
    from kiwi.torch.parallel import check_plan
    plan = h.plan([(2, 2, 0, False)] * 2)
    with pytest.raises(PlanError, match=r"blocks\.0\.attn\.mix: cannot tell"):
        check_plan(Net(), plan, WORLD)
    check_plan(Net(), plan, WORLD, tp_plan={"attn.mix": "colwise"})
    with pytest.raises(PlanError, match="tp_plan"):
        check_plan(Net(), plan, WORLD, tp_plan={"attn.mix": "diagonal"})

    class Mixer(torch.nn.Module):  # a 2-D weight that is neither an nn.Linear nor a transposed one (Conv1D)
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(8, 8))

    net = Net()
    net.blocks[1].attn.q_proj = Mixer()
    with pytest.raises(PlanError, match=r"blocks\.1\.attn\.q_proj: a Mixer"):
        check_plan(net, plan, WORLD, tp_plan={"attn.mix": "colwise"})


def test_the_step_checks_its_batch():
    from kiwi.torch.distributed.plan import PlanError
    from kiwi.torch.parallel import local_batch, parallelize, step
    model = h.build("llama")
    pm = parallelize(model, h.plan([(1, 1, 0, False)] * 4))  # one process: the plan as it is
    batch = h.batches()[0]
    opt = torch.optim.SGD(model.parameters(), lr=h.LR)
    with pytest.raises(PlanError, match="global_batch"):
        local_batch(pm, {k: v[:3] for k, v in batch.items()})
    with pytest.raises(PlanError, match="samples on this rank"):
        step(pm, opt, {k: v[:3] for k, v in batch.items()})
    assert step(pm, opt, local_batch(pm, batch)) == pytest.approx(h.reference("llama")[0][0], rel=1e-6)


def test_the_job_builds_the_planned_model_in_its_precision(kiwi_plan):
    from kiwi.torch.distributed.plan import PlanError, load_plan
    from kiwi.torch.parallel.job import build_model
    plan = load_plan(kiwi_plan)
    plan.model_flags["dtype"] = "bf16"
    model = build_model(plan)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.config.num_hidden_layers == len(plan.layers)
    plan.model_flags["dtype"] = "fp8"
    with pytest.raises(PlanError, match="model_flags.dtype"):
        build_model(plan)
    plan.hf_config = "/no/such/config.json"
    plan.model_flags["dtype"] = "fp32"
    with pytest.raises(PlanError, match="hf_config"):
        build_model(plan)
