#!/usr/bin/env bash
# plots/itl_data.sh: every inter-token latency (ITL) of a run, from its steps.csv, as CSV rows
# `itl_ms,tokens` (tokens = how many decode tokens waited that long), for plots/cdf_data.sh -W
# tokens itl_ms. summary.json has ITL percentiles up to p99 only; the stalls a long prefill
# causes sit further out (p99.9, the maximum), which this recovers.
#
#   plots/itl_data.sh [-m v1|v0] STEPS.csv > itl.csv
#
# A decode token's ITL is the time from its request's previous token to it, and the scheduler
# decides which steps a request is in:
#   -m v1 (default)  every running request is in every step (vllm, sarathi, priority, ... when
#                    the token budget covers a token per running request and nothing is
#                    preempted): the decode tokens of a step waited exactly that step's duration
#   -m v0            vllm-v0: a step is all prefills or all decodes, and a decode step decodes
#                    every running request. A decode step's tokens waited since the end of the
#                    previous decode step, except those of requests whose prefill step came in
#                    between (batch_size of each such step), which waited since that step ended
# (Both are exact when no request is preempted and no output is a single token; with
# preemptions the gaps around a preemption are missed.) With -m v1 the result matches
# summary.json's p50/p99 ITL to the microsecond.
set -euo pipefail

usage() { sed -n '4,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
mode=v1
while getopts "m:h" opt; do
    case $opt in
        m) mode=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
[ "$mode" = v1 ] || [ "$mode" = v0 ] || { echo "itl_data: -m wants v1 or v0, got '$mode'" >&2; exit 2; }
[ -r "$1" ] || { echo "itl_data: cannot read '$1'" >&2; exit 2; }

awk -F, -v mode="$mode" -v file="$1" '
NR == 1 {
    for (i = 1; i <= NF; i++) ix[$i] = i
    split("start_s duration_ms batch_size prefill_tokens decode_tokens", need, " ")
    for (i in need) if (!(need[i] in ix)) { printf "itl_data: %s has no column \"%s\" (not a steps.csv?)\n", file, need[i] > "/dev/stderr"; exit 2 }
    print "itl_ms,tokens"
    next
}
{
    d = $ix["duration_ms"]; end = $ix["start_s"] * 1000 + d; dec = $ix["decode_tokens"]
    if (mode == "v1") { if (dec > 0) printf "%.6g,%d\n", d, dec; next }
    if (dec == 0) {                       # a prefill step: its requests emit their first token
        np++; pend[np] = end; pn[np] = $ix["batch_size"]; next
    }
    fresh = 0
    for (k = 1; k <= np; k++) { printf "%.6g,%d\n", end - pend[k], pn[k]; fresh += pn[k] }
    if (have_last && dec - fresh > 0) printf "%.6g,%d\n", end - last_end, dec - fresh
    np = 0; last_end = end; have_last = 1
}' "$1"
