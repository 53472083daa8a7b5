"""`kiwi profile`: measures the local device with PyTorch and writes a profile file the cost model uses
in place of datasheet constants (docs/cluster-format.md, "Profile files"): GEMM and convolution times
over a grid of shapes and dtypes, the bandwidth of a large copy, the time of a near-empty op, and, with
--processes N, collective times over message sizes among 2..N processes (gloo on CPU, NCCL on GPUs),
compute measured while all N run at once (each rank then gets its share of the machine).

    python -m kiwi profile --out cpu.json                          # this CPU, one thread
    python -m kiwi profile --out cpu4.json --processes 4 --grid small
    python -m kiwi profile --device cuda --dtypes bf16,f32 --out h100.json
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

GRIDS = {
    # GEMM edge lengths (every m, n, k combination whose FLOPs stay under the cap), conv channels and
    # image sizes, collective message sizes in bytes, the least time each measurement takes.
    # Fused attention: sequence lengths, head dims, and query rows in all (batch x heads x sequence) on a
    # CPU and on a GPU (which needs many more rows to fill its multiprocessors). A GPU also times GEMMs
    # with edges of "gemm_gpu" and GPU_FLOP_SCALE times the FLOP cap. "gemm_vocab": output widths of a
    # language model's head (n; m and k from "gemm"), far past the other edges, so that a head's three
    # GEMMs are measured, not extrapolated from n = 4096.
    "small": {"gemm": [32, 256, 1024], "conv_channels": [16, 64], "conv_sizes": [8, 28],
              "attention_seq": [64], "attention_head_dims": [32],
              "attention_rows": {"cpu": [1 << 9], "cuda": [1 << 14]},
              "collective_bytes": [1 << 12, 1 << 16, 1 << 20], "min_seconds": 0.002, "flop_cap": 2 ** 31},
    "default": {"gemm": [16, 64, 256, 1024, 4096], "gemm_gpu": [16384], "gemm_vocab": [32768],
                "conv_channels": [8, 32, 128, 512], "conv_sizes": [4, 7, 14, 28, 56],
                "attention_seq": [128, 512, 2048], "attention_head_dims": [64, 128],
                "attention_rows": {"cpu": [1 << 10, 1 << 13], "cuda": [1 << 14, 1 << 17]},
                "collective_bytes": [1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 24], "min_seconds": 0.02,
                "flop_cap": 2 ** 33},
}
# A GPU runs GEMMs about a thousand times a CPU core's FLOP/s: 32x the work keeps its kernels past the
# size where launching dominates (a training step's GEMMs of 8-16k tokens) while the profile stays minutes.
GPU_FLOP_SCALE = 32
DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64"}
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")


class ProfileError(Exception):
    """Bad arguments or a device that cannot be profiled (exit code 2)."""


_STARTED = time.perf_counter()  # progress lines say how long the profile has run (minutes on a GPU)


def _log(quiet: bool, line: str) -> None:
    if not quiet:
        print(f"kiwi profile: [{time.perf_counter() - _STARTED:6.1f} s] {line}", file=sys.stderr, flush=True)


# A training step's ops find their operands out of the caches (written long before, by other ops):
# measured on this project's 2-core machine, an elementwise op on operands it touched last call runs
# 1.4-2x faster than on operands rotated through 256 MiB, and GEMMs up to 35% faster. Kernels are
# therefore timed cycling through operand sets carved from a pool this large.
POOL_BYTES = 256 << 20
BATCHES = 5  # a kernel's time is the median of this many batches of calls: other processes' load is bursty
MAX_SETS = 64


class OperandPool:
    """Random values in one POOL_BYTES buffer per dtype; operand sets are views at successive offsets,
    so that cycling through them streams from memory the way a training step does. Operands a kernel
    writes (`written`: their indices in `shapes`) are views of a second buffer of the same layout, so that
    what one kernel writes is never what a later one reads: GEMM outputs fed back as inputs grew the
    values to inf and NaN, on which a CPU's exp runs 3x slower than on a model's values."""

    def __init__(self, dev):
        self.dev = dev
        self.pools: Dict[Any, Any] = {}
        self.scratch: Dict[Any, Any] = {}

    def _buffer(self, buffers: Dict[Any, Any], dtype, fill: Callable[..., Any]) -> Any:
        import torch
        if dtype not in buffers:
            buffers[dtype] = fill(POOL_BYTES * 8 // torch.finfo(dtype).bits, device=self.dev).to(dtype)
        return buffers[dtype]

    def sets(self, shapes: Sequence[Sequence[int]], dtype, written: Sequence[int] = ()) -> List[List[Any]]:
        import torch
        pool = self._buffer(self.pools, dtype, torch.randn)
        sizes = [_numel(s) for s in shapes]
        per_set = sum(sizes)
        if per_set > pool.numel():  # larger than the pool: one fresh set
            return [[torch.randn(*s, device=self.dev).to(dtype) for s in shapes]]
        scratch = self._buffer(self.scratch, dtype, torch.zeros) if written else None
        out = []
        for i in range(min(MAX_SETS, pool.numel() // per_set)):
            offset, views = i * per_set, []
            for j, (shape, size) in enumerate(zip(shapes, sizes)):
                views.append((scratch if j in written else pool)[offset:offset + size].view(*shape))
                offset += size
            out.append(views)
        return out


def _torch_only_module(path: str) -> Any:
    """A file of kiwi's Python package that needs torch alone, loaded by its path beside this one: on a GPU
    machine without kiwi's extension `import kiwi` fails (bench/gpu_step_bench.py loads this file so)."""
    import importlib.util
    full = os.path.join(os.path.dirname(os.path.abspath(__file__)), *path.split("/"))
    spec = importlib.util.spec_from_file_location("kiwi_profile_" + os.path.basename(path)[:-3], full)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _timer(device: str) -> Callable[[Any, float], float]:
    import torch
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def seconds_per_call(fns: Any, min_seconds: float) -> float:
        """Median over 5 batches of the time of one call; each batch repeats the call for min_seconds.
        `fns`: a callable, or a list of the same kernel on different operands, called in turn."""
        calls_in_turn = fns if isinstance(fns, list) else [fns]
        turn = [0]

        def fn() -> Any:
            turn[0] = (turn[0] + 1) % len(calls_in_turn)
            return calls_in_turn[turn[0]]()
        fn()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        once = max(time.perf_counter() - t0, 1e-7)
        return _median_call_seconds(fn, max(1, int(min_seconds / once)), sync)

    return seconds_per_call


# A GPU's kernels are timed on the device (CUDA events), not by the host's clock: on an H200 PyTorch takes
# 10-15 us to issue a matmul, longer than the kernel of a 1024^3 GEMM runs, and kiwi prices issuing apart
# (the profile's kernel_time bounds a pass from below, CostModel::LaunchBoundTime). A spinning kernel
# first keeps the device busy while the host queues a batch, so that no gap between kernels is timed.
MAX_CALLS_PER_BATCH = 256       # the host's queue holds about a thousand kernels
DEVICE_BATCH_SHARE = 0.25       # events resolve microseconds: a batch needs a quarter of the host clock's time
SPIN_CYCLES_PER_SECOND = 2e9    # an H100/H200's SM clock under load, about 1.98 GHz
SPIN_MARGIN = 1.5               # the spin outlasts the host's queueing of a batch by this factor


def _cuda_kernel_timer() -> Callable[[Any, float], float]:
    import torch

    def seconds_per_call(fns: Any, min_seconds: float) -> float:
        """Median over BATCHES batches of one call's device time; `fns` as for _timer."""
        calls_in_turn = fns if isinstance(fns, list) else [fns]
        for f in calls_in_turn[:2]:  # first calls: cuBLAS/cuDNN plans, the allocator's blocks
            f()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def batch(calls: int, host_per_call: float) -> tuple:
            """(device seconds per call, host seconds to queue one)"""
            torch.cuda._sleep(int(calls * host_per_call * SPIN_MARGIN * SPIN_CYCLES_PER_SECOND))
            t0 = time.perf_counter()
            start.record()
            for i in range(calls):
                calls_in_turn[i % len(calls_in_turn)]()
            end.record()
            host = (time.perf_counter() - t0) / calls
            end.synchronize()
            return start.elapsed_time(end) * 1e-3 / calls, host

        once, host = batch(1, 1e-3)
        calls = max(1, min(MAX_CALLS_PER_BATCH, int(DEVICE_BATCH_SHARE * min_seconds / max(once, 1e-7))))
        return statistics.median(batch(calls, host)[0] for _ in range(BATCHES))

    return seconds_per_call


def _kernel_timer(device: str) -> Callable[[Any, float], float]:
    """How a kernel's time is measured: on the device for a GPU, by the host's clock on a CPU."""
    return _cuda_kernel_timer() if device.startswith("cuda") else _timer(device)


def _median_call_seconds(fn: Callable[[], Any], calls: int, sync: Callable[[], Any],
                         before: Optional[Callable[[], Any]] = None) -> float:
    """The median over BATCHES batches of `calls` calls of one call's time; with `before`, each call
    follows it and only the calls are timed."""
    batches = []
    for _ in range(BATCHES):
        if before is None:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            batches.append((time.perf_counter() - t0) / calls)
            continue
        spent = 0.0
        for _ in range(calls):
            before()
            t0 = time.perf_counter()
            fn()
            sync()
            spent += time.perf_counter() - t0
        batches.append(spent / calls)
    return statistics.median(batches)


def gemm_shapes(grid: Dict[str, Any], device_type: str = "cpu") -> List[tuple]:
    gpu = device_type == "cuda"
    edges = grid["gemm"] + (grid.get("gemm_gpu", []) if gpu else [])
    cap = grid["flop_cap"] * (GPU_FLOP_SCALE if gpu else 1)
    square = [(m, n, k) for m in edges for n in edges for k in edges if 2 * m * n * k <= cap]
    heads = [(m, n, k) for m in edges for n in grid.get("gemm_vocab", []) for k in edges if 2 * m * n * k <= cap]
    return square + [s for s in heads if s not in square]


def misaligned_gemm_shapes(grid: Dict[str, Any], device_type: str = "cuda") -> List[tuple]:
    """The grid's shapes of at least 256 on every side with one more column: cuBLAS runs a 16-bit GEMM
    whose leading dimensions are not multiples of 8 off the tensor cores (a 50,257-word vocabulary:
    docs/fidelity.md, "One GPU"), so a GPU's profile measures both kinds."""
    return [(m, n + 1, k) for m, n, k in gemm_shapes(grid, device_type) if min(m, n, k) >= 256]


def attention_shapes(grid: Dict[str, Any], device_type: str) -> List[tuple]:
    """(batch x heads, sequence, head dim) of the fused attentions to time: every grid combination whose
    forward (4 rows x sequence x head dim FLOPs) stays under the GEMMs' cap (times GPU_FLOP_SCALE on a
    GPU, over 4 on a CPU, where the forward and backward of one such call take about a second)."""
    cap = grid["flop_cap"] * GPU_FLOP_SCALE if device_type == "cuda" else grid["flop_cap"] // 4
    out = []
    for rows in grid["attention_rows"]["cuda" if device_type == "cuda" else "cpu"]:
        for seq in grid["attention_seq"]:
            for d in grid["attention_head_dims"]:
                if rows >= seq and 4 * rows * seq * d <= cap:
                    out.append((rows // seq, seq, d))
    return out


def conv_shapes(grid: Dict[str, Any]) -> List[tuple]:
    """(batch, in channels, out channels, image size, kernel, groups): 3x3 and 1x1 convolutions, and 3x3
    and 7x7 depthwise ones (groups = channels: MobileNet's, ConvNeXt's), stride 1."""
    out = []
    for c in grid["conv_channels"]:
        for hw in grid["conv_sizes"]:
            batch = 8
            for kernel in (1, 3):
                if 2 * batch * hw * hw * c * c * kernel * kernel <= grid["flop_cap"]:
                    out.append((batch, c, c, hw, kernel, 1))
            out += [(batch, c, c, hw, kernel, c) for kernel in (3, 7)]
    return out


CHAIN = 100            # ops in the chain that times one op's framework cost
TINY_PARAMETERS = 64   # one-element parameters whose optimizer step times the per-tensor cost


def _autograd_chain(dev) -> Callable[[], None]:
    """Forward and backward of CHAIN multiplications of a one-element tensor: a training step's cost per
    op beyond its work (the dispatcher, autograd's recording and its engine, the launch)."""
    import torch
    w = torch.ones(1, device=dev, requires_grad=True)

    def chain() -> None:
        x = w
        for _ in range(CHAIN):
            x = x * 1.0
        x.backward()
    return chain


# A small GPT kiwi's loader builds again as IR (cli/cost_model_loader.cpp) to calibrate the per-op time
# of eager training: small enough that its work is a few percent of its time, whole enough to run what a
# training step runs (views, transposes, addmm, layer norms, softmax, the loss, autograd's engine).
REFERENCE_STEP = {"model": "gpt", "layers": 2, "hidden": 8, "heads": 2, "seq": 4, "batch": 2, "vocab": 64}


def _reference_step() -> Optional[Callable[[], None]]:
    """Forward and backward of REFERENCE_STEP on a CPU, run by the distributed runtime's model functions
    (no dropout, no optimizer step; gradients dropped before each pass, as a step's zero_grad does);
    None where kiwi's runtime cannot be imported."""
    try:
        from kiwi.torch.distributed.model import (GptConfig, embed_forward, full_parameters, head_forward,
                                                  layer_forward, synthetic_batch)
    except ImportError:
        return None
    r = REFERENCE_STEP
    config = GptConfig(layers=r["layers"], hidden=r["hidden"], heads=r["heads"], seq=r["seq"], vocab=r["vocab"])
    parts = full_parameters(config)
    params = [t.requires_grad_(True) for part in parts.values() for t in part.values()]
    ids, labels = synthetic_batch(config, r["batch"], 0)

    def step() -> None:
        for t in params:
            t.grad = None
        x = embed_forward(parts["embed"], ids)
        for i in range(config.layers):
            x = layer_forward(parts[str(i)], x, config.heads)
        head_forward(parts["head"], x, labels, ids.numel()).backward()
    return step


# The small model whose step in kiwi.torch's runner calibrates the runner's per-op time (runner_op_time):
# a GPT written as an nn.Module, with what a captured language model's step runs (embeddings, layer
# norms, a causal mask, softmax, dropout at training's 0.1, GELU, views, the loss, autograd's backward).
RUNNER_STEP = {"layers": 2, "hidden": 8, "heads": 2, "seq": 8, "batch": 2, "vocab": 64, "dropout": 0.1}


def _runner_step(dev) -> Optional[tuple]:
    """RUNNER_STEP's model on `dev` captured by kiwi.torch.capture_joint (no step run at capture) and
    its checkpoint-all step in kiwi.torch's runner: (the captured graph, its cluster, the step); None
    where kiwi.torch cannot be imported."""
    try:
        import kiwi.torch as kt
        from kiwi.torch.joint_run import JointRunner, checkpoint_all
    except ImportError:
        return None
    import torch
    from torch import nn
    r = RUNNER_STEP

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h = r["hidden"]
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.out = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.up, self.down = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
            self.drop = nn.Dropout(r["dropout"])
            self.register_buffer("causal", torch.tril(torch.ones(r["seq"], r["seq"], dtype=torch.bool)))

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = (t.view(b, s, r["heads"], -1).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(h, -1))
            scores = (q @ k.transpose(-1, -2)) * (h // r["heads"]) ** -0.5
            attn = self.drop(scores.masked_fill(~self.causal[:s, :s], float("-inf")).softmax(-1))
            x = x + self.drop(self.out((attn @ v).transpose(1, 2).reshape(b, s, h)))
            return x + self.drop(self.down(nn.functional.gelu(self.up(self.ln2(x)))))

    class Gpt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens, self.positions = nn.Embedding(r["vocab"], r["hidden"]), nn.Embedding(r["seq"], r["hidden"])
            self.blocks = nn.ModuleList(Block() for _ in range(r["layers"]))
            self.ln, self.head = nn.LayerNorm(r["hidden"]), nn.Linear(r["hidden"], r["vocab"])

        def forward(self, ids):
            x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, r["vocab"], (r["batch"], r["seq"]), generator=generator).to(dev)
    labels = torch.randint(0, r["vocab"], (r["batch"], r["seq"]), generator=generator).to(dev)
    cap = kt.capture_joint(Gpt().to(dev), (ids,), labels=labels, workspaces="none")
    schedule = checkpoint_all(cap)
    runner = JointRunner(cap)
    return cap.graph, cap.cluster, lambda: runner.run(schedule)


def _with_gradients(params):
    """Copies of `params` with copies of their gradients (a second optimizer steps them apart)."""
    out = [p.detach().clone().requires_grad_(True) for p in params]
    for p, q in zip(out, params):
        p.grad = q.grad.clone()
    return out


def _fused_adam(params, dev):
    """PyTorch's fused Adam (one kernel per step: CUDA, and CPU from torch 2.4), or None where this
    build has none for the device."""
    import torch
    try:
        adam = torch.optim.Adam(params, lr=1e-3, fused=True)
        adam.step()
        return adam
    except (RuntimeError, TypeError, ValueError):
        return None


def _tiny_optimizer_steps(dev) -> List[tuple]:
    """(IR op, tensors the IR step reads per parameter, step) for Adam and fused Adam (parameter,
    gradient, 2 moments) and SGD (parameter, gradient) over TINY_PARAMETERS one-element parameters:
    their per-tensor time."""
    import torch
    params = [torch.zeros(1, device=dev, requires_grad=True) for _ in range(TINY_PARAMETERS)]
    for p in params:
        p.grad = torch.ones_like(p)
    adam = torch.optim.Adam(params, lr=1e-3)
    adam.step()
    steps = [("adam", 4, adam.step), ("sgd", 2, torch.optim.SGD(params, lr=1e-3).step)]
    fused = _fused_adam(_with_gradients(params), dev)
    if fused is not None:
        steps.append(("fused_adam", 4, fused.step))
    return steps


def _gemm_kernels(pool: OperandPool, m: int, n: int, k: int, dtype) -> List[tuple]:
    """A linear layer's three GEMMs for x [m, k] and weight [n, k] (PyTorch's layout), each with the IR op
    it stands for and its (m, n, k) as CostModel::GemmShapeOf reads it from that op's output: forward
    x @ W^T -> [m, n]; matmul_grad_a dY @ W -> [m, k] (depth n); matmul_grad_b, the weight's gradient,
    dY^T @ x -> [n, k], in the IR's [k, n] orientation (depth m)."""
    import torch
    # Each set has its own output buffers: a step writes every result to memory the caches do not hold.
    sets = pool.sets([(m, k), (n, k), (m, n), (m, n), (m, k), (n, k)], dtype, written=(3, 4, 5))
    return [("matmul", (m, n, k), [lambda x=x, w=w, y=y: torch.matmul(x, w.t(), out=y) for x, w, _, y, _, _ in sets]),
            ("matmul_grad_a", (m, k, n),
             [lambda dy=dy, w=w, dx=dx: torch.matmul(dy, w, out=dx) for _, w, dy, _, dx, _ in sets]),
            ("matmul_grad_b", (k, n, m),
             [lambda dy=dy, x=x, dw=dw: torch.matmul(dy.t(), x, out=dw) for x, _, dy, _, _, dw in sets])]


def _conv_kernels(pool: OperandPool, batch: int, cin: int, cout: int, hw: int, kernel: int, groups: int,
                  dtype) -> List[tuple]:
    """A convolution's forward and its two gradients (aten.convolution_backward, one output each), with
    their implicit-GEMM shapes as CostModel::GemmShapeOf reads them from the IR ops' outputs; a depthwise
    one (groups = channels) as the ops conv2d_depthwise*."""
    import torch
    import torch.nn.functional as F
    pad = kernel // 2
    area = kernel * kernel
    per_group = cin // groups
    sets = pool.sets([(batch, cin, hw, hw), (cout, per_group, kernel, kernel), (batch, cout, hw, hw)], dtype)
    name = "conv2d" if groups == 1 else "conv2d_depthwise"

    def grad(mask):
        return [lambda x=x, w=w, dy=dy: torch.ops.aten.convolution_backward(
            dy, x, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], groups, mask) for x, w, dy in sets]
    # The weight's gradient [C_out, C_in / groups, kh, kw]: C_out x area rows, C_in / groups columns.
    return [(name, (batch * hw * hw, cout, per_group * area),
             [lambda x=x, w=w: F.conv2d(x, w, padding=pad, groups=groups) for x, w, _ in sets]),
            (name + "_grad_x", (batch * hw * hw, cin, cout // groups * area), grad([True, False, False])),
            (name + "_grad_w", (cout * area, per_group, batch * hw * hw), grad([False, True, False]))]


ATTENTION_DROPOUT = 0.1  # the transformer presets' dropout (Megatron-LM's and GPT-2's)


def _attention_kernels(pool: OperandPool, batch_heads: int, seq: int, d: int, causal: bool, dropout: float,
                       dtype) -> List[tuple]:
    """F.scaled_dot_product_attention as PyTorch picks its kernel (FlashAttention on a GPU in 16-bit) on
    q, k, v of [1, batch x heads, seq, d]: the forward alone, and the forward with the backward (the
    three gradients from one dO), from which the backward's time is their difference."""
    import torch
    import torch.nn.functional as F
    shape = (1, batch_heads, seq, d)
    sets = pool.sets([shape] * 4, dtype)
    leaves = [[t.detach().requires_grad_(i < 3) for i, t in enumerate(s)] for s in sets]

    def forward(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal)
    return [("attention", [lambda q=q, k=k, v=v: forward(q, k, v) for q, k, v, _ in leaves]),
            ("attention+grad", [lambda q=q, k=k, v=v, do=do: torch.autograd.grad(forward(q, k, v), (q, k, v), do)
                                for q, k, v, do in leaves])]


def measure_attention(pool: OperandPool, dev, grid: Dict[str, Any], dtype_name: str,
                      timed: Callable[[Any, float], float], barrier: Callable[[], None]) -> List[Dict[str, Any]]:
    """Fused attention's forward and backward times over the grid, causal or not, with and without
    dropout; rows as the profile file holds them (docs/cluster-format.md)."""
    import torch
    dtype = getattr(torch, DTYPES[dtype_name])
    out = []
    for batch_heads, seq, d in attention_shapes(grid, dev.type):
        for causal in (False, True):
            for dropout in (0.0, ATTENTION_DROPOUT):
                seconds = {}
                for op, fn in _attention_kernels(pool, batch_heads, seq, d, causal, dropout, dtype):
                    barrier()
                    seconds[op] = timed(fn, grid["min_seconds"])
                forward = seconds["attention"]
                # A difference of two medians: at least a tenth of the pair, as noise can invert it.
                backward = max(seconds["attention+grad"] - forward, 0.1 * seconds["attention+grad"])
                for op, t in (("attention", forward), ("attention_grad", backward)):
                    out.append({"op": op, "batch_heads": batch_heads, "seq": seq, "head_dim": d, "causal": causal,
                                "dropout": dropout, "dtype": dtype_name, "time": t})
    return out


def _memory_bound_ops(pool: OperandPool, dev) -> List[tuple]:
    """(IR op name, bytes as the IR counts them (inputs + output), the PyTorch kernels that run it, one per
    operand set) on 16 MiB float32 tensors: the ops whose time is their traffic at a rate of their own."""
    import torch
    import torch.nn.functional as F
    aten = torch.ops.aten
    b = 4 << 22
    sets = pool.sets([(64, 256, 256)] * 3, torch.float32)
    ln_w, ln_b = torch.ones(1024, device=dev), torch.zeros(1024, device=dev)
    bn_w, bn_b = torch.ones(64, device=dev), torch.zeros(64, device=dev)

    def each(make: Callable[..., Callable[[], Any]]) -> List[Callable[[], Any]]:
        return [make(x, y, dy) for x, y, dy in sets]

    # The loss of a language model: 256 tokens over a 16,384-word vocabulary, as F.cross_entropy runs it
    # (log_softmax + nll_loss forward; backward nll_loss_backward's dense gradient, then log_softmax's).
    tokens, vocab = 256, b // 4 // 256
    labels = torch.randint(0, vocab, (tokens,), device=dev)
    one, count = torch.ones((), device=dev), torch.tensor(float(tokens), device=dev)

    def nll_loss_grad(x, y, dy):
        logp = y.view(tokens, vocab)
        return lambda: aten.nll_loss_backward(one, logp, labels, None, 1, -100, count)

    def cross_entropy_grad(x, y, dy):
        return lambda: aten._log_softmax_backward_data(dy.view(tokens, vocab), y.view(tokens, vocab), 1,
                                                       torch.float32)

    # Megatron's vocabulary-parallel loss as the distributed runtime runs it, the TP group's all-reduces
    # left out (one rank): the IR's bytes are the logits read and the softmax written.
    loss = _torch_only_module("torch/distributed/vocab_parallel_loss.py")
    vocab_parallel_loss_forward = loss.vocab_parallel_loss_forward
    vocab_parallel_loss_backward = loss.vocab_parallel_loss_backward

    def local(t, op):
        return t

    def vocab_parallel_cross_entropy_grad(x, y, dy):
        _, saved = vocab_parallel_loss_forward(x.view(tokens, vocab), labels, 0, local)
        grad = torch.ones(tokens, device=dev)  # each call moves the saved softmax (in place) by the one-hot
        return lambda: vocab_parallel_loss_backward(saved, grad)

    def max_pool_grad(x, y, dy):
        img = x.view(16, 64, 64, 64)
        _, indices = aten.max_pool2d_with_indices(img, [2, 2], [2, 2])
        grad = dy.view(-1)[:indices.numel()].view(indices.shape)
        return lambda: aten.max_pool2d_with_indices_backward(grad, img, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)

    def softmax_grad(x, y, dy):
        soft = torch.softmax(x.view(4096, 1024), -1)
        return lambda: aten._softmax_backward_data(dy.view(4096, 1024), soft, -1, torch.float32)

    def layernorm_grad(mask):
        def make(x, y, dy):
            rows = x.view(4096, 1024)
            _, mean, rstd = aten.native_layer_norm(rows, [1024], ln_w, ln_b, 1e-5)
            return lambda: aten.native_layer_norm_backward(dy.view(4096, 1024), rows, [1024], mean, rstd, ln_w,
                                                           ln_b, mask)
        return make

    def batchnorm_grad(mask):
        def make(x, y, dy):
            img = x.view(16, 64, 64, 64)
            _, mean, invstd = aten.native_batch_norm(img, bn_w, bn_b, None, None, True, 0.1, 1e-5)
            return lambda: aten.native_batch_norm_backward(dy.view(16, 64, 64, 64), img, bn_w, None, None, mean,
                                                           invstd, True, 1e-5, mask)
        return make

    params = [torch.zeros(1 << 20, device=dev, requires_grad=True) for _ in range(8)]
    for p in params:
        p.grad = torch.randn_like(p)
    adam = torch.optim.Adam(params, lr=1e-3)
    sgd = torch.optim.SGD(params, lr=1e-3)
    adam.step()  # creates the moments
    elements = sum(p.numel() for p in params)
    fused = _fused_adam(_with_gradients(params), dev)
    fused_step = [("fused_adam", 4 * 4 * elements, fused.step)] if fused is not None else []
    # The softmax of attention with a mask (scaled_dot_product_attention's math path; PyTorch 2.5 on):
    # rows of -inf come out 0, at about a third of softmax's speed on a CPU.
    safe_softmax = [("safe_softmax", 2 * b, each(lambda x, y, dy: lambda: aten._safe_softmax(x.view(4096, 1024), -1)))
                    ] if hasattr(aten, "_safe_softmax") else []
    return [
        ("relu", 2 * b, each(lambda x, y, dy: lambda: torch.relu(x))),
        ("relu_grad", 3 * b, each(lambda x, y, dy: lambda: aten.threshold_backward(dy, y, 0.0))),
        ("gelu", 2 * b, each(lambda x, y, dy: lambda: F.gelu(x))),
        ("gelu_grad", 3 * b, each(lambda x, y, dy: lambda: aten.gelu_backward(dy, x))),
        ("add", 3 * b, each(lambda x, y, dy: lambda: x + y)),
        ("mul", 3 * b, each(lambda x, y, dy: lambda: x * y)),
        ("scale", 2 * b, each(lambda x, y, dy: lambda: x * 0.5)),
        # Keep probability 0.9 (dropout 0.1, transformers' default): a CPU's bernoulli_ takes twice as
        # long at 0.5, so a mask drawn at 0.5 prices training's dropout at half its speed.
        ("dropout_mask", b, each(lambda x, y, dy: lambda: torch.empty_like(x).bernoulli_(0.9))),
        ("max_pool", b + b // 4,
         each(lambda x, y, dy: lambda: aten.max_pool2d_with_indices(x.view(16, 64, 64, 64), [2, 2], [2, 2]))),
        ("max_pool_grad", 2 * b + b // 4, each(max_pool_grad)),
        ("softmax", 2 * b, each(lambda x, y, dy: lambda: torch.softmax(x.view(4096, 1024), -1))),
        ("softmax_grad", 3 * b, each(softmax_grad)),
        ("log_softmax", 2 * b, each(lambda x, y, dy: lambda: torch.log_softmax(x.view(4096, 1024), -1))),
        # Transcendental elementwise ops a CPU runs well below its copy bandwidth (tanh: GPT-2's GELU;
        # SiLU: SwiGLU's gate).
        ("tanh", 2 * b, each(lambda x, y, dy: lambda: torch.tanh(x))),
        ("tanh_grad", 3 * b, each(lambda x, y, dy: lambda: aten.tanh_backward(dy, y))),
        ("silu", 2 * b, each(lambda x, y, dy: lambda: F.silu(x))),
        ("silu_grad", 3 * b, each(lambda x, y, dy: lambda: aten.silu_backward(dy, x))),
        ("exp", 2 * b, each(lambda x, y, dy: lambda: torch.exp(x))),
        ("layernorm", 2 * b, each(lambda x, y, dy: lambda: aten.native_layer_norm(x.view(4096, 1024), [1024], ln_w,
                                                                                  ln_b, 1e-5))),
        ("layernorm_grad_x", 3 * b, each(layernorm_grad([True, False, False]))),
        ("layernorm_grad_gamma", 2 * b, each(layernorm_grad([False, True, False]))),
        ("layernorm_grad_beta", b, each(layernorm_grad([False, False, True]))),
        ("batchnorm", 2 * b, each(lambda x, y, dy: lambda: aten.native_batch_norm(
            x.view(16, 64, 64, 64), bn_w, bn_b, None, None, True, 0.1, 1e-5))),
        ("batchnorm_grad_x", 3 * b, each(batchnorm_grad([True, False, False]))),
        ("batchnorm_grad_gamma", 2 * b, each(batchnorm_grad([False, True, False]))),
        ("batchnorm_grad_beta", b, each(batchnorm_grad([False, False, True]))),
        ("sum", b, each(lambda x, y, dy: lambda: x.view(4096, 1024).sum(0))),
        ("transpose", 2 * b, each(lambda x, y, dy: lambda: x.transpose(1, 2).contiguous())),
        # Bytes as the IR counts them (ir/annotate.cpp): the loss reads the logits; nll_loss_grad writes
        # a dense gradient; cross_entropy_grad reads the logits and it, and writes the logits' gradient.
        ("cross_entropy", b, each(lambda x, y, dy: lambda: F.cross_entropy(x.view(tokens, vocab), labels))),
        ("nll_loss_grad", b, each(nll_loss_grad)),
        ("cross_entropy_grad", 3 * b, each(cross_entropy_grad)),
        ("vocab_parallel_cross_entropy", 2 * b,
         each(lambda x, y, dy: lambda: vocab_parallel_loss_forward(x.view(tokens, vocab), labels, 0, local))),
        ("vocab_parallel_cross_entropy_grad", 2 * b, each(vocab_parallel_cross_entropy_grad)),
        # The optimizer step as the IR counts it: parameters, gradients and states read once.
        ("adam", 4 * 4 * elements, adam.step),
        ("sgd", 2 * 4 * elements, sgd.step),
    ] + fused_step + safe_softmax


def measure_compute(device: str, grid: Dict[str, Any], dtypes: Sequence[str], quiet: bool = True,
                    barrier: Callable[[], None] = lambda: None) -> Dict[str, Any]:
    """The device section of a profile. `barrier` runs before each measurement, so that concurrent
    ranks measure the same kernel at the same time."""
    import torch
    dev = torch.device(device)
    timed = _timer(device)
    min_s = grid["min_seconds"]

    barrier()
    kernel_time = timed(_autograd_chain(dev), min_s) / (2 * CHAIN)
    _log(quiet, f"kernel time {kernel_time * 1e6:.2f} us per op (forward and backward, autograd on)")
    reference = _reference_step() if dev.type == "cpu" else None
    if reference is not None:
        barrier()
        reference_seconds = timed(reference, min_s)
        _log(quiet, f"reference training pass {reference_seconds * 1e3:.2f} ms (gpt, {REFERENCE_STEP['layers']} "
                    f"layers, hidden {REFERENCE_STEP['hidden']}: kiwi calibrates its per-op time from it)")
    barrier()
    per_tensor = {name: timed(step, min_s) / (TINY_PARAMETERS * reads)
                  for name, reads, step in _tiny_optimizer_steps(dev)}

    timed = _kernel_timer(device)  # the kernels below: on the device for a GPU
    barrier()
    src = torch.empty(16 << 20, device=dev)  # 64 MiB: past the caches
    dst = torch.empty_like(src)
    copy = timed(lambda: dst.copy_(src), min_s)
    bandwidth_gbps = 2 * src.numel() * 4 / copy / 1e9  # read + write, as the roofline counts bytes
    del src, dst
    _log(quiet, f"memory bandwidth {bandwidth_gbps:.1f} GB/s")

    gemm, conv, attention = [], [], []
    pool = OperandPool(dev)
    for name in dtypes:
        dtype = getattr(torch, DTYPES[name])
        shapes = gemm_shapes(grid, dev.type)
        if dev.type == "cuda" and name in ("bf16", "f16"):
            shapes += misaligned_gemm_shapes(grid, dev.type)
        for i, (m, n, k) in enumerate(shapes):
            for op, (rows, cols, depth), fn in _gemm_kernels(pool, m, n, k, dtype):
                barrier()
                gemm.append({"op": op, "m": rows, "n": cols, "k": depth, "dtype": name, "time": timed(fn, min_s)})
            if (i + 1) % 20 == 0 or i + 1 == len(shapes):
                _log(quiet, f"gemm {name}: {i + 1}/{len(shapes)} shapes (forward and both gradients)")
        for shape in conv_shapes(grid):
            for op, (rows, cols, depth), fn in _conv_kernels(pool, *shape, dtype):
                barrier()
                conv.append({"op": op, "m": rows, "n": cols, "k": depth, "dtype": name, "time": timed(fn, min_s)})
        _log(quiet, f"conv {name}: {len(conv_shapes(grid))} shapes (forward and both gradients)")
        attention += measure_attention(pool, dev, grid, name, timed, barrier)
        _log(quiet, f"attention {name}: {len(attention_shapes(grid, dev.type))} shapes (causal or not, "
                    f"dropout {ATTENTION_DROPOUT} or none; forward and backward)")
    barrier()
    # Five times the GEMMs' least time: one call of these takes milliseconds, and they are few.
    op_bandwidth = {op: nbytes / timed(fn, 5 * min_s) / 1e9 for op, nbytes, fn in _memory_bound_ops(pool, dev)}
    _log(quiet, "memory-bound ops: " + ", ".join(f"{op} {gbps:.1f}" for op, gbps in op_bandwidth.items()) + " GB/s")
    if dev.type == "cuda":
        name = f"{torch.cuda.get_device_name(dev)} (torch {torch.__version__})"
    else:
        name = f"cpu, {torch.get_num_threads()} thread(s) (torch {torch.__version__})"
    section = {"name": name, "kernel_time": kernel_time, "memory_bandwidth_gbps": bandwidth_gbps,
               "op_bandwidth_gbps": op_bandwidth, "optimizer_time_per_tensor": per_tensor,
               # A GPU's host issues kernels ahead of the device; a CPU runs each op after the last.
               "overhead": "launch_bound" if dev.type == "cuda" else "additive", "gemm": gemm, "conv": conv,
               "attention": attention,
               **({"reference_step": dict(REFERENCE_STEP, time=reference_seconds)} if reference is not None else {})}
    runner = _runner_step(dev)
    if runner is not None:
        import kiwi
        graph, cluster, step = runner
        barrier()
        seconds = _timer(device)(step, min_s)
        # Its work priced by the rest of this profile, as kiwi will price a captured model's. On a GPU
        # that work is next to nothing: the time is the host's issuing the ops, a launch-bound floor.
        section["runner_op_time"] = kiwi.calibrated_op_seconds(
            graph, seconds, cluster, {"kiwi_profile_version": 1, "unit": "s", "device": section})
        _log(quiet, f"kiwi.torch's runner: a small GPT's step {seconds * 1e3:.2f} ms, "
                    f"{section['runner_op_time'] * 1e6:.2f} us per op beyond its work")
    return section


def _collective(op: str, numel: int, group, group_size: int, rank: int, device: str) -> Callable[[], Any]:
    import torch
    import torch.distributed as dist
    buf = torch.ones(numel, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(buf, group=group)
    if op == "all_gather":  # bytes = the gathered result, as kiwi's CollectiveTime takes them
        shard = buf[:max(1, numel // group_size)].clone()
        outs = [torch.empty_like(shard) for _ in range(group_size)]
        return lambda: dist.all_gather(outs, shard, group=group)
    if op == "reduce_scatter":  # bytes = the input; gloo has none: an all-reduce plus a slice, as kiwi's runtime
        fn = getattr(dist, "reduce_scatter_tensor", None)
        out = torch.empty(max(1, numel // group_size), device=device)
        if fn is not None and dist.get_backend(group) != "gloo":
            return lambda: fn(out, buf[:out.numel() * group_size], group=group)
        return lambda: dist.all_reduce(buf, group=group)
    # send_recv: rank 0 sends to rank 1 and waits for the reply; half the round trip is one message
    peer = 1 - rank

    def ping() -> None:
        if rank == 0:
            dist.send(buf, peer)
            dist.recv(buf, peer)
        elif rank == 1:
            dist.recv(buf, peer)
            dist.send(buf, peer)
    return ping


# On a CPU a collective is timed as a training step issues it: after a spell of compute on every rank,
# not back to back. A rank that finishes first sleeps in the call, and waking it costs what back-to-back
# calls never pay: on this project's 2-vCPU VM gloo's small all-reduce takes 0.1-0.6 ms back to back but
# 1.4-1.8 ms after 0.5-2 ms of compute, as the runtime's TP all-reduces measure (docs/fidelity.md).
COMPUTE_BETWEEN_COLLECTIVES = 5e-4  # seconds: about a small layer's forward between two TP all-reduces


def _busy(seconds: float) -> None:
    """Keeps this rank's core computing for `seconds` (small matmuls: the work between collectives)."""
    import torch
    a = torch.ones(64, 64)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ a


def _collective_seconds(fn: Callable[[], Any], nbytes: int, device: str) -> float:
    """Median over BATCHES batches of one call's mean time. Every rank of a group must make the same
    calls, so the count depends only on the size (not on a rank's own timing)."""
    import torch
    calls = 40 if nbytes <= 1 << 16 else 5 if nbytes <= 1 << 22 else 2  # the small ones: stalls of ~4 ms
    if device.startswith("cuda"):
        fn()
        torch.cuda.synchronize()
        return _median_call_seconds(fn, calls, torch.cuda.synchronize)
    fn()
    return _median_call_seconds(fn, calls, lambda: None, before=lambda: _busy(COMPUTE_BETWEEN_COLLECTIVES))


def measure_collectives(grid: Dict[str, Any], rank: int, world: int, device: str, quiet: bool) -> List[Dict[str, Any]]:
    """Times of each collective among the first g ranks, g = 2, 4, ... and world; rank 0's timings
    (every call is synchronous, so all ranks of the group finish within one message of each other)."""
    import torch.distributed as dist
    sizes = sorted({g for g in (2 ** i for i in range(1, 31)) if g < world} | {world})
    out = []
    for g in sizes:
        group = dist.new_group(list(range(g)))  # every rank takes part in creating every group
        for op in COLLECTIVES:
            if op == "send_recv" and g != 2:
                continue
            for nbytes in grid["collective_bytes"]:
                dist.barrier()
                if rank < g:
                    fn = _collective(op, max(1, nbytes // 4), group, g, rank, device)
                    seconds = _collective_seconds(fn, nbytes, device)
                    if op == "send_recv":
                        seconds /= 2
                    if rank == 0:
                        out.append({"op": op, "devices": g, "bytes": nbytes, "time": seconds})
        _log(quiet or rank != 0, f"collectives among {g} processes: done")
    return out


def _rank_main(rank: int, world: int, port: int, backend: str, device: str, grid: Dict[str, Any],
               dtypes: Sequence[str], threads: int, quiet: bool, out_path: str) -> None:
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device.startswith("cuda"):
        device = f"cuda:{rank}"
        torch.cuda.set_device(rank)
    torch.set_num_threads(threads)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    try:
        section = measure_compute(device, grid, dtypes, quiet or rank != 0, barrier=dist.barrier)
        collectives = measure_collectives(grid, rank, world, device, quiet)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump({"device": section, "collectives": collectives}, f)


def profile(device: str = "cpu", grid: str = "default", dtypes: Optional[Sequence[str]] = None, processes: int = 1,
            threads: int = 1, backend: str = "auto", quiet: bool = False) -> Dict[str, Any]:
    """Measures the device and returns the profile document (kiwi_profile_version 1)."""
    import torch
    if grid not in GRIDS:
        raise ProfileError(f"--grid: must be one of {', '.join(GRIDS)} (got '{grid}')")
    spec = GRIDS[grid]
    if device != "cpu" and not device.startswith("cuda"):
        raise ProfileError(f"--device: must be cpu or cuda[:N] (got '{device}')")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ProfileError("--device: cuda: this PyTorch sees no CUDA device")
    dtypes = list(dtypes) if dtypes else (["f32"] if device == "cpu" else ["bf16", "f16", "f32"])
    for d in dtypes:
        if d not in DTYPES:
            raise ProfileError(f"--dtypes: unknown dtype '{d}' (one of {', '.join(DTYPES)})")
    if processes < 1:
        raise ProfileError(f"--processes: must be at least 1 (got {processes})")
    if threads < 1:
        raise ProfileError(f"--threads: must be at least 1 (got {threads})")
    if device.startswith("cuda") and processes > torch.cuda.device_count():
        raise ProfileError(f"--processes: {processes} needs as many CUDA devices, {torch.cuda.device_count()} visible")
    global _STARTED
    _STARTED = time.perf_counter()
    doc: Dict[str, Any] = {"kiwi_profile_version": 1, "unit": "s"}
    if processes == 1:
        torch.set_num_threads(threads)
        doc["device"] = measure_compute(device, spec, dtypes, quiet)
        return doc
    import torch.multiprocessing as mp

    from kiwi.torch.distributed.launcher import free_port, rank_environment
    if backend == "auto":
        backend = "nccl" if device.startswith("cuda") else "gloo"
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    # The ranks measure with the allocator the runtime's ranks run with (gloo: glibc keeping freed memory).
    with tempfile.TemporaryDirectory(prefix="kiwi-profile-") as tmp, rank_environment(backend, "caching"):
        out = os.path.join(tmp, "profile.json")
        mp.spawn(_rank_main, args=(processes, free_port(), backend, device, spec, dtypes, threads, quiet, out),
                 nprocs=processes, join=True)
        with open(out, "r", encoding="utf-8") as f:
            doc.update(json.load(f))
    doc["device"]["name"] += f", {processes} processes at once"
    return doc


def dumps(doc: Dict[str, Any]) -> str:
    """JSON with one table row per line: readable and diffable."""
    def block(value: Any, indent: str) -> str:
        if isinstance(value, dict):
            items = [f'{indent}  {json.dumps(k)}: {block(v, indent + "  ")}' for k, v in value.items()]
            return "{\n" + ",\n".join(items) + f"\n{indent}}}"
        if isinstance(value, list) and value:
            return "[\n" + ",\n".join(f"{indent}  {json.dumps(v)}" for v in value) + f"\n{indent}]"
        return json.dumps(value)
    return block(doc, "") + "\n"


def write_profile(doc: Dict[str, Any], path: str) -> None:
    """Writes the profile whole or not at all (a temporary file renamed over `path`)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".kiwi-profile-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dumps(doc))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="kiwi profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the profile file to write (JSON)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument("--grid", default="default", choices=sorted(GRIDS), help="how many shapes and sizes")
    parser.add_argument("--dtypes", default="", help="comma-separated: f32,bf16,f16,f64 (default: f32 on CPU, "
                                                      "bf16,f16,f32 on CUDA)")
    parser.add_argument("--processes", type=int, default=1,
                        help="measure with N processes at once and time collectives among them (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per process on CPU (default 1)")
    parser.add_argument("--backend", default="auto", help="gloo, nccl or auto (with --processes)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("kiwi profile: needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        print(f"kiwi profile: --out: {args.out}: directory {out_dir} does not exist", file=sys.stderr)
        return 2
    try:
        t0 = time.perf_counter()
        doc = profile(args.device, args.grid, [d for d in args.dtypes.split(",") if d], args.processes,
                      args.threads, args.backend, args.quiet)
    except ProfileError as e:
        print(f"kiwi profile: {e}", file=sys.stderr)
        return 2
    write_profile(doc, args.out)
    d = doc["device"]
    _log(args.quiet, f"wrote {args.out}: {len(d['gemm'])} GEMM and {len(d['conv'])} convolution shapes, "
         f"{len(doc.get('collectives', []))} collective timings, in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
