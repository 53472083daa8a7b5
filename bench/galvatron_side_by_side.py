"""kiwi beside Galvatron's own cost estimator, strategy by strategy and term by term, on Galvatron's shipped
Llama-2-7B profiles (PKU-DAIR/Hetu-Galvatron): iteration time, the largest stage's memory, and the terms
that make them up.

    # 1. Galvatron's own numbers (needs a Python with Galvatron's search-engine dependencies):
    /tmp/galv-venv/bin/python bench/galvatron_reference.py --galvatron /tmp/galvatron --json /tmp/galv_ref_batch.json
    # 2. kiwi on the same strategies, side by side (stdlib only):
    python3 bench/galvatron_side_by_side.py --reference /tmp/galv_ref_batch.json --galvatron /tmp/galvatron \\
        [--kiwi build/kiwi] [--json side_by_side.json] [--markdown]

For each strategy of the reference (galvatron_reference.py's output) the script writes the Galvatron
strategy config that means it (uniform over the layers: pp_deg, tp_sizes_enc, dp_types_enc 1 for ZeRO-3
else 0 with default_dp_type "ddp" for DDP rows and "zero2" otherwise, checkpoint, global_bsz, chunks,
even pp_division, vtp = the layers' TP) and scores it with

    kiwi simulate --galvatron-config CONFIG.json --cluster dgx-a100-80gb --memory 36GiB \\
        --galvatron-profiles G/models/gpt/configs/computation_profiling_bf16_llama2-7b_all.json,\\
                             G/models/gpt/configs/memory_profiling_bf16_llama2-7b_all.json \\
        --galvatron-layers 32 --galvatron-seq 2048 --galvatron-sp --galvatron-hidden 4096 \\
        --galvatron-hardware G/profile_hardware/hardware_configs/allreduce_bandwidth_1nodes_8gpus_per_node.json,\\
                             ...p2p_bandwidth_1nodes_8gpus_per_node.json,...overlap_coefficient.json \\
        --galvatron-sp-time G/profile_hardware/hardware_configs/sp_time_1nodes_8gpus_per_node.json --json

(G = the checkout's galvatron/ folder; file names, layers, sequence length, hidden size, sequence
parallelism and the memory budget are the reference's own settings). Galvatron's estimator reads the same
files.

Columns (times in ms per iteration, memory in MiB of the largest stage of each side, "Galvatron / kiwi"):
  time        Galvatron's pipeline_costmodel total; kiwi's iteration_seconds.
  memory      Galvatron's total_MB_with_reserve (the DP's accounting: per-layer ceil, global memory buffer,
              PyTorch context, its 20% reserve); kiwi's peak_memory_bytes, whose "reserved" is the same
              20% of the budget plus the 1 GiB context.
  compute     Galvatron: fct + bct (with checkpointing bct holds the recomputed forward) of the layers and
              the embedding / head, weighted as its pipeline formula weighs them (sum over stages + the
              last stage's (chunks - 1) more); kiwi: compute + recompute, less the TP collectives that its
              recompute bucket holds (the recomputed forward's), which go to TP.
  TP          Galvatron: tp_comm_ms (+ the embedding / head's tp_sp_time), same weights; kiwi: its
              tensor-parallel communication, with the recomputed forward's.
  DP          data parallel / ZeRO communication that adds to the time. Galvatron: the ZeRO-3 all-gather
              (fsdp_allgather_ms, the embeddings' too) + the pipeline formula's reduce tail; kiwi: ZeRO-3
              gathers, the gradient sync not hidden by the backward, ZeRO-1/2's gather after the step.
  PP          pipeline sends (Galvatron p2p_ms; kiwi's pipeline communication).
  states / act / buf  model states; activations; Galvatron's Megatron global memory buffer beside kiwi's
              buffers (a ZeRO-2/3 layer's whole gradient / gathered parameters, a checkpointed layer's
              recomputed intermediates).
  fits        each side's verdict against the budget (Galvatron: the DP's, after its reserve).
  within      marked when both time and memory are within --tolerance (5%).
  G sync not charged  what Galvatron's "sync" variant of the worst stage's layers (backward overlapped
              with the DP gradient all-reduce) adds over its no-sync variant, less the reduce tail its
              pipeline formula charges: DP sync Galvatron prices but leaves out of the time.
Terms that the columns leave out (Galvatron's bubble bound, a residual of its per-layer extras; kiwi's
resharding) are zero here; a note follows the table otherwise. Every number is in --json.

kiwi's `simulate --json` splits its communication by kind (communication_seconds) but keeps the
recomputed forward's TP collectives in its recompute bucket, so the script isolates the kinds by
re-running kiwi on edited copies of the hardware files (written to --workdir), and checks the DP and PP
it finds against communication_seconds:
  - TP: the sp_time table's entries of the TP group size are set to ~0 (1e-6 ms; kiwi prices every
    collective of a group size from that size's entries). Where the DP group has the same size
    (pp2-tp2-dp2) only the entries up to a cut are zeroed: the largest table size that holds every TP
    message ([micro-batch, seq, hidden] in the training precision; SP's gradient all-reduce of the
    replicated parameters is smaller than a shard) and lies, plus 1 MB, below the smallest DP message (a
    TP shard of a layer or of the embeddings / head, from kiwi's own stage parameters); a point at cut + 1
    MB is added on the original line, so every DP message keeps its exact time. Where the sizes differ,
    zeroing all entries and zeroing up to such a cut are both run (when a cut exists) and must agree.
    TP = the drop in kiwi's communication; the drop in its recompute is the recomputed forward's TP
    collectives.
  - PP: the all-reduce bandwidth file's node bandwidth (which kiwi uses for point-to-point sends) is set
    to 1e9 GB/s; PP = the drop in communication (the 5 us latency per send stays, in DP).
  - DP = communication - TP - PP (kiwi's kinds add up to its communication).
Each variant must leave kiwi's compute unchanged (checked). Nothing of Galvatron is copied here: its
numbers come from the reference JSON; only its profile and hardware files are read (by kiwi).

Exit status: 0 when every kiwi run succeeded (whatever the ratios), 1 when kiwi failed or printed
something unreadable, 2 on missing inputs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ZERO_MS = 1e-6          # a "free" collective in an edited sp_time table (kiwi wants a positive time)
FAST_GBPS = 1e9         # a "free" point-to-point link in an edited all-reduce bandwidth file
MIB = 1024 * 1024
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


class KiwiFailed(Exception):
    pass


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def warn(msg):
    print(f"warning: {msg}", file=sys.stderr)


# ----------------------------------------------------------------------------------------------------
# Inputs


def galvatron_package_dir(path):
    """The folder holding models/ and profile_hardware/: PATH/galvatron for a checkout, else PATH."""
    for d in (os.path.join(path, "galvatron"), path):
        if os.path.isdir(os.path.join(d, "models")) and os.path.isdir(os.path.join(d, "profile_hardware")):
            return os.path.abspath(d)
    die(f"--galvatron {path}: neither it nor {path}/galvatron holds models/ and profile_hardware/")


def input_files(settings, gdir):
    """The profile and hardware files the reference used, found by name in the checkout at --galvatron."""
    def find(key, folder):
        name = os.path.basename(settings[key])
        path = os.path.join(gdir, folder, name)
        if not os.path.isfile(path):
            die(f"{path}: not found (the reference's {key} is {settings[key]})")
        return path

    profiles = [find("time_profile_path", "models/gpt/configs"), find("memory_profile_path", "models/gpt/configs")]
    hardware = {k: find(k + "_path", "profile_hardware/hardware_configs")
                for k in ("allreduce_bandwidth", "p2p_bandwidth", "overlap_coe", "sp_time")}
    return profiles, hardware


def budget_text(mb):
    return f"{mb // 1024}GiB" if mb % 1024 == 0 else f"{mb}MiB"


def write_config(row, settings, path):
    """The Galvatron strategy config of a uniform reference strategy."""
    n, pp, tp, sp = settings["layer_num"], row["pp"], row["tp"], row.get("sp", 1)
    if n % pp:
        die(f"{row['name']}: {n} layers do not split evenly over pp {pp}")

    def each(v):
        return ",".join([str(v)] * n)

    zero3 = row["dp_type"] == "ZERO3"
    cfg = {
        "pp_deg": pp, "tp_sizes_enc": each(max(tp, sp)), "tp_consecutive_flags": each(1),
        "dp_types_enc": each(1 if zero3 else 0), "use_sp": each(1 if sp > 1 else 0),
        "checkpoint": each(int(row["checkpoint"])),
        "global_bsz": row["gbsz"], "chunks": row["chunks"], "pp_division": ",".join([str(n // pp)] * pp),
        "pipeline_type": settings.get("pipeline_type", "pipedream_flush"),
        "default_dp_type": "ddp" if row["dp_type"] == "DDP" else "zero2",
        "vtp": max(tp, sp), "vsp": 1 if sp > 1 else 0, "embed_sdp": 1 if zero3 else 0,
    }
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return cfg


# ----------------------------------------------------------------------------------------------------
# kiwi runs


def run_kiwi(kiwi, config, profiles, hardware, settings, cluster, memory):
    cmd = [kiwi, "simulate", "--galvatron-config", config, "--cluster", cluster, "--memory", memory,
           "--galvatron-profiles", ",".join(profiles),
           "--galvatron-layers", str(settings["layer_num"]), "--galvatron-seq", str(settings["seq_length"])]
    if settings.get("sequence_parallel"):
        cmd.append("--galvatron-sp")
    cmd += ["--galvatron-hidden", str(settings["hidden_size"]),
            "--galvatron-hardware", ",".join(hardware[k] for k in ("allreduce_bandwidth", "p2p_bandwidth",
                                                                   "overlap_coe")),
            "--galvatron-sp-time", hardware["sp_time"],
            "--json"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KiwiFailed(f"{' '.join(cmd)}\n  {e}")
    if r.returncode != 0:
        raise KiwiFailed(f"{' '.join(cmd)}\n  exit status {r.returncode}: {r.stderr.strip()}")
    try:
        out = json.loads(r.stdout)
        out["iteration_seconds"], out["time"], out["stages"], out["peak_memory_bytes"]
    except (ValueError, KeyError, TypeError) as e:
        raise KiwiFailed(f"{' '.join(cmd)}\n  unreadable output ({e}): {r.stdout[:300]!r}")
    out["_command"] = cmd
    return out


def load_json(path):
    with open(path) as f:
        return json.load(f)


def timed_entries(doc, devices):
    """{MB: ms} of the sp_time table's all-reduce entries for a group size."""
    prefix = f"allreduce_size_{devices}_"
    out = {}
    for key, value in doc.items():
        if key.startswith(prefix) and key.endswith("MB_time"):
            mb = key[len(prefix):-len("MB_time")]
            if mb.isdigit():
                out[int(mb)] = float(value)
    return out


def choose_cut(sizes, max_tp_mb, min_dp_mb):
    """The largest table size P (one with a larger size after it) that holds every TP message (P >= the
    largest) and lies with P + 1 below every DP message; None when there is none."""
    fits = [p for p in sizes[:-1] if p >= max_tp_mb and p + 1 < min_dp_mb]
    return max(fits) if fits else None


def tp_free_table(doc, tp, cut_mb):
    """An sp_time table in which TP-group collectives cost ~0: all entries of group size tp (cut_mb None),
    or those up to cut_mb (a table size), with a point at cut_mb + 1 on the original line between cut_mb
    and the next size, so that messages above cut_mb + 1 keep their exact times. Returns (table, note)."""
    entries = timed_entries(doc, tp)
    sizes = sorted(entries)
    out = dict(doc)
    key = f"allreduce_size_{tp}_{{}}MB_time"
    if cut_mb is None:
        for mb in sizes:
            out[key.format(mb)] = ZERO_MS
        return out, "all entries zeroed"
    nxt = min(mb for mb in sizes if mb > cut_mb)
    if cut_mb + 1 < nxt:
        out[key.format(cut_mb + 1)] = entries[cut_mb] + (entries[nxt] - entries[cut_mb]) / (nxt - cut_mb)
    for mb in sizes:
        if mb <= cut_mb:
            out[key.format(mb)] = ZERO_MS
    return out, f"entries up to {cut_mb} MB zeroed, {cut_mb + 1} MB added on the original line"


def smallest_dp_message_mb(row, settings, base, dtype):
    """The smallest DP message kiwi sends, estimated from its own stage memory: a layer's TP shard
    (Galvatron's fp32 parameter_size in the training precision / tp) and what a stage holds beyond its
    layers (its embeddings' or head's shard; half each where one stage holds both)."""
    tp, n_stages = row["tp"], len(base["stages"])
    layer = settings["parameter_size_MB_per_layer"] * dtype / 4 / tp
    out = layer
    for s, st in enumerate(base["stages"]):
        params = st["memory_bytes"]["parameters"] / MIB * (row["dp"] if row["dp_type"] == "ZERO3" else 1)
        rest = params - len(st["layers"]) * layer
        ends = (s == 0) + (s == n_stages - 1)
        if ends and rest > 0:
            out = min(out, rest / ends)
    return out


def p2p_free_bandwidth(doc):
    out = dict(doc)
    for key in doc:
        if key.startswith("allreduce_size_") and "_consec_" in key:
            out[key] = FAST_GBPS
    return out


def variant_hardware(hardware, workdir, tag, **replaced):
    """A copy of the hardware file set with some files replaced by edited documents."""
    hw = dict(hardware)
    for k, doc in replaced.items():
        path = os.path.join(workdir, f"{tag}-{os.path.basename(hardware[k])}")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        hw[k] = path
    return hw


def same_compute(base, var, what, name):
    for k in ("compute_seconds", "recompute_seconds") if what == "p2p" else ("compute_seconds",):
        a, b = base["time"][k], var["time"][k]
        if abs(a - b) > 1e-9 * max(1.0, abs(a)):
            warn(f"{name}: the {what} variant changed kiwi's {k} ({a:.9f} -> {b:.9f} s); its split is approximate")


def kiwi_split(row, settings, base, run, hardware, workdir, tables):
    """kiwi's time buckets by kind (seconds per iteration) from the base run and its variants."""
    name, tp, dp, pp = f"{row['name']}-c{row['chunks']}", row["tp"], row["dp"], row["pp"]
    t = base["time"]
    split = {"tp_comm": 0.0, "tp_recompute": 0.0, "pp": 0.0, "method": []}
    if tp > 1:
        dtype = DTYPE_BYTES.get(str(settings.get("mixed_precision")), 2)
        lbsz = row["gbsz"] / row["chunks"] / dp
        # TP messages: the micro-batch's [seq, hidden] hidden states (and SP's gradient all-reduce of the
        # replicated parameters, smaller than a shard); DP messages: TP shards of parameters / gradients.
        max_tp_mb = lbsz * settings["seq_length"] * settings["hidden_size"] * dtype / MIB
        min_dp_mb = smallest_dp_message_mb(row, settings, base, dtype) if dp > 1 else float("inf")
        entries = timed_entries(tables["sp_time"], tp)
        sizes = sorted(entries)
        if not sizes:
            warn(f"{name}: the sp_time table has no all-reduce entries for {tp} devices; TP is left in DP")
        elif any(entries[b] < entries[a] for a, b in zip(sizes, sizes[1:])):
            warn(f"{name}: the sp_time entries for {tp} devices decrease somewhere; kiwi pools them, so the "
                 f"TP/DP split is approximate")
        cut = choose_cut(sizes, max_tp_mb, min_dp_mb) if sizes else None
        runs = {}
        for label, cut_mb in (("all", None), ("cut", cut)):
            if not sizes or (label == "all" and dp == tp) or (label == "cut" and cut is None):
                continue  # zeroing all would free DP too / no size separates the two
            table, note = tp_free_table(tables["sp_time"], tp, cut_mb)
            var = run(variant_hardware(hardware, workdir, f"{name}-tp{label}", sp_time=table))
            same_compute(base, var, "TP", name)
            runs[label] = (var["time"]["communication_seconds"], var["time"]["recompute_seconds"], note)
        if sizes and dp == tp and cut is None:
            warn(f"{name}: no table size separates the TP messages (up to {max_tp_mb:.0f} MB) from the DP ones "
                 f"(from {min_dp_mb:.0f} MB) of the shared {tp}-device group; TP is left in DP")
        if "all" in runs and "cut" in runs:
            split["tp_cut_check_seconds"] = runs["all"][0] - runs["cut"][0]
            if abs(split["tp_cut_check_seconds"]) > 1e-6:
                warn(f"{name}: zeroing all {tp}-device entries and only those up to {cut} MB leave different "
                     f"communication ({runs['all'][0]:.6f} vs {runs['cut'][0]:.6f} s): some TP message is "
                     f"above {cut} MB, and the split of rows with a shared group size misses it")
        if runs:
            comm, recompute, note = runs["all" if "all" in runs else "cut"]
            split["tp_comm"] = t["communication_seconds"] - comm
            split["tp_recompute"] = t["recompute_seconds"] - recompute
            split["method"].append(f"TP: sp_time {tp}-device {note}")
    if pp > 1:
        var = run(variant_hardware(hardware, workdir, f"{name}-p2p",
                                   allreduce_bandwidth=p2p_free_bandwidth(tables["allreduce_bandwidth"])))
        same_compute(base, var, "p2p", name)
        split["pp"] = t["communication_seconds"] - var["time"]["communication_seconds"]
        split["method"].append(f"PP: node bandwidth {FAST_GBPS:g} GB/s")
    split["dp"] = t["communication_seconds"] - split["tp_comm"] - split["pp"]
    kinds = base.get("communication_seconds")  # kiwi's own split of its communication bucket: exact for
    if kinds is not None:                      # DP and PP (the isolation leaves the sends' latency in DP)
        split["dp"], split["pp"] = kinds["data_parallel"], kinds["pipeline"]
        if abs(split["tp_comm"] - kinds["tensor_parallel"]) > 1e-6 + 1e-3 * kinds["tensor_parallel"]:
            warn(f"{name}: isolated TP {split['tp_comm'] * 1e3:.3f} ms, kiwi's communication_seconds.tensor_parallel "
                 f"{kinds['tensor_parallel'] * 1e3:.3f} ms")
        # Ulysses' all-to-alls (kiwi's context parallelism) sit in Galvatron's tp_comm_ms: the TP/SP column
        # (a checkpointed layer's recomputed pair stays in kiwi's recompute, the compute column).
        split["tp_comm"] += kinds.get("context_parallel", 0.0)
    split["compute"] = t["compute_seconds"]
    split["recompute"] = t["recompute_seconds"] - split["tp_recompute"]
    split["tp"] = split["tp_comm"] + split["tp_recompute"]
    split["other"] = t.get("resharding_seconds", 0.0)
    return split


# ----------------------------------------------------------------------------------------------------
# The two sides' terms


def galvatron_terms(row, settings):
    """Galvatron's iteration time by term (ms per iteration), weighted as its pipeline formula weighs the
    stages' no-sync micro-batch times: sum over stages + the last stage's (chunks - 1) more."""
    lt, ot, pl = row["layer_time"], row["other_time"], row["pipeline"]
    n_layers, chunks, parts = lt["layer_num"], row["chunks"], pl["partition"]
    weights = [1 + (chunks - 1 if s == len(parts) - 1 else 0) for s in range(len(parts))]
    layer_w = sum(w * n / n_layers for w, n in zip(weights, parts))
    coe = settings.get("bct_fct_coe", 2)
    recompute = lt["bct_ms"] - coe * lt["fct_ms"] if row["checkpoint"] else 0.0
    other_comm = [x * 1e3 - f - b for x, f, b in zip(ot["time_s_nosync"], ot["fct_ms"], ot["bct_ms"])]
    other_tp = [min(c, t) for c, t in zip(other_comm, ot["tp_sp_time_ms"])]
    other_dp = [c - t for c, t in zip(other_comm, other_tp)]

    def other(v):
        return sum(w * x for w, x in zip(weights, v))

    terms = {
        "compute": ((lt["fct_ms"] + lt["bct_ms"] - recompute) * layer_w
                    + other([f + b for f, b in zip(ot["fct_ms"], ot["bct_ms"])])),
        "recompute": recompute * layer_w,
        "tp": lt["tp_comm_ms"] * layer_w + other(other_tp),
        "dp": lt["fsdp_allgather_ms"] * layer_w + other(other_dp) + pl["reduce_tail_s"] * 1e3,
        "pp": lt["p2p_ms"] * layer_w,
        "bubble_bound": max(0.0, pl["overlapped_bubble_bound_s"] - pl["sum_plus_last_x_chunks_minus_1_s"]) * 1e3,
    }
    # per-layer extras of TimeCostModelBase (costmodel_coe, extra_overhead): whatever the terms above miss
    terms["other"] = row["iteration_s"] * 1e3 - sum(terms.values())
    # Galvatron prices the last micro-batch's gradient sync (the layers' "sync" variant: backward overlapped
    # with the DP all-reduce), but its pipeline formula charges it only as the reduce tail (the sync variant
    # of a stage's layers beyond the no-sync time of the stages up to it, embedding / head included): what
    # the sync variant adds over the no-sync one on the worst stage, less that tail.
    stage_nosync = [lt["per_layer_s_nosync"] * n for n in parts]
    dropped = [(a - b) * 1e3 for a, b in zip(pl["stage_layers_s_sync"], stage_nosync)]
    terms["dp_sync_priced_not_charged"] = max(dropped) - pl["reduce_tail_s"] * 1e3
    return {k: clean(v) for k, v in terms.items()}


def galvatron_memory(row):
    st = max(row["memory_stages"], key=lambda s: s["total_MB_with_reserve"])
    i = row["memory_stages"].index(st)
    rounding = st["total_MB_dp_accounted"] - st["total_MB_check_cost_model"] - int(st["global_memory_buffer_MB"])
    return {"stage": i, "total": st["total_MB_with_reserve"], "states": st["model_states_MB"],
            "activations": st["activation_MB"], "buffers": st["global_memory_buffer_MB"],
            "context": st["pytorch_context_MB"], "reserve": st["reserve_MB"], "rounding": rounding,
            "fits": bool(st["fits_dp_budget"])}


def kiwi_memory(out):
    i = max(range(len(out["stages"])), key=lambda s: out["stages"][s]["peak_memory_bytes"])
    m = out["stages"][i]["memory_bytes"]
    return {"stage": i, "total": out["peak_memory_bytes"] / MIB,
            "states": (m["parameters"] + m["gradients"] + m["optimizer_states"]) / MIB,
            "parameters": m["parameters"] / MIB, "gradients": m["gradients"] / MIB,
            "optimizer_states": m["optimizer_states"] / MIB,
            "activations": m["activations"] / MIB, "buffers": m["buffers"] / MIB, "reserved": m["reserved"] / MIB,
            "fits": bool(out.get("within_budget", True))}


# ----------------------------------------------------------------------------------------------------
# Output


def clean(v):
    """Float noise (a difference of equal sums) to 0."""
    return 0.0 if abs(v) < 1e-9 else v


def ratio(k, g):
    return k / g if g else (1.0 if k == 0 else float("inf"))


def pair(g, k, fmt="{:.1f}"):
    return f"{fmt.format(g)} / {fmt.format(k)}"


HEADER = ["strategy", "ch", "time G s", "time K s", "K/G", "mem G MiB", "mem K MiB", "K/G",
          "compute G / K ms", "TP/SP G / K ms", "DP G / K ms", "PP G / K ms",
          "states G / K MiB", "act G / K MiB", "buf G / K MiB", "fits G/K", "within", "G sync not charged ms"]


def table_rows(results, markdown):
    rows = []
    for r in results:
        g, k = r["galvatron"], r["kiwi"]
        gt, kt, gm, km = g["terms_ms"], k["terms_ms"], g["memory_MiB"], k["memory_MiB"]
        ok = r["within_time"] and r["within_memory"]
        rows.append([
            r["name"], str(r["chunks"]), f"{g['iteration_s']:.4f}", f"{k['iteration_s']:.4f}",
            f"{r['time_ratio']:.3f}", f"{gm['total']:.0f}", f"{km['total']:.0f}", f"{r['memory_ratio']:.3f}",
            pair(gt["compute"] + gt["recompute"], kt["compute"] + kt["recompute"]), pair(gt["tp"], kt["tp"]),
            pair(gt["dp"], kt["dp"]), pair(gt["pp"], kt["pp"]),
            pair(gm["states"], km["states"], "{:.0f}"), pair(gm["activations"], km["activations"], "{:.0f}"),
            pair(gm["buffers"], km["buffers"], "{:.0f}"),
            f"{'y' if gm['fits'] else 'n'}/{'y' if km['fits'] else 'n'}",
            ("✓" if markdown else "ok") if ok else "", f"{gt['dp_sync_priced_not_charged']:.1f}"])
    return rows


def print_table(results, markdown):
    rows = table_rows(results, markdown)
    if markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "|".join("---" for _ in HEADER) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(HEADER)]
    print("  ".join(h.ljust(w) if i < 1 else h.rjust(w) for i, (h, w) in enumerate(zip(HEADER, widths))))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) if i < 1 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))


def compare(a, settings, strategies, profiles, hardware, tables, memory, workdir):
    """One result per reference strategy; exits 1 when kiwi fails."""
    results = []
    try:
        for row in strategies:
            name = f"{row['name']}-c{row['chunks']}"
            config = os.path.join(workdir, f"{name}.json")
            cfg = write_config(row, settings, config)

            def run(hw, config=config):
                return run_kiwi(a.kiwi, config, profiles, hw, settings, a.cluster, memory)

            base = run(hardware)
            split = kiwi_split(row, settings, base, run, hardware, workdir, tables)
            gt = galvatron_terms(row, settings)
            gm, km = galvatron_memory(row), kiwi_memory(base)
            kt = {k: clean(split[k] * 1e3)
                  for k in ("compute", "recompute", "tp", "tp_comm", "tp_recompute", "dp", "pp", "other")}
            res = {
                "name": row["name"], "chunks": row["chunks"], "pp": row["pp"], "tp": row["tp"], "dp": row["dp"],
                "dp_type": row["dp_type"], "checkpoint": row["checkpoint"], "gbsz": row["gbsz"],
                "galvatron_config": cfg, "kiwi_command": " ".join(base["_command"]),
                "kiwi_notes": base.get("notes", []),
                "galvatron": {"iteration_s": row["iteration_s"], "terms_ms": gt, "memory_MiB": gm},
                "kiwi": {"iteration_s": base["iteration_seconds"], "time_s": base["time"], "terms_ms": kt,
                         "memory_MiB": km, "split_method": split["method"],
                         "stage_gradient_sync_ms": [s["gradient_sync_seconds"] * 1e3 for s in base["stages"]]},
                "time_ratio": ratio(base["iteration_seconds"], row["iteration_s"]),
                "memory_ratio": ratio(km["total"], gm["total"]),
            }
            if "tp_cut_check_seconds" in split:
                res["kiwi"]["tp_cut_check_seconds"] = split["tp_cut_check_seconds"]
            res["within_time"] = abs(res["time_ratio"] - 1) <= a.tolerance
            res["within_memory"] = abs(res["memory_ratio"] - 1) <= a.tolerance
            results.append(res)
    except KiwiFailed as e:
        print(f"error: kiwi failed:\n  {e}", file=sys.stderr)
        sys.exit(1)
    return results


def report(a, s, results, memory):
    print(f"Galvatron's estimator vs kiwi: {s['layer_num']} layers, seq {s['seq_length']}, hidden {s['hidden_size']}, "
          f"{s['mixed_precision']}, sequence parallel {'on' if s.get('sequence_parallel') else 'off'}, "
          f"{s['world_size']} GPUs ({a.cluster}), budget {memory}, global batch "
          f"{', '.join(sorted({str(r['gbsz']) for r in results}))}")
    print(f"(G = Galvatron, K = kiwi; terms in ms per iteration, memory MiB of each side's largest stage; "
          f"within: time and memory within {a.tolerance:.0%})\n")
    print_table(results, a.markdown)
    for r in results:
        g, k = r["galvatron"]["terms_ms"], r["kiwi"]["terms_ms"]
        for side, term, v in (("Galvatron", "bubble bound", g["bubble_bound"]), ("Galvatron", "residual", g["other"]),
                              ("kiwi", "resharding", k["other"])):
            if abs(v) >= 0.05:
                print(f"note: {r['name']} chunks {r['chunks']}: {side}'s {term} adds {v:.1f} ms (not in the columns)")
    off = [r for r in results if not (r["within_time"] and r["within_memory"])]
    print(f"\n{len(results) - len(off)} of {len(results)} rows within {a.tolerance:.0%} on both time and memory.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"reference": os.path.abspath(a.reference), "kiwi": os.path.abspath(a.kiwi),
                       "cluster": a.cluster, "memory": memory, "tolerance": a.tolerance, "workdir": a.workdir,
                       "settings": {k: s.get(k) for k in ("layer_num", "seq_length", "hidden_size", "mixed_precision",
                                                          "sequence_parallel", "world_size", "memory_constraint_MB",
                                                          "dp_mem_cache_reserve_MB", "pytorch_context_mem_MB")},
                       "rows": results}, f, indent=1)
        print("wrote", a.json)


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", required=True, help="galvatron_reference.py --json output")
    ap.add_argument("--galvatron", required=True,
                    help="Hetu-Galvatron checkout (or its galvatron/ folder): the profile and hardware files")
    ap.add_argument("--kiwi", default=os.path.join(repo, "build", "kiwi"), help="kiwi binary (default: build/kiwi)")
    ap.add_argument("--cluster", default="dgx-a100-80gb", help="kiwi cluster preset (default dgx-a100-80gb)")
    ap.add_argument("--memory", help="kiwi --memory (default: the reference's memory_constraint_MB; kiwi's "
                                     "reserve is 20%% of it, so another value breaks the memory comparison)")
    ap.add_argument("--tolerance", type=float, default=0.05, help="relative; a row is marked within it (0.05)")
    ap.add_argument("--workdir", help="keep the configs and edited hardware files here (default: a temporary "
                                      "folder, removed at the end)")
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    a = ap.parse_args()

    if not os.path.isfile(a.reference):
        die(f"--reference {a.reference}: not found")
    if not (os.path.isfile(a.kiwi) and os.access(a.kiwi, os.X_OK)):
        die(f"--kiwi {a.kiwi}: not an executable file")
    ref = load_json(a.reference)
    settings, strategies = ref["settings"], ref["strategies"]
    gdir = galvatron_package_dir(a.galvatron)
    profiles, hardware = input_files(settings, gdir)
    tables = {k: load_json(hardware[k]) for k in ("sp_time", "allreduce_bandwidth")}
    memory = a.memory or budget_text(int(settings["memory_constraint_MB"]))
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
        results = compare(a, settings, strategies, profiles, hardware, tables, memory, a.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="kiwi-galvatron-sbs-") as workdir:
            results = compare(a, settings, strategies, profiles, hardware, tables, memory, workdir)
    report(a, settings, results, memory)


if __name__ == "__main__":
    main()
