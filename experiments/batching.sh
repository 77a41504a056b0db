#!/usr/bin/env bash
# experiments/batching.sh: continuous vs static batching.
#
# Question: does iteration-level (continuous) batching give lower latency and higher
# utilisation than request-level (static) batching on bursty, mixed-length production traffic,
# and when is static batching as good?
#
#  1. replay_code, replay_chat: the Azure 2023 code trace (bursty, long prompts, short outputs)
#     and chat trace, each replayed at several speeds (--time-scale: 1 = as recorded, 0.1 = ten
#     times faster), under static, orca, vllm and priority. Requests are labelled 20% class 0
#     (important) / 80% class 1 (--priority-classes 0.2,0.8, the same labels for every policy)
#     so that priority has classes to act on; per-class latencies of vllm and priority are in
#     results/batching/per_class_*.csv.
#  2. timeline: one loaded run of the code trace, static vs vllm, step by step (KV usage,
#     batch size, queue over time).
#  3. equal: the case for static batching: every request has the same 512-token prompt and
#     256-token output and all arrive at t = 0 (no latency target; only throughput matters),
#     against the same means drawn from a lognormal (sigma 1), for several max_num_seqs.
#
# Model: Llama-3-8B on the H200 (its 8,192-token context replays every code request; Llama-2's
# 4,096 would reject 14% of them, the longest), vLLM V1 defaults otherwise: the same
# max_num_seqs (1,024) caps every policy, including static's batch. Static has no token budget:
# its padded prefill of a large batch is one step (19 s for 437 code prompts in the timeline),
# which a real FasterTransformer deployment could not hold in activation memory.
source "$(dirname "$0")/lib.sh"
exp_init batching

CODE=traces/samples/azure_code_2023.csv
CHAT=traces/samples/azure_conv_2023.csv
COMMON="model = llama-3-8b
scheduling-policy = static, orca, vllm, priority
priority-classes = \"0.2,0.8\""
CODE_SCALES="1, 0.5, 0.3, 0.2, 0.15, 0.1"
CHAT_SCALES="1, 0.6, 0.4, 0.3, 0.25, 0.2"
CDF_SCALE=1         # the CDFs: each trace as recorded
TIMELINE_SCALE=0.2  # the timeline: the code trace five times faster

run() {
    sweep replay_code --keep-requests --quiet <<EOF
trace = $CODE
$COMMON
time-scale = $CODE_SCALES
EOF
    sweep replay_chat --keep-requests --quiet <<EOF
trace = $CHAT
$COMMON
time-scale = $CHAT_SCALES
EOF
    sweep timeline --keep-steps --quiet <<EOF
trace = $CODE
model = llama-3-8b
scheduling-policy = static, vllm
time-scale = $TIMELINE_SCALE
EOF
    gen_trace "$RAW/equal_fixed.csv" --num-requests 2000 --rate inf --input-len 512 --output-len 256 \
        --length-dist fixed --seed 1
    gen_trace "$RAW/equal_lognormal.csv" --num-requests 2000 --rate inf --input-len 512 --output-len 256 \
        --length-dist lognormal --lognormal-sigma 1 --max-len 4096 --seed 1
    sweep equal --quiet <<EOF
trace = $RAW/equal_fixed.csv, $RAW/equal_lognormal.csv
model = llama-3-8b
scheduling-policy = static, orca, vllm
max-num-seqs = 8, 16, 32, 64, 128, 256, 512
max-num-batched-tokens = 8192
EOF
    reduce
}

# results.csv rows with the offered request rate; CDFs; per-class statistics; the binned timeline
reduce() {
    local name trace rate
    for name in code chat; do
        trace=$CODE; [ $name = chat ] && trace=$CHAT
        rate=$(trace_rate "$trace")
        "$BIN" reduce select "rate={$rate/time-scale}" "$RAW/replay_$name/results.csv" > "$RES/replay_$name.csv"

        # latency CDFs of each policy at the recorded speed. Not priority: at this speed the
        # server never runs out of KV blocks or sequence slots, so priority never preempts and
        # schedules exactly as vllm does (its CDFs lie on vllm's; what it changes under load is
        # in per_class_*.csv and the priority experiment)
        local series=() p dir
        for p in static orca vllm; do
            dir=$(point_dir replay_$name scheduling-policy=$p time-scale=$CDF_SCALE)
            series+=("$p" "$dir/requests.csv")
        done
        "$BIN" reduce cdf ttft_ms "${series[@]}" > "$RES/cdf_ttft_$name.dat"
        "$BIN" reduce cdf --scale 0.001 e2el_ms "${series[@]}" > "$RES/cdf_e2el_$name.dat"

        # per-class latency of vllm and priority at every speed
        "$BIN" reduce select --where 'scheduling-policy=vllm|priority' --keep scheduling-policy,rate,id \
            "$RES/replay_$name.csv" |
            points_group_stats "$RAW/replay_$name/points" priority ttft_ms tpot_ms e2el_ms > "$RES/per_class_$name.csv"
    done

    # the timeline: steps cut into 10-second bins
    for p in static vllm; do
        "$BIN" reduce bin --bin 10 "$(point_dir timeline scheduling-policy=$p)/steps.csv" > "$RES/timeline_$p.csv"
    done

    "$BIN" reduce select 'lengths={trace~fixed?fixed 512/256:lognormal with means 512/256}' \
        "$RAW/equal/results.csv" > "$RES/equal.csv"
}

plot() {
    local name label
    for name in code chat; do
        label="Azure $name trace"; [ $name = chat ] && label="Azure chat (conv) trace"
        gp vs_x -e 'logy="p99_ttft_ms p99_e2el_ms"' -e ncols=2 \
            "$RES/replay_$name.csv" "$FIG/batching_load_$name" \
            "$label replayed faster and faster (Llama-3-8B, H200)" rate \
            "request_throughput p99_ttft_ms p99_tpot_ms p99_e2el_ms" scheduling-policy
        gp vs_x -e yrange0=1 -e ncols=2 \
            "$RES/replay_$name.csv" "$FIG/batching_util_$name" \
            "$label: KV blocks allocated vs KV tokens stored, GPU busy time, batch size" rate \
            "mean_kv_usage mean_kv_token_usage busy_fraction mean_batch_size" scheduling-policy
        gp cdf "$FIG/batching_cdf_$name" "$label as recorded: latency per policy (Llama-3-8B, H200; priority = vllm here)" \
            "$RES/cdf_ttft_$name.dat" "TTFT (ms)" "$RES/cdf_e2el_$name.dat" "end-to-end latency (s)"
    done
    gp timeseries "$FIG/batching_timeline" \
        "Azure code trace at 5x speed (Llama-3-8B, H200): 10-second means" \
        static "$RES/timeline_static.csv" vllm "$RES/timeline_vllm.csv"
    gp vs_x -e logx=2 -e 'facet="lengths"' "$RES/equal.csv" "$FIG/batching_equal" \
        "2,000 requests at t = 0: equal lengths vs mixed lengths (Llama-3-8B, H200)" max-num-seqs \
        "output_throughput mean_e2el_ms" scheduling-policy
}

exp_main "$@"
