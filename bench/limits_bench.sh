#!/usr/bin/env bash
# The time-limit contract on large inputs (issue 18): every searching command should return within
# 1.2 x --time-limit + 1 s. Prints a Markdown table (command, limit, wall seconds, peak RSS, exit code)
# for docs/robustness.md. Usage: bash bench/limits_bench.sh [KIWI]   (default ./build/kiwi; ~1 min)
set -euo pipefail
cd "$(dirname "$0")/.."
kiwi=${1:-./build/kiwi}
command -v /usr/bin/time >/dev/null || { echo "limits_bench: needs GNU time (apt-get install time)" >&2; exit 2; }
cases=(
  "hybrid --model gpt --layers 10000 --hidden 64 --heads 4 --seq 16 --batch 8 --time-limit 5"
  "hybrid --model gpt --layers 10000 --hidden 64 --heads 4 --seq 16 --batch 8 --time-limit 0.1"
  "hybrid --layers 10000 --time-limit 5"
  "plan --layers 10000 --time-limit 5"
  "plan --layers 10000 --time-limit 0.1"
  "remat --model gpt --layers 24 --budget-fraction 0.5 --time-limit 5"
  "remat --model llama2-70b --budget-fraction 0.5 --time-limit 5"
  "remat --model gpt --layers 12 --budget-fraction 0.5 --max-batch --time-limit 1"
  "joint --model gpt --layers 200 --time-limit 5"
  "joint --model gpt --layers 200 --time-limit 0.1"
  "joint --model gpt --layers 4 --method kiwi-full --time-limit 3"
  "joint --model gpt --layers 8 --method kiwi-full --time-limit 5"
)
iopddl_s=../shared/benchmarks/iopddl/asplos-2025-iopddl-S.json.gz
[ -f "$iopddl_s" ] && cases+=("iopddl $iopddl_s --time-limit 1")
measured=$(mktemp)
trap 'rm -f "$measured"' EXIT
echo "| command | limit | wall | peak RSS | exit | within 1.2 x limit + 1 s |"
echo "|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
  limit=${c##*--time-limit }
  limit=${limit%% *}
  /usr/bin/time -o "$measured" -f "%e %M %x" $kiwi $c >/dev/null 2>&1 || true
  read -r wall rss code < <(tail -1 "$measured")
  ok=$(awk -v w="$wall" -v l="$limit" 'BEGIN { print (w <= 1.2 * l + 1) ? "yes" : "**no**" }')
  printf '| `kiwi %s` | %s s | %.1f s | %.0f MB | %s | %s |\n' "$c" "$limit" "$wall" "$((rss / 1024))" "$code" "$ok"
done
