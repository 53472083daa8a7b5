"""One measured training step, shared by the kiwi.torch tests."""
import torch

from kiwi.torch import measure


def run_step(model, step, x, y, seed=3):
    """One measured step (Adam, primed) from the model's current parameters: `step(opt)` runs it.
    Returns the measurement, the gradients and the parameters after the step."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    measure.prime_optimizer(opt)
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(seed)
    m = measure.measure_step(lambda: step(opt), measure.step_tensors(model, opt, [x, y]))
    return m, [p.grad.clone() for p in model.parameters()], [p.detach().clone() for p in model.parameters()]
