#!/usr/bin/env bash
# plots/cdf_data.sh: a compact CDF data file from tandem's CSV outputs, for plots/cdf.gp.
#
#   plots/cdf_data.sh [-n POINTS] [-s SCALE] [-W WEIGHTCOL] COLUMN SERIES [SERIES...] > out.dat
#   SERIES = [-w COL=VALUE]... LABEL FILE
#
# For each series, the COLUMN values of FILE are sorted and cut to about POINTS (default 200)
# evenly spaced levels of the CDF, plus 50 levels in the top 1% so the tail stays exact; the
# smallest and largest values are always kept. FILE is a requests.csv (only finished requests
# count: rejected ones have no latency) or any CSV with a header, e.g. a steps.csv.
#   -w COL=VALUE  only rows whose COL equals VALUE (repeatable; applies to the series it precedes)
#   -s SCALE      multiply every value (e.g. -s 0.001: ms to s)
#   -W WEIGHTCOL  weight each row by this column (rows of weight 0 are left out): e.g. the
#                 inter-token latencies of a run are its steps' durations, each counted once
#                 per decode token of the step: -W decode_tokens duration_ms on a steps.csv
# Each series is one gnuplot data block (blocks separated by two blank lines) that starts with
# a comment giving its count and a header line `"LABEL" "F"`, then `value F` rows, F the
# fraction of the (weighted) rows at or below value.
set -euo pipefail
source "$(dirname "$0")/csvlib.sh"

usage() { sed -n '4,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
points=200 scale=1 weight=""
while getopts "n:s:W:h" opt; do
    case $opt in
        n) points=$OPTARG ;;
        s) scale=$OPTARG ;;
        W) weight=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 3 ] || usage
column=$1; shift

first=1
filters=()
while [ $# -gt 0 ]; do
    if [ "$1" = -w ]; then
        if [ $# -lt 2 ] || [[ $2 != *=* ]]; then echo "cdf_data: -w wants COL=VALUE" >&2; exit 2; fi
        filters+=("$2"); shift 2; continue
    fi
    [ $# -ge 2 ] || usage
    label=$1 file=$2; shift 2
    [ -r "$file" ] || { echo "cdf_data: cannot read '$file'" >&2; exit 2; }
    [ $first = 1 ] || printf '\n\n'
    first=0
    # 1. `value weight` of the rows that count; 2. sorted by value; 3. the CDF, cut to size
    awk -F, -v col="$column" -v scale="$scale" -v wcol="$weight" -v filt="${filters[*]+"${filters[*]}"}" -v file="$file" '
    function need(name) {
        if (!(name in ix)) { printf "cdf_data: %s has no column \"%s\"\n", file, name > "/dev/stderr"; exit 2 }
    }
    NR == 1 {
        for (i = 1; i <= NF; i++) ix[$i] = i
        need(col); if (wcol != "") need(wcol)
        has_state = "state" in ix
        nf = split(filt, f, " ")
        for (j = 1; j <= nf; j++) {
            p = index(f[j], "="); fc[j] = substr(f[j], 1, p - 1); fv[j] = substr(f[j], p + 1)
            need(fc[j])
        }
        next
    }
    (has_state && $ix["state"] != "finished") || $ix[col] == "" { next }
    {
        for (j = 1; j <= nf; j++) if ($ix[fc[j]] != fv[j]) next
        w = wcol == "" ? 1 : $ix[wcol]
        if (w > 0) printf "%.9g %s\n", $ix[col] * scale, w
    }' <(csv_clean "$file") | LC_ALL=C sort -g -k1,1 | awk -v label="$label" -v col="$column" -v points="$points" -v wcol="$weight" '
    { v[++n] = $1; cum[n] = (n > 1 ? cum[n - 1] : 0) + $2 }
    END {
        printf "# %s: %s of %d rows%s\n", label, col, n, wcol == "" ? "" : sprintf(" (weighted by %s, total %.9g)", wcol, cum[n])
        printf "\"%s\" \"F\"\n", label
        if (n == 0) { print "NaN NaN"; exit }
        total = cum[n]; last_level = -1
        for (r = 1; r <= n; r++) {
            if (r < n && v[r + 1] == v[r]) continue          # equal values: only the last one
            F = cum[r] / total
            # a level of the evenly spaced grid, or of the finer grid over the top 1%
            level = F < 0.99 ? int(F * points) : points + int((F - 0.99) * 100 * 50)
            if (r == 1 || r == n || level != last_level) { printf "%.6g %.6g\n", v[r], F; last_level = level }
        }
    }'
    filters=()
done
