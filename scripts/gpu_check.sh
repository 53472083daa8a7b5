#!/usr/bin/env bash
# One command on a machine with CUDA GPUs (issue 21, item 5): profiles the device (kiwi profile),
# plans a Llama-style model for the visible GPUs with that profile (kiwi plan --hf-config), runs the
# plan with NCCL (python -m kiwi.torch.parallel) and prints measured beside predicted: step time, peak
# memory per rank, bytes of every collective. After scripts/setup.sh; writes into $OUT (gpu_check/).
#   bash scripts/gpu_check.sh                 # 8 layers, hidden 2048, seq 2048, bf16
#   LAYERS=16 HIDDEN=4096 HEADS=32 KV_HEADS=8 FFN=14336 SEQ=4096 bash scripts/gpu_check.sh
#   PROFILE=gpu_check/profile.json BATCH=16 MEMORY=40GiB OUT=check16 bash scripts/gpu_check.sh
#                                 # reuses a profile; plans within 40 GiB per GPU (checkpointing)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=${OUT:-gpu_check}
layers=${LAYERS:-8} hidden=${HIDDEN:-2048} heads=${HEADS:-16} kv_heads=${KV_HEADS:-8} ffn=${FFN:-5632}
seq=${SEQ:-2048} vocab=${VOCAB:-32000} steps=${STEPS:-10} profile=${PROFILE:-} memory=${MEMORY:-}
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"

gpus=$("$py" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
if [ "$gpus" -lt 1 ]; then
  echo "gpu_check: no CUDA GPU is visible (torch.cuda.device_count() is 0); run it on a GPU machine" >&2
  exit 2
fi
batch=${BATCH:-$((4 * gpus))}
mkdir -p "$out"
echo "gpu_check: $gpus GPU(s): $("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')" >&2

# 1. the device as PyTorch runs it: GEMMs, attention, bandwidth, and with several GPUs NCCL's collectives
if [ -z "$profile" ]; then
  processes=()
  [ "$gpus" -gt 1 ] && processes=(--processes "$gpus")
  profile="$out/profile.json"
  # the default grid: GEMMs up to 16,384 and the vocabulary's widths (the small grid's edges of at most 1024
  # priced this job 3.6x too slow on an H200: docs/distributed.md, "On GPUs")
  "$py" -m kiwi profile --device cuda --dtypes bf16 "${processes[@]}" --out "$profile"
fi

# 2. the cluster (this machine's GPUs; NVLink between them) and the model (a Llama config)
"$py" - "$out" "$gpus" "$layers" "$hidden" "$heads" "$kv_heads" "$ffn" "$vocab" "$seq" <<'PY'
import json, sys, torch, transformers
out, gpus, layers, hidden, heads, kv, ffn, vocab, seq = sys.argv[1], *map(int, sys.argv[2:])
p = torch.cuda.get_device_properties(0)
# peak dense bf16 TFLOP/s and HBM GB/s from the datasheets (NVIDIA H100/H200 SXM, A100 SXM); the profile's
# measured GEMM times take precedence for every shape it covers
name = p.name.upper()
peak, bandwidth, link = ((989, 4800, 450) if "H200" in name else (989, 3350, 450) if "H100" in name
                         else (312, 2039, 300) if "A100" in name else (100, 1000, 100))
json.dump({"kiwi_cluster_version": 1, "name": f"{gpus}x-{p.name}", "num_nodes": 1, "devices_per_node": gpus,
           "device": {"name": p.name, "memory": f"{p.total_memory // 2**20}MiB", "memory_bandwidth_gbps": bandwidth,
                      "peak_tflops": {"bf16": peak, "f32": peak / 16}},
           "intra_node": {"name": "nvlink", "bandwidth_gbps": link, "latency_us": 5}},
          open(f"{out}/cluster.json", "w"), indent=1)
transformers.LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                         num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab,
                         max_position_embeddings=seq).to_json_file(f"{out}/llama.json")
PY

# 3. kiwi's plan of it for the visible GPUs, priced with the profile
budget=()
[ -n "$memory" ] && budget=(--memory "$memory")
./build/kiwi plan --hf-config "$out/llama.json" --cluster "$out/cluster.json" --profile "$profile" \
  --seq "$seq" --batch "$batch" --dtype bf16 --optimizer adam --no-refine "${budget[@]}" --out "$out/plan.json"

# 4. the plan on the GPUs with NCCL: measured beside kiwi's predictions
if [ "$gpus" -gt 1 ]; then
  launch=("$py" -m torch.distributed.run --standalone --nproc-per-node "$gpus" -m kiwi.torch.parallel)
else
  launch=("$py" -m kiwi.torch.parallel --nproc 1)
fi
"${launch[@]}" --plan "$out/plan.json" --backend nccl --steps "$steps" --profile "$profile" \
  --json "$out/run.json"
