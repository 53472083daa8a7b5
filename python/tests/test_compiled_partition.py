"""kiwi's partitioner inside torch.compile (kiwi.torch.compiled): the joint graph Inductor partitions is
planned by kiwi, the ops kiwi recomputes are recomputed by the compiled backward (fewer bytes saved
for it), and the gradients are those of eager training (float tolerance: Inductor's fused kernels
round differently)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402
from kiwi.torch.compiled import KiwiPartitioner, compile_with_plan, joint_storage_graph  # noqa: E402


@pytest.fixture(autouse=True)
def no_compile_caches():
    """Every compile partitions anew: Inductor's and AOTAutograd's on-disk caches would serve a graph
    partitioned by an earlier run without calling the partitioner."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        yield


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.Tanh(),
                                    nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 8))

    def forward(self, x):
        return self.layers(x).square().mean()


def _saved_bytes_and_grads(model, x, fraction):
    torch._dynamo.reset()
    compiled, partitioner = compile_with_plan(model, fraction=fraction)
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    params = list(model.parameters())
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = compiled(x)
    return sum(saved), torch.autograd.grad(loss, params), partitioner


def test_kiwis_plan_decides_what_the_compiled_backward_recomputes():
    torch.manual_seed(0)
    model, x = Mlp(), torch.randn(256, 32)
    reference = torch.autograd.grad(model(x), list(model.parameters()))
    everything, grads_all, all_kept = _saved_bytes_and_grads(model, x, 1.0)
    less, grads_less, partitioner = _saved_bytes_and_grads(model, x, 0.75)
    (report,) = partitioner.reports
    assert all_kept.reports[0].recomputed == []                 # at 100% kiwi recomputes nothing
    assert report.reached and report.recomputed
    assert report.planned_peak_bytes <= report.budget_bytes < report.baseline_peak_bytes
    assert less < everything, (less, everything)                 # the backward recomputes instead of saving
    for grads in (grads_all, grads_less):
        for g, r in zip(grads, reference):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)


def test_the_joint_graph_as_kiwis_storage_graph():
    model, x = Mlp(), torch.randn(16, 32)
    graphs = []

    class Recording(KiwiPartitioner):
        def plan(self, gm):
            graphs.append(joint_storage_graph(gm))
            return super().plan(gm)

    torch._dynamo.reset()
    compiled = torch.compile(model, options={"custom_partitioner_fn": Recording(fraction=1.0)})
    compiled(x).backward()
    (graph, produced, backward), = graphs
    assert graph["operands"] == "storages"
    kinds = [n["kind"] for n in graph["nodes"]]
    assert kinds.count("matmul") == 4 + 4 + 3   # forward GEMMs (addmm), weight gradients, input gradients but x's
    names = {fx.name for fx in backward if fx.op == "call_function"}
    assert any(n["name"] in names for n in graph["nodes"])
    assert not any(fx in backward for fx in produced if fx is not None and fx.name.startswith("addmm"))


def test_partitioner_errors_and_lazy_names():
    assert kt.compile_with_plan is compile_with_plan and kt.KiwiPartitioner is KiwiPartitioner
    with pytest.raises(kt.PlanError, match="exactly one of fraction= and budget="):
        KiwiPartitioner()
    with pytest.raises(kt.PlanError, match="fraction: must be in"):
        KiwiPartitioner(fraction=0.0)
    with pytest.raises(kt.PlanError, match="fraction: must be in"):
        KiwiPartitioner(fraction=True)   # the same check as plan_joint's
    with pytest.raises(kiwi.BadInputError, match="budget: 'lots' is not a size"):
        KiwiPartitioner(budget="lots")
    assert KiwiPartitioner(budget="1MiB").budget == 1 << 20
