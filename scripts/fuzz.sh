#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/: one per reader) with clang into build-fuzz/ and runs each for
# SECONDS on seeds from the test fixtures. CI runs it (.ci/run).
# Usage: bash scripts/fuzz.sh [SECONDS]   (default 30 per harness; installs clang-14, libFuzzer and
#        compiler-rt from Debian's apt when missing, as scripts/setup.sh installs the rest)
# A finding (a crash, a leak, a hang, or a refusal that is not one line naming the file) is saved as
# build-fuzz/findings/HARNESS/...: the script names it and exits 1. Reproduce it with
# build-fuzz/fuzz/HARNESS FILE and add it to the reader's tests before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
case $seconds in '' | *[!0-9]*) echo "fuzz: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac

bash scripts/apt_install.sh fuzz clang-14 libfuzzer-14-dev libclang-rt-14-dev
build=build-fuzz
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKIWI_BUILD_FUZZERS=ON \
  -DKIWI_BUILD_TESTS=OFF -DKIWI_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target kiwi_fuzzers

# Seeds: the fixtures each reader's tests use; a reader of several files takes them joined by NUL bytes.
seeds=$build/seeds
rm -rf "$seeds"
seed() {  # seed HARNESS FILE...: one seed of FILEs joined by NULs (files that do not exist are left out)
  local harness=$1
  shift
  mkdir -p "$seeds/$harness"
  local out
  out="$seeds/$harness/$(basename "$1")"
  for f in "$@"; do [ -f "$f" ] || return 0; done
  : >"$out"
  local first=1
  for f in "$@"; do
    ((first)) || printf '\0' >>"$out"
    cat "$f" >>"$out"
    first=0
  done
}
io=tests/data/io
galvatron=tests/data/galvatron
for f in "$io"/tiny_graph.json "$io"/checkmate_sparse_ids.json "$io"/random_layered_string_order.json; do
  seed graph_json_fuzzer "$f"
done
seed plan_json_fuzzer "$io"/plan_example.json
seed cluster_json_fuzzer "$io"/cluster_example.json
seed cluster_json_fuzzer python/tests/data/cpu4.json
seed profile_json_fuzzer "$io"/profile_example.json
seed iopddl_json_fuzzer ../shared/benchmarks/iopddl/example.json
for f in tests/data/hf/*.json; do seed hf_config_fuzzer "$f"; done
seed galvatron_config_fuzzer "$galvatron"/galvatron_config_bert_example.json
for f in tests/data/megatron/*.sh; do seed megatron_args_fuzzer "$f"; done
for f in tests/data/torchtitan/*.toml; do seed torchtitan_config_fuzzer "$f"; done
seed galvatron_profiles_fuzzer "$galvatron"/computation_profiling_fp32_test.json "$galvatron"/memory_profiling_fp32_test.json
seed galvatron_hardware_fuzzer "$galvatron"/allreduce_bandwidth_1nodes_8gpus_per_node.json \
  "$galvatron"/p2p_bandwidth_1nodes_8gpus_per_node.json "$galvatron"/overlap_coefficient.json

failed=()
for harness in "$build"/fuzz/*_fuzzer; do
  name=$(basename "$harness")
  corpus=$build/corpus/$name
  findings=$build/findings/$name
  mkdir -p "$corpus" "$findings" "$seeds/$name"
  # -timeout: one input taking 10 s is a hang; -max_len: kiwi's fixtures are small, larger inputs only slow the search.
  if "$harness" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
       -artifact_prefix="$findings/" "$corpus" "$seeds/$name" >"$build/$name.log" 2>&1; then
    echo "fuzz: $name: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/$name.log" | grep -o '[0-9]*$') inputs in ${seconds} s, no finding"
  else
    echo "fuzz: $name: FINDING, $(ls "$findings" | head -1) (log: $build/$name.log):" >&2
    grep -E "^(kiwi fuzz|==[0-9]+==ERROR|SUMMARY)" "$build/$name.log" | head -5 >&2 || true
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
