"""16-bit training as kiwi prices it (`--dtype bf16` / `fp16`): the model's parameters and gradients in
16 bits, an fp32 master copy of each parameter with the optimizer's states beside it (Megatron-LM's mixed
precision; cost::LayerProfile::state_bytes_per_parameter_byte counts 2 + 4 + 8 bytes per parameter beyond
its own 2 for Adam). The step runs tensor by tensor, so that one fp32 gradient exists at a time, as in
kiwi's count (no 4 bytes per parameter of fp32 gradients at once). No loss scaling: fp16 gradients that
underflow stay zero."""
from typing import Any, Callable, Dict, List, Sequence

import torch

SIXTEEN_BIT = (torch.bfloat16, torch.float16)


class MasterWeightsOptimizer:
    """An optimizer over 16-bit `params` that steps fp32 master copies (DTensors stay DTensors with their
    placements: FSDP2's shards, TP's) with one `make(masters)` optimizer per tensor, then copies each
    master back into its parameter. `state` maps each master to its optimizer state and itself, so that
    kiwi.torch.measure counts masters as resident model states."""

    def __init__(self, params: Sequence[torch.nn.Parameter],
                 make: Callable[[List[torch.Tensor]], torch.optim.Optimizer]):
        self.params = [p for p in params if p.requires_grad]
        with torch.no_grad():
            self.masters = [p.detach().float().clone().requires_grad_() for p in self.params]
        self.optimizers = [make([m]) for m in self.masters]

    @property
    def state(self) -> Dict[torch.Tensor, Dict[str, Any]]:
        out: Dict[torch.Tensor, Dict[str, Any]] = {}
        for m, opt in zip(self.masters, self.optimizers):
            out[m] = {"master": m, **opt.state.get(m, {})}
        return out

    @torch.no_grad()
    def step(self) -> None:
        for p, m, opt in zip(self.params, self.masters, self.optimizers):
            if p.grad is None:
                continue
            m.grad = p.grad.float()
            p.grad = None  # the 16-bit gradient is read: free it before the next tensor's fp32 copy
            opt.step()
            m.grad = None
            p.copy_(m)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


def needs_master_weights(params: Sequence[torch.Tensor]) -> bool:
    """True where the trained parameters are 16-bit (kiwi plans them with fp32 master weights)."""
    return any(p.dtype in SIXTEEN_BIT for p in params if p.requires_grad)
