#!/usr/bin/env bash
# experiments/vllm_paper.sh: the comparison of the vLLM paper (Kwon et al., "Efficient Memory
# Management for Large Language Model Serving with PagedAttention", SOSP 2023), on tandem.
#
# Question: what request rate does each KV-memory scheme sustain under a latency target?
#   vllm          paged KV, blocks allocated as tokens arrive (vLLM V1's scheduler)
#   orca (max)    Orca-style iteration-level batching, every request reserving max_model_len
#   orca (exact)  the same reserving prompt + its true output length (the paper's Orca (Oracle))
#   static        request-level batching (FasterTransformer)
# Llama-2-13B on an A100-80GB (tandem's cost model; the paper ran OPT-13B on an A100), Poisson
# arrivals, 3,000 requests per point, request rate swept by --time-scale on one trace per setting
# (so every rate replays the same requests and the same arrival pattern, stretched).
#
# Latency target. The paper's metric is the normalized latency: the mean over requests of
# end-to-end latency / output tokens (s/token). A system sustains a rate when its normalized
# latency stays at or below 0.2 s/token: the whole answer, queueing included, arrives at least
# at about 5 tokens/s, a reading speed. Beyond its capacity a system's queue grows for as long as
# requests keep coming, so its normalized latency leaves any fixed target within a small step of
# rate: the knee, interpolated between the two rates that straddle the target, barely depends on
# the target chosen (knees.csv also gives it for 0.1 and 0.5 s/token).
#
# Settings (a 2 x 2 around the main one, to see what the gap between the schemes depends on):
#   lengths  sharegpt  traces/samples/sharegpt_lengths_5k.csv, rows whose prompt + output fits
#                      Llama-2's 4,096 tokens (3,698 of 5,000; mean prompt 1,280, output 431)
#            short     lognormal, means 160 prompt / 340 output tokens (sigma 1, at most 2,000):
#                      short prompts, long answers, as in chat benchmarks of the paper's time
#   memory   80GB      --gpu-memory-utilization 0.9: 3,745 KV blocks (59,920 tokens)
#            40GB      --gpu-memory-utilization 0.45: 796 blocks (12,736 tokens), about what an
#                      A100-40GB leaves for KV next to 26 GB of weights
# The main setting is sharegpt / 80GB. Capacity (saturated throughput) comes from 2,000 requests
# all at t = 0 (the capacity sweep crosses orca-reserve with every policy; vllm and static ignore
# it, and their duplicate rows are dropped).
source "$(dirname "$0")/lib.sh"
exp_init vllm_paper

N=3000        # requests per point: enough that an overloaded system's queue shows
N_CAP=2000    # requests of the capacity runs
SLO=0.2
MODEL="model = llama-2-13b
gpu = a100-80gb"
# setting:lengths:memory utilisation:rates (first step last)
SETTINGS="sharegpt_80GB:sharegpt:0.9:0.2 0.1 1.6
sharegpt_40GB:sharegpt:0.45:0.05 0.05 0.8
short_80GB:short:0.9:0.5 0.5 7
short_40GB:short:0.45:0.2 0.2 3.6"

# lengths_args NAME: the trace gen options of a length distribution
lengths_args() {
    case $1 in
        sharegpt) echo "--length-dist file --lengths-file $RAW/sharegpt_4096.csv" ;;
        short) echo "--length-dist lognormal --input-len 160 --output-len 340 --lognormal-sigma 1 --max-len 2000" ;;
    esac
}

run() {
    # ShareGPT rows that fit Llama-2's context
    [ -f "$RAW/sharegpt_4096.csv" ] ||
        "$BIN" reduce select --where 'num_total_tokens<=4096' traces/samples/sharegpt_lengths_5k.csv \
            --out "$RAW/sharegpt_4096.csv"
    local setting lengths util rates scales
    while IFS=: read -r setting lengths util rates; do
        # shellcheck disable=SC2046
        gen_trace "$RAW/${lengths}_poisson.csv" --num-requests $N --rate 1 $(lengths_args "$lengths") --seed 1
        # shellcheck disable=SC2046
        gen_trace "$RAW/${lengths}_inf.csv" --num-requests $N_CAP --rate inf $(lengths_args "$lengths") --seed 1
        # the time scales of the rates, 1/rate: "5, 3.33333, 2.5, ..."
        # shellcheck disable=SC2086 # rates is "first step last"
        scales=$({ echo rate; seq $rates; } | "$BIN" reduce select 'scale={1/rate}' --keep scale /dev/stdin |
                 tail -n +2 | paste -sd, - | sed 's/,/, /g')
        sweep "${setting}_paged" --keep-requests --quiet <<EOF
trace = $RAW/${lengths}_poisson.csv
$MODEL
gpu-memory-utilization = $util
scheduling-policy = vllm, static
time-scale = $scales
EOF
        sweep "${setting}_orca" --keep-requests --quiet <<EOF
trace = $RAW/${lengths}_poisson.csv
$MODEL
gpu-memory-utilization = $util
scheduling-policy = orca
orca-reserve = max, exact
time-scale = $scales
EOF
        sweep "${setting}_capacity" --quiet <<EOF
trace = $RAW/${lengths}_inf.csv
$MODEL
gpu-memory-utilization = $util
scheduling-policy = vllm, static, orca
orca-reserve = max, exact
EOF
    done <<<"$SETTINGS"
    reduce
}

# system LABEL of a results row: orca's reservation is part of the system (the paged sweep has
# no orca-reserve column, and tandem reduce refuses an expression naming a missing column)
SYSTEM='system={scheduling-policy=orca?orca ({orca-reserve}):{scheduling-policy}}'
SYSTEM_PAGED='system={scheduling-policy}'

reduce() {
    local setting lengths util rates base s first=1 first_cap=1
    : > "$RES/results.csv"
    : > "$RES/capacity.csv"
    while IFS=: read -r setting lengths util rates; do
        base=$(trace_rate "$RAW/${lengths}_poisson.csv")
        for s in paged orca; do
            local system=$SYSTEM; [ $s = paged ] && system=$SYSTEM_PAGED
            # results.csv rows + the rate, the system and the setting, then the normalized
            # latency of every point from its requests.csv
            "$BIN" reduce select "rate={$base/time-scale}" "$system" "setting=$setting" \
                --keep setting,system,rate,time-scale,request_throughput,output_throughput,mean_ttft_ms,p99_ttft_ms,mean_tpot_ms,p99_tpot_ms,mean_e2el_ms,p99_e2el_ms,num_preemptions,mean_batch_size,mean_kv_usage,peak_kv_usage,id \
                "$RAW/${setting}_$s/results.csv" > "$RAW/rows.csv"
            points_group_stats "$RAW/${setting}_$s/points" - \
                'norm_latency_s={e2el_ms/1000/output_tokens}' < "$RAW/rows.csv" > "$RAW/rows_stats.csv"
            "$BIN" reduce select --keep setting,system,rate,time-scale,request_throughput,output_throughput,mean_ttft_ms,p99_ttft_ms,mean_tpot_ms,p99_tpot_ms,mean_e2el_ms,p99_e2el_ms,num_preemptions,mean_batch_size,mean_kv_usage,peak_kv_usage,mean_norm_latency_s,p99_norm_latency_s "$RAW/rows_stats.csv" \
                > "$RAW/rows_norm.csv"
            if [ $first = 1 ]; then cat "$RAW/rows_norm.csv"; else tail -n +2 "$RAW/rows_norm.csv"; fi >> "$RES/results.csv"
            first=0
        done
        "$BIN" reduce select "$SYSTEM" "setting=$setting" \
            --keep setting,system,request_throughput,output_throughput,mean_batch_size,num_preemptions,mean_kv_usage \
            --distinct "$RAW/${setting}_capacity/results.csv" > "$RAW/capacity_rows.csv"
        if [ $first_cap = 1 ]; then cat "$RAW/capacity_rows.csv"; else tail -n +2 "$RAW/capacity_rows.csv"; fi \
            >> "$RES/capacity.csv"
        first_cap=0
    done <<<"$SETTINGS"

    # knees: per setting and system, the rate where the mean normalized latency crosses each
    # target (linear between the last rate at or below it and the first above; ">" when it
    # never crosses within the swept rates, "<" when the lowest rate already misses it)
    "$BIN" reduce cross "$RES/results.csv" rate mean_norm_latency_s --at "0.1,$SLO,0.5" --by setting,system \
        --suffix _s_per_token > "$RES/knees.csv"
}

plot() {
    "$BIN" reduce select --where setting=sharegpt_80GB "$RES/results.csv" > "$RAW_TMP/main.csv"
    gp vs_x -e 'logy="mean_norm_latency_s p99_ttft_ms"' -e ncols=2 -e "hline=\"mean_norm_latency_s=$SLO=SLO $SLO s/token\"" \
        "$RAW_TMP/main.csv" "$FIG/vllm_paper" \
        "Paged KV vs reservation vs static batching: Llama-2-13B on A100-80GB, ShareGPT lengths" rate \
        "mean_norm_latency_s request_throughput p99_ttft_ms p99_tpot_ms" system
    gp vs_x -e 'logy="mean_norm_latency_s"' -e 'facet="setting"' -e ncols=2 \
        -e "hline=\"mean_norm_latency_s=$SLO=SLO\"" \
        "$RES/results.csv" "$FIG/vllm_paper_settings" \
        "Normalized latency: prompt lengths x KV memory (80GB: 59,920 KV tokens; 40GB: 12,736)" rate \
        "mean_norm_latency_s" system
}

RAW_TMP=$(mktemp -d)
trap 'rm -rf "$RAW_TMP"' EXIT
exp_main "$@"
