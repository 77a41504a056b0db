#!/usr/bin/env bash
# plots/csv_select.sh: rows and columns of a CSV with a header (a sweep's results.csv, a
# requests.csv), with derived columns, for the figure scripts.
#
#   plots/csv_select.sh [-w COL=VALUE]... [-x AWK_COND] [-a NAME=AWK_EXPR]... [-k COL,COL,...] FILE
#
#   -w COL=VALUE    keep rows whose COL equals VALUE (string comparison); repeat to AND them
#   -x AWK_COND     keep rows where the awk condition holds; c["col"] is a column's value
#   -a NAME=EXPR    append column NAME = awk expression EXPR (c["col"] as above, and earlier -a
#                   names); e.g. -a 'rate=5.53/c["time-scale"]'
#   -k COLS         write only these columns, in this order (default: all, then the -a ones)
#
# Writes CSV to stdout. Fields must not hold commas (tandem's outputs never do). Exit 2 on a
# bad flag or a column that does not exist.
set -euo pipefail
source "$(dirname "$0")/csvlib.sh"

usage() { sed -n '4,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
conds=() adds=() need=() keep=""
while getopts "w:x:a:k:h" opt; do
    case $opt in
        w) [[ $OPTARG == *=* ]] || { echo "csv_select: -w wants COL=VALUE, got '$OPTARG'" >&2; exit 2; }
           col=${OPTARG%%=*} val=${OPTARG#*=}
           conds+=("(c[\"${col//\"/\\\"}\"] == \"${val//\"/\\\"}\")")
           need+=("$col") ;;
        x) conds+=("($OPTARG)") ;;
        a) [[ $OPTARG == *=* ]] || { echo "csv_select: -a wants NAME=EXPR, got '$OPTARG'" >&2; exit 2; }
           adds+=("$OPTARG") ;;
        k) keep=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
file=$1
[ -r "$file" ] || { echo "csv_select: cannot read '$file'" >&2; exit 2; }

cond="1"
for c in "${conds[@]+"${conds[@]}"}"; do cond="$cond && $c"; done
add_names="" add_code=""
for a in "${adds[@]+"${adds[@]}"}"; do
    name=${a%%=*} expr=${a#*=}
    add_names="$add_names,$name"
    add_code="$add_code c[\"$name\"] = ($expr);"
done

awk -F, -v keep="$keep" -v add_names="$add_names" -v need="${need[*]+"${need[*]}"}" -v file="$file" '
NR == 1 {
    nh = split($0, h, ",")
    for (i = 1; i <= nh; i++) known[h[i]] = 1
    na = split(substr(add_names, 2), an, ",")
    for (i = 1; i <= na; i++) known[an[i]] = 1
    if (keep == "") {
        nk = 0
        for (i = 1; i <= nh; i++) k[++nk] = h[i]
        for (i = 1; i <= na; i++) k[++nk] = an[i]
    } else nk = split(keep, k, ",")
    for (i = 1; i <= nk; i++)
        if (!(k[i] in known)) { printf "csv_select: %s has no column \"%s\"\n", file, k[i] > "/dev/stderr"; exit 2 }
    nn = split(need, nd, " ")
    for (i = 1; i <= nn; i++)
        if (!(nd[i] in known)) { printf "csv_select: %s has no column \"%s\"\n", file, nd[i] > "/dev/stderr"; exit 2 }
    line = k[1]; for (i = 2; i <= nk; i++) line = line "," k[i]; print line
    next
}
{
    for (i = 1; i <= nh; i++) c[h[i]] = $i
    '"$add_code"'
    if (!('"$cond"')) next
    line = c[k[1]]; for (i = 2; i <= nk; i++) line = line "," c[k[i]]; print line
}' <(csv_clean "$file")
