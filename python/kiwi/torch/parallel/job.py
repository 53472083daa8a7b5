"""A training job of a plan made for a HuggingFace config (`kiwi plan --hf-config ... --out`): the
model built from the config (random weights), synthetic tokens, N steps on every rank, and what they
measured (iteration time, peak device memory, bytes per collective) beside kiwi's predictions."""
import json
import statistics
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from kiwi.torch.distributed.plan import HybridPlan, PlanError
from kiwi.torch.parallel.apply import parallelize
from kiwi.torch.parallel.collectives import CollectiveBytes
from kiwi.torch.parallel.master_weights import MasterWeightsOptimizer, needs_master_weights
from kiwi.torch.parallel.training import local_batch, step

# kiwi's traffic fields (sim::LayerPlanTraffic) by what the run counts: (mesh dimension, collective)
TRAFFIC = {("dp", "all_reduce"): ("dp_all_reduce_bytes",),
           ("dp", "all_gather"): ("sdp_all_gather_bytes", "step_all_gather_bytes"),
           ("dp", "reduce_scatter"): ("sdp_reduce_scatter_bytes",),
           ("tp", "all_reduce"): ("tp_all_reduce_bytes", "sp_gradient_all_reduce_bytes"),
           ("tp", "all_gather"): ("sp_all_gather_bytes", "sequence_gather_bytes", "sequence_gather_backward_bytes"),
           ("tp", "reduce_scatter"): ("sp_reduce_scatter_bytes",),
           ("tied", "all_reduce"): ("tied_all_reduce_bytes",),
           ("reshard", "all_gather"): ("slice_gather_bytes", "slice_gather_backward_bytes")}


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def build_model(plan: HybridPlan) -> torch.nn.Module:
    """The plan's HuggingFace model from its config (hf_config), with random weights (seed 0)."""
    if not plan.hf_config:
        raise PlanError(f"{plan.source}: hf_config: missing (plan a HuggingFace config.json with kiwi plan "
                        "--hf-config ... --out; kiwi's own presets run with python -m kiwi.torch.distributed)")
    import transformers as tf
    try:
        config = tf.AutoConfig.from_pretrained(plan.hf_config)
    except (OSError, ValueError) as e:
        raise PlanError(f"{plan.source}: hf_config: {plan.hf_config}: {str(e).splitlines()[0]}") from None
    torch.manual_seed(0)
    dtype = DTYPES.get(plan.model_flags.get("dtype", "fp32"))
    if dtype is None:
        raise PlanError(f"{plan.source}: model_flags.dtype: '{plan.model_flags['dtype']}': expected one of "
                        f"{', '.join(DTYPES)}")
    for auto in (tf.AutoModelForCausalLM, tf.AutoModelForMaskedLM):
        try:
            return auto.from_config(config).to(dtype)  # the precision kiwi planned
        except ValueError:
            continue
    raise PlanError(f"{plan.source}: hf_config: {plan.hf_config}: a {config.model_type} model is neither a causal "
                    "nor a masked language model")


def token_batches(plan: HybridPlan, vocab: int, steps: int) -> List[Dict[str, torch.Tensor]]:
    """One global batch of random tokens per step (the same on every rank), labels = inputs."""
    seq = plan.model_flags.get("seq")
    if not isinstance(seq, int):
        raise PlanError(f"{plan.source}: model_flags.seq: missing (kiwi plan --hf-config ... --seq N --out)")
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        # on the CPU, the generator's device: an NCCL rank makes CUDA the default device (launcher.init_rank)
        ids = torch.randint(0, vocab, (plan.global_batch, seq), generator=g, device="cpu")
        out.append({"input_ids": ids, "labels": ids})
    return out


def make_optimizer(name: str, params, lr: float):
    """As kiwi prices them: sgd is plain SGD (no momentum state), adam and fused_adam Adam's two states;
    16-bit parameters step through fp32 master weights (master_weights.py)."""
    if name not in ("sgd", "adam", "fused_adam"):
        raise PlanError(f"optimizer: '{name}': expected sgd, adam or fused_adam")

    def plain(ps):
        return torch.optim.SGD(ps, lr=lr) if name == "sgd" else torch.optim.Adam(ps, lr=lr, foreach=True)
    params = list(params)
    return MasterWeightsOptimizer(params, plain) if needs_master_weights(params) else plain(params)


def _local_tensors(tensors) -> List[torch.Tensor]:
    from torch.distributed.tensor import DTensor
    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors if isinstance(t, torch.Tensor)]


def run_rank(rank: int, world: int, plan: HybridPlan, steps: int, optimizer: str, lr: float,
             composition: int = 0) -> Dict[str, Any]:
    """This rank's job: `steps` steps; the time of each but the last, and of the last its peak memory
    (kiwi.torch.measure: CUDA's peak, or the CPU profiler's allocations above what is resident when it
    starts: this rank's parameter shards, optimizer state and batch) and the bytes of every collective.
    `composition` > 0 (CPU): one more step, under kiwi.torch.peak_composition, whose `composition`
    largest holders at the peak come back as "peak_composition"."""
    model = build_model(plan)
    model.train()
    device = "cuda" if torch.cuda.is_available() and dist.get_backend() == "nccl" else "cpu"
    pm = parallelize(model, plan)
    opt = make_optimizer(optimizer, model.parameters(), lr)
    where = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    batches = [{k: v.to(where) for k, v in b.items()}  # a later stage has no embedding: the config's vocabulary
               for b in token_batches(plan, model.config.vocab_size, steps)]
    from kiwi.torch.measure import measure_step, optimizer_tensors
    seconds, losses = [], []
    for batch in batches[:-1]:
        dist.barrier()
        start = time.perf_counter()
        losses.append(step(pm, opt, local_batch(pm, batch)))
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    last = local_batch(pm, batches[-1])
    resident = _local_tensors(list(model.parameters()) + list(model.buffers()) + optimizer_tensors(opt) +
                              list(last.values()))
    dist.barrier()
    with CollectiveBytes(pm.groups) as counted:
        measured = measure_step(lambda: losses.append(step(pm, opt, last)), resident, device)
    out = {"rank": rank, "seconds": seconds or [measured.seconds], "losses": losses,
           "peak_memory_bytes": measured.peak_bytes,
           "bytes": {f"{dim} {kind}": n for (dim, kind), n in sorted(counted.bytes.items())}}
    if composition > 0 and device == "cpu":
        from kiwi.torch.measure import peak_composition
        dist.barrier()
        out["peak_composition"] = peak_composition(lambda: step(pm, opt, last), model).table(composition)
    return out


def predicted(plan: HybridPlan, cluster: Optional[str] = None, profile: Optional[str] = None) -> Dict[str, Any]:
    """kiwi's layer simulator on the plan: iteration seconds, and per pipeline stage its peak memory and,
    per "dimension collective", the bytes one of its devices sends per iteration (sim::LayerPlanTraffic:
    the stage's layers, the embedding on the first stage, the head on the last, its sends)."""
    from kiwi import _kiwi
    priced = plan.to_kiwi_plan()  # as parallelize runs it: ZeRO-3 by FSDP2 (kiwi plan --runtime fsdp2)
    priced["model_flags"] = {**priced["model_flags"], "runtime": "fsdp2"}
    report = json.loads(_kiwi.layer_plan_report(json.dumps(priced), cluster or "", profile or ""))
    simulated, traffic = report["simulated"], report["traffic"]
    stages = []
    for s in range(plan.pp_degree):
        units = [traffic["layers"][i] for i in plan.stage_layers(s)]
        units += [traffic["embedding"]] if s == 0 else []
        units += [traffic["head"]] if s == plan.pp_degree - 1 else []
        counted = {f"{dim} {kind}": sum(u.get(f, 0) for u in units for f in fields)
                   for (dim, kind), fields in TRAFFIC.items()}
        counted["pp send"] = traffic["send_forward_bytes"][s] + traffic["send_backward_bytes"][s]
        stages.append({"peak_memory_bytes": simulated["stage_peak_memory_bytes"][s], "bytes": counted})
    return {"iteration_seconds": simulated["iteration_seconds"], "stages": stages}


def table(results: List[Dict[str, Any]], kiwi: Dict[str, Any]) -> str:
    """Measured (the median step after the first but the last; each stage's first rank's bytes) beside kiwi's
    predictions."""
    rest = results[0]["seconds"][1:] or results[0]["seconds"]
    rows: List[Tuple[str, str, str]] = [("iteration (median after the first)", f"{statistics.median(rest) * 1e3:.2f} ms",
                                         f"{kiwi['iteration_seconds'] * 1e3:.2f} ms")]
    per_stage = len(results) // len(kiwi["stages"])
    for r in results:
        peak, predicted_peak = r["peak_memory_bytes"], kiwi["stages"][r["rank"] // per_stage]["peak_memory_bytes"]
        rows.append((f"peak memory, rank {r['rank']}", f"{peak / 2**20:.3f} MiB ({peak / predicted_peak - 1:+.1%})",
                     f"{predicted_peak / 2**20:.3f} MiB"))
    for s, stage in enumerate(kiwi["stages"]):
        measured = results[s * per_stage]["bytes"]
        where = f"stage {s}, " if len(kiwi["stages"]) > 1 else ""
        for key in sorted(set(measured) | {k for k, v in stage["bytes"].items() if v}):
            rows.append((f"bytes, {where}{key}", str(measured.get(key, 0)), str(stage["bytes"].get(key, 0))))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':{width}}  {'measured':>22}  {'kiwi':>14}"]
    lines += [f"{a:{width}}  {b:>22}  {c:>14}" for a, b, c in rows]
    return "\n".join(lines)
