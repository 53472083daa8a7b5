"""kiwi.torch.capture: FX graph -> kiwi training graph, with what autograd really saves, and its errors."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402


def by_name(graph):
    return {n["name"]: n for n in graph["nodes"]}


def test_cnn_maps_every_op(cnn):
    model, x, y = cnn
    cap = kt.capture(model, (x,), labels=y)
    nodes = by_name(cap.graph)
    assert nodes["conv1"]["kind"] == "conv" and nodes["conv1"]["attrs"]["padding"] == 1
    assert nodes["bn1"]["op"] == "batchnorm" and nodes["bn1"]["inputs"] == [nodes["conv1"]["id"],
                                                                          nodes["bn1.weight"]["id"],
                                                                          nodes["bn1.bias"]["id"]]
    assert nodes["pool"]["op"] == "max_pool" and nodes["pool"]["attrs"]["window"] == 2
    assert nodes["fc"]["kind"] == "matmul" and nodes["fc"]["attrs"]["transpose_b"] is True
    assert nodes["drop.mask"]["kind"] == "random" and nodes["drop"]["op"] == "mul"
    assert nodes["kiwi_loss"]["op"] == "cross_entropy"
    # The reused ReLU module gets two distinct nodes; `z += y` runs out of place as an add.
    assert nodes["relu"]["op"] == "relu" and nodes["relu#1"]["op"] == "relu"
    assert any(n["op"] == "add" and n.get("pass") == "forward" for n in cap.graph["nodes"])
    params = [n for n in cap.graph["nodes"] if n["kind"] == "parameter"]
    assert sum(kiwi.torch.costs.node_bytes(n) for n in params) == sum(p.numel() * 4 for p in model.parameters())
    states = [n for n in cap.graph["nodes"] if n["kind"] == "optimizer_state"]
    assert len(states) == 2 * len(params)


def test_saved_buffers_are_what_autograd_keeps(cnn):
    model, x, y = cnn
    cap = kt.capture(model, (x,), labels=y)
    nodes = by_name(cap.graph)
    # max_pool2d saves int64 indices shaped like its output: 8 x 8 x 16 x 16 elements.
    assert nodes["pool.saved"]["shape"] == [8 * 8 * 16 * 16 * 8]
    # batch norm saves its mean and inverse std per channel (2 x 8 floats).
    assert nodes["bn1.saved"]["shape"] == [2 * 8 * 4]
    # The dropout mask PyTorch's CPU kernel saves is a float tensor the size of its input.
    assert nodes["drop.mask"]["dtype"] == ("f32" if x.device.type == "cpu" else nodes["drop.mask"]["dtype"])
    # Before the pool's backward: its input and indices are unpacked; relu's output is read by its gradient.
    unpack = nodes["pool.autograd_unpack"]
    assert set(unpack["inputs"]) == {nodes["relu#1"]["id"], nodes["pool.saved"]["id"]}
    order = cap.graph["order"]
    assert order.index(unpack["id"]) < order.index(nodes["relu#1.grad"]["id"])


def test_planners_see_the_whole_step(cnn):
    model, x, y = cnn
    cap = kt.capture(model, (x,), labels=y)
    summary = cap.summary()
    keep_all = kt.predict(cap, [])
    # kiwi's checkpoint-all schedule and the applied module's keep-all schedule are the same execution.
    assert summary["checkpoint_all_peak_bytes"] == keep_all["peak"]
    resident = sum(p.numel() * 4 for p in model.parameters()) * 3 + x.numel() * 4 + y.numel() * 8
    assert keep_all["peak"] > resident  # parameters, Adam's two moments, inputs, then activations


def test_transformer_ops(transformer):
    model, ids, y = transformer
    cap = kt.capture(model, (ids,), labels=y, optimizer="sgd-momentum")
    kinds = {(n["kind"], n["op"]) for n in cap.graph["nodes"]}
    assert {("embedding", "embedding"), ("layernorm", "layernorm"), ("transpose", "transpose"),
            ("batch_matmul", "batch_matmul"), ("softmax", "softmax"), ("elementwise", "gelu"),
            ("reduce", "mean"), ("elementwise", "scale")} <= kinds
    assert sum(n["op"] == "momentum" for n in cap.graph["nodes"]) == len(list(model.parameters()))


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow
            return self.fc(x)
        return x


def test_untraceable_model_names_the_line():
    with pytest.raises(kt.TraceError, match=r"Branchy at test_torch_capture.py:\d+: if x.sum\(\) > 0"):
        kt.capture(Branchy(), (torch.randn(2, 4),), labels=torch.tensor([0, 1]))


class Grouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, groups=2)

    def forward(self, x):
        return self.conv(x).flatten(1)


class Concat(nn.Module):
    def forward(self, x):
        return torch.cat([x, x], dim=1)


def test_unsupported_ops_are_named():
    with pytest.raises(kt.UnsupportedOpError, match=r"module 'conv' \(Conv2d\): grouped convolution"):
        kt.capture(Grouped(), (torch.randn(2, 4, 5, 5),), labels=torch.tensor([0, 1]))
    with pytest.raises(kt.UnsupportedOpError, match=r"function .*cat .*has no kiwi IR mapping"):
        kt.capture(Concat(), (torch.randn(2, 3),), labels=torch.tensor([0, 1]))


def test_capture_errors():
    model = nn.Linear(3, 2)
    with pytest.raises(kt.CaptureError, match="scalar"):
        kt.capture(model, (torch.randn(2, 3),))  # no labels and the model does not return a loss
    with pytest.raises(kt.CaptureError, match="takes 1 inputs"):
        kt.capture(model, (torch.randn(2, 3), torch.randn(2, 3)), labels=torch.tensor([0, 1]))
    with pytest.raises(kt.CaptureError, match="optimizer"):
        kt.capture(model, (torch.randn(2, 3),), labels=torch.tensor([0, 1]), optimizer="lion")
    frozen = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    frozen[0].weight.requires_grad_(False)
    cap = kt.capture(frozen, (torch.randn(2, 3),), labels=torch.tensor([0, 1]))
    assert by_name(cap.graph)["0.weight"]["kind"] == "input"  # frozen weights get no gradient


def test_cpu_convolution_temporaries():
    """oneDNN's reorder buffers, as measured with torch.profiler on a float32 batch of 16 (MiB)."""
    from kiwi.torch.costs import cpu_conv_workspace
    mib = 1 << 20

    def ws(cin, cout, hw, stride=1, grad_input=True):
        f, b = cpu_conv_workspace([16, cin, hw, hw], [16, cout, hw // stride, hw // stride], grad_input)
        return f / mib, b / mib

    assert ws(16, 32, 64) == (8.0, 12.0)      # input reordered (4), output computed blocked (8)
    assert ws(32, 16, 64) == (8.0, 12.0)
    assert ws(3, 64, 64) == (16.0, 19.25)     # a 3-channel image is not reordered; dx is padded to 16
    assert ws(8, 8, 64) == (4.0, 6.0)         # 8 channels: blocked buffers padded to 16
    assert ws(24, 24, 32) == (2.5, 4.0)
    assert ws(3, 64, 64, grad_input=False) == (16.0, 16.0)


def test_a_fused_adam_is_captured_as_one(cnn):
    """Adam(fused=True) keeps Adam's states, has no parameter-sized temporaries, and its step is the
    training graph's fused_adam op (priced as one pass, or at its measured rate)."""
    model, x, y = cnn
    fused = kt.capture(model, (x,), labels=y, optimizer=torch.optim.Adam(model.parameters(), fused=True))
    loop = kt.capture(model, (x,), labels=y, optimizer=torch.optim.Adam(model.parameters()))
    assert fused.optimizer == kt.capture(model, (x,), labels=y, optimizer="fused_adam").optimizer
    assert fused.optimizer.kind == "fused_adam" and loop.optimizer.kind == "adam"
    steps = {g: [n["op"] for n in c.graph["nodes"] if n["kind"] == "optimizer"] for g, c in (("f", fused), ("l", loop))}
    assert steps == {"f": ["fused_adam"], "l": ["adam"]}
    states = [n["name"] for n in fused.graph["nodes"] if n["kind"] == "optimizer_state"]
    assert states == [n["name"] for n in loop.graph["nodes"] if n["kind"] == "optimizer_state"] and states
    assert fused.workspace.optimizer == 0 < loop.workspace.optimizer
