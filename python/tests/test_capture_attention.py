"""F.scaled_dot_product_attention -> kiwi's fused `attention` op: what capture maps and refuses, and a
planned step of a small causal-attention model (recomputation, micro-batches, dropout inside the kernel)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402
from kiwi.torch import measure  # noqa: E402
from step_helpers import run_step  # noqa: E402

BATCH, SEQ, HEADS, HEAD_DIM, CLASSES = 2, 8, 2, 4, 5
DIM = HEADS * HEAD_DIM


class CausalAttention(nn.Module):
    """q/k/v projections split into heads, scaled-dot-product attention, an output projection with a
    residual, mean pooling over the sequence and a linear head."""

    def __init__(self, causal: bool = True, dropout_p: float = 0.0, keywords: bool = False, kv_heads: int = HEADS,
                 enable_gqa: bool = False, mask: bool = False, shared_kv: bool = False):
        super().__init__()
        self.causal, self.dropout_p, self.keywords = causal, dropout_p, keywords
        self.kv_heads, self.enable_gqa = kv_heads, enable_gqa
        self.q = nn.Linear(DIM, DIM)
        self.k = nn.Linear(DIM, kv_heads * HEAD_DIM)
        self.v = nn.Linear(DIM, kv_heads * HEAD_DIM)
        self.out = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, CLASSES)
        if mask:
            self.register_buffer("mask", torch.ones(SEQ, SEQ, dtype=torch.bool).tril())
        else:
            self.mask = None
        # keys and values shared by the whole batch: batch dims that broadcast
        self.kv = nn.Parameter(torch.randn(1, kv_heads, SEQ, HEAD_DIM)) if shared_kv else None

    def forward(self, x):
        b, s, d = x.shape
        q = self.q(x).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, HEAD_DIM).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, HEAD_DIM).transpose(1, 2)
        if self.kv is not None:
            k, v = self.kv, self.kv
        if self.keywords:
            o = F.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=self.mask,
                                               dropout_p=self.dropout_p, is_causal=self.causal,
                                               scale=0.5, enable_gqa=self.enable_gqa)
        elif self.mask is not None:
            o = F.scaled_dot_product_attention(q, k, v, self.mask)
        elif self.enable_gqa:
            o = F.scaled_dot_product_attention(q, k, v, None, self.dropout_p, self.causal, enable_gqa=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, None, self.dropout_p, self.causal)
        x = x + self.out(o.transpose(1, 2).reshape(b, s, d))
        return self.head(x.mean(dim=1))


def data(batch: int = BATCH):
    return torch.randn(batch, SEQ, DIM), torch.randint(0, CLASSES, (batch,))


@pytest.fixture
def attn():
    torch.manual_seed(0)
    return (CausalAttention().train(),) + data()


def attention_nodes(cap):
    nodes = cap.graph["nodes"]
    fwd = [n for n in nodes if n["kind"] == "attention" and n.get("pass", "forward") == "forward"]
    grads = [n for n in nodes if n["kind"] == "attention" and n.get("pass") == "backward"]
    return nodes, fwd, grads


def test_sdpa_is_one_fused_attention_node_with_its_gradients(attn):
    model, x, y = attn
    cap = kt.capture(model, (x,), labels=y)
    nodes, fwd, grads = attention_nodes(cap)
    assert len(fwd) == 1
    a = fwd[0]
    shape = [BATCH, HEADS, SEQ, HEAD_DIM]
    assert a["op"] == "attention" and a["attrs"] == {"causal": True} and a["shape"] == shape
    assert [nodes[i]["shape"] for i in a["inputs"]] == [shape] * 3
    assert [nodes[i]["name"] for i in a["inputs"]] == ["transpose", "transpose_1", "transpose_2"]  # q, k, v
    # FlashAttention-2's FLOPs, halved by the causal mask: 4 sq sk d per batch element and head.
    assert a["flops"] == pytest.approx(4 * SEQ * SEQ * HEAD_DIM * BATCH * HEADS / 2)
    # No decomposition: no score matrix, softmax or dropout mask of its own.
    assert not any(n["kind"] == "batch_matmul" or n["op"] in ("softmax", "dropout_mask") for n in nodes)
    # kiwi's gradient rule: dq, dk, dv, each reading (dO, q, k, v, output), flowing into the projections.
    assert sorted(g["op"] for g in grads) == ["attention_grad_k", "attention_grad_q", "attention_grad_v"]
    for g in grads:
        assert g["grad_of"] == a["id"] and g["attrs"] == {"causal": True} and g["shape"] == shape
        assert g["inputs"][1:] == a["inputs"] + [a["id"]]
    assert {"q.weight.grad", "k.weight.grad", "v.weight.grad"} <= {n["name"] for n in nodes}
    # The attention output is a tensor the planners may drop (autograd saves it for the backward).
    assert a["id"] in kt.droppable_tensors(cap)
    assert kt.floor(cap)["bytes"] > 0


def test_keyword_call_without_causal_and_gqa_with_equal_heads():
    torch.manual_seed(0)
    model = CausalAttention(causal=False, keywords=True, enable_gqa=True).train()
    x, y = data()
    cap = kt.capture(model, (x,), labels=y)
    _, fwd, grads = attention_nodes(cap)
    assert len(fwd) == 1 and "attrs" not in fwd[0] and len(grads) == 3
    assert all("attrs" not in g for g in grads)
    assert fwd[0]["flops"] == pytest.approx(4 * SEQ * SEQ * HEAD_DIM * BATCH * HEADS)


def test_dropout_is_an_attribute_of_the_attention_and_its_gradients():
    torch.manual_seed(0)
    x, y = data()
    cap = kt.capture(CausalAttention(dropout_p=0.25).train(), (x,), labels=y)
    _, fwd, grads = attention_nodes(cap)
    for n in fwd + grads:
        assert n["attrs"] == {"causal": True, "dropout_p": 0.25}


def test_a_profiles_attention_samples_price_the_captured_attention(attn):
    """`kiwi profile` times fused attention (forward, backward; causal or not, dropout or not): a sample
    of the captured op's exact shape gives its time, the backward's shared by dq, dk and dv by FLOPs."""
    model, x, y = attn
    cap = kt.capture(model, (x,), labels=y)
    _, fwd, grads = attention_nodes(cap)
    sample = {"batch_heads": BATCH * HEADS, "seq": SEQ, "head_dim": HEAD_DIM, "causal": True, "dtype": "f32"}
    attention = [dict(sample, op="attention", time=3e-3), dict(sample, op="attention_grad", time=5e-3),
                 dict(sample, op="attention", causal=False, time=1.0)]  # not causal: not this op's
    profile = {"kiwi_profile_version": 1, "unit": "s", "device": {"kernel_time": 0.0, "attention": attention}}
    costs = kiwi.graph_summary(cap.graph, cap.cluster, profile)["node_costs"]
    assert costs[fwd[0]["id"]] == pytest.approx(3e-3, rel=1e-9)
    assert sum(costs[g["id"]] for g in grads) == pytest.approx(5e-3, rel=1e-9)
    dk = next(g for g in grads if g["op"] == "attention_grad_k")
    assert costs[dk["id"]] == pytest.approx(5e-3 / 5, rel=1e-9)  # dk: a fifth of the backward's FLOPs
    assert kiwi.graph_summary(cap.graph, cap.cluster)["node_costs"][fwd[0]["id"]] != pytest.approx(3e-3)


def test_what_kiwis_attention_cannot_express_is_refused():
    x, y = data()
    with pytest.raises(kt.UnsupportedOpError, match="scaled_dot_product_attention.*attn_mask: kiwi's fused "
                                                    "attention takes no mask tensor .*is_causal"):
        kt.capture(CausalAttention(mask=True), (x,), labels=y)
    with pytest.raises(kt.UnsupportedOpError, match="attn_mask"):
        kt.capture(CausalAttention(mask=True, keywords=True, causal=False), (x,), labels=y)
    with pytest.raises(kt.UnsupportedOpError, match="grouped-query attention.*as many key/value heads"):
        kt.capture(CausalAttention(kv_heads=1, enable_gqa=True), (x,), labels=y)
    with pytest.raises(kt.UnsupportedOpError, match="does not broadcast"):
        kt.capture(CausalAttention(shared_kv=True), (x,), labels=y)


def run_both(model, applied, x, y):
    """The unmodified model's step and the applied plan's (train_step: micro-batches too), same start."""
    pristine = {k: v.clone() for k, v in model.state_dict().items()}
    ref = run_step(model, lambda opt: measure.training_step(model, (x,), y, F.cross_entropy, opt), x, y)
    model.load_state_dict(pristine)
    got = run_step(model, lambda opt: applied.train_step((x,), y, opt), x, y)
    model.load_state_dict(pristine)
    return ref, got


def test_recomputing_attention_gives_the_models_gradients(attn):
    model, x, y = attn
    cap = kt.capture(model, (x,), labels=y)
    applied = kt.apply_remat(model, kt.plan_from_dropped(cap, kt.droppable_tensors(cap)))
    (_, ref, _), (_, got, _) = run_both(model, applied, x, y)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert applied.last_step.recomputed > 0 and applied.last_step.fallbacks == 0


@pytest.mark.parametrize("fraction", [1.0, 0.9])
def test_budget_plan_runs_at_its_predicted_peak(attn, fraction):
    model, x, y = attn
    cap = kt.capture(model, (x,), labels=y, costs="measured")
    plan = kt.plan_remat(cap, fraction=fraction, solver="heuristic")
    assert plan.predicted_peak_bytes <= plan.budget_bytes
    applied = kt.apply_remat(model, plan)
    (_, ref, _), (m, got, _) = run_both(model, applied, x, y)
    for a, b in zip(got, ref):  # micro-batches sum float32 gradients in another order
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert m.peak_bytes == pytest.approx(plan.predicted_peak_bytes, rel=0.05)


def test_dropout_inside_attention_replays_when_recomputed():
    torch.manual_seed(0)
    model = CausalAttention(dropout_p=0.3).train()
    x, y = data()
    cap = kt.capture(model, (x,), labels=y)
    nodes, fwd, _ = attention_nodes(cap)
    assert len(fwd) == 1 and not any(n["kind"] == "random" for n in nodes)  # dropout is inside the kernel
    applied = kt.apply_remat(model, kt.plan_from_dropped(cap, kt.droppable_tensors(cap)))
    assert "scaled_dot_product_attention" in applied._program.random
    (_, ref, _), (_, got, _) = run_both(model, applied, x, y)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert applied.last_step.recomputed > 0
