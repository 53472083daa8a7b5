"""The generic capture (kiwi.torch.capture_joint): HuggingFace models and in-place/view-heavy modules are
captured as autograd's own joint graph, planned at 100/80/60% of their peak, run by the plan, and
checked against unmodified training: measured peak within the budget, predicted peak within 3% of it,
gradients bit-identical (float tolerance where noted)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402
from conftest import SmallCnn  # noqa: E402
from kiwi.torch.joint_plan import plan_joint_or_smallest  # noqa: E402
from kiwi.torch.joint_run import JointRunner, checkpoint_all  # noqa: E402
from kiwi.torch.measure import measure_step  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
from kiwi.torch import hf_zoo  # noqa: E402

# Mixtral's batched expert GEMMs sum in another order than the reference's (index_add over experts).
FLOAT_TOLERANCE = {"mixtral": 1e-6}


def _reference(model, step):
    """Gradients of unmodified training, with buffers and the generator restored afterwards."""
    saved = {k: v.clone() for k, v in model.named_buffers()}
    torch.manual_seed(1)
    loss = step()
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    with torch.no_grad():
        for k, v in model.named_buffers():
            v.copy_(saved[k])
    return loss.detach(), grads, saved


def _check_grads(grads, ref, tolerance=0.0):
    assert len(grads) == len(ref)
    for g, r in zip(grads, ref):
        assert (g is None) == (r is None)
        if g is None:
            continue
        if tolerance == 0.0:
            assert torch.equal(g, r), (g - r).abs().max()
        else:
            assert torch.allclose(g, r, rtol=0, atol=tolerance * max(r.abs().max().item(), 1.0))


def _plan_or_smallest(cap, fraction):
    """The plan at `fraction` of the peak, or at the smallest budget kiwi knows works when that is higher."""
    return plan_joint_or_smallest(cap, fraction)[0]


def _measured(cap, plan, resident):
    runner = JointRunner(cap)
    box = {}

    def step():
        torch.manual_seed(1)
        box["out"] = runner.run(plan.schedule)

    saved = {k: v.clone() for k, v in cap.model.named_buffers()}
    m = measure_step(step, resident)
    with torch.no_grad():
        for k, v in cap.model.named_buffers():
            v.copy_(saved[k])
    return m, box["out"]


@pytest.mark.parametrize("name", hf_zoo.names())
def test_huggingface_models_capture_plan_and_run_within_budget(name):
    model, inputs = hf_zoo.build(name)
    cap = kt.capture_joint(model, inputs, loss=None)
    assert cap.graph["operands"] == "storages"
    ref_loss, ref, _ = _reference(model, lambda: model(**inputs).loss)
    resident = list(model.parameters()) + list(model.buffers()) + list(inputs.values())
    for fraction in (1.0, 0.8, 0.6):
        plan = _plan_or_smallest(cap, fraction)
        m, (loss, grads) = _measured(cap, plan, resident)
        assert m.peak_bytes <= plan.budget_bytes, (fraction, m.peak_bytes, plan.budget_bytes)
        assert abs(plan.predicted_peak_bytes - m.peak_bytes) <= 0.03 * m.peak_bytes, \
            (fraction, plan.predicted_peak_bytes, m.peak_bytes)
        assert torch.equal(loss, ref_loss) or name in FLOAT_TOLERANCE
        _check_grads(grads, ref, FLOAT_TOLERANCE.get(name, 0.0))


class InPlaceOnViews(nn.Module):
    """Writes into slices of activations, in-place activations, a view chain read after a write."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        h = self.a(x) * 1.0
        h[:, :4].mul_(2.0)                   # a write through a view: the base's storage has a new version
        v = h.view(x.shape[0], 4, 8)         # a view taken after the write, written through
        v.add_(1.0)
        torch.relu_(h)                       # an in-place activation, whose output autograd saves
        return self.b(h)


def test_in_place_writes_through_views_keep_autograds_values():
    torch.manual_seed(0)
    model = InPlaceOnViews()
    x, y = torch.randn(6, 16), torch.randint(0, 8, (6,))
    cap = kt.capture_joint(model, (x,), labels=y)
    ref_loss, ref, _ = _reference(model, lambda: nn.functional.cross_entropy(model(x), y))
    loss, grads = JointRunner(cap).run(checkpoint_all(cap))
    assert torch.equal(loss, ref_loss)
    _check_grads(grads, ref)


def test_batch_norm_dropout_and_in_place_residual_under_recomputation():
    torch.manual_seed(0)
    model = SmallCnn().train()
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    cap = kt.capture_joint(model, (x,), labels=y)
    ref_loss, ref, before = _reference(model, lambda: nn.functional.cross_entropy(model(x), y))
    torch.manual_seed(1)
    model(x)  # the running statistics one eager training step leaves
    after = {k: v.clone() for k, v in model.named_buffers()}
    with torch.no_grad():
        for k, v in model.named_buffers():
            v.copy_(before[k])
    plan = _plan_or_smallest(cap, 0.6)
    assert plan.recomputed(), "the plan recomputes nothing: this test would not test recomputation"
    torch.manual_seed(1)
    loss, grads = JointRunner(cap).run(plan.schedule)
    assert torch.equal(loss, ref_loss)
    _check_grads(grads, ref)
    for k, v in model.named_buffers():   # batch norm's statistics updated once, not once per recomputation
        assert torch.equal(v, after[k]), k


def test_recomputed_dropout_replays_its_mask():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Dropout(0.5), nn.GELU(), nn.Linear(64, 4))
    x, y = torch.randn(8, 32), torch.randint(0, 4, (8,))
    cap = kt.capture_joint(model, (x,), labels=y)
    ref_loss, ref, _ = _reference(model, lambda: nn.functional.cross_entropy(model(x), y))
    nodes = cap.graph["nodes"]
    mask = next(v for v, n in enumerate(nodes) if n["op"] == "dropout_mask")
    (empty,) = nodes[mask]["inputs"]   # the mask is bernoulli_ written into a fresh tensor
    assert nodes[mask]["bytes_accessed"] == 8 * 64 * 4   # it overwrites that tensor: written, never read
    first_reader = min(v for v, n in enumerate(nodes) if mask in n["inputs"])
    # checkpoint-all, but the mask is freed and made again (from a new empty tensor) before its first reader
    sched = []
    for s in checkpoint_all(cap):
        if s == {"op": "compute", "node": first_reader}:
            sched += [{"op": "free", "node": mask}, {"op": "compute", "node": empty},
                      {"op": "compute", "node": mask}, {"op": "free", "node": empty}]
        sched.append(s)
    assert kiwi.simulate(cap.graph, kiwi.make_plan(sched), cap.cluster)["recomputations"] == 2
    with pytest.raises(kt.PlanError, match="which is not resident"):   # the mask without its tensor
        JointRunner(cap).run([s for s in sched if s != {"op": "compute", "node": empty}])
    torch.manual_seed(1)
    loss, grads = JointRunner(cap).run(sched)
    assert torch.equal(loss, ref_loss)
    _check_grads(grads, ref)


def test_joint_step_trains_like_backward_in_an_ordinary_loop():
    torch.manual_seed(0)
    model, inputs = hf_zoo.build("llama")
    twin, _ = hf_zoo.build("llama")
    twin.load_state_dict(model.state_dict())
    cap = kt.capture_joint(model, inputs, loss=None)
    step = kt.apply_joint(kt.plan_joint(cap, fraction=0.7))
    opt, opt_twin = torch.optim.Adam(model.parameters(), lr=1e-3), torch.optim.Adam(twin.parameters(), lr=1e-3)
    for _ in range(2):
        torch.manual_seed(5)
        loss = step(inputs)
        opt.step()
        opt.zero_grad()
        torch.manual_seed(5)
        twin(**inputs).loss.backward()
        opt_twin.step()
        opt_twin.zero_grad()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.equal(p, q), name
    assert loss.ndim == 0


def test_errors_are_one_line_and_name_the_problem():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            if x.sum() > 0:   # data-dependent control flow
                return self.fc(x)
            return self.fc(-x)

    with pytest.raises(kt.TraceError, match="make_fx cannot trace Branchy") as e:
        kt.capture_joint(Branchy(), (torch.randn(3, 4),), labels=torch.tensor([0, 1, 0]))
    assert "\n" not in str(e.value)
    with pytest.raises(kt.CaptureError, match="expected a torch.nn.Module"):
        kt.capture_joint(lambda x: x, (torch.randn(2),))
    frozen = nn.Linear(4, 2).requires_grad_(False)
    with pytest.raises(kt.CaptureError, match="no parameter that requires a gradient"):
        kt.capture_joint(frozen, (torch.randn(3, 4),), labels=torch.tensor([0, 1, 0]))
    with pytest.raises(kt.CaptureError, match="loss: 'mse'"):
        kt.capture_joint(nn.Linear(4, 2), (torch.randn(3, 4),), loss="mse")
    with pytest.raises(kt.CaptureError, match="workspaces: 'profiled' is not"):   # refused before tracing
        kt.capture_joint(Branchy(), (torch.randn(3, 4),), labels=torch.tensor([0, 1, 0]), workspaces="profiled")
    with pytest.raises(kt.CaptureError, match="not a scalar loss"):
        kt.capture_joint(nn.Linear(4, 2), (torch.randn(3, 4),), loss=None)

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    cap = kt.capture_joint(model, (x,), labels=y)
    with pytest.raises(kt.PlanError, match="exactly one of budget= and fraction="):
        kt.plan_joint(cap)
    with pytest.raises(kt.PlanError, match="fraction: must be in"):
        kt.plan_joint(cap, fraction=1.5)
    with pytest.raises(kiwi.InfeasibleError, match="smallest budget kiwi can satisfy") as e:
        kt.plan_joint(cap, budget=1024)
    smallest, reached = plan_joint_or_smallest(cap, budget=1024)   # planned at that smallest budget instead
    assert not reached and smallest.budget_bytes == e.value.smallest_budget_bytes
    assert smallest.predicted_peak_bytes <= smallest.budget_bytes
    step = kt.apply_joint(cap)
    with pytest.raises(kt.PlanError, match="capture again for new shapes"):
        step(torch.randn(5, 8), labels=torch.randint(0, 2, (5,)))
    # kiwi's own passes refuse a captured graph: it holds storages, not kiwi's operators
    with pytest.raises(kiwi.BadInputError, match="backward graph builder needs kiwi's own operators"):
        kiwi.build_training_graph(cap.graph)


def test_workspaces_none_captures_without_running_the_model():
    torch.manual_seed(0)
    model = SmallCnn().train()
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cap = kt.capture_joint(model, (x,), labels=y, workspaces="none")
    assert cap.workspaces == {} and cap.seconds == {}
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    measured = kt.capture_joint(model, (x,), labels=y)
    assert any("convolution" in name for name in measured.workspaces), measured.workspaces


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):   # x: [batch, seq, 16], 4 heads of 4
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 4, 4).permute(2, 0, 3, 1, 4)
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum(dim=(1, 3))


def test_the_cpus_fused_attention_is_counted_by_torchs_attention_formula():
    x, y = torch.randn(2, 8, 16), torch.randint(0, 8, (2,))
    cap = kt.capture_joint(Attention(), (x,), labels=y, workspaces="none")
    attention = [n for n in cap.graph["nodes"] if n["kind"] == "attention"]
    assert [n["op"] for n in attention] == ["attention", "attention_grad_q"], [n["name"] for n in attention]
    b, h, s, d = 2, 4, 8, 4
    assert attention[0]["flops"] == 4 * b * h * s * s * d   # QK^T and PV, as torch's counter (no causal half)
    assert attention[1]["flops"] == 2.5 * attention[0]["flops"]   # its backward: five products


def test_convolutions_are_named_by_kind_and_gradients_and_counted_per_group():
    # Image -> 3x3 depthwise (groups 8) -> 1x1: the depthwise one named apart (a device runs it at rates
    # of its own); the first convolution's input needs no gradient (the weight's only), the others both;
    # each gradient costs the forward's flops (torch's own formula counts a grouped convolution's
    # backward as dense: 8x here).
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1, groups=8),
                          nn.Conv2d(8, 4, 1), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    x, y = torch.randn(2, 3, 6, 6), torch.randint(0, 5, (2,))
    cap = kt.capture_joint(model, (x,), labels=y, workspaces="none")
    nodes = cap.graph["nodes"]
    forward = [n for n in nodes if n["kind"] == "conv" and "_grad" not in n["op"]]
    backward = [n for n in nodes if n["kind"] == "conv" and "_grad" in n["op"]]
    assert sorted(n["op"] for n in forward) == ["conv2d", "conv2d", "conv2d_depthwise"]
    assert sorted(n["op"] for n in backward) == ["conv2d_depthwise_grad_xw", "conv2d_grad_w", "conv2d_grad_xw"]
    depthwise_forward = 2 * 2 * 6 * 6 * 8 * 1 * 9   # batch x image x out channels x (in per group x 3 x 3)
    assert sorted(n["flops"] for n in forward) == sorted([2 * 2 * 36 * 8 * 27, depthwise_forward, 2 * 2 * 36 * 4 * 8])
    assert sorted(n["flops"] for n in backward) == sorted(
        [2 * 2 * 36 * 8 * 27, 2 * depthwise_forward, 2 * 2 * 2 * 36 * 4 * 8])


def test_an_in_place_op_on_an_activation_counts_the_copy_the_runner_writes_it_into():
    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

        def forward(self, x):
            h = self.a(x)
            h.mul_(2.0)   # an activation no one else reads: the runner writes its new version into a copy
            return self.b(h)

    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    cap = kt.capture_joint(InPlace(), (x,), labels=y, workspaces="none")
    (mul,) = [n for n in cap.graph["nodes"] if n["op"] == "mul_"]
    nbytes = 8 * 32 * 4
    assert mul["bytes_accessed"] == 4 * nbytes   # read, written, and the copy's read and write


def test_measured_op_times_are_what_the_simulator_prices():
    torch.manual_seed(0)
    model = SmallCnn().train()
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    cap = kt.capture_joint(model, (x,), labels=y)   # times="measured" by default with measured workspaces
    nodes = cap.graph["nodes"]
    ops = {p.fx.name for p in cap.produced if p is not None}
    assert set(cap.seconds) == ops and all(t > 0 for t in cap.seconds.values())
    for v, p in enumerate(cap.produced):   # the op's first node has its time, its other nodes none
        if p is not None:
            first = next(w for w, q in cap.effects[p.fx] if q.what != "workspace") if p.what != "optimizer" else v
            assert nodes[v]["cost"] == (cap.seconds[p.fx.name] if v == first else 0.0), nodes[v]["name"]
    for fraction in (1.0, 0.6):   # the simulator's time is the sum of the times of what the plan computes
        plan = _plan_or_smallest(cap, fraction)
        computed = sum(nodes[int(s["node"])].get("cost", 0.0) for s in plan.schedule if s["op"] == "compute")
        assert plan.predicted_seconds == pytest.approx(computed, rel=1e-9)
    assert plan.recomputed() and plan.predicted_seconds > plan.baseline_seconds
    modelled = kt.capture_joint(model, (x,), labels=y, times="model")
    assert modelled.seconds == {} and not any("cost" in n for n in modelled.graph["nodes"])
    assert modelled.workspaces   # still measured
    timed = kt.capture_joint(model, (x,), labels=y, workspaces="none", times="measured")
    assert timed.workspaces == {} and set(timed.seconds) == ops
    with pytest.raises(kt.CaptureError, match="times: 'profile' is not 'measured' or 'model'"):
        kt.capture_joint(model, (x,), labels=y, times="profile")


class RefusedByTheFxPath(nn.Module):
    """The constructs kiwi's fx path refused in torchvision's models (issue 17): ReLU6 (MobileNetV2),
    Hardswish (MobileNetV3), torch.cat (DenseNet, Inception), ceil_mode pooling (SqueezeNet, GoogLeNet),
    grouped convolution (ResNeXt, RegNet), channel shuffle's view/transpose (ShuffleNet)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4)
        self.branch = nn.Conv2d(8, 8, 1)
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        y = nn.functional.relu6(self.stem(x))
        z = nn.functional.hardswish(self.grouped(y))
        b, c, h, w = z.shape
        z = z.view(b, 4, c // 4, h, w).transpose(1, 2).reshape(b, c, h, w)   # channel shuffle
        y = torch.cat([z, self.branch(y)], dim=1)
        y = self.pool(y)
        return self.head(y.mean(dim=(2, 3)))


def test_constructs_the_fx_path_refused_are_captured_planned_and_run():
    torch.manual_seed(0)
    model = RefusedByTheFxPath()
    x, y = torch.randn(4, 3, 15, 15), torch.randint(0, 5, (4,))
    cap = kt.capture_joint(model, (x,), labels=y)
    ref_loss, ref, _ = _reference(model, lambda: nn.functional.cross_entropy(model(x), y))
    plan = _plan_or_smallest(cap, 0.6)
    resident = list(model.parameters()) + [x, y]
    m, (loss, grads) = _measured(cap, plan, resident)
    assert m.peak_bytes <= plan.budget_bytes
    assert abs(plan.predicted_peak_bytes - m.peak_bytes) <= 0.03 * m.peak_bytes
    assert torch.equal(loss, ref_loss)
    _check_grads(grads, ref)


@pytest.mark.parametrize("make_optimizer", [lambda ps: torch.optim.Adam(ps, lr=1e-3),
                                            lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9)])
def test_the_optimizers_step_inside_the_plan(make_optimizer):
    """The optimizer in the captured step: its state resident, its temporaries counted, its step run
    by the plan; two steps train exactly as loss.backward(); optimizer.step() does."""
    from kiwi.torch.measure import step_tensors
    model, inputs = hf_zoo.build("gpt2")
    twin, _ = hf_zoo.build("gpt2")
    twin.load_state_dict(model.state_dict())
    opt, opt_twin = make_optimizer(model.parameters()), make_optimizer(twin.parameters())
    cap = kt.capture_joint(model, inputs, loss=None, optimizer=opt)
    nodes = cap.graph["nodes"]
    assert sum(n["kind"] == "optimizer_state" for n in nodes) > 0 and nodes[-2]["kind"] == "optimizer"
    from kiwi.torch.measure import prime_optimizer
    prime_optimizer(opt_twin)
    plan = _plan_or_smallest(cap, 0.7)
    step = kt.apply_joint(plan)
    for k in range(2):
        torch.manual_seed(5)
        if k == 0:   # the first step measured: the whole step, the optimizer's state resident
            box = {}
            m = measure_step(lambda: box.setdefault("loss", step(inputs)), step_tensors(model, opt, inputs.values()))
            assert m.peak_bytes <= plan.budget_bytes
            assert abs(plan.predicted_peak_bytes - m.peak_bytes) <= 0.03 * m.peak_bytes
        else:
            step(inputs)
        torch.manual_seed(5)
        twin(**inputs).loss.backward()
        opt_twin.step()
        opt_twin.zero_grad(set_to_none=True)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.equal(p, q), name
        assert p.grad is None
    with pytest.raises(kt.CaptureError, match="not a trainable parameter"):
        kt.capture_joint(model, inputs, loss=None, optimizer=torch.optim.SGD([torch.zeros(3, requires_grad=True)],
                                                                             lr=0.1))


def test_the_optimizers_update_runs_in_chunks_where_its_temporaries_set_the_peak():
    """Adam's step holds two copies of the largest parameter (its `denom`s): a step of a wide linear
    layer on a small batch peaks there, where no recomputation helps. plan_joint then updates in
    chunks: the peak predicted to the byte's neighbourhood and met, parameters and state bit for bit
    as optimizer.step() makes them; below what chunks reach it names the smallest budget."""
    from kiwi.torch.chunked_optimizer import default_chunk_bytes
    from kiwi.torch.measure import step_tensors
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10))
    twin = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10))
    twin.load_state_dict(model.state_dict())
    x, y = torch.randn(8, 512), torch.randint(0, 10, (8,))
    opt, opt_twin = torch.optim.Adam(model.parameters(), lr=1e-3), torch.optim.Adam(twin.parameters(), lr=1e-3)
    cap = kt.capture_joint(model, (x,), labels=y, optimizer=opt)
    with pytest.raises(kt.InfeasibleError, match="smallest budget kiwi can satisfy"):
        kt.plan_joint(cap, fraction=0.8, optimizer_chunks=False)
    plan = kt.plan_joint(cap, fraction=0.8)
    assert plan.capture.optimizer_chunk_bytes == default_chunk_bytes(model) and not plan.recomputed()
    assert kt.plan_joint(cap, fraction=0.8).capture is plan.capture   # one chunked capture per size
    step = kt.apply_joint(plan)
    from kiwi.torch.measure import prime_optimizer
    prime_optimizer(opt_twin)
    for k in range(2):
        if k == 0:
            m = measure_step(lambda: step(x, labels=y), step_tensors(model, opt, [x, y]))
            assert m.peak_bytes <= plan.budget_bytes
            assert abs(plan.predicted_peak_bytes - m.peak_bytes) <= 1e-3 * m.peak_bytes
        else:
            step(x, labels=y)
        nn.functional.cross_entropy(twin(x), y).backward()
        opt_twin.step()
        opt_twin.zero_grad(set_to_none=True)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p, q)
        assert torch.equal(opt.state[p]["exp_avg_sq"], opt_twin.state[q]["exp_avg_sq"])
    with pytest.raises(kt.InfeasibleError, match="smallest budget kiwi can satisfy") as e:
        kt.plan_joint(cap, fraction=0.6)
    assert kt.plan_joint(cap, budget=e.value.smallest_budget_bytes).capture.optimizer_chunk_bytes > 0
    sgd = kt.capture_joint(twin, (x,), labels=y, optimizer=torch.optim.SGD(twin.parameters(), lr=0.1))
    with pytest.raises(kt.PlanError, match="optimizer_chunks: .* Adam and AdamW .* this step has SGD"):
        kt.plan_joint(sgd, fraction=0.8, optimizer_chunks=True)


def test_an_output_recomputed_alone_counts_the_whole_op_it_re_runs():
    """Layer norm's mean, freed and recomputed alone before the backward: the runner re-runs the op,
    whose output (as large as its input) exists for that instant; the prediction counts it."""
    from kiwi.torch.joint_plan import _predicted
    from kiwi.torch.joint_run import rerun_transients
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 1024), nn.LayerNorm(1024), nn.Linear(1024, 4))
    x, y = torch.randn(512, 16), torch.randint(0, 4, (512,))
    cap = kt.capture_joint(model, (x,), labels=y)
    nodes = cap.graph["nodes"]
    mean = next(v for v, n in enumerate(nodes) if n["name"] == "native_layer_norm.out1")
    reader = next(v for v, n in enumerate(nodes) if mean in n["inputs"])
    sched = []
    for s in checkpoint_all(cap):
        if s == {"op": "compute", "node": reader}:
            sched.append({"op": "compute", "node": mean})   # again, alone
        sched.append(s)
        if s == {"op": "compute", "node": mean} and len(sched) > 1 and sched.count(s) == 1:
            sched.append({"op": "free", "node": mean})
    transients = rerun_transients(cap, sched)
    assert len(transients) == 1 and list(transients.values())[0] >= 512 * 1024 * 4   # the op's normalized output
    (step, extra), = transients.items()
    timeline = kiwi.simulate(cap.graph, kiwi.make_plan(sched), cap.cluster)["timeline"]
    ref_loss, ref, _ = _reference(model, lambda: nn.functional.cross_entropy(model(x), y))
    runner, box = JointRunner(cap), {}
    m = measure_step(lambda: box.setdefault("out", runner.run(sched, ranges=True)), list(model.parameters()) + [x, y],
                     ranges=True)
    instant = m.resident_bytes + m.ranges[f"kiwi::{mean}"].peak   # the re-run (its first computation was kept)
    assert abs(timeline[step] + extra - instant) <= 0.03 * instant
    assert timeline[step] < 0.8 * instant   # the simulator's count alone misses the re-run's bytes
    assert _predicted(cap, sched)[0] >= timeline[step] + extra
    _check_grads(box["out"][1], ref)


def test_the_generators_state_is_saved_and_restored_per_device():
    from kiwi.torch.joint_run import rng_state, set_rng_state
    cpu = torch.device("cpu")
    torch.manual_seed(3)
    state = rng_state(cpu)
    first = torch.rand(5)
    set_rng_state(cpu, state)
    assert torch.equal(torch.rand(5), first)
    assert isinstance(state, bytes) and len(state) == torch.get_rng_state().numel()


class _FakeCudaEvent:
    """torch.cuda.Event's timing interface on the host clock, to check the runner's CUDA timing here."""
    clock = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None

    def record(self):
        _FakeCudaEvent.clock += 1
        self.at = _FakeCudaEvent.clock

    def elapsed_time(self, end):
        return float(end.at - self.at)


def test_the_runner_records_cuda_events_around_each_ops_first_run(monkeypatch):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.5), nn.GELU(), nn.Linear(64, 64), nn.GELU(),
                          nn.Linear(64, 4))
    x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))
    cap = kt.capture_joint(model, (x,), labels=y, workspaces="none")
    plan = _plan_or_smallest(cap, 0.6)
    assert plan.recomputed()
    monkeypatch.setattr(torch.cuda, "Event", _FakeCudaEvent)
    events = {}
    JointRunner(cap).run(plan.schedule, events=events)
    ops = {v for s in plan.schedule if s["op"] == "compute"
           for v in [int(s["node"])] if cap.produced[v] is not None and cap.produced[v].what != "workspace"}
    assert set(events) <= ops   # an op's other outputs come from its run, with no events of their own
    assert {cap.produced[v].fx for v in events} == {cap.produced[v].fx for v in ops}
    order = sorted(events.values(), key=lambda e: e[0].at)
    for (start, end), (later, _) in zip(order, order[1:]):
        assert start.at < end.at < later.at and start.elapsed_time(end) == 1.0   # one pair per op, none nested


def test_the_runner_analyses_a_schedule_again_when_it_changes():
    from kiwi.torch.joint_run import _recomputed_ops, _retained_outputs
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
    x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))
    cap = kt.capture_joint(model, (x,), labels=y, workspaces="none")
    _, ref, _ = _reference(model, lambda: nn.functional.cross_entropy(model(x), y))
    runner = JointRunner(cap)
    plan = _plan_or_smallest(cap, 0.6)
    assert plan.recomputed()
    schedule = list(plan.schedule)
    for edit in (lambda s: None, lambda s: s.__setitem__(slice(None), checkpoint_all(cap))):
        edit(schedule)
        torch.manual_seed(1)
        _check_grads(runner.run(schedule)[1], ref)
        assert runner._analyse(schedule) == (_retained_outputs(cap, schedule), _recomputed_ops(cap, schedule))
    assert not runner._analyse(schedule)[1]   # checkpoint-all recomputes nothing


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_cuda_device_memory_is_predicted_and_dropout_replays():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.Dropout(0.1), nn.GELU(), nn.Linear(1024, 256), nn.GELU(),
                          nn.Linear(256, 8)).cuda()
    x, y = torch.randn(512, 256, device="cuda"), torch.randint(0, 8, (512,), device="cuda")
    cap = kt.capture_joint(model, (x,), labels=y)
    assert cap.cluster["name"] == "local-cuda" and cap.seconds and all(t >= 0 for t in cap.seconds.values())
    _, ref, _ = _reference(model, lambda: nn.functional.cross_entropy(model(x), y))
    resident = list(model.parameters()) + [x, y]
    for fraction in (1.0, 0.6):
        plan = _plan_or_smallest(cap, fraction)
        m, (_, grads) = _measured(cap, plan, resident)
        assert abs(plan.predicted_peak_bytes - m.peak_bytes) <= 0.01 * m.peak_bytes
        _check_grads(grads, ref, 1e-6)
