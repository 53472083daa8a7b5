"""Reads a layer-level plan: `kiwi hybrid --json` output (top-level fields) or a kiwi plan JSON with a
"layer" section (`kiwi hybrid --out`, docs/plan-format.md). Errors are one line naming the source
and the field, as kiwi's C++ readers do."""
import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from kiwi.torch.errors import PlanError  # one class for every plan kiwi.torch cannot run (bad input: exit 2)


@dataclasses.dataclass(frozen=True)
class LayerStrategy:
    tp: int = 1
    dp: int = 1
    zero: int = 0  # what the dp ranks shard: 0 nothing (DP), 1 optimizer states, 2 and gradients, 3 and parameters
    checkpoint: bool = False
    sequence_parallel: bool = False  # Megatron SP over the TP group (in effect only with tp > 1)
    selective_recompute: bool = False  # recompute the attention core (in effect without checkpoint)
    recompute: Tuple[str, ...] = ()    # a recompute set: the layer's ops recomputed, by kiwi's names

    @property
    def zero_stage(self) -> int:
        """The stage in effect: ZeRO over one DP rank shards nothing."""
        return self.zero if self.dp > 1 else 0

    @property
    def sequence_split(self) -> bool:
        """Sequence parallelism in effect (plan::LayerStrategy::SequenceParallel): it needs a TP group."""
        return self.sequence_parallel and self.tp > 1

    @property
    def recomputes_core(self) -> bool:
        """Selective recomputation in effect (plan::LayerStrategy::SelectiveRecompute): CKPT recomputes all."""
        return self.selective_recompute and not self.checkpoint

    @property
    def recomputes_set(self) -> bool:
        """A recompute set in effect (plan::LayerStrategy::RecomputesSet): CKPT recomputes all."""
        return bool(self.recompute) and not self.checkpoint

    def name(self) -> str:
        """As kiwi names it (plan::StrategyName): "TP2xDP2", "SP-TP2xZeRO1-DP2", "SDP4+CKPT", "TP2+SEL"."""
        dp = {0: f"DP{self.dp}", 1: f"ZeRO1-DP{self.dp}", 2: f"ZeRO2-DP{self.dp}", 3: f"SDP{self.dp}"}[self.zero_stage]
        tp = ("SP-" if self.sequence_parallel else "") + f"TP{self.tp}"
        parts = ([tp] if self.tp > 1 else []) + ([dp] if self.dp > 1 else [])
        return (("x".join(parts) or "single") + ("+CKPT" if self.checkpoint else "+SEL" if self.recomputes_core else "") +
                (f"+RC{len(self.recompute)}" if self.recomputes_set else ""))


@dataclasses.dataclass
class HybridPlan:
    layers: List[LayerStrategy]
    pp_degree: int = 1
    pp_partition: List[int] = dataclasses.field(default_factory=list)
    global_batch: int = 1
    micro_batches: int = 1
    pipeline: str = "1f1b"
    virtual_stages: int = 1                # > 1: interleaved 1F1B, pp_partition lists pp x v chunks
    source: str = "plan"
    model: Optional[str] = None            # model preset (kiwi plan JSON only)
    hf_config: Optional[str] = None        # or the HuggingFace config.json it was made for (kiwi plan --hf-config)
    model_flags: Dict[str, Any] = dataclasses.field(default_factory=dict)
    cluster: Optional[str] = None
    predicted: Dict[str, Any] = dataclasses.field(default_factory=dict)  # iteration_seconds, peak_memory_bytes

    @property
    def microbatch(self) -> int:
        return self.global_batch // self.micro_batches

    def stage_of_layers(self) -> List[int]:
        out: List[int] = []
        for c, count in enumerate(self.pp_partition):  # chunk c runs on stage c % pp_degree
            out += [c % self.pp_degree] * count
        return out

    def chunk_layers(self, chunk: int) -> List[int]:
        """The layers of model chunk `chunk` (a stage's, without interleaving)."""
        first = sum(self.pp_partition[:chunk])
        return list(range(first, first + self.pp_partition[chunk]))

    def stage_chunks(self, stage: int) -> List[int]:
        """The model chunks `stage` runs, in model order (interleaved 1F1B: stage, stage + pp, ...)."""
        return list(range(stage, len(self.pp_partition), self.pp_degree))

    def stage_layers(self, stage: int) -> List[int]:
        return [i for c in self.stage_chunks(stage) for i in self.chunk_layers(c)]

    def check_world(self, world: int) -> None:
        """Errors when the plan does not fit `world` processes (every layer: tp * dp = world / pp)."""
        if world % self.pp_degree != 0:
            raise PlanError(f"{self.source}: pp_degree: {self.pp_degree} does not divide the {world} processes")
        per_stage = world // self.pp_degree
        for i, s in enumerate(self.layers):
            if s.tp * s.dp != per_stage:
                raise PlanError(f"{self.source}: layers[{i}]: tp {s.tp} x dp {s.dp} must equal the {per_stage} "
                                f"processes of a stage ({world} processes, pp_degree {self.pp_degree})")

    def check_whole_layer_recomputation(self) -> None:
        """Errors for a recompute set: kiwi's GPT runtime recomputes whole layers or their attention core
        only (kiwi.torch.parallelize runs the sets)."""
        for i, s in enumerate(self.layers):
            if s.recomputes_set:
                raise PlanError(f"{self.source}: layers[{i}].recompute: recompute sets ({list(s.recompute)!r}) are not "
                                "run by kiwi.torch.distributed (run the plan with python -m kiwi.torch.parallel, or "
                                "plan with kiwi hybrid --no-recompute-sets)")

    def check_schedule(self, schedule: Optional[str]) -> None:
        """Errors when a schedule override (--schedule) cannot run the plan: interleaved plans run 1f1b."""
        if self.virtual_stages > 1 and schedule not in (None, "1f1b"):
            raise PlanError(f"{self.source}: virtual_stages: {self.virtual_stages} model chunks per stage run "
                            f"interleaved 1F1B, not {schedule}")

    def check_sequence(self, seq: int) -> None:
        """Errors when a sequence-parallel layer's TP degree does not divide the sequence length."""
        for i, s in enumerate(self.layers):
            if s.sequence_split and seq % s.tp:
                raise PlanError(f"{self.source}: layers[{i}]: sequence_parallel: tp {s.tp} does not divide the "
                                f"sequence of {seq} tokens")

    def to_kiwi_plan(self) -> Dict[str, Any]:
        """The kiwi plan JSON (docs/plan-format.md) of this plan, for kiwi's simulator."""
        return {"kiwi_plan_version": 1, "model": self.model or "", "model_flags": self.model_flags,
                **({"hf_config": self.hf_config} if self.hf_config else {}),
                "cluster": self.cluster or "",
                "layer": {"layers": [{**dataclasses.asdict(s), "recompute": list(s.recompute)} for s in self.layers], "pp_degree": self.pp_degree,
                          "pp_partition": self.pp_partition, "global_batch": self.global_batch,
                          "micro_batches": self.micro_batches, "pipeline": self.pipeline,
                          **({"virtual_stages": self.virtual_stages} if self.virtual_stages > 1 else {})}}


def _int(obj: Dict[str, Any], key: str, where: str, default: Optional[int] = None) -> int:
    if key not in obj:
        if default is None:
            raise PlanError(f"{where}.{key}: missing" if where else f"{key}: missing")
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise PlanError(f"{where}.{key}: must be an integer >= 1, got {v!r}" if where else
                        f"{key}: must be an integer >= 1, got {v!r}")
    return v


def _bool(obj: Dict[str, Any], key: str, where: str) -> bool:
    v = obj.get(key, False)
    if not isinstance(v, bool):
        raise PlanError(f"{where}.{key}: must be true or false, got {v!r}")
    return v


def _zero(obj: Dict[str, Any], where: str) -> int:
    """The ZeRO stage: "zero" 0-3; "sdp": true, ZeRO-3's first spelling (`kiwi hybrid --json` writes both),
    must agree with it (as kiwi reads them)."""
    sdp = _bool(obj, "sdp", where)
    if "zero" not in obj:
        return 3 if sdp else 0
    v = obj["zero"]
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 3:
        raise PlanError(f"{where}.zero: must be an integer from 0 to 3, got {v!r}")
    if "sdp" in obj and sdp != (v == 3):
        raise PlanError(f"{where}.sdp: {str(sdp).lower()} contradicts zero {v}")
    return v


def _strategy(obj: Any, where: str) -> LayerStrategy:
    if not isinstance(obj, dict):
        raise PlanError(f"{where}: must be an object with tp, dp, zero, checkpoint")
    if obj.get("ep", 1) != 1:  # kiwi's GPT has no experts to split
        raise PlanError(f"{where}.ep: expert parallelism ({obj['ep']!r}) is not run by kiwi.torch.distributed")
    if obj.get("cp", 1) != 1:  # no ring attention in its GPT
        raise PlanError(f"{where}.cp: context parallelism ({obj['cp']!r}) is not run by kiwi.torch.distributed "
                        "(plan with kiwi hybrid --no-context-parallel)")
    if obj.get("offload", False) is not False:  # its optimizer steps on the ranks' devices
        raise PlanError(f"{where}.offload: optimizer offloading ({obj['offload']!r}) is not run by kiwi.torch.distributed "
                        "(plan with kiwi hybrid --no-offload)")
    unknown = set(obj) - {"tp", "dp", "zero", "sdp", "checkpoint", "sequence_parallel", "selective_recompute", "ep",
                          "cp", "ulysses", "offload", "recompute"}
    if unknown:
        raise PlanError(f"{where}.{sorted(unknown)[0]}: unknown field")
    recompute = obj.get("recompute", [])
    if not isinstance(recompute, list) or not all(isinstance(n, str) and n for n in recompute):
        raise PlanError(f"{where}.recompute: must be a list of op names, got {recompute!r}")
    return LayerStrategy(_int(obj, "tp", where, 1), _int(obj, "dp", where, 1), _zero(obj, where),
                         _bool(obj, "checkpoint", where), _bool(obj, "sequence_parallel", where),
                         _bool(obj, "selective_recompute", where), tuple(recompute))


def parse_plan(obj: Any, source: str = "plan") -> HybridPlan:
    """A HybridPlan from a parsed `kiwi hybrid --json` object or kiwi plan JSON; PlanError names `source`."""
    if not isinstance(obj, dict):
        raise PlanError(f"{source}: must be a JSON object")
    try:
        return _parse(obj, source)
    except PlanError as e:
        msg = str(e)
        raise PlanError(msg if msg.startswith(source + ":") else f"{source}: {msg}") from None


def _parse(obj: Dict[str, Any], source: str) -> HybridPlan:
    layer, where, predicted = obj, "", {}
    if "layer" in obj:  # kiwi plan JSON
        layer, where = obj["layer"], "layer"
        if not isinstance(layer, dict):
            raise PlanError("layer: must be an object")
        claims = obj.get("claims", {}) or {}
        predicted = {k: claims[k] for k in ("iteration_seconds", "peak_memory_bytes") if k in claims}
    else:
        if obj.get("feasible") is False:
            raise PlanError("feasible: false (kiwi hybrid found no plan)")
        predicted = {k: obj[k] for k in ("iteration_seconds", "peak_memory_bytes") if k in obj}
    if not isinstance(layer.get("layers"), list) or not layer["layers"]:
        raise PlanError(f"{where + '.' if where else ''}layers: must be a non-empty array")
    prefix = f"{where}.layers" if where else "layers"
    layers = [_strategy(s, f"{prefix}[{i}]") for i, s in enumerate(layer["layers"])]
    plan = HybridPlan(layers=layers, source=source, predicted=predicted)
    plan.pp_degree = _int(layer, "pp_degree", where, 1)
    plan.global_batch = _int(layer, "global_batch", where, 1)
    plan.micro_batches = _int(layer, "micro_batches", where, 1)
    plan.pipeline = layer.get("pipeline", "1f1b")
    plan.virtual_stages = _int(layer, "virtual_stages", where, 1)
    if plan.pipeline not in ("1f1b", "gpipe"):
        raise PlanError(f"{where + '.' if where else ''}pipeline: must be \"1f1b\" or \"gpipe\", got {plan.pipeline!r}")
    _interleaving(plan, where)
    _partition(plan, layer.get("pp_partition", []), where)
    _batch(plan, where)
    if "layer" in obj:
        plan.model = obj.get("model") or None
        plan.hf_config = obj.get("hf_config") or None
        plan.model_flags = dict(obj.get("model_flags", {}) or {})
        plan.cluster = obj.get("cluster") or None
    return plan


def _interleaving(plan: HybridPlan, where: str) -> None:
    """Interleaved 1F1B as Megatron-LM (and kiwi's simulator) runs it."""
    v = plan.virtual_stages
    if v == 1:
        return
    prefix = f"{where}." if where else ""
    if plan.pipeline != "1f1b":
        raise PlanError(f"{prefix}virtual_stages: {v} model chunks per stage (interleaved 1F1B) need pipeline "
                        f"\"1f1b\", got {plan.pipeline!r}")
    if plan.pp_degree < 2:
        raise PlanError(f"{prefix}virtual_stages: {v} model chunks per stage need pp_degree >= 2")
    if plan.micro_batches % plan.pp_degree:
        raise PlanError(f"{prefix}micro_batches: {plan.micro_batches} is not a multiple of pp_degree "
                        f"{plan.pp_degree}, which interleaved 1F1B needs")


def _partition(plan: HybridPlan, part: Any, where: str) -> None:
    field = f"{where + '.' if where else ''}pp_partition"
    if not part:
        part = [len(plan.layers)] if plan.pp_degree == 1 else None
        if part is None:
            raise PlanError(f"{field}: empty, but pp_degree is {plan.pp_degree}")
    if not isinstance(part, list) or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in part):
        raise PlanError(f"{field}: must be an array of integers >= 1, got {part!r}")
    if plan.virtual_stages > 1 and len(part) != plan.pp_degree * plan.virtual_stages:
        raise PlanError(f"{field}: has {len(part)} chunks, pp_degree {plan.pp_degree} x virtual_stages "
                        f"{plan.virtual_stages} is {plan.pp_degree * plan.virtual_stages}")
    if plan.virtual_stages == 1 and len(part) != plan.pp_degree:
        raise PlanError(f"{field}: has {len(part)} stages, pp_degree is {plan.pp_degree}")
    if sum(part) != len(plan.layers):
        raise PlanError(f"{field}: covers {sum(part)} layers, the plan has {len(plan.layers)}")
    plan.pp_partition = list(part)


def _batch(plan: HybridPlan, where: str) -> None:
    pre = where + "." if where else ""
    if plan.global_batch % plan.micro_batches:
        raise PlanError(f"{pre}global_batch: {plan.global_batch} is not divisible into {plan.micro_batches} micro-batches")
    for i, s in enumerate(plan.layers):
        if plan.microbatch % s.dp:
            raise PlanError(f"{pre}layers[{i}]: micro-batch of {plan.microbatch} samples is not divisible by dp {s.dp}")


def load_plan(path: str) -> HybridPlan:
    name = os.path.basename(path)
    try:
        with open(path, "r", encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as e:
        raise PlanError(f"{name}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise PlanError(f"{name}: not JSON (line {e.lineno}: {e.msg})") from None
    return parse_plan(obj, name)
