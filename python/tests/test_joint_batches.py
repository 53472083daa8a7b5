"""Micro-batches on the generic path (kiwi.torch.joint_batches): below what one batch can reach, the step
runs as micro-batches planned by kiwi; measured peak within the budget and predicted within 3%,
gradients the whole batch's (float tolerance: the micro-batches' sums run in another order)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import kiwi.torch as kt  # noqa: E402
from kiwi.torch.joint_batches import apply_joint_batches, plan_joint_batches, split_batch  # noqa: E402
from kiwi.torch.measure import measure_step  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256),
                         nn.Tanh(), nn.Linear(256, 10))


def test_micro_batches_fit_where_one_batch_cannot_with_the_batchs_gradients():
    model = _mlp()
    x, y = torch.randn(512, 64), torch.randint(0, 10, (512,))
    params = list(model.parameters())
    reference = torch.autograd.grad(nn.functional.cross_entropy(model(x), y), params)
    plan = plan_joint_batches(model, (x,), labels=y, fraction=0.5)
    assert plan.micro_batches > 1 and plan.considered[0][:2] == (1, None)   # one batch cannot reach it
    assert plan.predicted_peak_bytes <= plan.budget_bytes
    assert plan.predicted_peak_bytes == (plan.plan.predicted_peak_bytes + plan.gradient_bytes
                                         + plan.other_inputs_bytes)
    assert plan.other_inputs_bytes == (x.numel() * 4 + y.numel() * 8) * (1 - 1 / plan.micro_batches)
    step = apply_joint_batches(plan)
    resident = params + [x, y]
    m = measure_step(lambda: step((x,), labels=y), resident)
    assert m.peak_bytes <= plan.budget_bytes, (m.peak_bytes, plan.budget_bytes)
    assert abs(plan.predicted_peak_bytes - m.peak_bytes) <= 0.03 * m.peak_bytes, (plan.predicted_peak_bytes,
                                                                                  m.peak_bytes)
    for p, r in zip(params, reference):
        torch.testing.assert_close(p.grad, r, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind, fraction, micro_batches, chunked", [("adam", 0.7, 2, False), ("adam", 0.6, 8, True),
                                                                    ("sgd", 0.7, 2, False)])
def test_the_optimizer_steps_once_inside_the_last_micro_batchs_plan(kind, fraction, micro_batches, chunked):
    """An optimizer with micro-batches: its state resident beside every micro-batch, its step (and its
    temporaries) in the last one's plan on all micro-batches' gradients; measured peak within the budget
    and predicted within 3%, the parameters those of one step on the whole batch's gradients. At 60% of
    the whole batch's step, 8 micro-batches with Adam's update in chunks. SGD's step is linear in the
    gradients, so it also checks their 1/k scale, which Adam's normalized step would not show."""
    import copy
    model = _mlp()
    x, y = torch.randn(512, 64), torch.randint(0, 10, (512,))
    # eps 1e-6: Adam's normalized step turns a gradient's rounding (the micro-batches sum in another
    # order) into lr x rounding / eps where a gradient is near 0; PyTorch's 1e-8 would make that 1e-5.
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-6) if kind == "adam" else \
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    plan = plan_joint_batches(model, (x,), labels=y, fraction=fraction, micro_batches=micro_batches, optimizer=opt,
                              optimizer_chunks=chunked if kind == "adam" else "auto")
    assert plan.last is not None and plan.last.capture.optimizer is opt
    assert (plan.last.capture.optimizer_chunk_bytes > 0) == chunked
    assert plan.predicted_peak_bytes <= plan.budget_bytes
    params = list(model.parameters())
    states = 2 * sum(p.numel() * 4 for p in params) + 4 * len(params) if kind == "adam" else \
        sum(p.numel() * 4 for p in params)   # Adam: two moments and a step count; SGD: the momentum
    assert plan.optimizer_state_bytes == states
    ref_model, ref_opt = copy.deepcopy((model, opt))   # the state the capture created, parameters unchanged
    ref_opt.zero_grad()
    nn.functional.cross_entropy(ref_model(x), y).backward()
    ref_opt.step()
    step = apply_joint_batches(plan)
    resident = params + [x, y] + [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    m = measure_step(lambda: step((x,), labels=y), resident)
    assert m.peak_bytes <= plan.budget_bytes, (m.peak_bytes, plan.budget_bytes)
    assert abs(plan.predicted_peak_bytes - m.peak_bytes) <= 0.03 * m.peak_bytes, (plan.predicted_peak_bytes,
                                                                                  m.peak_bytes)
    assert all(p.grad is None for p in params)   # dropped after the step, as zero_grad(set_to_none=True)
    for p, r in zip(params, ref_model.parameters()):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)


def test_one_batch_when_it_fits_without_recomputation():
    model = _mlp()
    x, y = torch.randn(512, 64), torch.randint(0, 10, (512,))
    plan = plan_joint_batches(model, (x,), labels=y, fraction=1.0)
    assert plan.micro_batches == 1 and plan.gradient_bytes == plan.other_inputs_bytes == 0
    assert not plan.plan.recomputed()


def test_split_batch_cuts_the_batch_dimension_only():
    ids, mask, table = torch.arange(8).view(4, 2), torch.ones(4, 2), torch.zeros(3, 5)
    first, second = split_batch({"input_ids": ids, "mask": mask, "table": table}, 4, 2)
    assert torch.equal(first["input_ids"], ids[:2]) and torch.equal(second["mask"], mask[2:])
    assert first["table"] is table


def test_micro_batch_errors():
    model = _mlp()
    x, y = torch.randn(512, 64), torch.randint(0, 10, (512,))
    with pytest.raises(kt.PlanError, match="3 does not divide the batch of 512"):
        plan_joint_batches(model, (x,), labels=y, fraction=0.5, micro_batches=3)
    with pytest.raises(kt.PlanError, match="expected a positive int or 'auto'"):
        plan_joint_batches(model, (x,), labels=y, fraction=0.5, micro_batches=0)
    with pytest.raises(kt.PlanError, match="exactly one of budget= and fraction="):
        plan_joint_batches(model, (x,), labels=y)
    with pytest.raises(kt.InfeasibleError, match="no plan of Sequential fits in 1, 2, 4, .* micro-batches"):
        plan_joint_batches(model, (x,), labels=y, budget="100KiB", times="model")
    bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)).train()
    with pytest.raises(kt.PlanError, match="batch norm in training mode"):
        plan_joint_batches(bn, (torch.randn(4, 3, 8, 8),), labels=torch.tensor([0, 1, 0, 1]), fraction=0.5,
                           micro_batches=2)
