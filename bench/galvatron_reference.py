"""Reference numbers from Galvatron's own cost estimator (PKU-DAIR/Hetu-Galvatron, v3 search engine) for
uniform strategies on its shipped Llama-2-7B profiles, so kiwi's cost model can be compared with it term by
term.

Nothing of Galvatron is copied here: the script imports Galvatron's modules from a checkout (--galvatron),
builds the search arguments from Galvatron's own llama2-7b search script (models/gpt/scripts/search_dist.yaml,
with the cluster, memory and sequence length overridden as below), loads the profiles through the search
engine's own code paths (get_profiled_model_configs, get_profiled_hardware_configs, set_cost_models) and
evaluates Galvatron's estimator classes (TimeCostModelBase, MemoryCostModelBase, EmbeddingLMHead*CostModel,
pipeline_costmodel) on each strategy, the way check_cost_model and the dynamic programme (DpOnModel) do.
Each total is checked against Galvatron's check_cost_model and, for the memory budget, against DpOnModel's
coarse-grained (fine_grained_mode=0) pass, which accounts memory exactly as the DP does (per-layer ceil,
global memory buffer, 20% reserve).

    python3 -m venv /tmp/galv-venv
    /tmp/galv-venv/bin/pip install numpy scipy pyyaml pydantic rich torch==2.13.0
    /tmp/galv-venv/bin/python bench/galvatron_reference.py --galvatron /tmp/galvatron [--json out.json]

Galvatron's galvatron.core.runtime package __init__ imports the whole training runtime (transformers,
Megatron datasets); only its args_schema module is needed, so the script registers that package without
running its __init__. Time unit inside Galvatron's terms is ms (per micro-batch); totals are seconds.
"""
import argparse
import contextlib
import copy
import io
import json
import math
import os
import sys
import types

# Strategies: (name, pp, tp, dp, dp type name, list of chunks[, Ulysses sp degree]). Embedding / LM-head use
# the layers' own (pp, tp, sp, dp, dp type): LayerStrategy.to_embedding_lmhead_strategy(), as
# check_cost_model does.
STRATEGIES = [
    ("dp8-ddp", 1, 1, 8, "DDP", [1]),
    ("dp8-zero2", 1, 1, 8, "ZERO2", [1]),
    ("dp8-zero3", 1, 1, 8, "ZERO3", [1]),
    ("tp2-dp4-zero2", 1, 2, 4, "ZERO2", [1]),
    ("tp4-dp2-zero2", 1, 4, 2, "ZERO2", [1]),
    ("tp8", 1, 8, 1, "DDP", [1]),
    ("pp2-tp2-dp2-zero2", 2, 2, 2, "ZERO2", [2, 4, 8]),
    ("sp2-dp4-zero2", 1, 1, 4, "ZERO2", [1], 2),
    ("sp8-zero2", 1, 1, 1, "ZERO2", [1], 8),
]


def plain(x):
    """numpy scalars / arrays and Enum values to JSON-able Python."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "value") and hasattr(x, "name"):
        return x.name
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    return x


def import_galvatron(root):
    """Put the checkout on sys.path; register galvatron.core.runtime as a bare package (its __init__ pulls
    in the training runtime, which the search engine does not need)."""
    sys.path.insert(0, os.path.abspath(root))
    import galvatron.core  # trivial __init__
    runtime_dir = os.path.join(os.path.dirname(galvatron.core.__file__), "runtime")
    if "galvatron.core.runtime" not in sys.modules:
        pkg = types.ModuleType("galvatron.core.runtime")
        pkg.__path__ = [runtime_dir]
        pkg.__package__ = "galvatron.core.runtime"
        sys.modules["galvatron.core.runtime"] = pkg


def substitute(node, variables):
    """Resolve the ${NAME} interpolations of Galvatron's search YAML (top-level scalars only)."""
    if isinstance(node, dict):
        return {k: substitute(v, variables) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, variables) for v in node]
    if isinstance(node, str) and node.startswith("${") and node.endswith("}"):
        return variables[node[2:-1]]
    return node


def build_search_args(gpt_dir, a):
    import yaml
    from galvatron.core.search_engine.args_schema import GalvatronSearchArgs

    with open(os.path.join(gpt_dir, "scripts", "search_dist.yaml")) as f:
        raw = yaml.safe_load(f)
    script_defaults = {k: v for k, v in raw.items() if not isinstance(v, dict)}
    variables = dict(script_defaults)
    variables.update(NUM_NODES=a.nodes, NUM_GPUS_PER_NODE=a.gpus_per_node, MEMORY_CONSTRAINT=a.memory_gb,
                     SEQ_LENGTH=a.seq)
    cfg = substitute(raw["search_engine"], variables)
    script_profile_modes = dict(cfg["profiling_info"])
    cfg["model_info"]["model_config_path"] = os.path.normpath(
        os.path.join(gpt_dir, cfg["model_info"]["model_config_path"]))
    if a.time_profile_mode:
        cfg["profiling_info"]["time_profile_mode"] = a.time_profile_mode
    if a.memory_profile_mode:
        cfg["profiling_info"]["memory_profile_mode"] = a.memory_profile_mode
    cfg["batch_size_info"]["settle_bsz"] = a.gbsz
    cfg["options_info"]["log_dir"] = a.log_dir
    return GalvatronSearchArgs(**cfg), script_defaults, script_profile_modes


def make_engine(args, gpt_dir, quiet_buf):
    from galvatron.core.search_engine.search_engine import GalvatronSearchEngine
    from galvatron.utils.hf_config_adapter import model_name, model_layer_configs, resolve_model_config

    with contextlib.redirect_stdout(quiet_buf):
        resolve_model_config(args)
        se = GalvatronSearchEngine(args)
        se.set_search_engine_info(path=gpt_dir, model_layer_configs=model_layer_configs(args),
                                  model_name=model_name(args))
        se.generate_strategy_list()
        se.filter_strategy_list()
        se.get_profiled_model_configs()
        se.get_profiled_hardware_configs()
        se.set_cost_models()
    return se


def layer_time_terms(se, strategy, gbsz, chunks):
    """Intermediate terms of TimeCostModelBase (all-layer sums per micro-batch, ms) and its per-layer
    result (s)."""
    from galvatron.core.cost_model.components.layer_cost import TimeCostModelBase
    from galvatron.utils.strategy_utils import DPType

    o = TimeCostModelBase(strategy=strategy, global_batch_size=gbsz, chunks=chunks,
                          model_args=se.model_args_list[0], train_args=se.train_args_list[0],
                          parallel_args=se.parallel_args_list[0],
                          profile_model_args=se.profile_model_args_list[0],
                          profile_hardware_args=se.profile_hardware_args_list[0])
    hw = se.profile_hardware_args_list[0]
    t = dict(layer_num=o.layer_num, lbsz=o.lbsz, fct_ms=o.fct, bct_ms=o.bct,
             dp_message_MB=o.dp_message_size, dc_ms_per_MB=o.dc, dc_overlap_ms_per_MB=o.dc_overlap,
             dp_time_ms=o.dp_message_size * o.dc, tp_comm_ms=o.tp_communication_time,
             extra_overhead_ms=hw.extra_overhead, costmodel_coe=hw.costmodel_coe)
    if o.tp_sp_size > 1:
        msg = o.lbsz * o.seq_length * o.hidden_size * (2 if o.args.mixed_precision else 4) / 1024 / 1024
        table = (hw.allgather_message_size_to_latency_dict_dict[o.tp_size] if o.tp_size > 1
                 else hw.all2all_message_size_to_latency_dict_dict[o.sp_size])
        t.update(tp_comm_count=o.tp_sp_comm_num, tp_message_MB=msg,
                 tp_message_ms=o.tp_communication_time / o.tp_sp_comm_num,
                 tp_message_from="profiled table entry" if msg in table else "linear fit popt")
    if o.tp_sp_size == 1 and o.dp_size > 1:
        branch = "pp+dp"
    elif o.dp_size == 1 and o.tp_sp_size > 1:
        branch = "pp+tp"
    elif o.dp_size == 1 and o.tp_sp_size == 1:
        branch = "pure pp"
    else:
        branch = "pp+dp+tp"
    t["branch"] = branch
    if branch in ("pp+dp", "pp+dp+tp"):
        for label, factor in (("sync", 1), ("nosync", 0)):
            ov, rest, _ = o.bct_dp_overlap(o.dp_message_size * factor, o.bct)
            t["overlap_part_ms_" + label] = ov
            t["rest_part_ms_" + label] = rest
    t["fsdp_allgather_MB"] = o.fsdp_allgather_message_size if o.dp_type == DPType.ZERO3 else 0.0
    t["fsdp_allgather_ms"] = t["fsdp_allgather_MB"] * o.dc
    if o.pp_size > 1 and o.p2p_comm_coe is not None:
        t.update(p2p_message_MB=o.p2p_message_size, p2p_ms_per_MB=o.p2p_comm_coe,
                 p2p_ms=o.p2p_message_size * o.p2p_comm_coe)
    else:
        t.update(p2p_message_MB=0.0, p2p_ms_per_MB=None, p2p_ms=0.0)
    with_sync, no_sync = o.gen_result()
    t["per_layer_s_sync"], t["per_layer_s_nosync"] = with_sync, no_sync
    return t


def other_time_terms(se, emb, gbsz, chunks):
    """EmbeddingLMHeadTimeCostModel terms: per stage (ms, seconds for the results)."""
    from galvatron.core.cost_model.components.embedding_lmhead_cost import EmbeddingLMHeadTimeCostModel

    o = EmbeddingLMHeadTimeCostModel(strategy=emb, global_batch_size=gbsz, chunks=chunks,
                                     sequence_length_list=se.seqlen_list, model_args=se.model_args_list[0],
                                     train_args=se.train_args_list[0],
                                     parallel_args=se.parallel_args_list[0],
                                     profile_model_args=se.profile_model_args_list[0],
                                     profile_hardware_args=se.profile_hardware_args_list[0])
    sync, nosync = o.gen_result()
    return dict(lbsz=o.lbsz, fct_ms=list(o.fct), bct_ms=[f * o.args.bct_fct_coe for f in o.fct],
                dp_message_MB=list(o.dp_message_size), dp_coe_ms_per_MB=o.dp_coe, fwd_factor=o.fwd_factor,
                bwd_factor=o.bwd_factor, tp_sp_time_ms=list(o.tp_sp_time), time_s_sync=list(sync),
                time_s_nosync=list(nosync))


def pipeline_terms(se, strategy, gbsz, chunks, lt, ot):
    """Galvatron's pipeline_costmodel total, plus the pieces of its formula (recomposed here and checked
    against the returned total)."""
    from galvatron.core.cost_model.cost_model_handler import pipeline_costmodel
    from galvatron.core.search_engine.search_engine import pp_division_even

    pp = strategy.pp_size
    partition = pp_division_even(se.layernum_list, pp)
    stage_sync, total = pipeline_costmodel(
        layer_num_list=se.layernum_list, model_args_list=se.model_args_list,
        train_args_list=se.train_args_list, parallel_args_list=se.parallel_args_list,
        profile_model_args_list=se.profile_model_args_list,
        profile_hardware_args_list=se.profile_hardware_args_list,
        strategy_list=[strategy] * se.total_layernum, partition=partition, chunks=chunks, gbsz=gbsz,
        pp_size=pp, other_time_cost=ot["time_s_nosync"], return_stage_cost=True)
    compute = [lt["per_layer_s_nosync"] * n + ot["time_s_nosync"][i] for i, n in enumerate(partition)]
    straight = sum(compute) + compute[-1] * (chunks - 1)
    k = min(pp - 1, chunks - 1)
    overlapped = (max(k * compute[0] / 3, sum(compute[1:]) / 3) + max(k * compute[0] * 2 / 3,
                  sum(compute[1:]) * 2 / 3) + compute[0] * max(0, chunks + 1 - pp))
    reduce_ = max(0.0, max(float(stage_sync[i]) - sum(compute[:i + 1]) for i in range(pp)))
    recomposed = max(straight, overlapped) + reduce_
    assert abs(recomposed - total) < 1e-9 * max(1.0, total), (recomposed, total)
    return dict(partition=partition, stage_layers_s_sync=[float(x) for x in stage_sync],
                stage_compute_s_nosync_with_other=compute, sum_plus_last_x_chunks_minus_1_s=straight,
                overlapped_bubble_bound_s=overlapped, reduce_tail_s=reduce_, iteration_s=float(total))


def memory_terms(se, strategy, emb, gbsz, chunks, dp_model):
    from galvatron.core.cost_model.components.embedding_lmhead_cost import EmbeddingLMHeadMemoryCostModel
    from galvatron.core.cost_model.components.layer_cost import MemoryCostModelBase
    from galvatron.core.search_engine.search_engine import pp_division_even
    from galvatron.utils.strategy_utils import DPType

    pp = strategy.pp_size
    partition = pp_division_even(se.layernum_list, pp)
    eo = EmbeddingLMHeadMemoryCostModel(strategy=emb, global_batch_size=gbsz, chunks=chunks,
                                        model_args=se.model_args_list[0], train_args=se.train_args_list[0],
                                        parallel_args=se.parallel_args_list[0],
                                        profile_model_args=se.profile_model_args_list[0])
    em = eo.get_memory_cost()
    # The sequence-parallel global memory buffer DpOnModel adds to every stage (tp_sp_mode != 'sp_only');
    # global_buffer_tp_size taken as the strategy's own tp_sp_size, the smallest search task holding it.
    cfg = se.args
    if cfg.common_train_info.sequence_parallel and cfg.common_train_info.global_memory_buffer and strategy.sp_size == 1:
        cur_dp = se.world_size // pp // strategy.tp_sp_size
        gmem = (gbsz / chunks / cur_dp) * cfg.model_info.hidden_size * max(se.seqlen_list) * 4 / 1024 / 1024
        if cfg.parallelism_info.mixed_precision:  # a non-empty string: always halved, 'fp32' too
            gmem /= 2
    else:
        gmem = 0.0
    stages = []
    for i in range(pp):
        lo = MemoryCostModelBase(strategy=strategy, global_batch_size=gbsz, chunks=chunks, stage_idx=i,
                                 model_args=se.model_args_list[0], train_args=se.train_args_list[0],
                                 parallel_args=se.parallel_args_list[0],
                                 profile_model_args=se.profile_model_args_list[0])
        lm = lo.get_memory_cost()
        n = partition[i]
        zero = (lo.zero3_ratio(lo.sdp_size) if lo.dp_type == DPType.ZERO3 else
                lo.zero2_ratio(lo.sdp_size) if lo.dp_type == DPType.ZERO2 else 1.0)
        raw = lm["enc_total"] * n + em["enc_total"][i]
        dp_accounted = math.ceil(lm["enc_total"]) * n + math.ceil(em["enc_total"][i]) + int(gmem)
        stages.append(dict(
            layers=n, layer_parameter_MB=lm["parameter"], layer_zero_ratio=zero,
            layer_model_states_MB=lm["model_states"], layer_activation_MB=lm["activation"],
            layer_cumulative_lbsz=lo.cumulative_lbsz, other_zero_ratio=eo.zero_scale_factor,
            other_model_states_MB=em["model_states"][i], other_activation_MB=em["activation"][i],
            pytorch_context_MB=em["pytorch_context_mem"][i], global_memory_buffer_MB=gmem,
            model_states_MB=lm["model_states"] * n + em["model_states"][i],
            activation_MB=lm["activation"] * n + em["activation"][i],
            total_MB_check_cost_model=raw, total_MB_dp_accounted=dp_accounted,
            reserve_MB=dp_model.mem_cache, total_MB_with_reserve=dp_accounted + dp_model.mem_cache,
            fits_dp_budget=dp_accounted <= dp_model.max_mem))
    return stages


def galvatron_checks(se, strategy, emb, gbsz, chunks, quiet_buf):
    """Galvatron's own totals: check_cost_model (time, raw memory) and DpOnModel's coarse-grained pass
    (memory as the DP accounts it, OOM check against the reduced budget)."""
    from galvatron.core.search_engine.dynamic_programming import DpOnModel
    from galvatron.core.search_engine.search_engine import pp_division_even

    with contextlib.redirect_stdout(quiet_buf):
        times, mems = se.check_cost_model(gbsz, chunks, [strategy])
        cfg = copy.deepcopy(se.args)
        cfg.options_info.fine_grained_mode = 0
        dp = DpOnModel(model_args_list=se.model_args_list, train_args_list=se.train_args_list,
                       parallel_args_list=se.parallel_args_list,
                       profile_model_args_list=se.profile_model_args_list,
                       profile_hardware_args_list=se.profile_hardware_args_list, max_mem=se.memory_constraint,
                       layer_num=se.layernum_list, sequence_len=se.seqlen_list,
                       comm_coe_dict=se.allreduce_comm_coe, world_size=se.world_size,
                       pipeline_type=se.args.parallelism_info.pipeline_type, config=cfg, logger=None)
        opt = dp.fit(gbsz=gbsz, chunks=chunks, pp_size=strategy.pp_size,
                     pp_stage_list=pp_division_even(se.layernum_list, strategy.pp_size),
                     global_buffer_tp_size=strategy.tp_sp_size,
                     tp_sp_mode="sp_only" if strategy.sp_size > 1 else "tp_only",
                     layer_strategy_list=[strategy], embedding_lmhead_strategy_list=[emb])
    return dict(check_cost_model_time_s=float(times[0]), check_cost_model_memory_MB=[float(m) for m in mems[0]],
                dp_coarse_time_s=float(opt["time_cost"]), dp_coarse_memory_used_MB=plain(opt["memory_used"]),
                dp_coarse_memory_remain_MB=plain(opt["memory_remain"])), dp


def settings_report(se, args, dp_model, script_defaults, script_profile_modes):
    hw = se.profile_hardware_args_list[0]
    ta = se.train_args_list[0]
    pa = se.parallel_args_list[0]
    pm = se.profile_model_args_list[0]
    ma = se.model_args_list[0]
    allgather = {}
    for tp, table in se.allgather_message_size_to_latency_dict_dict.items():
        allgather[tp] = {"popt_m_ms_per_MB": float(table["popt"][0]), "popt_c_ms": float(table["popt"][1]),
                         "table_ms": {k: v for k, v in table.items() if k != "popt"}}
    return plain(dict(
        search_script_defaults=script_defaults, search_script_profile_modes=script_profile_modes,
        time_profile_mode=args.profiling_info.time_profile_mode,
        memory_profile_mode=args.profiling_info.memory_profile_mode,
        time_profile_path=se.time_path, memory_profile_path=se.mem_path,
        allreduce_bandwidth_path=args.profiling_info.allreduce_bandwidth_config_path,
        p2p_bandwidth_path=args.profiling_info.p2p_bandwidth_config_path,
        overlap_coe_path=args.profiling_info.overlap_coe_path, sp_time_path=args.profiling_info.sp_time_path,
        world_size=se.world_size, memory_constraint_MB=se.memory_constraint,
        dp_mem_cache_reserve_MB=dp_model.mem_cache, dp_budget_after_reserve_MB=dp_model.max_mem,
        mixed_precision=args.parallelism_info.mixed_precision, mixed_precision_flag=ta.mixed_precision,
        async_grad_reduce=ta.async_grad_reduce, pytorch_context_mem_MB=ta.pytorch_context_mem,
        default_dp_type=args.parallelism_info.default_dp_type, use_zero2_for_dp=pa.use_zero2_for_dp,
        sequence_parallel=pa.sequence_parallel, global_memory_buffer=args.common_train_info.global_memory_buffer,
        pipeline_type=pa.pipeline_type, fine_grained_mode=args.options_info.fine_grained_mode,
        costmodel_coe=hw.costmodel_coe, bct_fct_coe=hw.bct_fct_coe, extra_overhead=hw.extra_overhead,
        dp_overlap_coe=hw.dp_overlap_coe, bct_overlap_coe=hw.bct_overlap_coe,
        hidden_size=ma.hidden_size, seq_length=ma.seq_length, layer_num=ma.layer_num,
        parameter_size_MB_per_layer=ma.parameter_size,
        forward_computation_time=pm.forward_computation_time, other_time_profiled=pm.other_time_profiled,
        forward_computation_time_note=("batch mode: curve_fit of (t * bsz) over bsz, [m ms/sample, c ms]"
                                       if args.profiling_info.time_profile_mode == "batch" else
                                       "static mode: ms per sample per layer"),
        tp_activation_per_bsz_dict=pm.tp_activation_per_bsz_dict, other_memory_pp_off=pm.other_memory_pp_off,
        other_memory_pp_on=pm.other_memory_pp_on,
        allreduce_bandwidth_GBps=se.allreduce_bandwidth,
        allreduce_latency_per_MB_dict=hw.allreduce_latency_per_MB_dict,
        p2p_bandwidth_GBps=se.p2p_bandwidth, p2p_comm_coe_dict=hw.p2p_comm_coe_dict,
        allgather_latency=allgather))


def print_details(r):
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.6g}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        return str(v)

    print(f"\n## {r['name']} chunks={r['chunks']}: iteration {r['iteration_s']:.6f} s, "
          f"fits DP budget: {r['fits_dp_budget']}")
    for part in ("layer_time", "other_time", "pipeline"):
        print(f"  {part}: " + ", ".join(f"{k}={fmt(v)}" for k, v in r[part].items()))
    for i, st in enumerate(r["memory_stages"]):
        print(f"  memory stage {i}: " + ", ".join(f"{k}={fmt(v)}" for k, v in st.items()))
    print("  galvatron_checks: " + ", ".join(f"{k}={fmt(v)}" for k, v in r["galvatron_checks"].items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--galvatron", required=True, help="checkout of PKU-DAIR/Hetu-Galvatron (holds galvatron/)")
    ap.add_argument("--json", help="write the full report here")
    ap.add_argument("--gbsz", type=int, default=16)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--memory-gb", type=int, default=36)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--time-profile-mode", choices=["static", "batch", "sequence"], default="batch",
                    help="search_dist.yaml says 'sequence', which cannot fit the shipped profile (one sequence "
                         "length only); the shipped profile was made in batch mode (bsz 1..12 at 2048)")
    ap.add_argument("--memory-profile-mode", choices=["static", "sequence"], default=None,
                    help="default: the search script's (static)")
    ap.add_argument("--log-dir", default="/tmp/galvatron_reference_logs")
    ap.add_argument("--verbose", action="store_true", help="show Galvatron's own prints")
    ap.add_argument("--details", action="store_true", help="print every intermediate term per strategy")
    a = ap.parse_args()

    import_galvatron(a.galvatron)
    from galvatron.utils.strategy_utils import DPType, LayerStrategy

    gpt_dir = os.path.join(os.path.abspath(a.galvatron), "galvatron", "models", "gpt")
    quiet = io.StringIO()
    args, script_defaults, script_modes = build_search_args(gpt_dir, a)
    try:
        se = make_engine(args, gpt_dir, quiet)
    except TypeError as e:  # scipy's curve_fit with fewer points than parameters
        sys.exit(f"Galvatron could not fit the {args.profiling_info.time_profile_mode}-mode computation profile: "
                 f"{e}\n(sequence mode fits a quadratic over the layertype_*_bsz1_seq* entries; the shipped "
                 f"profile has one sequence length only, 2048)")

    rows, dp_model = [], None
    for name, pp, tp, dp, dpt, chunk_list, *ulysses in STRATEGIES:
        sp = ulysses[0] if ulysses else 1
        for chunks in chunk_list:
            for ckpt in (False, True):
                with contextlib.redirect_stdout(quiet):
                    s = LayerStrategy(pp_size=pp, tp_size=tp, sp_size=sp, cp_size=1, dp_size=dp,
                                      dp_type=DPType[dpt], checkpoint=ckpt)
                    emb = s.to_embedding_lmhead_strategy()
                checks, dp_model = galvatron_checks(se, s, emb, a.gbsz, chunks, quiet)
                lt = layer_time_terms(se, s, a.gbsz, chunks)
                ot = other_time_terms(se, emb, a.gbsz, chunks)
                pt = pipeline_terms(se, s, a.gbsz, chunks, lt, ot)
                mem = memory_terms(se, s, emb, a.gbsz, chunks, dp_model)
                assert abs(checks["check_cost_model_time_s"] - pt["iteration_s"]) < 1e-9
                fits = all(st["fits_dp_budget"] for st in mem)
                for i, st in enumerate(mem):
                    assert abs(checks["check_cost_model_memory_MB"][i] - st["total_MB_check_cost_model"]) < 1e-6
                    if fits:  # the coarse pass reports memory only for a strategy that fits on every stage
                        assert checks["dp_coarse_memory_used_MB"][i] == st["total_MB_with_reserve"]
                assert fits == (checks["dp_coarse_time_s"] != float("inf"))
                if fits:
                    assert abs(checks["dp_coarse_time_s"] - pt["iteration_s"]) < 1e-9
                rows.append(dict(name=name + ("-ckpt" if ckpt else ""), pp=pp, tp=tp, sp=sp, dp=dp, dp_type=dpt,
                                 checkpoint=ckpt, chunks=chunks, gbsz=a.gbsz, strategy=str(s),
                                 embedding_lmhead_strategy=str(emb), iteration_s=pt["iteration_s"],
                                 fits_dp_budget=fits,
                                 layer_time=lt, other_time=ot, pipeline=pt, memory_stages=mem,
                                 galvatron_checks=checks))
    if a.verbose:
        sys.stdout.write(quiet.getvalue())

    settings = settings_report(se, args, dp_model, script_defaults, script_modes)
    print(f"Galvatron reference: llama2-7b, {a.nodes}x{a.gpus_per_node} GPUs, {a.memory_gb} GB, seq {a.seq}, "
          f"gbsz {a.gbsz}, time_profile_mode={settings['time_profile_mode']}, "
          f"memory_profile_mode={settings['memory_profile_mode']}, "
          f"DP budget {settings['memory_constraint_MB']} MB - reserve {settings['dp_mem_cache_reserve_MB']} "
          f"= {settings['dp_budget_after_reserve_MB']} MB")
    hdr = (f"{'strategy':<24}{'ch':>3}{'iter s':>9}{'fct ms':>9}{'bct ms':>9}{'dp MB':>9}{'dc':>9}"
           f"{'ovl ms':>9}{'rest ms':>9}{'tp ms':>8}{'ag ms':>8}{'p2p ms':>8}{'other s':>8}  "
           f"{'stage MB: states + act + ctx (+buf) = raw / DP [fits]'}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        lt = r["layer_time"]
        stage_txt = []
        for st in r["memory_stages"]:
            stage_txt.append(
                f"{st['model_states_MB']:.0f}+{st['activation_MB']:.0f}+{st['pytorch_context_MB']:.0f}"
                f"(+{st['global_memory_buffer_MB']:.0f})={st['total_MB_check_cost_model']:.0f}/"
                f"{st['total_MB_dp_accounted']}{'' if st['fits_dp_budget'] else ' OOM'}")
        print(f"{r['name']:<24}{r['chunks']:>3}{r['iteration_s']:>9.4f}{lt['fct_ms']:>9.1f}{lt['bct_ms']:>9.1f}"
              f"{lt['dp_message_MB']:>9.1f}{lt['dc_ms_per_MB']:>9.5f}"
              f"{lt.get('overlap_part_ms_sync', 0.0):>9.1f}{lt.get('rest_part_ms_sync', 0.0):>9.1f}"
              f"{lt['tp_comm_ms']:>8.1f}{lt['fsdp_allgather_ms']:>8.1f}{lt['p2p_ms']:>8.2f}"
              f"{sum(r['other_time']['time_s_nosync']):>8.4f}  " + " | ".join(stage_txt))
    print("(fct/bct/dp/tp/ag/p2p: all 32 layers, one micro-batch, ms; other: embedding+head per micro-batch, "
          "no-grad-sync variant that pipeline_costmodel uses; raw = check_cost_model sum, DP = per-layer ceil "
          "+ global buffer, compared with the budget after the reserve)")
    if a.details:
        for r in rows:
            print_details(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(plain(dict(settings=settings, strategies=rows)), f, indent=1)
        print("wrote", a.json)


if __name__ == "__main__":
    main()
