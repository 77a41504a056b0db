#!/usr/bin/env bash
# experiments/max_num_seqs.sh: max_num_seqs against the prompt-length distribution.
#
# Question: as the cap on running requests (max_num_seqs) grows, where does throughput stop
# growing, and where does latency take off, and how does that depend on the lengths of the
# traffic? Two length distributions drawn from the bundled samples with `tandem trace gen
# --length-dist file`:
#   sharegpt  traces/samples/sharegpt_lengths_5k.csv  conversations: mean prompt 2,335, output 448
#   arxiv     traces/samples/arxiv_lengths_5k.csv     summarisation: mean prompt 2,565, output 305
# each as 3,000 requests (a) all at t = 0 (rate inf: the saturated throughput) and (b) Poisson
# arrivals at a fixed 8 requests/s (about 90% of ShareGPT's and 76% of arXiv's best saturated
# throughput here), for max_num_seqs from 4 to 1024.
#
# Model: Llama-3-8B on the H200 (8,192-token context: both samples replay whole, up to 8,014 +
# 1,023 tokens), vLLM V1 defaults otherwise (chunked prefill, 8,192 tokens per step).
source "$(dirname "$0")/lib.sh"
exp_init max_num_seqs

N=3000
RATE=8
SEQS="4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1024"

run() {
    local d
    for d in sharegpt arxiv; do
        gen_trace "$RAW/${d}_inf.csv" --num-requests $N --rate inf --length-dist file \
            --lengths-file traces/samples/${d}_lengths_5k.csv --seed 1
        gen_trace "$RAW/${d}_rate$RATE.csv" --num-requests $N --rate $RATE --length-dist file \
            --lengths-file traces/samples/${d}_lengths_5k.csv --seed 1
    done
    sweep sweep --quiet <<EOF
trace = $RAW/sharegpt_inf.csv, $RAW/arxiv_inf.csv, $RAW/sharegpt_rate$RATE.csv, $RAW/arxiv_rate$RATE.csv
model = llama-3-8b
max-num-seqs = $SEQS
EOF
    reduce
}

reduce() {
    # the trace's distribution and arrival process as columns of their own
    "$BIN" reduce select 'lengths={trace~sharegpt?sharegpt:arxiv}' \
        "arrivals={trace~_inf?all at t=0:Poisson $RATE req/s}" \
        "$RAW/sweep/results.csv" > "$RES/results.csv"
    # knees: per distribution and arrival process, the smallest max_num_seqs within 5% of the
    # best throughput, and (Poisson) the one with the lowest mean E2E latency and the smallest
    # one whose p99 TTFT is within 2x of the lowest p99 TTFT
    "$BIN" reduce best "$RES/results.csv" max-num-seqs --by lengths,arrivals \
        'best_output_throughput=max(output_throughput)' \
        'seqs_at_95pct_throughput=first(output_throughput>=0.95*max)' \
        'seqs_lowest_mean_e2el=at_min(mean_e2el_ms)' 'lowest_mean_e2el_ms=min(mean_e2el_ms)' \
        'seqs_p99_ttft_within_2x=first(p99_ttft_ms<=2*min)' 'lowest_p99_ttft_ms=min(p99_ttft_ms)' \
        > "$RES/knees.csv"
}

plot() {
    "$BIN" reduce select --where "arrivals=all at t=0" "$RES/results.csv" > "$RAW_TMP/saturated.csv"
    "$BIN" reduce select --where "arrivals=Poisson $RATE req/s" "$RES/results.csv" > "$RAW_TMP/poisson.csv"
    gp vs_x -e logx=2 -e yrange0=1 -e ncols=2 "$RAW_TMP/saturated.csv" "$FIG/max_num_seqs_saturated" \
        "3,000 requests at t = 0: throughput saturates (Llama-3-8B, H200)" max-num-seqs \
        "output_throughput median_tpot_ms peak_kv_usage num_preemptions" lengths
    gp vs_x -e logx=2 -e 'logy="p99_ttft_ms mean_e2el_ms"' -e ncols=2 "$RAW_TMP/poisson.csv" \
        "$FIG/max_num_seqs_latency" "Poisson arrivals at $RATE requests/s: latency (Llama-3-8B, H200)" max-num-seqs \
        "request_throughput p99_ttft_ms median_tpot_ms mean_e2el_ms" lengths
}

RAW_TMP=$(mktemp -d)
trap 'rm -rf "$RAW_TMP"' EXIT
exp_main "$@"
