"""kiwi's recompute sets run by kiwi.torch.parallelize (recompute_sets.py): the ops of HuggingFace blocks
are named as kiwi's layer graph names its ops, a set recomputes exactly its ops and trains as without it,
and what the forward keeps drops as kiwi prices the set (one process, no process group needed)."""
import json

import pytest
import torch

torch_parallel = pytest.importorskip("kiwi.torch.parallel")
import kiwi  # noqa: E402
import parallel_helpers as h  # noqa: E402
from kiwi.torch.distributed.plan import PlanError  # noqa: E402
from kiwi.torch.parallel.recompute_sets import BlockOpNames  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

# What each family's block runs, by kiwi's names (the rest is linears and views, never recomputed).
NAMED = {
    "llama": {"attn.norm_normalized", "attn.norm", "mlp.norm_normalized", "attn.q_rotary", "attn.k_rotary", "attn.attention", "attn.residual", "mlp.norm",
              "mlp.act", "mlp.gated", "mlp.residual"},
    "gpt2": {"attn.norm", "attn.attention", "attn.residual", "mlp.norm", "mlp.act", "mlp.residual"},
    "bert": {"attn.attention", "attn.residual", "attn.norm", "mlp.act", "mlp.residual", "mlp.norm"},
}
# Qwen3: its query and key head norms are kiwi's attn.q_norm and attn.k_norm, not the block's second norm
NAMED["qwen3"] = NAMED["llama"] | {"attn.q_norm", "attn.k_norm"}
LLAMA_SET = ["attn.norm", "mlp.norm", "mlp.act", "mlp.gated"]  # kiwi hybrid's set for the tests' Llama config


def _blocks(model):
    from kiwi.torch.parallel.blocks import find_blocks
    return find_blocks(model, None)[1]


class _Names(TorchDispatchMode):
    def __init__(self, names):
        super().__init__()
        self.names, self.seen = names, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(self.names.name(func, args))
        return func(*args, **(kwargs or {}))


def _named_ops(model_name):
    model = h.build(model_name)
    block = _blocks(model)[0]
    names = BlockOpNames(block)
    mode = _Names(names)
    block.register_forward_pre_hook(lambda *_: mode.__enter__() and None)
    block.register_forward_hook(lambda *_: mode.__exit__(None, None, None) and None)
    model(**h.batches()[0])
    return [n for n in mode.seen if n]


@pytest.mark.parametrize("model_name", sorted(NAMED))
def test_block_ops_are_named_as_kiwi_names_them(model_name):
    seen = _named_ops(model_name)
    assert set(seen) == NAMED[model_name]
    # in kiwi's order: each name's ops in one run, the norms where kiwi's layer has them
    runs = [n for i, n in enumerate(seen) if i == 0 or seen[i - 1] != n]
    assert len(runs) == len(set(runs)), runs
    if model_name == "bert":  # post-norm: each section's norm after its residual
        assert runs.index("attn.residual") < runs.index("attn.norm") < runs.index("mlp.act") < runs.index("mlp.norm")
    else:
        first = runs.index("attn.norm_normalized") if "attn.norm_normalized" in runs else runs.index("attn.norm")
        assert first == 0 and runs.index("attn.residual") < runs.index("mlp.norm") < runs.index("mlp.act")
        # HuggingFace's eager RMSNorm: the normalized input, then its product with the weight
        if "attn.norm_normalized" in runs:
            assert runs.index("attn.norm_normalized") + 1 == runs.index("attn.norm")
            assert runs.index("mlp.norm_normalized") + 1 == runs.index("mlp.norm")


def test_names_are_ops_of_kiwis_llama_layer(tmp_path):
    """Every name the Llama block's ops get is an op of kiwi's layer graph of the same HuggingFace config."""
    out, config = tmp_path / "g.json", tmp_path / "config.json"
    h.build("llama").config.to_json_file(str(config))
    r = kiwi.cli("graph", "--hf-config", str(config), "--seq", "16", "--batch", "1", "--export", str(out))
    assert r.returncode == 0, r.stderr
    ops = {n["name"][len("layer0."):] for n in json.loads(out.read_text())["nodes"] if n["name"].startswith("layer0.")}
    assert NAMED["llama"] <= ops
    r = kiwi.cli("graph", "--model", "qwen3-30b-a3b", "--layers", "1", "--hidden", "64", "--heads", "4", "--seq", "16",
                 "--batch", "1", "--vocab", str(h.VOCAB), "--export", str(out))
    assert r.returncode == 0, r.stderr
    ops = {n["name"][len("layer0."):] for n in json.loads(out.read_text())["nodes"] if n["name"].startswith("layer0.")}
    assert {"attn.q_norm", "attn.k_norm", "attn.norm", "mlp.norm"} <= ops  # Qwen3's head norms by those names


def _plan(recompute, layers=4, selective=False):
    return {"kiwi_plan_version": 1, "model": "", "layer": {
        "layers": [dict(tp=1, dp=1, recompute=recompute, selective_recompute=selective)] * layers,
        "pp_degree": 1, "pp_partition": [layers], "global_batch": h.BATCH, "micro_batches": 2}}


def _train(model_name, plan):
    model = h.build(model_name)
    pm = torch_parallel.parallelize(model, plan) if plan else None
    optimizer = torch.optim.SGD(model.parameters(), lr=h.LR)
    losses = []
    for batch in h.batches():
        if pm is not None:
            losses.append(float(torch_parallel.step(pm, optimizer, batch)))
        else:
            optimizer.zero_grad()
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}, pm


@pytest.mark.parametrize("model_name,recompute,selective", [("llama", LLAMA_SET, False),
                                                            ("llama", ["attn.q_rotary", "mlp.gated"], True),
                                                            ("llama", [], True),  # selective recomputation alone
                                                            ("gpt2", [], True),
                                                            ("gpt2", ["attn.norm", "mlp.act", "attn.residual"], False),
                                                            ("bert", ["attn.norm", "mlp.act"], False),
                                                            # Qwen3's head norms and the block's second norm
                                                            ("qwen3", ["attn.q_norm", "attn.k_norm", "mlp.norm"], False)])
def test_a_set_recomputes_its_ops_and_trains_the_same(model_name, recompute, selective):
    ref_losses, ref_params, _ = _train(model_name, None)
    losses, params, pm = _train(model_name, _plan(recompute, selective=selective))
    assert losses == pytest.approx(ref_losses, rel=1e-6)
    for name, p in ref_params.items():
        torch.testing.assert_close(params[name], p, rtol=1e-5, atol=1e-6)
    expected = set(recompute) | ({"attn.attention"} if selective else set())
    for i in range(4):  # each named op marked for recomputation, nothing else
        assert set(pm.recompute_sets[i].marked) == expected, (i, pm.recompute_sets[i].marked)
        assert pm.recompute_sets[i].recomputed > 0  # and the backward passes made them again


def test_unknown_names_are_refused():
    model = h.build("llama")
    with pytest.raises(PlanError, match=r"^plan: layer.layers\[1\].recompute: 'mlp.up' is not an op kiwi.torch."
                                        r"parallelize can recompute in a block \(it names attn.attention, "):
        torch_parallel.check_plan(model, {**_plan(["mlp.act"]), "layer": {**_plan([])["layer"], "layers": [
            dict(tp=1, dp=1), dict(tp=1, dp=1, recompute=["mlp.act", "mlp.up"]), dict(tp=1, dp=1), dict(tp=1, dp=1)]}}, 1)


def test_a_set_keeps_less_by_at_least_what_kiwi_predicts(llama_config_file):
    """What the forward pass keeps (measured: the CPU allocator's level at its end) drops with kiwi hybrid's
    Llama set by at least the drop of kiwi's predicted peak (`kiwi simulate`), on one process."""
    from kiwi.torch.measure import measure_step
    from torch.autograd.profiler import record_function
    kept, predicted = {}, {}
    for name, recompute in (("none", []), ("set", LLAMA_SET)):
        plan = {**_plan(recompute), "hf_config": llama_config_file, "cluster": llama_config_file + ".cluster.json",
                "model_flags": {"seq": h.SEQ, "batch": h.BATCH, "dtype": "fp32", "optimizer": "sgd"}}
        plan["layer"]["micro_batches"] = 1
        model = h.build("config:" + llama_config_file)
        torch_parallel.parallelize(model, plan)
        batch = h.batches()[0]

        def step():
            with record_function("kiwi::forward"):
                loss = model(**batch).loss
            loss.backward()
        step()
        model.zero_grad(set_to_none=True)
        kept[name] = measure_step(step, list(model.parameters()), ranges=True).ranges["kiwi::forward"].level_after
        report = json.loads(kiwi._kiwi.layer_plan_report(json.dumps(plan), "", ""))
        predicted[name] = report["simulated"]["peak_memory_bytes"]
    assert 0 < predicted["none"] - predicted["set"] <= kept["none"] - kept["set"], (kept, predicted)


@pytest.fixture(scope="module")
def llama_config_file(tmp_path_factory):
    path = h.write_llama_config(str(tmp_path_factory.mktemp("hf") / "config.json"))
    cluster = json.loads(open(CLUSTER4).read())
    cluster.update(devices_per_node=1, name="cpu1")
    open(path + ".cluster.json", "w").write(json.dumps(cluster))
    return path


CLUSTER4 = __file__.rsplit("/", 1)[0] + "/data/cpu4.json"


def test_reshapes_are_accepted_and_do_nothing():
    """kiwi's materialized attention names its reshapes ("attn.context_groups", "attn.context#1"): accepted,
    nothing to recompute (views)."""
    from kiwi.torch.parallel.recompute_sets import check_recompute_set
    names = ["attn.q_split", "attn.k_heads", "attn.context_groups", "attn.context_merge", "attn.context#1"]
    assert check_recompute_set(names, "x") == frozenset(names)
    with pytest.raises(PlanError, match=r"^x: 'mlp.router_probs' is not an op"):
        check_recompute_set(["mlp.router_probs"], "x")


def test_selective_recomputation_keeps_no_more_than_no_recomputation():
    """Megatron's selective recomputation runs as the attention core's recompute set: every other
    activation is kept as without recomputation, so a step holds no more (a selective-activation-
    checkpointing policy that saved every other op's output held 23% more on a Qwen2 step at TP 2)."""
    from kiwi.torch.measure import measure_step
    peaks = {}
    for selective in (False, True):
        model = h.build("llama")
        pm = torch_parallel.parallelize(model, _plan([], selective=selective))
        optimizer = torch.optim.SGD(model.parameters(), lr=h.LR)
        batch = h.batches()[0]
        torch_parallel.step(pm, optimizer, batch)
        peaks[selective] = measure_step(lambda: torch_parallel.step(pm, optimizer, batch),
                                        list(model.parameters())).peak_bytes
    assert peaks[True] <= peaks[False], peaks
