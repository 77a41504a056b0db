#!/usr/bin/env bash
# plots/group_stats.sh: latency statistics of a requests.csv per group of requests (a priority
# class, long vs short prompts), which a sweep's results.csv (whole-run figures) does not give.
#
#   plots/group_stats.sh [-p PREFIX] FILE GROUP METRIC [METRIC...]
#
#   GROUP   a column name (e.g. priority), or NAME=AWK_EXPR (c["col"] is a column's value), e.g.
#           'long=(c["prompt_tokens"] >= 4096 ? "long" : "short")'; "-" for one group, "all"
#   METRIC  a column name (ttft_ms, tpot_ms, e2el_ms, queue_ms, preemptions, ...), or
#           NAME=AWK_EXPR, e.g. 'norm_latency_s=c["e2el_ms"]/1000/c["output_tokens"]'
#   -p      a CSV prefix (e.g. "vllm,swap,") put before every data row; its header names go
#           with -P (e.g. -P "policy,mode,")
#
# Over the finished requests of each group, writes CSV to stdout:
#   [PREFIX]GROUP,count,mean_M,p50_M,p90_M,p99_M,max_M for each METRIC M (tandem's names)
# Percentiles interpolate linearly between order statistics (numpy's default, as tandem's
# summary does); a row with an empty METRIC (TPOT of a one-token output) is left out of that
# METRIC's statistics only. Groups come out in sorted order.
set -euo pipefail
source "$(dirname "$0")/csvlib.sh"

usage() { sed -n '4,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
prefix="" prefix_hdr="" no_header=0
while getopts "p:P:nh" opt; do
    case $opt in
        p) prefix=$OPTARG ;;
        P) prefix_hdr=$OPTARG ;;
        n) no_header=1 ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 3 ] || usage
file=$1 group=$2; shift 2
[ -r "$file" ] || { echo "group_stats: cannot read '$file'" >&2; exit 2; }

# awk code that sets g (the group) and m[1..] (the metrics) from c[]; need: the columns used
need="state"
cols_of() { grep -o 'c\["[^"]*"\]' <<<"$1" | sed 's/^c\["//; s/"\]$//' | tr '\n' ' '; }
if [ "$group" = - ]; then gcode='g = "all";'; group=group
elif [[ $group == *=* ]]; then gcode="g = (${group#*=});"; need="$need $(cols_of "${group#*=}")"; group=${group%%=*}
else gcode="g = c[\"$group\"];"; need="$need $group"
fi
names="" mcode="" i=0
for m in "$@"; do
    i=$((i + 1))
    if [[ $m == *=* ]]; then
        # an expression over an empty field (a rejected request's latency) is empty
        guard=$(cols_of "${m#*=}" | awk '{ for (j = 1; j <= NF; j++) printf "%sc[\"%s\"] == \"\"", (j > 1 ? " || " : ""), $j }')
        names="$names ${m%%=*}"; mcode="$mcode m[$i] = (${guard:-0}) ? \"\" : (${m#*=});"
        need="$need $(cols_of "${m#*=}")"
    else
        names="$names $m"; mcode="$mcode m[$i] = c[\"$m\"];"; need="$need $m"
    fi
done

# 1. one line per (metric, group, value) of the finished requests; 2. sorted; 3. statistics
values=$(mktemp)
trap 'rm -f "$values"' EXIT
awk -F, -v nm="$i" -v need="$need" -v file="$file" '
NR == 1 {
    for (j = 1; j <= NF; j++) { h[j] = $j; ix[$j] = j }
    nn = split(need, nd, " ")
    for (j = 1; j <= nn; j++)
        if (!(nd[j] in ix)) { printf "group_stats: %s has no column \"%s\"\n", file, nd[j] > "/dev/stderr"; exit 2 }
    next
}
{
    for (j = 1; j <= NF; j++) c[h[j]] = $j
    if (c["state"] != "finished") next
    '"$gcode"'
    '"$mcode"'
    for (j = 1; j <= nm; j++) if (m[j] != "") printf "%d\t%s\t%.9g\n", j, g, m[j]
}' <(csv_clean "$file") > "$values" || exit 2
LC_ALL=C sort -t"$(printf '\t')" -k2,2 -k1,1n -k3,3g "$values" | awk -F'\t' -v names="$names" -v group="$group" \
    -v prefix="$prefix" -v prefix_hdr="$prefix_hdr" -v no_header="$no_header" '
function pct(p,    pos, lo) {                  # numpy linear interpolation over v[1..n]
    pos = p * (n - 1) + 1; lo = int(pos)
    return lo >= n ? v[n] : v[lo] + (pos - lo) * (v[lo + 1] - v[lo])
}
function flush() {
    if (n == 0) return
    out[cur_g, cur_m] = sprintf("%.6g,%.6g,%.6g,%.6g,%.6g", sum / n, pct(0.5), pct(0.9), pct(0.99), v[n])
    cnt[cur_g, cur_m] = n
    n = 0; sum = 0
}
BEGIN { nm = split(names, mn, " ") }
{
    if ($2 != cur_g || $1 != cur_m) { flush(); cur_g = $2; cur_m = $1; if (!($2 in seen)) { seen[$2] = 1; order[++ng] = $2 } }
    v[++n] = $3; sum += $3
}
END {
    flush()
    if (!no_header) {
        line = prefix_hdr group ",count"
        for (j = 1; j <= nm; j++) line = line sprintf(",mean_%s,p50_%s,p90_%s,p99_%s,max_%s", mn[j], mn[j], mn[j], mn[j], mn[j])
        print line
    }
    for (k = 1; k <= ng; k++) {
        gg = order[k]; best = 0
        for (j = 1; j <= nm; j++) if (cnt[gg, j] > best) best = cnt[gg, j]
        line = prefix gg "," best
        for (j = 1; j <= nm; j++) line = line "," ((gg, j) in out ? out[gg, j] : ",,,,")
        print line
    }
}'
