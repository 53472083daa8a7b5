"""Peak memory and time of a real training step (forward, backward, optimizer step).

CPU: the profiler's memory events (torch.profiler, profile_memory=True) are the CPU allocator's own
allocations and frees; the level they report, on top of the bytes resident when the step starts
(parameters, buffers, optimizer state, inputs), is the step's memory, and its maximum the peak. The
level is the whole process's (every thread's allocations and frees, `process_wide_cpu_accounting`):
gloo frees the buffers a collective ran on from its own worker thread, which the profiler records no
event for, and a running sum of the events would count those buffers as held for the rest of the step.
CUDA:
torch.cuda.max_memory_allocated over the step. Named ranges ("kiwi::..." record_function markers)
report the memory before, at the peak within, and the time of each part of the step."""
import contextlib
import ctypes
import dataclasses
import gc
import os
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from kiwi.torch.execution import storage_nbytes, storage_ptr


@dataclasses.dataclass
class Range:
    name: str
    seconds: float
    level_before: int   # bytes allocated during the step before the range began
    peak: int           # the highest level within the range
    level_after: int


@dataclasses.dataclass
class StepMeasurement:
    peak_bytes: int          # resident_bytes + the highest level reached during the step
    resident_bytes: int      # parameters, buffers, optimizer state, inputs at the start
    seconds: float           # wall time of the step (profiled)
    device: str
    cpu_seconds: float = 0.0  # CPU time of this process during the step: on a shared machine, the
                              # measure of a CPU step that other processes' load does not inflate
    ranges: Dict[str, Range] = dataclasses.field(default_factory=dict)


def unique_bytes(tensors: Iterable[torch.Tensor]) -> int:
    seen: Dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            seen[storage_ptr(t)] = storage_nbytes(t)
    return sum(seen.values())


def optimizer_tensors(optimizer: Optional[torch.optim.Optimizer]) -> List[torch.Tensor]:
    if optimizer is None:
        return []
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def step_tensors(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer],
                 inputs: Sequence[Any]) -> List[torch.Tensor]:
    """What is resident when a step starts: parameters, buffers, optimizer state and the inputs."""
    return list(model.parameters()) + list(model.buffers()) + optimizer_tensors(optimizer) + \
        [t for t in inputs if isinstance(t, torch.Tensor)]


def prime_optimizer(optimizer: Optional[torch.optim.Optimizer]) -> None:
    """Creates the optimizer's state (Adam's moments...) with one step on zero gradients, leaving the
    parameters as they were, so that a measured step is a steady-state step."""
    if optimizer is None:
        return
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)
            p.grad = None


def training_step(module: Callable[..., Any], inputs: Sequence[Any], labels: Optional[torch.Tensor],
                  loss_fn: Callable[..., Any], optimizer: Optional[torch.optim.Optimizer]) -> torch.Tensor:
    out = module(*inputs)
    with record_function("kiwi::loss"):
        loss = loss_fn(out, labels) if labels is not None else out
    del out
    loss.backward()
    if optimizer is not None:
        with record_function("kiwi::optimizer"):
            optimizer.step()
    return loss.detach()


def measure_step(step: Callable[[], Any], resident: Sequence[torch.Tensor], device: str = "cpu",
                 ranges: bool = False) -> StepMeasurement:
    """Runs `step` once under the profiler and returns its peak memory and time (see module doc).
    Python's cyclic garbage collector is off during the step: tensors of earlier work that it would
    free mid-step (allocated before the profiler started) would lower the level the step's own
    allocations are counted from."""
    base = unique_bytes(resident)
    with _no_garbage_collection():
        if device.startswith("cuda"):
            return _measure_cuda(step, base, ranges)
        with process_wide_cpu_accounting() as process_wide:
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                t0, c0 = time.perf_counter(), time.process_time()
                step()
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    results = prof.profiler.kineto_results
    m = _analyse(results.events(), base, seconds, "cpu", ranges, _process_levels(results) if process_wide else None)
    m.cpu_seconds = cpu
    return m


def _c10_report_flag() -> Optional[ctypes.c_bool]:
    """c10's FLAGS_caffe2_report_cpu_memory_usage (libc10's exported bool), or None where this build's
    libc10 cannot be found or does not export it."""
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libc10.so", "libc10.dylib"):
        path = os.path.join(lib_dir, name)
        if os.path.exists(path):
            try:
                return ctypes.c_bool.in_dll(ctypes.CDLL(path), "FLAGS_caffe2_report_cpu_memory_usage")
            except (OSError, ValueError):
                return None
    return None


@contextlib.contextmanager
def process_wide_cpu_accounting():
    """Sets c10's caffe2_report_cpu_memory_usage while the block runs: with it the CPU allocator's
    reporter counts the allocations and frees of every thread (without it, only of threads the profiler
    records), so each memory event's total_allocated is the whole process's level. Yields whether it
    could (False: the profiler's events are all there is)."""
    flag = _c10_report_flag()
    if flag is None:
        yield False
        return
    was = flag.value
    flag.value = True
    try:
        yield True
    finally:
        flag.value = was


def _event_tree(results: Any) -> List[Tuple[Any, Tuple[str, ...]]]:
    """Every node of the profiler's event tree, with the names of the nodes it ran under (outermost first)."""
    out = []
    stack = [(node, ()) for node in results.experimental_event_tree()]
    while stack:
        node, path = stack.pop()
        out.append((node, path))
        stack.extend((child, path + (node.name,)) for child in node.children)
    return out


@dataclasses.dataclass
class _Allocation:
    time: int
    ptr: int
    size: int                 # bytes; negative: a free
    level: int                # the process's allocated bytes after it, from the level before the first event
    path: Tuple[str, ...]     # the ops it ran under


def _cpu_allocations(nodes: List[Tuple[Any, Tuple[str, ...]]]) -> List[_Allocation]:
    """Each CPU allocation or free among the event tree's `nodes` (_event_tree), in time order (the
    kineto events do not carry the level)."""
    from torch._C._profiler import _EventType
    out = []
    for node, path in nodes:
        if node.typed[0] == _EventType.Allocation:
            fields = node.typed[1]
            if fields.device.type == "cpu":
                out.append(_Allocation(node.start_time_ns, fields.ptr, fields.alloc_size, fields.total_allocated, path))
    out.sort(key=lambda a: a.time)
    if out:
        start = out[0].level - out[0].size   # the level before the first event
        for a in out:
            a.level -= start
    return out


def _process_levels(results: Any) -> List[Tuple[int, int]]:
    """(time, the process's allocated bytes after it) of each CPU allocation or free the profiler recorded."""
    return [(a.time, a.level) for a in _cpu_allocations(_event_tree(results))]


@contextlib.contextmanager
def _no_garbage_collection():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _measure_cuda(step: Callable[[], Any], base: int, ranges: bool) -> StepMeasurement:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() - start + base
    m = _analyse(prof.profiler.kineto_results.events(), base, seconds, "cuda", ranges)
    m.peak_bytes = peak
    return m


def _analyse(events: Any, base: int, seconds: float, device: str, want_ranges: bool,
             process_levels: Optional[List[Tuple[int, int]]] = None) -> StepMeasurement:
    """The step's peak and ranges from its events: from the process's levels where given, else from a
    running sum of the events' bytes."""
    mem = []
    marks = []
    for i, e in enumerate(events):
        if e.name() == "[memory]":
            if (e.device_type() == torch.autograd.DeviceType.CPU) == (device == "cpu"):
                mem.append((e.start_ns(), i, e.nbytes()))
        elif want_ranges and e.name().startswith("kiwi::"):
            marks.append((e.start_ns(), e.end_ns(), e.name(), e.duration_ns() * 1e-9))
    mem.sort()
    times, levels = [], []
    level = peak = 0
    if process_levels is not None:
        for t, level in process_levels:
            peak = max(peak, level)
            times.append(t)
            levels.append(level)
    else:
        for t, _, nbytes in mem:
            level += nbytes
            peak = max(peak, level)
            times.append(t)
            levels.append(level)
    result = StepMeasurement(base + peak, base, seconds, device)
    if want_ranges:
        result.ranges = _ranges(marks, times, levels)
    return result


def _ranges(marks: List[Any], times: List[int], levels: List[int]) -> Dict[str, Range]:
    import bisect
    out: Dict[str, Range] = {}
    for start, end, name, secs in marks:
        i = bisect.bisect_left(times, start)
        j = bisect.bisect_right(times, end)
        before = levels[i - 1] if i > 0 else 0
        inside = levels[i:j]
        peak = max([before] + inside)
        after = levels[j - 1] if j > 0 else 0
        if name in out:  # a node run twice (recomputation): keep the first run
            continue
        out[name] = Range(name, secs, before, peak, after)
    return out


@dataclasses.dataclass
class PeakHolder:
    """Tensors alive at a step's peak, made by one op in one place."""
    module: str    # the innermost module whose forward pass was running when they were made ("" outside any)
    op: str        # the op that made them, with the ops it ran under (outermost first, up to three)
    size: int      # bytes of each
    count: int

    @property
    def bytes(self) -> int:
        return self.size * self.count


@dataclasses.dataclass
class PeakComposition:
    peak_bytes: int                # above what was resident at the start, as StepMeasurement counts it
    holders: List[PeakHolder]      # largest first
    freed_resident: int            # bytes of tensors older than the step freed before its peak (last step's
                                   # gradients set to None, ...): holders' bytes - freed_resident = peak_bytes
    by_module: Dict[str, int]      # bytes per top-level part of the path ("model.layers.1", ...)

    def table(self, top: int = 30) -> str:
        lines = [f"{self.peak_bytes:>12,d} B at the peak ({self.freed_resident:,d} B of older tensors freed before it)"]
        lines += [f"{h.bytes:>12,d} = {h.count:3d} x {h.size:>9,d}  {h.module or '-'}  {h.op}"
                  for h in self.holders[:top]]
        return "\n".join(lines)


_MODULE_MARK = "kiwi.module::"


@contextlib.contextmanager
def _module_spans(model: torch.nn.Module):
    """Marks every forward pass of `model`'s submodules (a recomputed one too) as a profiler range
    named after the module's path."""
    names = {id(m): n for n, m in model.named_modules()}
    open_ranges: Dict[int, List[Any]] = {}

    def enter(module, _args):
        name = names.get(id(module))
        if name is not None:
            r = record_function(_MODULE_MARK + (name or "<root>"))
            r.__enter__()
            open_ranges.setdefault(id(module), []).append(r)

    def leave(module, _args, _output):
        stack = open_ranges.get(id(module))
        if stack:
            stack.pop().__exit__(None, None, None)

    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    handles = [register_module_forward_pre_hook(enter), register_module_forward_hook(leave, always_call=True)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def peak_composition(step: Callable[[], Any], model: torch.nn.Module) -> PeakComposition:
    """Runs `step` once on the CPU under the profiler and names what is alive at its peak: each tensor
    made during the step and not yet freed there, by the module whose forward pass made it (innermost;
    "" for the backward pass, the loss and the optimizer, whose op path says where) and the op. Where a
    prediction and a measurement disagree, this says which tensors make the difference."""
    with _no_garbage_collection(), _module_spans(model), process_wide_cpu_accounting():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
    nodes = _event_tree(prof.profiler.kineto_results)
    spans = [(node.start_time_ns, node.end_time_ns, node.name[len(_MODULE_MARK):])
             for node, _ in nodes if node.name.startswith(_MODULE_MARK)]
    allocations = _cpu_allocations(nodes)
    if not allocations:
        return PeakComposition(0, [], 0, {})
    peak = max(range(len(allocations)), key=lambda i: allocations[i].level)
    live: Dict[int, _Allocation] = {}
    freed_resident = 0
    for a in allocations[:peak + 1]:
        if a.size > 0:
            live[a.ptr] = a
        elif live.pop(a.ptr, None) is None:
            freed_resident -= a.size

    def module_at(t: int) -> str:
        inner = None
        for begin, end, name in spans:
            if begin <= t <= end and (inner is None or end - begin < inner[0]):
                inner = (end - begin, name)
        return inner[1] if inner else ""

    counts: Dict[Tuple[str, str, int], int] = {}
    for a in live.values():
        ops = [name for name in a.path if not name.startswith(_MODULE_MARK)]
        key = (module_at(a.time), "/".join(ops[-3:]), a.size)
        counts[key] = counts.get(key, 0) + 1
    holders = sorted((PeakHolder(m, op, size, n) for (m, op, size), n in counts.items()),
                     key=lambda h: (-h.bytes, h.module, h.op))
    by_module: Dict[str, int] = {}
    for h in holders:
        top = ".".join(h.module.split(".")[:3]) if h.module else ""
        by_module[top] = by_module.get(top, 0) + h.bytes
    return PeakComposition(allocations[peak].level, holders, freed_resident, by_module)
