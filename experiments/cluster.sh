#!/usr/bin/env bash
# experiments/cluster.sh: how many replicas, and which router, for a fleet-sized trace.
#
# Question 1: the Mooncake conversation trace (long prompts that share prefixes across the turns
# of a conversation) on N replicas of Llama-3.1-8B, one H200 each, vLLM V1 defaults with prefix
# caching on: as N grows, how do TTFT, goodput (TTFT <= 2 s and TPOT <= 100 ms) and the prefix
# cache hit rate move under each router? Prefix affinity should buy hits that the load-blind
# routers scatter away, as Mooncake's and SGLang's routers claim.
# The repository ships the first 2,000 requests (traces/samples/mooncake_conversation_2k.jsonl,
# 590 s); MOONCAKE=FILE runs the whole trace instead (12,031 requests, conversation_trace.jsonl
# of github.com/kvcache-ai/Mooncake, FAST25-release/traces), into results of its own.
#
# Question 2: the Azure 2023 code trace is bursty (inter-arrival CV 13, up to 67 requests in
# one second). Replayed 10x faster on N Llama-3-8B replicas, does a load-aware router
# (least-outstanding, least-kv, power-of-two) absorb the bursts that round-robin piles onto
# whichever replica is next?
#
# Question 3: the fewest GPUs for a goodput target, as one spec: Llama-3.1-70B (which needs 2
# H200s at least) on the Mooncake sample, tensor-parallel size 2, 4 or 8 x 1 to 8 replicas,
# least-kv router, prefix caching: which split gives the most goodput per GPU?
source "$(dirname "$0")/lib.sh"
exp_init cluster

MOONCAKE=${MOONCAKE:-traces/samples/mooncake_conversation_2k.jsonl}
TAG=$([ "$MOONCAKE" = traces/samples/mooncake_conversation_2k.jsonl ] && echo mooncake || echo mooncake_full)
ROUTERS="round-robin, random, least-outstanding, least-kv, power-of-two, prefix-affinity"

run() {
    sweep "$TAG" --quiet <<EOF
trace = $MOONCAKE
model = llama-3.1-8b
enable-prefix-caching = true
goodput = "ttft:2000 tpot:100"
router = $ROUTERS
num-replicas = 1, 2, 3, 4, 6, 8, 12, 16
EOF
    keep_results "$TAG"
    sweep azure_code --quiet <<EOF
trace = traces/samples/azure_code_2023.csv
model = llama-3-8b
time-scale = 0.1
goodput = "ttft:2000 tpot:100"
router = round-robin, least-outstanding, least-kv, power-of-two
num-replicas = 2, 3, 4, 6, 8
EOF
    keep_results azure_code
    sweep fewest_gpus --quiet <<EOF
trace = traces/samples/mooncake_conversation_2k.jsonl
model = llama-3.1-70b
max-model-len = 65536
enable-prefix-caching = true
router = least-kv
goodput = "ttft:2000 tpot:100"
tensor-parallel-size = 2, 4, 8
num-replicas = 1, 2, 3, 4, 6, 8
EOF
    "$BIN" reduce select 'split=TP {tensor-parallel-size}' "$RAW/fewest_gpus/results.csv" \
        --out "$RES/fewest_gpus.csv"
}

plot() {
    local tag what
    for tag in mooncake mooncake_full; do
        [ -f "$RES/$tag.csv" ] || continue
        what=$([ $tag = mooncake ] && echo "first 2,000 requests" || echo "12,031 requests")
        gp vs_x -e logx=2 -e 'logy="mean_ttft_ms"' -e ncols=2 -e 'key="top right"' "$RES/$tag.csv" \
            "$FIG/cluster_$tag" "Mooncake conversation ($what) on N x Llama-3.1-8B (H200), prefix caching, by router" \
            num-replicas "mean_ttft_ms request_goodput prefix_cache_hit_rate load_imbalance" router
    done
    gp vs_x -e 'logy="p99_ttft_ms mean_ttft_ms"' -e ncols=3 -e 'key="top right"' "$RES/azure_code.csv" \
        "$FIG/cluster_azure_code" "Azure code trace 10x faster on N x Llama-3-8B (H200): bursts by router" \
        num-replicas "mean_ttft_ms p99_ttft_ms load_imbalance" router
    gp vs_x -e logx=2 -e 'logy="mean_ttft_ms"' -e ncols=3 -e 'key="bottom right"' "$RES/fewest_gpus.csv" \
        "$FIG/cluster_fewest_gpus" "Llama-3.1-70B on the Mooncake sample: replicas x tensor-parallel size (H200s)" \
        num_gpus "request_goodput mean_ttft_ms median_tpot_ms" split "GPUs (replicas x TP)"
}

exp_main "$@"
