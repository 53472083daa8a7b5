"""16-bit plans run as kiwi prices them (kiwi.torch.parallel.master_weights): bf16 parameters and gradients,
fp32 master weights and Adam moments, one tensor's fp32 gradient at a time; the measured peak of a bf16
plan is kiwi's (it was 44% below it when the run kept bf16 moments and no masters, 33% above it where the
logits dominate before kiwi counted HuggingFace's fp32 loss)."""
import json
import os

import pytest
import torch

import kiwi
import parallel_helpers as h
from kiwi.torch.measure import optimizer_tensors
from kiwi.torch.parallel.job import make_optimizer
from kiwi.torch.parallel.master_weights import MasterWeightsOptimizer


def _loss(model, batch):
    return model(**batch).loss


def test_16_bit_parameters_step_through_fp32_masters():
    model = h.build("llama").to(torch.bfloat16)
    batch = h.batches()[0]
    before = [p.detach().float().clone() for p in model.parameters()]
    _loss(model, batch).backward()
    grads = [p.grad.float().clone() for p in model.parameters()]
    lr = 1e-6  # updates far below bf16's resolution of the weights (~1e-4): only the masters keep them
    opt = make_optimizer("adam", model.parameters(), lr)
    assert isinstance(opt, MasterWeightsOptimizer)
    opt.step()
    # the reference: one fp32 Adam over all the masters with the 16-bit gradients made fp32
    masters = [b.clone().requires_grad_() for b in before]
    for m, g in zip(masters, grads):
        m.grad = g
    torch.optim.Adam(masters, lr=lr, foreach=True).step()
    for p, m, ref in zip(model.parameters(), opt.masters, masters):
        assert m.dtype == torch.float32 and torch.equal(m, ref.detach())
        assert torch.equal(p.detach(), ref.detach().to(torch.bfloat16)) and p.grad is None
    moved = sum(int((m != b).sum()) for m, b in zip(opt.masters, before))
    rounded = sum(int((p.detach().float() != b).sum()) for p, b in zip(model.parameters(), before))
    assert moved > 10 * rounded and moved > 0
    resident = optimizer_tensors(opt)  # what kiwi.torch.measure counts as model states: masters and moments
    assert {t.dtype for t in resident if t.dim()} == {torch.float32}
    assert sum(t.numel() for t in resident if t.dim()) == 3 * sum(p.numel() for p in model.parameters())


def test_fp32_parameters_keep_the_plain_optimizer():
    model = h.build("llama")
    assert isinstance(make_optimizer("adam", model.parameters(), 1e-3), torch.optim.Adam)
    assert isinstance(make_optimizer("sgd", model.parameters(), 1e-3), torch.optim.SGD)


# (layers, ffn, vocabulary, sequence): model states dominate; then the logits do (32000 words), whose loss
# HuggingFace computes on logits.float() (kiwi's model: +32.8% measured before it counted that, -4.5% since)
SIZES = {"states": (4, 512, 1024, 64), "logits": (2, 704, 32000, 256)}


def _llama_config(path: str, sizes: str) -> int:
    """A hidden-256 Llama config of SIZES[sizes] written to `path`; returns its sequence length."""
    import transformers as tf
    layers, ffn, vocab, seq = SIZES[sizes]
    tf.LlamaConfig(hidden_size=256, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=ffn, vocab_size=vocab, max_position_embeddings=seq).to_json_file(path)
    return seq


@pytest.mark.parametrize("sizes", sorted(SIZES))
def test_a_bf16_plans_measured_peak_is_kiwis(tmp_path, sizes):
    config, cluster, plan, run = (str(tmp_path / f) for f in ("llama.json", "cpu1.json", "plan.json", "run.json"))
    seq = _llama_config(config, sizes)
    with open(cluster, "w") as f:
        json.dump({"kiwi_cluster_version": 1, "name": "cpu1", "num_nodes": 1, "devices_per_node": 1,
                   "device": {"name": "cpu-core", "memory": "1GiB", "memory_bandwidth_gbps": 10,
                              "peak_tflops": {"f32": 0.02, "bf16": 0.02}},
                   "intra_node": {"name": "loopback", "bandwidth_gbps": 1, "latency_us": 50}}, f)
    r = kiwi.cli("plan", "--hf-config", config, "--cluster", cluster, "--batch", "4", "--seq", str(seq), "--dtype", "bf16",
                 "--optimizer", "adam", "--no-refine", "--quiet", "--out", plan)
    assert r.returncode == 0, r.stderr
    from kiwi.torch.parallel.__main__ import main
    assert main(["--plan", plan, "--nproc", "1", "--steps", "2", "--backend", "gloo", "--json", run]) == 0
    out = json.load(open(run))
    measured, predicted = out["ranks"][0]["peak_memory_bytes"], out["kiwi"]["stages"][0]["peak_memory_bytes"]
    # "states": measured 3.2% below kiwi's (bf16 moments and no masters: 44% below); "logits": 4.5% below
    # (4.9% above while the step held the model's output, its bf16 logits, through the backward pass)
    assert 0.92 * predicted <= measured <= predicted


def test_a_bf16_zero3_plan_steps_each_ranks_fp32_shards(tmp_path):
    """FSDP2's bf16 shards (DTensors) step through fp32 master shards on 4 gloo processes: the collectives are
    kiwi's to the byte (bf16 all-gathers and reduce-scatters) and every rank peaks within 6% of kiwi's count
    (measured 2.7-5.2% below it)."""
    config, plan, run = (str(tmp_path / f) for f in ("llama.json", "plan.json", "run.json"))
    seq = _llama_config(config, "states")
    cluster = os.path.join(os.path.dirname(__file__), "data", "cpu4.json")
    r = kiwi.cli("hybrid", "--hf-config", config, "--cluster", cluster, "--batch", "8", "--seq", str(seq), "--dtype", "bf16",
                 "--optimizer", "adam", "--runtime", "fsdp2", "--method", "dp+tp", "--quiet", "--out", plan)
    assert r.returncode == 0, r.stderr
    planned = json.load(open(plan))
    for layer in planned["layer"]["layers"]:
        layer.update(tp=1, dp=4, zero=3)
    with open(plan, "w") as f:
        json.dump(planned, f)
    from kiwi.torch.parallel.__main__ import main
    assert main(["--plan", plan, "--nproc", "4", "--steps", "2", "--backend", "gloo", "--json", run]) == 0
    out = json.load(open(run))
    predicted = out["kiwi"]["stages"][0]
    for rank in out["ranks"]:
        assert rank["peak_memory_bytes"] == pytest.approx(predicted["peak_memory_bytes"], rel=0.06)
        assert rank["bytes"]["dp all_gather"] == predicted["bytes"]["dp all_gather"] > 0
        assert rank["bytes"]["dp reduce_scatter"] == predicted["bytes"]["dp reduce_scatter"] > 0
