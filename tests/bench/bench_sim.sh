#!/usr/bin/env bash
# `make bench`: simulator speed and memory. Not a test: it prints numbers, it does not judge.
#   (a) the bundled Azure 2023 chat trace (19,366 requests), defaults (Llama-2-7B on H200)
#   (b) a 1,000,000-request synthetic trace, same defaults: Poisson at 30 req/s, prompts uniform
#       in [256, 768], outputs in [64, 192] tokens: about 70% of what the simulated H200 serves
#       (~42 req/s), so the queue stays bounded, as in a real deployment (an overloaded server's
#       queue, and memory, grow without bound)
#   (c) the same process at 2,000,000 requests, rows not written: peak RSS should match (b)'s,
#       since the trace streams and every latency goes into a bounded histogram
#   (d) the Mooncake conversation trace (12,031 requests; MOONCAKE=FILE, else the bundled first
#       2,000) on 16 replicas of Llama-3.1-8B, least-outstanding router, without and with prefix
#       caching (prefix-affinity router)
#   (e) a 1,000,000-request synthetic trace on 64 replicas: as (b) at 1,900 req/s, ~70% of 64
#       simulated H200s, least-outstanding router
# For each: wall time, simulated steps per second, peak RSS (GNU time), pinned to one core.
set -euo pipefail
BIN=${TANDEM_BIN:-build/tandem}
OUT=${BENCH_OUT:-build/bench}
mkdir -p "$OUT"
pin() { if command -v taskset >/dev/null; then taskset -c 0 "$@"; else "$@"; fi; }

run() { # name trace [extra sim flags...]
    local name=$1 trace=$2; shift 2
    local t0 t1
    t0=$(date +%s.%N)
    pin /usr/bin/time -f '%M' -o "$OUT/$name.rss" "$BIN" sim --trace "$trace" --out "$OUT/$name" --quiet "$@"
    t1=$(date +%s.%N)
    local steps rss wall
    steps=$(python3 -c "import json;print(json.load(open('$OUT/$name/summary.json'))['num_steps'])" 2>/dev/null ||
            awk 'END{print NR-1}' "$OUT/$name/steps.csv")
    rss=$(cat "$OUT/$name.rss")
    wall=$(echo "$t1 - $t0" | bc -l)
    printf '%-28s wall %7.2f s   steps %9d   %10.0f steps/s   peak RSS %6.1f MB\n' \
        "$name" "$wall" "$steps" "$(echo "$steps / $wall" | bc -l)" "$(echo "$rss / 1024" | bc -l)"
}

if [ ! -f "$OUT/synthetic_1m.csv" ]; then
    "$BIN" trace gen --num-requests 1000000 --rate 30 --length-dist uniform --input-len 512 \
        --output-len 128 --range-ratio 0.5 --seed 1 --out "$OUT/synthetic_1m.csv"
fi
if [ ! -f "$OUT/synthetic_2m.csv" ]; then
    "$BIN" trace gen --num-requests 2000000 --rate 30 --length-dist uniform --input-len 512 \
        --output-len 128 --range-ratio 0.5 --seed 1 --out "$OUT/synthetic_2m.csv"
fi
echo "tandem bench ($(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m)); one core each:"
run azure_conv_19k traces/samples/azure_conv_2023.csv
run synthetic_1m "$OUT/synthetic_1m.csv"
run synthetic_1m_no_steps "$OUT/synthetic_1m.csv" --no-steps
run synthetic_2m_no_rows "$OUT/synthetic_2m.csv" --no-steps --no-requests
run synthetic_1m_no_rows "$OUT/synthetic_1m.csv" --no-steps --no-requests
MOONCAKE=${MOONCAKE:-traces/samples/mooncake_conversation_2k.jsonl}
run mooncake_16_replicas "$MOONCAKE" --model llama-3.1-8b --num-replicas 16 --router least-outstanding
run mooncake_16_replicas_prefix "$MOONCAKE" --model llama-3.1-8b --num-replicas 16 --router prefix-affinity \
    --enable-prefix-caching
if [ ! -f "$OUT/synthetic_1m_64r.csv" ]; then
    "$BIN" trace gen --num-requests 1000000 --rate 1900 --length-dist uniform --input-len 512 \
        --output-len 128 --range-ratio 0.5 --seed 1 --out "$OUT/synthetic_1m_64r.csv"
fi
run synthetic_1m_64_replicas "$OUT/synthetic_1m_64r.csv" --num-replicas 64 --router least-outstanding

# (f) a 1,000-point sweep over the Azure chat trace on every core of this machine
rm -rf "$OUT/sweep_1000"
t0=$(date +%s.%N)
"$BIN" sweep tests/bench/sweep_1000.spec --out "$OUT/sweep_1000" --quiet
t1=$(date +%s.%N)
printf '%-28s wall %7.1f s   (%d points, %d cores)\n' sweep_1000_azure_conv "$(echo "$t1 - $t0" | bc -l)" \
    "$(($(wc -l < "$OUT/sweep_1000/results.csv") - 1))" "$(nproc)"
