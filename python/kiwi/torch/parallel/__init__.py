"""kiwi's layer plans on a user's model with PyTorch 2's distributed engine (docs/distributed.md):
DeviceMesh, FSDP2 by ZeRO stage, DTensor tensor + sequence parallelism, activation checkpointing.

    pm = kiwi.torch.parallel.parallelize(model, "plan.json")   # on each rank of the process group
    loss = kiwi.torch.parallel.step(pm, optimizer, kiwi.torch.parallel.local_batch(pm, batch))
"""
from kiwi.torch.parallel.apply import ParallelModel, check_plan, parallelize
from kiwi.torch.parallel.blocks import find_blocks
from kiwi.torch.parallel.tensor_parallel import classify_linears
from kiwi.torch.parallel.training import local_batch, step

__all__ = ["ParallelModel", "check_plan", "parallelize", "find_blocks", "classify_linears", "local_batch", "step"]
