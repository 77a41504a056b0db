#!/usr/bin/env bash
# plots/steps_bin.sh: a steps.csv (one row per model step, hundreds of thousands of rows) cut
# into fixed time bins, for plots/timeseries.gp.
#
#   plots/steps_bin.sh [-b BIN_S] [-f FROM_S] [-t TO_S] STEPS.csv > out.csv
#
# A step belongs to the bin its start falls in. Per bin (default 10 s), writes CSV:
#   t_s            the bin's middle, seconds since the first arrival
#   busy           fraction of the bin with a step running
#   kv_usage       KV cache usage (fraction of the blocks), averaged over the steps' durations
#   kv_usage_max   its largest value in the bin
#   batch_size     requests in a step, duration-weighted mean
#   num_running    running requests, duration-weighted mean
#   num_waiting    waiting requests, duration-weighted mean;  num_waiting_max  the largest
#   tokens_per_step  prefill + decode tokens, duration-weighted mean
#   preemptions    preemptions in the bin
# Bins without a step are written with busy 0 and the other columns empty (a gap in the plot).
set -euo pipefail

usage() { sed -n '4,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bin=10 from=0 to=-1
while getopts "b:f:t:h" opt; do
    case $opt in
        b) bin=$OPTARG ;;
        f) from=$OPTARG ;;
        t) to=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
[ -r "$1" ] || { echo "steps_bin: cannot read '$1'" >&2; exit 2; }

awk -F, -v bin="$bin" -v from="$from" -v to="$to" -v file="$1" '
BEGIN { last = -1 }
NR == 1 {
    for (i = 1; i <= NF; i++) ix[$i] = i
    split("start_s duration_ms kv_usage batch_size num_running num_waiting prefill_tokens decode_tokens num_preemptions", need, " ")
    for (i in need) if (!(need[i] in ix)) { printf "steps_bin: %s has no column \"%s\" (not a steps.csv?)\n", file, need[i] > "/dev/stderr"; exit 2 }
    next
}
{
    t = $ix["start_s"]
    if (t < from || (to >= 0 && t >= to)) next
    b = int((t - from) / bin); d = $ix["duration_ms"] / 1000
    if (b > last) last = b
    busy[b] += d; n[b]++
    kv[b] += d * $ix["kv_usage"]; if ($ix["kv_usage"] > kvmax[b]) kvmax[b] = $ix["kv_usage"]
    bs[b] += d * $ix["batch_size"]; run[b] += d * $ix["num_running"]
    wait[b] += d * $ix["num_waiting"]; if ($ix["num_waiting"] > waitmax[b]) waitmax[b] = $ix["num_waiting"]
    tok[b] += d * ($ix["prefill_tokens"] + $ix["decode_tokens"]); pre[b] += $ix["num_preemptions"]
}
END {
    print "t_s,busy,kv_usage,kv_usage_max,batch_size,num_running,num_waiting,num_waiting_max,tokens_per_step,preemptions"
    for (b = 0; b <= last; b++) {
        mid = from + (b + 0.5) * bin
        if (!(b in n)) { printf "%g,0,,,,,,,,\n", mid; continue }
        w = busy[b] > 0 ? busy[b] : 1
        printf "%g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%d,%.4g,%d\n", mid, (busy[b] > bin ? 1 : busy[b] / bin),
               kv[b] / w, kvmax[b], bs[b] / w, run[b] / w, wait[b] / w, waitmax[b], tok[b] / w, pre[b]
    }
}' "$1"
