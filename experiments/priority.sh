#!/usr/bin/env bash
# experiments/priority.sh: what priority preemption buys the important class, and what it costs
# the others.
#
# The Azure chat trace, each request labelled class 0 (important, 20%) or class 1 (80%) by
# --priority-classes 0.2,0.8 (labels drawn from the run's seed, so every policy sees the same
# labels), replayed at speeds around the server's capacity (~15 requests/s here). Compared:
#   vllm      vLLM V1's FCFS scheduler: it ignores the labels
#   priority  priority order, and an important arrival preempts less important running requests
# each with recompute and with swap preemption (--preemption-mode swap, vLLM's default 4 GiB of
# host swap). Reported per class: TTFT and E2E percentiles; overall: preemptions, throughput.
#
# Model: Llama-2-7B on the H200 (no GQA: KV blocks are scarce, which is when preemption
# happens); vLLM V1 defaults otherwise. Llama-2's 4,096-token context rejects the 416 chat
# requests (2%) with longer prompts, the same ones under every policy.
source "$(dirname "$0")/lib.sh"
exp_init priority

CHAT=traces/samples/azure_conv_2023.csv
SCALES="0.5, 0.45, 0.42, 0.4, 0.38, 0.36, 0.34, 0.32, 0.3"
CDF_SCALE=0.34   # the CDFs: just over capacity

run() {
    sweep sweep --keep-requests --quiet <<EOF
trace = $CHAT
model = llama-2-7b
priority-classes = "0.2,0.8"
scheduling-policy = vllm, priority
preemption-mode = recompute, swap
time-scale = $SCALES
EOF
    reduce
}

reduce() {
    local rate
    rate=$(trace_rate "$CHAT")
    "$BIN" reduce select "rate={$rate/time-scale}" 'system={scheduling-policy} + {preemption-mode}' \
        "$RAW/sweep/results.csv" > "$RES/results.csv"
    # per class: latency, and how often its requests were preempted
    "$BIN" reduce select --keep system,rate,time-scale,id "$RES/results.csv" |
        points_group_stats "$RAW/sweep/points" priority ttft_ms e2el_ms tpot_ms preemptions \
        > "$RES/per_class.csv"
    # TTFT CDFs per class just over capacity
    local k series p m dir
    for k in 0 1; do
        series=()
        for p in vllm priority; do
            for m in recompute swap; do
                dir=$(point_dir sweep scheduling-policy=$p preemption-mode=$m time-scale=$CDF_SCALE)
                series+=("$p + $m" "$dir/requests.csv")
            done
        done
        "$BIN" reduce cdf --where "priority=$k" --scale 0.001 ttft_ms "${series[@]}" > "$RES/cdf_ttft_class$k.dat"
    done
}

plot() {
    local cdf_rate
    # the request rate of the CDFs' time scale (every system's row has the same), to 0.1 req/s
    cdf_rate=$("$BIN" reduce select --where "time-scale=$CDF_SCALE" --keep rate "$RES/results.csv" | sed -n 2p)
    cdf_rate=$(printf '%.1f' "$cdf_rate")
    gp vs_x -e 'logy="p99_ttft_ms p99_e2el_ms"' -e 'facet="priority"' \
        "$RES/per_class.csv" "$FIG/priority_per_class" \
        "Azure chat trace, 20% class 0 (important): latency per class (Llama-2-7B, H200)" rate \
        "p99_ttft_ms p99_e2el_ms" system
    gp vs_x -e yrange0=1 "$RES/results.csv" "$FIG/priority_cost" \
        "What preemption costs: throughput, preemptions, decode speed (all requests)" rate \
        "request_throughput num_preemptions p99_tpot_ms" system
    gp cdf -e 'key="below"' "$FIG/priority_cdf" "TTFT per class at $cdf_rate requests/s (time scale $CDF_SCALE, just over capacity)" \
        "$RES/cdf_ttft_class0.dat" "class 0 (important) TTFT (s)" \
        "$RES/cdf_ttft_class1.dat" "class 1 TTFT (s)"
}

exp_main "$@"
