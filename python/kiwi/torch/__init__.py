"""kiwi for PyTorch: capture a model, plan rematerialization for a memory budget, apply the plan,
measure it (docs/pytorch.md).

    import kiwi.torch as kt
    cap = kt.capture(model, (x,), labels=y)                 # torch.fx + kiwi's training graph
    plan = kt.plan_remat(cap, fraction=0.6)                  # or budget="4GiB"
    fast = kt.apply_remat(model, plan)                       # same parameters, less memory
    loss = F.cross_entropy(fast(x), y); loss.backward()      # gradients equal to model's
    fast.train_step((x,), y, optimizer)                      # the step as planned (micro-batches...)
    print(plan.predicted_peak_bytes, plan.predicted_seconds)

    cap = kt.capture_joint(model, (x,), labels=y)            # any model make_fx traces: autograd's own graph
    step = kt.apply_joint(kt.plan_joint(cap, fraction=0.6))  # kiwi's schedule, run op by op
    loss = step(x, labels=y); optimizer.step()               # fills .grad as backward() does
    mb = kt.plan_joint_batches(model, (x,), labels=y, fraction=0.4)   # micro-batches where one batch cannot
    loss = kt.apply_joint_batches(mb)((x,), labels=y)

    compiled, partitioner = kt.compile_with_plan(model, fraction=0.6)   # torch.compile, kiwi's partition

    pm = kt.parallelize(hf_model, "plan.json")               # a kiwi plan on FSDP2 + DTensor (one rank)
    loss = kt.parallel.step(pm, optimizer, kt.parallel.local_batch(pm, batch))
"""
from kiwi.torch.capture import Captured, OptimizerSpec, capture
from kiwi.torch.chunked_optimizer import chunked_step
from kiwi.torch.joint_capture import JointCapture, capture_joint
from kiwi.torch.joint_plan import JointPlan, JointStep, apply_joint, plan_joint, plan_joint_or_smallest
from kiwi.torch.joint_batches import MicroBatchPlan, MicroBatchStep, apply_joint_batches, plan_joint_batches
from kiwi.torch.errors import CaptureError, InfeasibleError, PlanError, TraceError, UnsupportedOpError
from kiwi.torch.measure import (PeakComposition, StepMeasurement, measure_step, peak_composition, prime_optimizer,
                                step_tensors, training_step)
from kiwi.torch.planning import (RematPlan, apply_remat, droppable_tensors, floor, plan_from_dropped, plan_remat,
                                 predict)
from kiwi.torch.runtime import RematModule
from kiwi.torch.stepping import StepConfig

__all__ = [
    "Captured", "OptimizerSpec", "capture", "CaptureError", "InfeasibleError", "PlanError", "TraceError",
    "UnsupportedOpError", "StepMeasurement", "measure_step", "PeakComposition", "peak_composition", "prime_optimizer",
    "step_tensors", "training_step",
    "RematPlan", "apply_remat", "droppable_tensors", "floor", "plan_from_dropped", "plan_remat", "predict",
    "RematModule", "StepConfig", "chunked_step", "JointCapture", "capture_joint", "JointPlan", "JointStep",
    "apply_joint", "plan_joint", "plan_joint_or_smallest", "MicroBatchPlan", "MicroBatchStep",
    "apply_joint_batches", "plan_joint_batches", "compile_with_plan", "KiwiPartitioner", "parallelize",
    "ParallelModel",
]


def __getattr__(name):
    # kiwi.torch.compiled subclasses Inductor's partitioner hook: importing Inductor takes about a second,
    # so it is imported when first asked for.
    if name in ("compile_with_plan", "KiwiPartitioner"):
        from kiwi.torch import compiled
        return getattr(compiled, name)
    if name in ("parallelize", "ParallelModel"):  # torch.distributed's tensor and FSDP modules: on first use
        from kiwi.torch.parallel import apply
        return getattr(apply, name)
    raise AttributeError(f"module 'kiwi.torch' has no attribute '{name}'")
