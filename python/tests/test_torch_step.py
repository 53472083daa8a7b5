"""The step beyond rematerialization: micro-batches (gradient accumulation) and the optimizer in chunks.
Each configuration's measured peak is the predicted one, within its budget, with the unsplit step's
gradients and parameters."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402
from kiwi.torch import measure  # noqa: E402
from kiwi.torch.chunked_optimizer import chunked_step  # noqa: E402
from kiwi.torch import StepConfig  # noqa: E402
from kiwi.torch.stepping import pass_graph  # noqa: E402
from step_helpers import run_step  # noqa: E402


class ConvHead(nn.Module):
    """Activation-heavy (two 16-channel convolutions at 32x32) with a dropout before its head: no batch
    norm, so splitting the batch computes the same step."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 16 * 16, 64)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.c2(self.relu(self.c1(x)))))
        return self.fc2(self.drop(self.relu(self.fc1(torch.flatten(x, 1)))))


@pytest.fixture
def convhead():
    torch.manual_seed(0)
    model = ConvHead().train()
    return model, torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))


def compare_with_unsplit(model, applied, x, y):
    pristine = {k: v.clone() for k, v in model.state_dict().items()}
    ref = run_step(model, lambda opt: measure.training_step(model, (x,), y, F.cross_entropy, opt), x, y)
    model.load_state_dict(pristine)
    got = run_step(model, lambda opt: applied.train_step((x,), y, opt), x, y)
    for a, b in zip(got[1] + got[2], ref[1] + ref[2]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # float32 sums in another order
    return ref[0], got[0]


@pytest.mark.parametrize("cls,kw", [(torch.optim.Adam, {}), (torch.optim.AdamW, {"weight_decay": 0.1}),
                                    (torch.optim.Adam, {"amsgrad": True, "weight_decay": 0.01}),
                                    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})])
def test_chunked_step_is_the_optimizers_step(cls, kw):
    torch.manual_seed(0)
    a = [nn.Parameter(torch.randn(300, 37)), nn.Parameter(torch.randn(5)), nn.Parameter(torch.randn(4, 3).t())]
    b = [nn.Parameter(t.detach().clone()) for t in a]
    whole, chunked = cls(a, **kw), cls(b, **kw)
    for _ in range(3):  # the first step makes the state, the others update it in chunks
        for pa, pb in zip(a, b):
            pa.grad = torch.randn_like(pa)
            pb.grad = pa.grad.clone()
        whole.step()
        chunked_step(chunked, 1000)
    for pa, pb in zip(a, b):
        assert torch.equal(pa, pb)
    for pa, pb in zip(a, b):
        for key, value in whole.state[pa].items():
            if torch.is_tensor(value):
                assert torch.equal(value, chunked.state[pb][key]), key


def test_chunked_step_refuses_other_optimizers():
    p = nn.Parameter(torch.randn(10))
    p.grad = torch.randn(10)
    with pytest.raises(kt.PlanError, match="Adagrad"):
        chunked_step(torch.optim.Adagrad([p]), 16)


@pytest.mark.parametrize("config,drop", [(StepConfig(2), False), (StepConfig(4, 64 << 10), True),
                                         (StepConfig(8, 64 << 10), False), (StepConfig(1, 64 << 10), True)])
def test_each_configuration_is_predicted_and_computes_the_unsplit_step(convhead, config, drop):
    model, x, y = convhead
    cap = kt.capture(model, (x,), labels=y).at_batch(8 // config.micro_batches)
    dropped = kt.droppable_tensors(cap)[::2] if drop else []
    plan = kt.plan_from_dropped(cap, dropped, config=config)
    applied = kt.apply_remat(model, plan)
    ref, got = compare_with_unsplit(model, applied, x, y)
    assert got.peak_bytes == pytest.approx(plan.predicted_peak_bytes, rel=0.01)
    assert got.peak_bytes <= plan.predicted_peak_bytes  # e.g. a new weight gradient alive until its bias's
    assert applied.last_step.fallbacks == 0 and (applied.last_step.recomputed > 0) == drop
    if config.micro_batches > 1:
        assert got.peak_bytes < ref.peak_bytes


def test_plan_remat_splits_the_batch_when_one_pass_cannot_fit(convhead):
    model, x, y = convhead
    cap = kt.capture(model, (x,), labels=y, costs="measured")
    one_pass = min(kt.floor(cap, c)["bytes"] for c in kt.planning.step_configs(cap) if c.micro_batches == 1)
    plan = kt.plan_remat(cap, budget=one_pass - 1)
    assert plan.micro_batches > 1 and plan.predicted_peak_bytes <= plan.budget_bytes
    applied = kt.apply_remat(model, plan)
    _, got = compare_with_unsplit(model, applied, x, y)
    assert got.peak_bytes <= plan.budget_bytes
    assert got.peak_bytes == pytest.approx(plan.predicted_peak_bytes, rel=0.01)
    with pytest.raises(kt.PlanError, match="train_step"):
        applied(x)
    with pytest.raises(kt.PlanError, match="labels"):
        applied.train_step((x,), None, None)
    low = kt.floor(cap)
    assert low["bytes"] < one_pass and low["config"].micro_batches > 1
    with pytest.raises(kt.InfeasibleError, match="micro-batches"):
        kt.plan_remat(cap, budget=low["bytes"] - 1)


def test_micro_batches_need_a_splittable_step(cnn, convhead):
    model, x, y = cnn  # batch norm
    cap = kt.capture(model, (x,), labels=y)
    with pytest.raises(kt.PlanError, match="batch norm"):
        kt.plan_remat(cap, fraction=0.5, micro_batches=2)
    with pytest.raises(kt.PlanError, match="batch norm"):
        kt.plan_from_dropped(cap.at_batch(4), [], config=StepConfig(2))
    assert {c.micro_batches for c in kt.planning.step_configs(cap)} == {1}
    model.eval()  # running statistics: each sample on its own
    assert kt.stepping.micro_batch_obstacle(cap) is None
    model, x, y = convhead
    cap = kt.capture(model, (x,), labels=y)
    with pytest.raises(kt.PlanError, match="does not divide"):
        kt.plan_remat(cap, fraction=0.5, micro_batches=3)
    with pytest.raises(kiwi.BadInputError, match="optimizer_chunks"):
        kt.plan_remat(cap, fraction=0.5, optimizer_chunks=-5)
    fixed = kt.plan_remat(cap, fraction=0.95, micro_batches=2, optimizer_chunks=False)
    assert fixed.config == StepConfig(2, 0)


def test_micro_batch_gradients_are_as_close_to_exact_as_the_unsplit_ones(convhead):
    """Accumulating micro-batches sums float32 numbers in another order: against a float64 step, the
    split step's gradients are as accurate as the unsplit step's (dropout off: float64 draws differ)."""
    model, x, y = convhead
    model.eval()
    exact = ConvHead().double().eval()
    exact.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    F.cross_entropy(exact(x.double()), y).backward()
    cap = kt.capture(model, (x,), labels=y).at_batch(2)
    applied = kt.apply_remat(model, kt.plan_from_dropped(cap, [], config=StepConfig(4)))
    F.cross_entropy(model(x), y).backward()
    unsplit = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    applied.train_step((x,), y)
    for p, u, e in zip(model.parameters(), unsplit, exact.parameters()):
        scale = float(e.grad.abs().max())
        err_split = float((p.grad.double() - e.grad).abs().max()) / scale
        err_unsplit = float((u.double() - e.grad).abs().max()) / scale
        assert err_split <= max(10 * err_unsplit, 1e-6), (err_split, err_unsplit)


def test_later_passes_pay_for_adding_each_gradient(convhead):
    model, x, y = convhead
    cap = kt.capture(model, (x,), labels=y).at_batch(4)
    config = StepConfig(2)
    grad = next(n["id"] for n in cap.graph["nodes"] if n["name"] == "fc1.weight.grad")
    costs = {role: kiwi.graph_summary(pass_graph(cap, config, role), cap.cluster)["node_costs"][grad]
             for role in ("first", "last")}
    assert costs["last"] > costs["first"] > 0
