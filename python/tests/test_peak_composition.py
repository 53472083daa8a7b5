"""kiwi.torch.peak_composition names what is alive at a step's peak: each tensor made in the step and
not freed there, by the module whose forward pass made it and the op; the bytes add up to the peak
measure_step reports."""
import torch
import torch.utils.checkpoint

import kiwi.torch as kt

BATCH, WIDTH, HIDDEN = 512, 64, 256  # activations (512 kB a tensor) above the gradients (64 kB)


class Mlp(torch.nn.Module):
    def __init__(self, checkpointed: bool = False):
        super().__init__()
        self.up = torch.nn.Linear(WIDTH, HIDDEN)
        self.act = torch.nn.ReLU()
        self.down = torch.nn.Linear(HIDDEN, WIDTH)
        self.checkpointed = checkpointed

    def inner(self, x):
        return self.down(self.act(self.up(x)))

    def forward(self, x):
        if self.checkpointed:
            return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=False)
        return self.inner(x)


def _step(model):
    torch.manual_seed(0)
    x = torch.randn(BATCH, WIDTH)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():  # gradients accumulate in place after the first step
        model(x).square().mean().backward()
        opt.step()
    step()
    return step


def test_the_holders_add_up_to_the_measured_peak():
    model = Mlp()
    step = _step(model)
    composition = kt.peak_composition(step, model)
    measured = kt.measure_step(step, [])
    assert composition.peak_bytes == measured.peak_bytes > 0
    assert sum(h.bytes for h in composition.holders) - composition.freed_resident == composition.peak_bytes
    assert sum(composition.by_module.values()) == sum(h.bytes for h in composition.holders)


def test_a_saved_activation_is_named_by_the_module_that_made_it():
    model = Mlp()
    composition = kt.peak_composition(_step(model), model)
    relu = [h for h in composition.holders if h.module == "act"]
    assert [(h.size, h.count) for h in relu] == [(BATCH * HIDDEN * 4, 1)]  # ReLU keeps its output
    assert "relu" in relu[0].op or "clamp" in relu[0].op
    # the backward pass's tensors are made outside any module's forward pass; their op path says where
    assert any(h.module == "" and "Backward" in h.op for h in composition.holders)


def test_a_recomputed_forward_is_named_by_its_module_too():
    model = Mlp(checkpointed=True)
    composition = kt.peak_composition(_step(model), model)
    # ReLU's output, dropped after the forward pass, is made again in the backward pass, by the same module
    assert [(h.module, h.size) for h in composition.holders if "relu" in h.op] == [("act", BATCH * HIDDEN * 4)]
    assert "Backward" in next(h.op for h in composition.holders if "relu" in h.op)
    assert sum(h.bytes for h in composition.holders) - composition.freed_resident == composition.peak_bytes


def test_the_module_hooks_are_removed_afterwards():
    from torch.nn.modules import module
    before = (len(module._global_forward_pre_hooks), len(module._global_forward_hooks))
    model = Mlp()
    kt.peak_composition(_step(model), model)
    assert (len(module._global_forward_pre_hooks), len(module._global_forward_hooks)) == before
    assert "B at the peak" in kt.peak_composition(_step(model), model).table()
