"""Training steps of kiwi's GPT preset on one CUDA device, measured with plain PyTorch, beside kiwi's
predictions for the same model on that device (docs/fidelity.md, "One GPU").

The model is kiwi's `gpt` graph op for op (src/kiwi/models/transformer*.cpp): token + position
embeddings, dropout 0.1, pre-LayerNorm layers with separate q/k/v projections, attention either
materialized (scores, scale, causal mask and softmax as three kernels where kiwi's graph has Megatron's
fused one, dropout, context) or fused (F.scaled_dot_product_attention, causal, dropout 0.1 inside: on a
GPU in bf16, FlashAttention; kiwi's `--attention fused`), output projection, GELU MLP of 4h,
dropout after each sublayer, final LayerNorm, untied LM head, cross entropy; Adam. `f32` trains in fp32
(TF32 off); `bf16` in bf16 with fp32 master weights and moments (kiwi's `--dtype bf16`). Checkpointing
keeps each layer's input and recomputes the layer in the backward pass.

Measure, on the GPU machine (needs torch only, not kiwi's extension; each configuration runs in its own
process so that no allocator state carries over; --profile-out then profiles the GPU, `kiwi profile
--device cuda`):

    python3 bench/gpu_step_bench.py measure --out steps.json --profile-out h200.json
    python3 bench/gpu_step_bench.py profile --out h200.json   # the profile alone (about 4.5 min on an H200)
    python3 bench/gpu_step_bench.py measure --fused --out fused-steps.json   # fused attention's rows

Compare, here (kiwi's layer-level simulator on a one-GPU cluster with the device's datasheet figures,
and again with the device profile made there):

    .venv/bin/python bench/gpu_step_bench.py compare steps.json [--profile h200.json]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

# (dtype, layers, hidden, heads, seq, batch, checkpointed[, attention]): kiwi's default job's model at
# several batches, and a 12-layer hidden-2048 model whose GEMMs fill the device; materialized attention
# unless the eighth field says "fused".
CONFIGS = [(dt, 4, 1024, 16, 1024, b, ck) for dt in ("f32", "bf16") for b in (1, 4, 8, 16) for ck in (False, True)]
CONFIGS += [("bf16", 12, 2048, 16, 1024, b, ck) for b in (1, 8) for ck in (False, True)]
# --quick: kiwi's default job's model at batch 4 and 16 (a device check that fits in two minutes).
QUICK_CONFIGS = [c for c in CONFIGS if c[1] == 4 and c[5] in (4, 16)]
# --fused: the bf16 rows with fused attention, the materialized batch-8 row beside them as this machine's
# baseline, and sequences of 4096 (attention a larger share of the step) with either kernel.
FUSED_CONFIGS = [c + ("fused",) for c in CONFIGS if c[0] == "bf16" and (c[1] == 12 or c[5] != 1)]
FUSED_CONFIGS += [c for c in CONFIGS if c[0] == "bf16" and c[1] == 4 and c[5] == 8]
FUSED_CONFIGS += [("bf16", 4, 1024, 16, 4096, 2, ck, a) for a in ("fused", "materialized") for ck in (False, True)]
VOCAB = 50257  # GPT-2
WARMUP, STEPS = 3, 10


def build(layers: int, hidden: int, heads: int, seq: int, dtype, device, attention: str = "materialized"):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.q, self.k, self.v, self.out = (nn.Linear(hidden, hidden) for _ in range(4))
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, s, h = x.shape
            d = h // heads
            y = self.norm1(x)
            q, k, v = (p(y).view(b, s, heads, d).transpose(1, 2) for p in (self.q, self.k, self.v))
            if attention == "fused":
                context = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0,
                                                         is_causal=True)
            else:
                scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
                mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu_(1)
                probs = F.dropout(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1), 0.1, self.training)
                context = torch.matmul(probs, v)
            context = context.transpose(1, 2).reshape(b, s, h)
            x = x + F.dropout(self.out(context), 0.1, self.training)
            return x + F.dropout(self.fc2(F.gelu(self.fc1(self.norm2(x)))), 0.1, self.training)

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(VOCAB, hidden)
            self.position = nn.Parameter(torch.randn(seq, hidden) * 0.02)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.final_norm = nn.LayerNorm(hidden)
            self.lm_head = nn.Linear(hidden, VOCAB, bias=False)
            self.checkpointed = False

        def forward(self, tokens, labels):
            from torch.utils.checkpoint import checkpoint
            x = F.dropout(self.word(tokens) + self.position, 0.1, self.training)
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=False) if self.checkpointed else layer(x)
            logits = self.lm_head(self.final_norm(x))
            return F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1))

    return Gpt().to(device=device, dtype=dtype)


def device_used_bytes(torch) -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free


def setup(dtype_name: str, layers: int, hidden: int, heads: int, seq: int, batch: int, checkpointed: bool,
          attention: str = "materialized"):
    """The model, its inputs and a step (forward, backward, optimizer) split into its three phases."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    torch.manual_seed(0)
    dtype = torch.float32 if dtype_name == "f32" else torch.bfloat16
    model = build(layers, hidden, heads, seq, dtype, dev, attention)
    model.checkpointed = checkpointed
    params = list(model.parameters())
    if dtype_name == "f32":
        masters = params
    else:  # fp32 master weights; Adam's moments are fp32 with them
        masters = [p.detach().float().requires_grad_() for p in params]
    opt = torch.optim.Adam(masters, lr=1e-4, foreach=False)
    tokens = torch.randint(0, VOCAB, (batch, seq), device=dev)
    labels = torch.randint(0, VOCAB, (batch, seq), device=dev)

    def forward():
        return model(tokens, labels)

    def update():
        if masters is not params:
            for p, m in zip(params, masters):
                m.grad = p.grad.float()
                p.grad = None
        opt.step()
        opt.zero_grad(set_to_none=True)
        if masters is not params:
            with torch.no_grad():
                for p, m in zip(params, masters):
                    p.copy_(m)

    return params, forward, update


def measure_one(dtype_name: str, layers: int, hidden: int, heads: int, seq: int, batch: int,
                checkpointed: bool, attention: str = "materialized") -> Dict[str, Any]:
    """One configuration: median step time, peak allocated bytes of a steady-state step, the process's
    device memory beyond the caching allocator's (the CUDA context and libraries), kernels per step."""
    import torch
    torch.zeros(1, device="cuda")
    context_bytes = device_used_bytes(torch)  # before any tensor of the model: context + PyTorch's kernels
    params, forward, update = setup(dtype_name, layers, hidden, heads, seq, batch, checkpointed, attention)

    def step():
        forward().backward()
        update()

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak_allocated = torch.cuda.max_memory_allocated()
    peak_reserved = torch.cuda.max_memory_reserved()
    used = device_used_bytes(torch)
    reserved_now = torch.cuda.memory_reserved()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    gpu = [e for e in prof.events() if e.device_type.name == "CUDA"]
    kernels = [e for e in gpu if "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    return {"dtype": dtype_name, "layers": layers, "hidden": hidden, "heads": heads, "seq": seq, "batch": batch,
            "checkpointed": checkpointed, "attention": attention, "step_seconds": statistics.median(times),
            "step_seconds_min": min(times), "step_seconds_max": max(times),
            "peak_allocated_bytes": peak_allocated, "peak_reserved_bytes": peak_reserved,
            "context_bytes": context_bytes, "beyond_allocator_bytes": used - reserved_now,
            "kernels": len(kernels), "gpu_busy_seconds": sum(e.device_time_total for e in gpu) * 1e-6,
            "parameters": sum(p.numel() for p in params)}


def breakdown(dtype_name: str, layers: int, hidden: int, heads: int, seq: int, batch: int, checkpointed: bool,
              attention: str = "materialized") -> None:
    """Prints each phase's time and peak allocated bytes, and the kernels that take the most device time."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    params, forward, update = setup(dtype_name, layers, hidden, heads, seq, batch, checkpointed, attention)
    for _ in range(WARMUP):
        forward().backward()
        update()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    phases, loss = {}, None
    for name in ("forward", "backward", "optimizer"):
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        if name == "forward":
            loss = forward()
        elif name == "backward":
            loss.backward()
        else:
            update()
        torch.cuda.synchronize()
        phases[name] = (time.perf_counter() - t0, torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated())
    print(f"{dtype_name} {layers}x{hidden} seq {seq} batch {batch} checkpointed {checkpointed}, {attention} attention: "
          f"allocated before the step "
          f"{base / 2**30:.3f} GiB")
    for name, (sec, peak, after) in phases.items():
        print(f"  {name}: {sec * 1e3:.2f} ms, peak {peak / 2**30:.3f} GiB, after {after / 2**30:.3f} GiB")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        forward().backward()
        update()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=22, max_name_column_width=60))


def measure_communicator() -> Dict[str, Any]:
    """Device memory that a one-rank NCCL communicator and its first all-reduce add (the reserve's share
    for communication buffers)."""
    import torch
    import torch.distributed as dist
    torch.zeros(1, device="cuda")
    before = device_used_bytes(torch)
    with tempfile.NamedTemporaryFile() as f:
        dist.init_process_group("nccl", init_method=f"file://{f.name}", rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        after = device_used_bytes(torch) - 4 * (1 << 20)
        dist.destroy_process_group()
    return {"nccl_communicator_bytes": after - before}


def in_own_process(call: str) -> Dict[str, Any]:
    """`call` (a function of this file and its arguments, in Python) run in a fresh interpreter, so that
    no CUDA or allocator state carries over: its JSON result, or {"error": its last line on stderr}."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import json, sys; sys.path.insert(0, {here!r}); import gpu_step_bench as b; print(json.dumps(b.{call}))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1:]}
    return json.loads(run.stdout.strip().splitlines()[-1])


def measure(out: str, configs: Optional[List[tuple]] = None) -> int:
    import torch
    if not torch.cuda.is_available():
        print("gpu_step_bench: no CUDA device", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    doc: Dict[str, Any] = {"device": props.name, "multiprocessors": props.multi_processor_count,
                           "memory_bytes": props.total_memory, "torch": torch.__version__, "rows": []}
    for config in configs or CONFIGS:
        row = in_own_process(f"measure_one(*{list(config)!r})")
        if "error" in row:
            row["config"] = list(config)
        doc["rows"].append(row)
        write_json(doc, out)  # after every row: a run cut off keeps what it measured
        print(f"gpu_step_bench: {config}: {row.get('step_seconds', row.get('error'))}", file=sys.stderr, flush=True)
    doc["communicator"] = in_own_process("measure_communicator()")
    write_json(doc, out)
    return 0


def profile_device(out: str) -> int:
    """`kiwi profile --device cuda` where kiwi's extension is not built (a GPU machine with torch only):
    python/kiwi/profile.py needs torch alone, so it is loaded by its path."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "kiwi", "profile.py")
    spec = importlib.util.spec_from_file_location("kiwi_profile", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(["--device", "cuda", "--dtypes", "bf16,f32", "--out", out])


def write_json(doc: Dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run the steps on this machine's GPU")
    m.add_argument("--out", required=True)
    which = m.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true", help="only the 4-layer model at batch 4 and 16 (8 rows)")
    which.add_argument("--fused", action="store_true",
                       help="the bf16 rows with fused attention, a materialized baseline and sequences of 4096 (16 rows)")
    m.add_argument("--profile-out", default=None,
                   help="then profile the GPU (kiwi profile --device cuda --dtypes bf16,f32) into this file")
    b = sub.add_parser("breakdown", help="phases and top kernels of one configuration, on this machine's GPU")
    b.add_argument("dtype", choices=["f32", "bf16"])
    b.add_argument("layers", type=int)
    b.add_argument("hidden", type=int)
    b.add_argument("batch", type=int)
    b.add_argument("--checkpointed", action="store_true")
    b.add_argument("--vocab", type=int, default=VOCAB, help="vocabulary size (default GPT-2's 50,257)")
    b.add_argument("--seq", type=int, default=1024)
    b.add_argument("--attention", choices=["materialized", "fused"], default="materialized")
    pr = sub.add_parser("profile", help="only the device profile (kiwi profile --device cuda), about 4.5 min on an "
                                        "H200 with both dtypes: a device call of its own")
    pr.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="kiwi's predictions beside a measurement file")
    c.add_argument("steps")
    c.add_argument("--profile", default=None)
    args = parser.parse_args(argv)
    if args.command == "measure":
        status = measure(args.out, QUICK_CONFIGS if args.quick else FUSED_CONFIGS if args.fused else None)
        return status if status or not args.profile_out else profile_device(args.profile_out)
    if args.command == "profile":
        return profile_device(args.out)
    if args.command == "breakdown":
        globals()["VOCAB"] = args.vocab  # build() and setup() read the module's vocabulary
        breakdown(args.dtype, args.layers, args.hidden, 16, args.seq, args.batch, args.checkpointed, args.attention)
        return 0
    return compare(args.steps, args.profile)


# Datasheet figures of the GPUs measured here (NVIDIA H100 / H200 Tensor Core GPU datasheets, SXM
# columns: the same compute, dense); kernel launch and reserve as the dgx-* presets assume them.
DATASHEETS = {"H100": {"memory_bandwidth_gbps": 3350, "peak_tflops": {"f64": 67, "f32": 67, "bf16": 989, "f16": 989}},
              "H200": {"memory_bandwidth_gbps": 4800, "peak_tflops": {"f64": 67, "f32": 67, "bf16": 989, "f16": 989}}}


def cluster_file(doc: Dict[str, Any], path: str) -> None:
    """A one-GPU cluster JSON for the measured device: its datasheet, its SM count, the dgx presets' launch
    time (35 us) and reserve (3 GiB)."""
    name = next((k for k in DATASHEETS if k in doc["device"]), None)
    if name is None:
        raise SystemExit(f"gpu_step_bench: no datasheet figures for {doc['device']!r} (known: {', '.join(DATASHEETS)})")
    device = dict(DATASHEETS[name], name=doc["device"], memory=int(doc["memory_bytes"]), kernel_launch_us=35,
                  reserved="3GiB", multiprocessors=int(doc["multiprocessors"]))
    write_json({"kiwi_cluster_version": 1, "name": name.lower() + "-1", "device": device}, path)


def predict(row: Dict[str, Any], cluster: str, profile: Optional[str]) -> Dict[str, Any]:
    """kiwi plan --uniform's simulated single-GPU plan (checkpointed or not, one micro-batch) for a measured row."""
    import kiwi
    args = ["plan", "--model", "gpt", "--layers", row["layers"], "--hidden", row["hidden"], "--heads", row["heads"],
            "--seq", row["seq"], "--batch", row["batch"], "--dtype", row["dtype"], "--cluster", cluster, "--json", "--uniform",
            "--attention", row.get("attention", "materialized")]  # rows before --fused: materialized
    if profile:
        args += ["--profile", profile]
    result = kiwi.cli(*[str(a) for a in args])
    if result.returncode != 0:
        raise SystemExit(f"gpu_step_bench: kiwi {' '.join(map(str, args))}: {result.stderr.strip()}")
    plans = [p for p in result.json()["plans"] if p["checkpoint"] == row["checkpointed"] and p["micro_batches"] == 1
             and not p["selective_recompute"] and not p.get("recompute")]  # they keep or recompute whole layers
    if len(plans) != 1:
        raise SystemExit(f"gpu_step_bench: kiwi plan gave {len(plans)} single-GPU plans for {row}")
    return plans[0]


RESERVE_BYTES = 3 << 30  # the reserve cluster_file gives the device


def compare_rows(doc: Dict[str, Any], profile: Optional[str]) -> List[Dict[str, Any]]:
    """Each measured row beside kiwi's prediction: times in seconds, memory in bytes, errors as
    predicted / measured - 1. Tensors: kiwi's peak less the reserve against PyTorch's peak allocated;
    process: kiwi's peak against the allocator's peak reserved plus the device memory outside it."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = os.path.join(tmp, "cluster.json")
        cluster_file(doc, cluster)
        for row in doc["rows"]:
            if "error" in row:
                continue
            plan = predict(row, cluster, profile)
            r = dict(row)
            r["predicted_seconds"] = plan["iteration_seconds"]
            r["predicted_tensor_bytes"] = plan["peak_memory_bytes"] - RESERVE_BYTES
            r["predicted_process_bytes"] = plan["peak_memory_bytes"]
            r["process_bytes"] = row["peak_reserved_bytes"] + row["beyond_allocator_bytes"]
            r["time_error"] = r["predicted_seconds"] / row["step_seconds"] - 1
            r["tensor_error"] = r["predicted_tensor_bytes"] / row["peak_allocated_bytes"] - 1
            r["process_error"] = r["predicted_process_bytes"] / r["process_bytes"] - 1
            out.append(r)
    return out


def compare(steps: str, profile: Optional[str]) -> int:
    with open(steps) as f:
        doc = json.load(f)
    rows = compare_rows(doc, profile)
    gib = 1 << 30
    print(f"{doc['device']} ({doc['multiprocessors']} SMs), torch {doc['torch']}; kiwi: datasheet"
          + (f" + profile {profile}" if profile else "") + ", launch 35 us, reserve 3 GiB")
    print("| model | seq | attention | dtype | batch | ckpt | kernels | predicted | measured | error | tensors predicted | "
          "measured (peak allocated) | error | process predicted | measured (reserved + outside) | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['layers']}x{r['hidden']} | {r['seq']} | {r.get('attention', 'materialized')} | {r['dtype']} "
              f"| {r['batch']} | {'yes' if r['checkpointed'] else 'no'} | {r['kernels']} | {r['predicted_seconds'] * 1e3:.1f} ms | {r['step_seconds'] * 1e3:.1f} ms "
              f"| {r['time_error']:+.1%} | {r['predicted_tensor_bytes'] / gib:.2f} GiB "
              f"| {r['peak_allocated_bytes'] / gib:.2f} GiB | {r['tensor_error']:+.1%} "
              f"| {r['predicted_process_bytes'] / gib:.2f} GiB | {r['process_bytes'] / gib:.2f} GiB "
              f"| {r['process_error']:+.1%} |")
    for key in ("time", "tensor", "process"):
        values = [abs(r[key + "_error"]) for r in rows]
        if values:
            print(f"{key}: mean absolute error {statistics.mean(values):.1%}, worst {max(values):.1%}")
    failed = [row for row in doc["rows"] if "error" in row]
    for row in failed:
        print(f"not measured: {row['config']}: {row['error']}")
    comm = doc.get("communicator", {})
    if "nccl_communicator_bytes" in comm:
        print(f"a one-rank NCCL communicator with its first all-reduce: {comm['nccl_communicator_bytes'] / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
