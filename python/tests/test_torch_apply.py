"""kiwi.torch.plan_remat / apply_remat: the applied module drops what the plan drops, recomputes it,
gives the unmodified model's gradients, and its measured peak memory is the one kiwi predicts."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402
from kiwi.torch import measure  # noqa: E402


def step(model, forward, x, y, seed=1):
    """One measured training step (Adam, state primed) from the model's current parameters."""
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    measure.prime_optimizer(opt)
    for p in params:
        p.grad = None
    torch.manual_seed(seed)
    m = measure.measure_step(lambda: measure.training_step(forward, (x,), y, F.cross_entropy, opt),
                             measure.step_tensors(model, opt, [x, y]))
    return m, [p.grad.clone() for p in params], {k: v.clone() for k, v in model.state_dict().items()}


def run_both(model, applied, x, y):
    pristine = {k: v.clone() for k, v in model.state_dict().items()}
    ref = step(model, model, x, y)
    model.load_state_dict(pristine)
    got = step(model, applied, x, y)
    return ref, got


@pytest.mark.parametrize("fraction", [0.95, 0.9])
def test_gradients_and_state_equal_the_unmodified_model(cnn, fraction):
    model, x, y = cnn
    cap = kt.capture(model, (x,), labels=y, costs="measured")
    plan = kt.plan_remat(cap, fraction=fraction, solver="heuristic")
    assert plan.dropped, "the budget should force some recomputation"
    applied = kt.apply_remat(model, plan)
    (ref, ref_grads, ref_state), (got, grads, state) = run_both(model, applied, x, y)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # Batch-norm statistics are updated once per step, as without recomputation; dropout masks replay.
    for k in ref_state:
        torch.testing.assert_close(state[k], ref_state[k], rtol=0, atol=1e-6)
    assert applied.last_step.recomputed > 0 and applied.last_step.fallbacks == 0
    assert got.peak_bytes < ref.peak_bytes


def test_measured_peak_is_the_predicted_peak(cnn):
    model, x, y = cnn
    cap = kt.capture(model, (x,), labels=y, costs="measured")
    for fraction in (1.0, 0.9):
        plan = kt.plan_remat(cap, fraction=fraction, solver="heuristic")
        m, _, _ = step(model, kt.apply_remat(model, plan), x, y)
        assert plan.predicted_peak_bytes <= plan.budget_bytes
        assert m.peak_bytes == pytest.approx(plan.predicted_peak_bytes, rel=0.05)


def test_transformer_gradients(transformer):
    model, ids, y = transformer
    cap = kt.capture(model, (ids,), labels=y)
    droppable = kt.droppable_tensors(cap)
    applied = kt.apply_remat(model, kt.plan_from_dropped(cap, droppable))
    (_, ref_grads, _), (_, grads, _) = run_both(model, applied, ids, y)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert applied.last_step.recomputed >= len(droppable) // 2


def test_plan_files_round_trip(cnn, tmp_path):
    model, x, y = cnn
    cap = kt.capture(model, (x,), labels=y)
    plan = kt.plan_remat(cap, fraction=0.9, solver="heuristic")
    path = tmp_path / "plan.json"
    plan.save(str(path))
    assert kiwi.read_plan(str(path))["claims"]["peak_memory_bytes"] == plan.predicted_peak_bytes
    applied = kt.apply_remat(model, str(path), captured=cap)
    assert applied.dropped == sorted(plan.dropped)
    sim = kiwi.simulate(cap.graph, kiwi.read_plan(str(path)), cap.cluster)
    assert sim["peak_memory_bytes"] == plan.predicted_peak_bytes


def test_budget_below_the_minimum(cnn):
    model, x, y = cnn
    cap = kt.capture(model, (x,), labels=y)
    low = kt.floor(cap)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert 3 * params < low["bytes"] <= kt.predict(cap, [])["peak"]  # weights, gradients, Adam's moments, ...
    with pytest.raises(kt.InfeasibleError, match=r"smallest budget kiwi can realise.*no plan can go below"):
        kt.plan_remat(cap, budget=low["bytes"] - 1, solver="heuristic")
    with pytest.raises(kt.InfeasibleError, match=low["at"]):
        kt.plan_remat(cap, budget=1024, solver="heuristic")
    with pytest.raises(kt.PlanError, match="exactly one"):
        kt.plan_remat(cap)


def test_apply_errors(cnn, transformer):
    model, x, y = cnn
    cap = kt.capture(model, (x,), labels=y)
    plan = kt.plan_remat(cap, fraction=1.0)
    other, ids, _ = transformer
    with pytest.raises(kt.PlanError, match="another SmallCnn"):
        kt.apply_remat(type(model)(), plan)
    with pytest.raises(kt.PlanError, match="needs the Captured model"):
        kt.apply_remat(model, plan.to_json())
    bad = kiwi.make_plan([{"op": "compute", "node": 10 ** 6}])
    with pytest.raises(kt.PlanError, match="another graph"):
        kt.apply_remat(model, bad, captured=cap)
    applied = kt.apply_remat(model, plan)
    with pytest.raises(kt.PlanError, match=r"shape \(8, 3, 32, 32\)"):
        applied(torch.randn(2, 3, 16, 16))


class LossInside(torch.nn.Module):
    """A model that computes its own loss from (inputs, labels)."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                        torch.nn.Sigmoid(), torch.nn.Linear(32, 4))

    def forward(self, x, y):
        return F.cross_entropy(self.body(x), y)


def test_model_that_returns_its_loss():
    torch.manual_seed(0)
    model = LossInside()
    x, y = torch.randn(16, 12), torch.randint(0, 4, (16,))
    cap = kt.capture(model, (x, y))
    plan = kt.plan_from_dropped(cap, kt.droppable_tensors(cap))
    assert plan.dropped
    applied = kt.apply_remat(model, plan)
    model(x, y).backward()
    ref = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    applied(x, y).backward()
    for p, g in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, g, rtol=0, atol=1e-6)
    assert applied.last_step.recomputed > 0 and applied.last_step.fallbacks == 0


class DropoutAfterFreed(torch.nn.Module):
    """relu's output is dropped and freed before dropout draws a mask of the same shape: the allocator
    may hand the mask that address, which must not make the mask look like the dropped tensor."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(16, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 3)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        a = torch.relu(self.fc1(x))
        return self.fc3(self.drop(self.fc2(a)))


def test_reused_addresses_do_not_confuse_saved_tensors():
    torch.manual_seed(0)
    model = DropoutAfterFreed().train()
    x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
    cap = kt.capture(model, (x,), labels=y)
    relu = next(n["id"] for n in cap.graph["nodes"] if n["op"] == "relu")
    applied = kt.apply_remat(model, kt.plan_from_dropped(cap, [relu]))
    for _ in range(3):  # a few steps: allocation patterns vary
        (ref, ref_grads, _), (got, grads, _) = run_both(model, applied, x, y)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_garbage_of_earlier_work_freed_mid_step_does_not_lower_the_measured_peak():
    import gc

    class Cycle:
        pass

    garbage = Cycle()
    garbage.self, garbage.tensor = garbage, torch.ones(1 << 18)   # 1 MiB freed only by the cyclic collector
    del garbage
    seen = []

    def step():
        seen.append(gc.isenabled())
        x = torch.ones(1 << 16)   # 256 KiB, the step's own
        del x

    was = gc.isenabled()
    m = measure.measure_step(step, [])
    assert seen == [False] and gc.isenabled() == was   # the collector is off during the step only
    assert m.peak_bytes == 4 * (1 << 16)
    gc.collect()


def test_a_buffer_freed_on_another_thread_leaves_the_measured_level():
    """gloo frees the buffers its collectives ran on from its worker thread, where the profiler records
    nothing: the measured level is the process's, so the step's peak is 4 MiB, not 4 + 1 MiB."""
    import threading

    def step():
        held = [torch.ones(1 << 20)]                  # 4 MiB, freed below on another thread
        worker = threading.Thread(target=held.clear)
        worker.start()
        worker.join()
        y = torch.ones(1 << 18)                       # 1 MiB after it
        del y

    m = measure.measure_step(step, [])
    assert m.peak_bytes == 4 * (1 << 20)
    with measure.process_wide_cpu_accounting() as process_wide:
        assert process_wide   # this build's libc10 exports the flag (else the events' sum is all there is)
