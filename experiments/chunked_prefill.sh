#!/usr/bin/env bash
# experiments/chunked_prefill.sh: chunked prefill and the decode-latency tail under long prompts.
#
# Question: when long prompts arrive among short chat requests, how much do they stall the
# decodes that share their steps, and how much of that does chunked prefill (and a smaller
# token budget per step) remove, at what cost to TTFT?
#
# Two traces, each 300 s of Poisson arrivals merged from two `tandem trace gen` runs:
#   short  lognormal prompts (mean 512, sigma 0.8) and outputs (mean 256)
#   long   prompts uniform in 4,200..7,800 tokens, 128-token outputs, 5% of the requests
# at a moderate load (20 + 1 requests/s, about two thirds of what the server sustains) and a
# high one (30 + 1.5 requests/s, close to it).
# Configurations (all Llama-3-8B on the H200, max_model_len 8,192, max_num_seqs 256):
#   vllm, chunked prefill, max_num_batched_tokens (the token budget of a step) 256 .. 8,192
#   vllm, no chunking, budget 8,192 (a whole long prompt in one step)
#   vllm-v0 (a step is all prefills or all decodes), budget 8,192
#   sarathi (decodes first, then prefill chunks of --chunk-size tokens) 256 .. 2,048
# Inter-token latencies (ITL) come from steps.csv: a decode token waits for the step that
# produces it, so the ITL distribution is the step durations counted once per decode token;
# this gives the p99.9 and the maximum, which summary.json does not have.
source "$(dirname "$0")/lib.sh"
exp_init chunked_prefill

# the loads: arrival rates of the short and the long requests (requests/s)
LOADS="name,short_rate,long_rate
moderate,20,1
high,30,1.5"
SPAN_S=300
LONG_MIN=4096   # prompts at least this long are "long" in the per-group statistics
COMMON="model = llama-3-8b
max-model-len = 8192
max-num-seqs = 256"

# loads: LOADS, with the requests each trace needs to span SPAN_S and the load's label in the
# figures, "moderate (21 req/s)": CSV name,short_rate,long_rate,short_requests,long_requests,label
loads() {
    "$BIN" reduce select "short_requests={short_rate*$SPAN_S}" "long_requests={long_rate*$SPAN_S}" \
        "label={name} ({short_rate+long_rate} req/s)" /dev/stdin <<<"$LOADS"
}

run() {
    local name rs rl ns nl label traces=""
    while IFS=, read -r name rs rl ns nl label; do
        gen_trace "$RAW/short_$name.csv" --num-requests "$ns" --rate "$rs" \
            --length-dist lognormal --input-len 512 --output-len 256 --lognormal-sigma 0.8 --max-len 4000 --seed 1
        gen_trace "$RAW/long_$name.csv" --num-requests "$nl" --rate "$rl" \
            --length-dist uniform --input-len 6000 --range-ratio 0.3 --output-len 128 --seed 2
        if [ ! -f "$RAW/mix_$name.csv" ]; then
            { echo arrival_s,prompt_tokens,output_tokens
              tail -q -n +2 "$RAW/short_$name.csv" "$RAW/long_$name.csv" | LC_ALL=C sort -t, -k1,1g; } > "$RAW/mix.tmp"
            mv "$RAW/mix.tmp" "$RAW/mix_$name.csv"
        fi
        traces="$traces${traces:+, }$RAW/mix_$name.csv"
    done < <(loads | tail -n +2)
    local trace=$traces
    sweep chunked --keep-requests --keep-steps --quiet <<EOF
trace = $trace
$COMMON
scheduling-policy = vllm
enable-chunked-prefill = true
max-num-batched-tokens = 256, 512, 1024, 2048, 4096, 8192
EOF
    sweep unchunked --keep-requests --keep-steps --quiet <<EOF
trace = $trace
$COMMON
scheduling-policy = vllm, vllm-v0
enable-chunked-prefill = false
max-num-batched-tokens = 8192
EOF
    sweep sarathi --keep-requests --keep-steps --quiet <<EOF
trace = $trace
$COMMON
scheduling-policy = sarathi
chunk-size = 256, 512, 1024, 2048
EOF
    reduce
}

# load_label NAME: the load as the figures name it, with its rate: "moderate (21 req/s)"
load_label() { loads | "$BIN" reduce select --where "name=$1" --keep label /dev/stdin | tail -n +2; }
# load_of TRACE: the load label of a mix_NAME.csv trace
load_of() { local b=${1##*/mix_}; load_label "${b%.csv}"; }

# one row per configuration: its label, the budget, results.csv metrics, the ITL tail (from
# steps.csv, tandem reduce itl), TTFT of short and long prompts (from requests.csv)
reduce() {
    local s id label budget
    {
        "$BIN" reduce select --keep trace,max-num-batched-tokens,id "$RAW/chunked/results.csv" | tail -n +2 |
            while IFS=, read -r t budget id; do echo "$(load_of "$t"),vllm chunked,$budget,$id"; done
        "$BIN" reduce select --keep trace,scheduling-policy,id "$RAW/unchunked/results.csv" | tail -n +2 |
            while IFS=, read -r t s id; do echo "$(load_of "$t"),$s unchunked,8192,$id"; done
        "$BIN" reduce select --keep trace,chunk-size,id "$RAW/sarathi/results.csv" | tail -n +2 |
            while IFS=, read -r t budget id; do echo "$(load_of "$t"),sarathi (budget = chunk size),$budget,$id"; done
    } > "$RAW/configs.csv"

    # the metrics of every point of the three sweeps, keyed by point id
    local cols=id,request_throughput,median_ttft_ms,p99_ttft_ms,median_tpot_ms,p99_tpot_ms,median_itl_ms,p99_itl_ms,num_preemptions,mean_batch_size
    local all=$RAW/all_results.csv
    "$BIN" reduce select --keep $cols "$RAW/chunked/results.csv" > "$all"
    for s in unchunked sarathi; do "$BIN" reduce select --keep $cols "$RAW/$s/results.csv" | tail -n +2 >> "$all"; done

    echo "load,system,budget,${cols#id,},p999_itl_ms,max_itl_ms,short_p50_ttft_ms,short_p99_ttft_ms,long_p50_ttft_ms,long_p99_ttft_ms" \
        > "$RES/configs.csv"
    : > "$RES/cdf_itl.dat"
    local first=1 dir row tail groups mode load
    while IFS=, read -r load label budget id; do
        dir=$(ls -d "$RAW"/*/points/"$id")
        row=$("$BIN" reduce select --where "id=$id" --keep "${cols#id,}" "$all" | tail -n +2)
        # every ITL of the run, its CDF, and its tail: p99.9 and the largest, where the CDF
        # reaches 0.999 and 1
        mode=v1; [ "$label" = "vllm-v0 unchunked" ] && mode=v0
        "$BIN" reduce itl --mode $mode "$dir/steps.csv" > "$RAW/itl_$id.csv"
        [ $first = 1 ] || printf '\n\n' >> "$RES/cdf_itl.dat"
        first=0
        "$BIN" reduce cdf --weight tokens itl_ms "$load: $label $budget" "$RAW/itl_$id.csv" >> "$RES/cdf_itl.dat"
        tail=$("$BIN" reduce quantile --weight tokens --at 99.9,100 itl_ms "$label" "$RAW/itl_$id.csv" |
               tail -n +2 | cut -d, -f2-)
        # TTFT of short and long prompts: the rows of the two groups as one row
        groups=$("$BIN" reduce group "$dir/requests.csv" "len={prompt_tokens>=$LONG_MIN?long:short}" ttft_ms |
                 "$BIN" reduce pivot /dev/stdin - len p50_ttft_ms p99_ttft_ms |
                 "$BIN" reduce select --keep short_p50_ttft_ms,short_p99_ttft_ms,long_p50_ttft_ms,long_p99_ttft_ms /dev/stdin |
                 tail -n +2)
        echo "$load,$label,$budget,$row,$tail,$groups" >> "$RES/configs.csv"
    done < "$RAW/configs.csv"
}

plot() {
    gp vs_x -e logx=2 -e 'logy="p999_itl_ms p99_ttft_ms"' -e 'facet="load"' \
        -e panel_w=340 -e panel_h=300 \
        "$RES/configs.csv" "$FIG/chunked_prefill" \
        "5% long prompts (4.2k-7.8k tokens) among chat requests: decode stalls vs the token budget per step (Llama-3-8B, H200)" \
        budget "p99_itl_ms p999_itl_ms p99_tpot_ms p99_ttft_ms" system \
        "token budget per step (tokens)"
    # the ITL tails of a few configurations at the moderate load (blocks of cdf_itl.dat, by label)
    local moderate
    moderate=$(load_label moderate)
    "$BIN" reduce blocks "$RES/cdf_itl.dat" --strip "$moderate: " "vllm chunked 256" "vllm chunked 512" \
        "vllm chunked 2048" "vllm unchunked 8192" "vllm-v0 unchunked 8192" > "$RAW_TMP/cdf_itl_some.dat"
    gp cdf -e ccdf=1 -e ymin=1e-4 -e 'what="decode tokens"' -e 'key="below"' "$FIG/chunked_prefill_itl" \
        "ITL tail at the moderate load ${moderate#moderate }, by token budget per step" \
        "$RAW_TMP/cdf_itl_some.dat" "inter-token latency (ms)"
}

RAW_TMP=$(mktemp -d)
trap 'rm -rf "$RAW_TMP"' EXIT
exp_main "$@"
