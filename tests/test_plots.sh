#!/usr/bin/env bash
# tests/test_plots.sh: the reducers of plots/ agree with tandem's own metrics, and the figure
# scripts draw. Run by `make test` (TANDEM_BIN names the binary). Each check says what differed.
#
#   group_stats_percentiles_match_summary   per-group p50/p90/p99 = summary.json's, one group
#   itl_data_matches_summary_v1 / _v0       ITLs rebuilt from steps.csv: p50/p99 = summary.json's
#   cdf_data_is_a_cdf                       F rises to 1, the extremes are kept, weights count
#   csv_select_unquotes_spec_values         "0.2,0.8" stays one field (as 0.2;0.8)
#   bad_input_is_an_error                   a missing column is exit 2 with its name
#   figure_scripts_write_png_and_svg        vs_x.gp, cdf.gp, timeseries.gp
set -uo pipefail
BIN=${TANDEM_BIN:-build/tandem}
P=plots
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "test_plots: $1: $2" >&2; fails=$((fails + 1)); }

# key VALUE of a summary.json (flat keys)
key() { sed -n "s/^ *\"$2\": *\([^,]*\),\{0,1\}$/\1/p" "$1" | head -n 1; }
# equal to the reducers' %.6g, to the microseconds of requests.csv and steps.csv (3 decimals
# of ms: an ITL rebuilt from two rounded step times can be 1 us off), and to summary.json's
# histograms (core/stats.h: within 0.003% above 16 ms)
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b; exit !(d <= 4e-5 * s + 1.5e-3) }'; }

"$BIN" sim --trace traces/samples/azure_conv_2023.csv --max-requests 400 --time-scale 0.3 \
    --out "$TMP/v1" --quiet || { echo "test_plots: tandem sim failed" >&2; exit 1; }
"$BIN" sim --trace traces/samples/azure_conv_2023.csv --max-requests 400 --time-scale 0.3 \
    --scheduling-policy vllm-v0 --out "$TMP/v0" --quiet || { echo "test_plots: tandem sim failed" >&2; exit 1; }

# group_stats_percentiles_match_summary
out=$("$P/group_stats.sh" "$TMP/v1/requests.csv" - ttft_ms e2el_ms tpot_ms) || fail group_stats "exit $?"
for m in ttft_ms e2el_ms tpot_ms; do
    for s in p50:median p90:p90 p99:p99 mean:mean; do
        col=${s%%:*}_$m want=$(key "$TMP/v1/summary.json" "${s#*:}_$m")
        got=$(awk -F, -v c="$col" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next } { print $k }' <<<"$out")
        close "$got" "$want" || fail group_stats_percentiles_match_summary "$col = $got, summary.json has $want"
    done
done
n=$(awk -F, 'NR == 2 { print $2 }' <<<"$out")
[ "$n" = "$(key "$TMP/v1/summary.json" completed)" ] || fail group_stats_percentiles_match_summary "count $n != completed"

# itl_data_matches_summary_v1 / _v0
for mode in v1 v0; do
    "$P/itl_data.sh" -m $mode "$TMP/$mode/steps.csv" > "$TMP/itl.csv" || fail itl_data "exit $?"
    "$P/cdf_data.sh" -n 100000 -W tokens itl_ms x "$TMP/itl.csv" > "$TMP/itl.dat"
    for q in 0.5:median 0.99:p99; do
        got=$(awk -v q="${q%%:*}" '/^[0-9]/ && $2 >= q { print $1; exit }' "$TMP/itl.dat")
        want=$(key "$TMP/$mode/summary.json" "${q#*:}_itl_ms")
        close "$got" "$want" || fail itl_data_matches_summary_$mode "${q#*:} ITL from steps.csv $got ms, summary.json $want ms"
    done
done

# cdf_data_is_a_cdf
"$P/cdf_data.sh" -n 50 e2el_ms a "$TMP/v1/requests.csv" -w priority=0 b "$TMP/v1/requests.csv" > "$TMP/e2e.dat"
awk '/^"/ { blocks++; lastF = 0; next } /^[0-9]/ { if ($2 < lastF) bad = "F falls at " $0; lastF = $2; last = $0 }
     END { if (blocks != 2) bad = bad " blocks=" blocks; if (last !~ / 1$/) bad = bad " last row " last; if (bad) { print bad; exit 1 } }' \
    "$TMP/e2e.dat" || fail cdf_data_is_a_cdf "$(awk '/^"/ {b++} END {print b}' "$TMP/e2e.dat") blocks"
want=$(awk -F, 'NR > 1 && $13 == "finished" && $11 > m { m = $11 } END { printf "%.6g", m }' "$TMP/v1/requests.csv")
got=$(awk '/^[0-9]/ { v = $1 } /^$/ { exit } END { print v }' "$TMP/e2e.dat")
close "$got" "$want" || fail cdf_data_is_a_cdf "largest value $got, requests.csv has $want"
printf 'x,w\n1,1\n2,3\n' > "$TMP/w.csv"
got=$("$P/cdf_data.sh" -W w x a "$TMP/w.csv" | awk '/^[0-9]/ { printf "%s:%s ", $1, $2 }')
[ "$got" = "1:0.25 2:1 " ] || fail cdf_data_is_a_cdf "weights 1 and 3 give '$got', want '1:0.25 2:1 '"

# csv_select_unquotes_spec_values
printf 'point,priority-classes,x\n0,"0.2,0.8",7\n' > "$TMP/q.csv"
got=$("$P/csv_select.sh" -w priority-classes='0.2;0.8' -k x,priority-classes "$TMP/q.csv" | tail -n 1)
[ "$got" = "7,0.2;0.8" ] || fail csv_select_unquotes_spec_values "got '$got', want '7,0.2;0.8'"

# bad_input_is_an_error
msg=$("$P/csv_select.sh" -k nope "$TMP/q.csv" 2>&1 >/dev/null); rc=$?
{ [ $rc = 2 ] && [[ $msg == *nope* ]]; } || fail bad_input_is_an_error "csv_select -k nope: exit $rc, '$msg'"
printf 'state,ttft_ms\nfinished,1\n' > "$TMP/r.csv"
msg=$("$P/group_stats.sh" "$TMP/r.csv" priority ttft_ms 2>&1 >/dev/null); rc=$?
{ [ $rc = 2 ] && [[ $msg == *priority* ]]; } || fail bad_input_is_an_error "group_stats on a file without the column: exit $rc, '$msg'"
msg=$("$P/steps_bin.sh" "$TMP/q.csv" 2>&1 >/dev/null); rc=$?
{ [ $rc = 2 ] && [[ $msg == *steps.csv* ]]; } || fail bad_input_is_an_error "steps_bin on a non-steps file: exit $rc, '$msg'"

# figure_scripts_write_png_and_svg
if command -v gnuplot >/dev/null; then
    printf 'pol,x,y,z\na,1,1,2\nb,1,2,3\na,2,2,4\nb,2,3,1\n' > "$TMP/t.csv"
    "$P/steps_bin.sh" -b 5 "$TMP/v1/steps.csv" > "$TMP/ts.csv"
    gnuplot -c "$P/vs_x.gp" "$TMP/t.csv" "$TMP/f1" "t" x "y z" pol 2>"$TMP/gp.err" || fail figure_scripts "vs_x.gp: $(cat "$TMP/gp.err")"
    gnuplot -c "$P/cdf.gp" "$TMP/f2" "t" "$TMP/e2e.dat" "E2E (ms)" 2>"$TMP/gp.err" || fail figure_scripts "cdf.gp: $(cat "$TMP/gp.err")"
    gnuplot -c "$P/timeseries.gp" "$TMP/f3" "t" run "$TMP/ts.csv" 2>"$TMP/gp.err" || fail figure_scripts "timeseries.gp: $(cat "$TMP/gp.err")"
    for f in f1 f2 f3; do
        for ext in png svg; do
            [ -s "$TMP/$f.$ext" ] || fail figure_scripts_write_png_and_svg "$f.$ext missing or empty"
        done
        if awk '/^<g [^>]*>$/ { h = 1; next } h && /^<\/g>$/ { bad = 1 } { h = 0 } END { exit !bad }' "$TMP/$f.svg"; then
            fail figure_scripts_write_png_and_svg "$f.svg has empty groups left (svg_tidy.sh)"
        fi
    done
else
    echo "test_plots: gnuplot not found, figure scripts not tested"
fi

if [ $fails = 0 ]; then echo "test_plots: all checks passed"; else echo "test_plots: $fails check(s) failed" >&2; exit 1; fi
