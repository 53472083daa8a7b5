"""Costs of a captured model: the device kiwi's roofline prices ops on (the local CPU by default,
calibrated with one GEMM and one convolution), the framework's resident buffers, analytic estimates
of temporaries, and the measured alternative (one profiled training step: times and temporaries)."""
import functools
import json
import os
import platform
import time
from typing import Any, Dict, Optional, Sequence

import torch
import torch.nn.functional as F

from kiwi.torch.dtypes import node_bytes
from kiwi.torch.semantics import Workspace

def _rate(fn, flops: float, device: str, repeats: int = 3) -> float:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return flops * repeats / max(time.perf_counter() - t0, 1e-9)


@functools.lru_cache(maxsize=None)
def local_cluster(device: str = "cpu") -> Dict[str, Any]:
    """This machine's device (the CPU, or a CUDA device) as a one-device kiwi cluster
    (docs/cluster-format.md). Peak FLOP/s is set so that kiwi's roofline efficiencies (0.75 matmul,
    0.6 conv) reproduce measured rates; bandwidth from a copy. A CPU: one 512x512 f32 GEMM and one
    convolution, every dtype at the f32 rate, a 64 MiB copy (about a quarter of a second). A CUDA
    device: 4096x4096 GEMMs in f32 and in bf16 (its tensor cores; f16 taken as bf16) and a 256 MiB
    copy, each timed over ten runs after a warm-up, since smaller problems time the launch rather
    than the device (about a second). Once per process and device."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    n, repeats = (4096, 10) if cuda else (512, 3)
    rates = {}
    for name, dtype in ((("f32", torch.float32), ("bf16", torch.bfloat16)) if cuda else (("f32", torch.float32),)):
        a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
        rates[name] = _rate(lambda: a @ b, 2 * n ** 3, device, repeats) / 0.75
    if not cuda:
        x, w = torch.randn(4, 64, 28, 28, device=dev), torch.randn(64, 64, 3, 3, device=dev)
        conv = _rate(lambda: F.conv2d(x, w, padding=1), 2 * 4 * 64 * 28 * 28 * 64 * 9, device)
        rates["f32"] = max(rates["f32"], conv / 0.6)
    src = torch.empty((64 if cuda else 16) << 20, device=dev)
    dst = torch.empty_like(src)
    bandwidth = _rate(lambda: dst.copy_(src), 2 * src.numel() * 4, device, repeats) / 0.8  # kiwi assumes 80% of peak
    if cuda:
        del a, b, src, dst
        torch.cuda.empty_cache()   # the ~0.8 GiB these took goes back to the device, not into the process's cache
        memory, name = torch.cuda.get_device_properties(dev).total_memory, torch.cuda.get_device_name(dev)
    else:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            memory = 16 << 30
        name = platform.processor() or platform.machine() or "cpu"
    f32, bf16 = rates["f32"] / 1e12, rates.get("bf16", rates["f32"]) / 1e12
    return {"kiwi_cluster_version": 1, "name": f"local-{dev.type}",
            "device": {"name": name, "memory": int(memory), "memory_bandwidth_gbps": bandwidth / 1e9,
                       "peak_tflops": {"f64": f32 / 2, "f32": f32, "bf16": bf16, "f16": bf16}}}


def runner_profile(profile: Any) -> Any:
    """A `kiwi profile` device profile (a path or a parsed dict) as kiwi prices a step that kiwi.torch's
    runner runs: the profile's runner_op_time becomes the op_time every priced op pays (its
    reference_step times eager training, which pays another). Returned as it is when it has no
    runner_op_time or already gives an op_time, or when it is a path that cannot be read (kiwi's loader
    then says why)."""
    doc = profile
    if isinstance(profile, (str, os.PathLike)):
        try:
            with open(profile, "r", encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return profile
    device = doc.get("device") if isinstance(doc, dict) else None
    if not isinstance(device, dict) or "runner_op_time" not in device or "op_time" in device:
        return profile
    return dict(doc, device=dict(device, op_time=device["runner_op_time"]))


# Scalars PyTorch allocates around the loss and in the optimizer step (Python numbers wrapped as 8-byte
# tensors, the loss's gradient): a few bytes no op model covers, reserved once.
SCALAR_SLACK = 256


def framework_bytes(model: torch.nn.Module, optimizer) -> int:
    """Resident framework state that is not a parameter: the model's buffers (batch-norm statistics),
    Adam's step counters (one 4-byte tensor per parameter) and SCALAR_SLACK."""
    from kiwi.torch.measure import unique_bytes
    steps = 4 * sum(1 for p in model.parameters() if p.requires_grad) if optimizer.kind in ("adam", "fused_adam") else 0
    return unique_bytes(model.buffers()) + steps + SCALAR_SLACK


def optimizer_workspace(params: Sequence[torch.Tensor], kind: str, foreach: bool) -> int:
    """Temporaries of one optimizer step. Adam, one tensor at a time (PyTorch's CPU default):
    `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` holds two parameter-sized
    temporaries at once for the largest parameter; the multi-tensor (foreach) version one per
    parameter. SGD updates in place."""
    sizes = [p.numel() * p.element_size() for p in params if p.requires_grad]
    if not sizes or kind != "adam":
        return 0
    return sum(sizes) + max(sizes) if foreach else 2 * max(sizes)


def _blocked(shape: Sequence[int], itemsize: int = 4) -> int:
    """Bytes of an NCHW tensor in oneDNN's blocked layout (channels padded to a multiple of 16)."""
    n, c = shape[0], -(-shape[1] // 16) * 16
    rest = 1
    for d in shape[2:]:
        rest *= d
    return n * c * rest * itemsize


def cpu_conv_workspace(x: Sequence[int], y: Sequence[int], grad_input: bool) -> tuple:
    """Temporaries of a float32 convolution on oneDNN (PyTorch's CPU default), as measured on this
    backend for 3 to 64 channels: the forward reorders its input into blocked layout (16 channels or
    more) and computes its output blocked before copying it out; the backward reorders dY (and x),
    and computes dx blocked. Returns (forward, backward) bytes beyond the op's own outputs, for one
    intra-op thread: with more, the backward adds a per-thread weight-gradient scratch (torch 2.13,
    2 threads: +29,952 bytes for 16 channels 3x3) that only `costs="measured"` captures."""
    plain_x = _blocked(x) * x[1] // (-(-x[1] // 16) * 16)
    plain_y = _blocked(y) * y[1] // (-(-y[1] // 16) * 16)
    x_re = _blocked(x) if x[1] >= 16 else 0
    y_b = _blocked(y)
    forward = max(x_re + y_b, y_b + plain_y) - plain_y
    if not grad_input:
        return forward, y_b + x_re
    backward = max(y_b + _blocked(x), plain_x + y_b + x_re) - plain_x
    return forward, backward


def analytic_workspace(captured) -> Workspace:
    """Estimated temporaries: the optimizer step's, and on the CPU oneDNN's convolution reorders and
    batch norm's backward temporary (one input-sized tensor). Other ops are taken to need none."""
    params = [p for p in captured.model.parameters()]
    ws = Workspace(optimizer=optimizer_workspace(params, captured.optimizer.kind, captured.optimizer.foreach))
    cluster = captured.cluster
    if not (isinstance(cluster, dict) and cluster.get("name") == "local-cpu"):
        return ws
    nodes = captured.training_graph["nodes"]
    grads_of: Dict[int, set] = {}
    for v in nodes:
        if v.get("pass") == "backward" and v.get("grad_of", -1) >= 0:
            grads_of.setdefault(v["grad_of"], set()).add(v["op"])
    for fx, k in captured.structure.value_of.items():
        node = nodes[k]
        if fx not in captured.fx_order or node["dtype"] != "f32":
            continue
        x = nodes[node["inputs"][0]]["shape"] if node["inputs"] else []
        if node["kind"] == "conv":
            f, b = cpu_conv_workspace(x, node["shape"], "conv2d_grad_x" in grads_of.get(k, ()))
            ws.forward[fx], ws.backward[fx] = f, b
        elif node["op"] == "batchnorm" and grads_of.get(k):
            ws.backward[fx] = node_bytes(node)
    return ws


def make_optimizer(spec, params: Sequence[torch.nn.Parameter], lr: float = 1e-3) -> Optional[torch.optim.Optimizer]:
    params = [p for p in params if p.requires_grad]
    if spec.kind == "adam":
        return torch.optim.Adam(params, lr=lr, foreach=spec.foreach)
    if spec.kind == "fused_adam":
        return torch.optim.Adam(params, lr=lr, fused=True)
    if spec.kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9 if spec.momentum else 0.0, foreach=spec.foreach)
    return None


def calibrate(captured, inputs: Sequence[Any], labels: Optional[torch.Tensor]) -> None:
    """Measured costs: one profiled training step of the applied module with nothing dropped gives each
    FX node's forward time and temporaries and each autograd group's; the graph is rebuilt with them.
    The model is left as it was (learning rate 0; batch-norm statistics restored)."""
    from kiwi.torch import measure
    from kiwi.torch.runtime import RematModule
    model = captured.model
    buffers = [b.detach().clone() for b in model.buffers()]
    opt = make_optimizer(captured.optimizer, list(model.parameters()), lr=0.0)
    module = RematModule(captured, dropped=[], instrument=True)
    measure.prime_optimizer(opt)
    loss_fn = F.cross_entropy if captured.loss_outside else None
    for p in model.parameters():
        p.grad = None
    device = next((p.device.type for p in model.parameters()), "cpu")
    m = measure.measure_step(lambda: measure.training_step(module, inputs, labels, loss_fn, opt),
                             measure.step_tensors(model, opt, list(inputs) + ([labels] if labels is not None else [])),
                             device, ranges=True)
    for p in model.parameters():
        p.grad = None
    with torch.no_grad():
        for b, saved in zip(model.buffers(), buffers):
            b.copy_(saved)
    workspace, node_costs = workspace_from(captured, m)
    captured.rebuild(workspace, node_costs)
    captured.calibration = m


def workspace_from(captured, m) -> tuple:
    """Temporaries = the peak within each range minus what the range leaves allocated in kiwi's graph."""
    nodes = captured.training_graph["nodes"]
    st = captured.structure
    ws = Workspace()
    node_costs: Dict[int, float] = {}
    # Profiled ranges are wall time; on a CPU shared with other processes the step got only part of a
    # core, so they are scaled by the step's CPU time over its wall time (1 on an idle machine).
    load = 1.0
    if m.device == "cpu" and m.cpu_seconds > 0 and m.seconds > 0:
        load = min(1.0, m.cpu_seconds / m.seconds)
    for fx, b in st.bundles.items():
        r = m.ranges.get("kiwi::f::" + fx)
        if r is None:
            continue
        own = sum(node_bytes(captured.graph["nodes"][v]) for v in b.own)
        made = node_bytes(nodes[b.node]) + own
        ws.forward[fx] = max(0, r.peak - r.level_before - made)
        node_costs[b.node] = r.seconds * load
    for g in st.groups:
        r = m.ranges.get("kiwi::b::" + g.fx) if g.fx else None
        if r is None:
            continue
        members = [v for v in g.backward if not _accumulation(nodes, v, g.node)]
        ws.backward[g.fx] = max(0, r.peak - r.level_before - sum(node_bytes(nodes[v]) for v in members))
        flops = [max(nodes[v].get("flops", 0.0), 1.0) for v in g.backward]
        for v, f in zip(g.backward, flops):
            node_costs[v] = r.seconds * load * f / sum(flops)
    opt = m.ranges.get("kiwi::optimizer")
    if opt is not None:
        ws.optimizer = max(0, opt.peak - opt.level_before)
        if st.optimizer is not None and st.optimizer < len(nodes):
            node_costs[st.optimizer] = opt.seconds * load
    loss = m.ranges.get("kiwi::loss")
    loss_node = st.value_of.get("kiwi_loss")
    if loss is not None and loss_node is not None:
        node_costs[loss_node] = loss.seconds * load
    for key in list(ws.forward):
        if ws.forward[key] < 1024:
            del ws.forward[key]
    for key in list(ws.backward):
        if ws.backward[key] < 1024:
            del ws.backward[key]
    return ws, node_costs


def _accumulation(nodes, v: int, k: int) -> bool:
    """kiwi's sum of several gradient contributions (PyTorch adds them before the group runs)."""
    n = nodes[v]
    return n["op"] == "add" and n.get("grad_of") == k and n["name"] == nodes[k]["name"] + ".grad"
