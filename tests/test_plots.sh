#!/usr/bin/env bash
# tests/test_plots.sh: `tandem reduce` agrees with tandem's own metrics, the figure scripts draw,
# and `tandem plot` draws runs and sweeps. Run by `make test` (TANDEM_BIN names the binary).
# Each check says what differed.
#
#   group_percentiles_match_summary     per-group p50/p90/p99/mean = summary.json's, one group
#   itl_matches_summary_v1 / _v0        ITLs rebuilt from steps.csv: p50/p99 = summary.json's
#   cdf_is_a_cdf                        F rises to 1, the extremes are kept, weights count
#   select_derives_and_filters          {a/b}, {cond?x:y}, --where with | and &, quoted values
#   cross_finds_knees                   interpolated crossing, "<" and ">" per group
#   arithmetic_sums_and_products        + and " - " after * and /, 1e+02 a number, x-y a name
#   quantile_reads_the_cdf              weighted and unweighted levels, not interpolated
#   pivot_makes_rows_wide               a row per key, a column per value, empty cells
#   best_finds_saturation_knees         max/min, at_max/at_min, first within a factor
#   blocks_picks_series_by_label        order of the arguments, --strip, rows kept
#   trace_gives_the_rate                requests / span of a tandem and an Azure trace
#   select_distinct_drops_repeats       a row equal to an earlier one is left out
#   bad_input_is_an_error               exit 2 and a message naming the column, file or folder
#   figure_scripts_write_png_and_svg    vs_x.gp, cdf.gp, timeseries.gp
#   plot_draws_runs_and_sweeps          tandem plot on two runs and on a sweep
#   preemptions_csv_matches_requests    per request, preempted/swapped rows = requests.csv's
#                                       preemptions, each resumed before the request finished
set -uo pipefail
BIN=${TANDEM_BIN:-build/tandem}
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
# column C of CSV text on stdin, row 2
col() { awk -F, -v c="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next } { print $k; exit }'; }

"$BIN" sim --trace traces/samples/azure_conv_2023.csv --max-requests 400 --time-scale 0.3 \
    --out "$TMP/v1" --quiet || { echo "test_plots: tandem sim failed" >&2; exit 1; }
"$BIN" sim --trace traces/samples/azure_conv_2023.csv --max-requests 400 --time-scale 0.3 \
    --scheduling-policy vllm-v0 --out "$TMP/v0" --quiet || { echo "test_plots: tandem sim failed" >&2; exit 1; }

# group_percentiles_match_summary
out=$("$BIN" reduce group "$TMP/v1/requests.csv" - ttft_ms e2el_ms tpot_ms) || fail group "exit $?"
for m in ttft_ms e2el_ms tpot_ms; do
    for s in p50:median p90:p90 p99:p99 mean:mean; do
        c=${s%%:*}_$m want=$(key "$TMP/v1/summary.json" "${s#*:}_$m")
        got=$(col "$c" <<<"$out")
        close "$got" "$want" || fail group_percentiles_match_summary "$c = $got, summary.json has $want"
    done
done
n=$(col count <<<"$out")
[ "$n" = "$(key "$TMP/v1/summary.json" completed)" ] || fail group_percentiles_match_summary "count $n != completed"

# itl_matches_summary_v1 / _v0
for mode in v1 v0; do
    "$BIN" reduce itl --mode $mode "$TMP/$mode/steps.csv" > "$TMP/itl.csv" || fail itl "exit $?"
    "$BIN" reduce cdf --points 100000 --weight tokens itl_ms x "$TMP/itl.csv" > "$TMP/itl.dat"
    for q in 0.5:median 0.99:p99; do
        got=$(awk -v q="${q%%:*}" '/^[0-9]/ && $2 >= q { print $1; exit }' "$TMP/itl.dat")
        want=$(key "$TMP/$mode/summary.json" "${q#*:}_itl_ms")
        close "$got" "$want" || fail itl_matches_summary_$mode "${q#*:} ITL from steps.csv $got ms, summary.json $want ms"
    done
done

# cdf_is_a_cdf
"$BIN" reduce cdf --points 50 e2el_ms a "$TMP/v1/requests.csv" b "$TMP/v1/requests.csv" > "$TMP/e2e.dat"
awk '/^"/ { blocks++; lastF = 0; next } /^[0-9]/ { if ($2 < lastF) bad = "F falls at " $0; lastF = $2; last = $0 }
     END { if (blocks != 2) bad = bad " blocks=" blocks; if (last !~ / 1$/) bad = bad " last row " last; if (bad) { print bad; exit 1 } }' \
    "$TMP/e2e.dat" || fail cdf_is_a_cdf "$(awk '/^"/ {b++} END {print b}' "$TMP/e2e.dat") blocks"
want=$(key "$TMP/v1/summary.json" max_e2el_ms)
got=$(awk '/^[0-9]/ { v = $1 } /^$/ { exit } END { print v }' "$TMP/e2e.dat")
close "$got" "$want" || fail cdf_is_a_cdf "largest value $got, summary.json's max is $want"
printf 'x,w\n1,1\n2,3\n' > "$TMP/w.csv"
got=$("$BIN" reduce cdf --weight w x a "$TMP/w.csv" | awk '/^[0-9]/ { printf "%s:%s ", $1, $2 }')
[ "$got" = "1:0.25 2:1 " ] || fail cdf_is_a_cdf "weights 1 and 3 give '$got', want '1:0.25 2:1 '"

# select_derives_and_filters
printf 'point,priority-classes,x,p,t\n0,"0.2,0.8",7,vllm,2\n1,"0.5,0.5",8,orca,4\n2,"0.5,0.5",9,static,5\n' > "$TMP/q.csv"
got=$("$BIN" reduce select --where 'priority-classes=0.2,0.8' --keep x,priority-classes "$TMP/q.csv" | tail -n 1)
[ "$got" = "7,0.2;0.8" ] || fail select_derives_and_filters "quoted value: got '$got', want '7,0.2;0.8'"
got=$("$BIN" reduce select 'rate={10/t}' 'sys={p=orca?orca ({x}):{p}}' --where 'p=vllm|orca&x>=7' --keep sys,rate "$TMP/q.csv" | tr '\n' ' ')
[ "$got" = "sys,rate vllm,5 orca (8),2.5 " ] || fail select_derives_and_filters "got '$got', want 'sys,rate vllm,5 orca (8),2.5 '"
got=$("$BIN" reduce group "$TMP/v1/requests.csv" 'len={prompt_tokens>=1000?long:short}' 'n={e2el_ms/1000/output_tokens}' | cut -d, -f1,2 | tr '\n' ' ')
want=$(awk -F, 'NR > 1 && $13 == "finished" { if ($6 >= 1000) l++; else s++ } END { printf "len,count long,%d short,%d ", l, s }' "$TMP/v1/requests.csv")
[ "$got" = "$want" ] || fail select_derives_and_filters "group by expression: got '$got', want '$want'"

# cross_finds_knees
printf 'sys,rate,lat\na,1,0.1\na,2,0.3\na,3,0.9\nb,1,0.5\nb,2,0.6\n' > "$TMP/k.csv"
got=$("$BIN" reduce cross "$TMP/k.csv" rate lat --at 0.2,0.55,1 --by sys | tr '\n' ' ')
want="sys,knee_rate_at_0.2,knee_rate_at_0.55,knee_rate_at_1 a,1.5,2.42,>3 b,<1,1.5,>2 "
[ "$got" = "$want" ] || fail cross_finds_knees "got '$got', want '$want'"

# arithmetic_sums_and_products
printf 'time-scale,x-y,a\n0.5,3,2\n' > "$TMP/ar.csv"
got=$("$BIN" reduce select 'p={a+x-y*2}' 'm={x-y - a/4}' 'r={x-y/time-scale}' 'e={1e+02*a}' --keep p,m,r,e "$TMP/ar.csv" | tail -n 1)
[ "$got" = "8,2.5,6,200" ] || fail arithmetic_sums_and_products "got '$got', want '8,2.5,6,200'"

# quantile_reads_the_cdf: weights 1,3,1 on 1,2,5 put F at 0.2, 0.8, 1; 1,1,3,4 at 0.5, 0.75, 1
printf 'x,w\n5,1\n1,1\n2,3\n' > "$TMP/qw.csv"
got=$("$BIN" reduce quantile --weight w --at 50,80,81,100 x a "$TMP/qw.csv" | tr '\n' ' ')
[ "$got" = "series,p50_x,p80_x,p81_x,max_x a,2,2,5,5 " ] ||
    fail quantile_reads_the_cdf "weighted: got '$got', want 'series,p50_x,p80_x,p81_x,max_x a,2,2,5,5 '"
printf 'x\n3\n1\n4\n1\n' > "$TMP/qu.csv"
got=$("$BIN" reduce quantile --at 50,60,100 x a "$TMP/qu.csv" b "$TMP/qw.csv" | tail -n +2 | tr '\n' ' ')
[ "$got" = "a,1,3,4 b,2,2,5 " ] || fail quantile_reads_the_cdf "unweighted: got '$got', want 'a,1,3,4 b,2,2,5 '"

# pivot_makes_rows_wide (k.csv from cross_finds_knees)
got=$("$BIN" reduce pivot "$TMP/k.csv" sys rate lat | tr '\n' ' ')
[ "$got" = "sys,1,2,3 a,0.1,0.3,0.9 b,0.5,0.6, " ] || fail pivot_makes_rows_wide "got '$got', want 'sys,1,2,3 a,0.1,0.3,0.9 b,0.5,0.6, '"
got=$(printf 'g,n,v\nlong,1,10\nshort,2,20\n' | "$BIN" reduce pivot /dev/stdin - g n v | tr '\n' ' ')
[ "$got" = "long_n,long_v,short_n,short_v 1,10,2,20 " ] ||
    fail pivot_makes_rows_wide "one row: got '$got', want 'long_n,long_v,short_n,short_v 1,10,2,20 '"

# best_finds_saturation_knees
printf 'sys,n,tp,lat\na,1,10,5\na,2,19,3\na,4,20,3\na,8,20,9\nb,1,7,\nb,2,8,4\n' > "$TMP/b.csv"
got=$("$BIN" reduce best "$TMP/b.csv" n --by sys 'best=max(tp)' 'n95=first(tp>=0.95*max)' 'lo=at_min(lat)' \
      'hi=at_max(tp)' 'w2=first(lat<=2*min)' 'min=min(lat)' | tr '\n' ' ')
want="sys,best,n95,lo,hi,w2,min a,20,2,2,4,1,3 b,8,2,2,2,2,4 "
[ "$got" = "$want" ] || fail best_finds_saturation_knees "got '$got', want '$want'"

# blocks_picks_series_by_label
printf '# c1\n"L: one" "F"\n1 0.5\n2 1\n\n\n# c2\n"L: two" "F"\n3 1\n\n\n# c3\n"M: one" "F"\n4 1\n' > "$TMP/blk.dat"
got=$("$BIN" reduce blocks "$TMP/blk.dat" --strip "L: " two one)
want=$(printf '# c2\n"two" "F"\n3 1\n\n\n# c1\n"one" "F"\n1 0.5\n2 1')
[ "$got" = "$want" ] || fail blocks_picks_series_by_label "got '$got', want '$want'"

# trace_gives_the_rate: 3 requests over 4 s; 4 over 10 s on the Azure clock
printf 'arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n4,10,5\n' > "$TMP/tr.csv"
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50.5,10,5\n2023-11-16 18:15:52,10,5\n2023-11-16 18:15:55,10,5\n2023-11-16 18:16:00.5,10,5\n' > "$TMP/az.csv"
got=$("$BIN" reduce trace "$TMP/tr.csv" "$TMP/az.csv" | cut -d, -f2- | tr '\n' ' ')
want="format,requests,span_s,mean_rate_per_s tandem,3,4,0.75 azure,4,10,0.4 "
[ "$got" = "$want" ] || fail trace_gives_the_rate "got '$got', want '$want'"

# select_distinct_drops_repeats
printf 'a,b\n1,x\n2,x\n1,x\n' > "$TMP/d.csv"
got=$("$BIN" reduce select --distinct "$TMP/d.csv" | tr '\n' ' ')
[ "$got" = "a,b 1,x 2,x " ] || fail select_distinct_drops_repeats "got '$got', want 'a,b 1,x 2,x '"
got=$("$BIN" reduce select --distinct --keep b "$TMP/d.csv" | tr '\n' ' ')
[ "$got" = "b x " ] || fail select_distinct_drops_repeats "--keep b: got '$got', want 'b x '"

# bad_input_is_an_error: exit 2 and the message names what is wrong
expect_error() { # NAME WORD COMMAND...: exit 2 and WORD in the message
    local name=$1 word=$2; shift 2
    local msg rc
    msg=$("$@" 2>&1 >/dev/null); rc=$?
    { [ $rc = 2 ] && [[ $msg == *"$word"* ]]; } || fail bad_input_is_an_error "$name: exit $rc, '$msg'"
}
expect_error "select --keep nope" nope "$BIN" reduce select --keep nope "$TMP/q.csv"
expect_error "group by a missing column" priority "$BIN" reduce group "$TMP/w.csv" priority x
expect_error "bin on a non-steps file" steps.csv "$BIN" reduce bin "$TMP/q.csv"
expect_error "unbalanced braces" "'{'" "$BIN" reduce select 'a={x' "$TMP/q.csv"
expect_error "a non-number in arithmetic" '"vllm" is not a number' "$BIN" reduce select 'a={p/2}' "$TMP/q.csv"
expect_error "a typo in a branch no row takes" typo "$BIN" reduce select 'a={p=none?{typo}:{p}}' "$TMP/q.csv"
expect_error "a where on a missing column" nocol "$BIN" reduce select --where 'nocol=1' "$TMP/q.csv"
expect_error "cross without targets" "--at" "$BIN" reduce cross "$TMP/q.csv" x t
expect_error "quantile without levels" "--at" "$BIN" reduce quantile x a "$TMP/qw.csv"
expect_error "pivot: two rows for one cell" "second row" "$BIN" reduce pivot "$TMP/d.csv" - b a
expect_error "best: an unknown function" "median" "$BIN" reduce best "$TMP/b.csv" n 'm=median(tp)'
expect_error "blocks: a label no block has" '"L: three"' "$BIN" reduce blocks "$TMP/blk.dat" --strip "L: " three
expect_error "trace: not a trace" "q.csv" "$BIN" reduce trace "$TMP/q.csv"
expect_error "cdf without a file" "no file" "$BIN" reduce cdf x a "$TMP/w.csv" b
expect_error "a missing file" nothere.csv "$BIN" reduce cdf x a "$TMP/nothere.csv"
printf 'a,b\n1,2\n3\n' > "$TMP/short.csv"
expect_error "a short row" "short.csv:3" "$BIN" reduce select "$TMP/short.csv"
mkdir -p "$TMP/empty"
expect_error "plot on a folder that is not a run" "$TMP/empty: neither a run" "$BIN" plot "$TMP/empty" --out "$TMP/figs"
expect_error "plot on no folder" "no such folder" "$BIN" plot "$TMP/nothere" --out "$TMP/figs"

# preemptions_csv_matches_requests (recompute and swap, in a KV cache small enough to preempt)
for mode in recompute swap; do
    "$BIN" sim --trace traces/samples/azure_conv_2023.csv --max-requests 300 --time-scale 0.2 \
        --num-gpu-blocks-override 200 --preemption-mode $mode --out "$TMP/p_$mode" --quiet ||
        { fail preemptions_csv_matches_requests "tandem sim --preemption-mode $mode failed"; continue; }
    msg=$(awk -F, -v mode=$mode '
        FNR == 1 { file++; next }
        file == 1 { if ($4 == "resumed") { if (!open[$3]) bad = bad " resumed " $3 " not preempted"; open[$3] = 0 }
                    else { n[$3]++; open[$3] = 1; if ($4 != (mode == "swap" ? "swapped" : "preempted")) other++ } next }
        { want = $8; got = n[$1] + 0; total += want
          if (got != want) bad = bad sprintf(" request %s: %d rows, preemptions %d;", $1, got, want)
          if ($13 == "finished" && open[$1]) bad = bad " request " $1 " finished while preempted;" }
        END { if (!total) bad = bad " no preemption at all"; if (other) bad = bad " " other " rows of the other mode"; print bad }' \
        "$TMP/p_$mode/preemptions.csv" "$TMP/p_$mode/requests.csv")
    [ -z "$msg" ] || fail preemptions_csv_matches_requests "$mode:${msg:0:300}"
done

if ! command -v gnuplot >/dev/null; then
    echo "test_plots: gnuplot not found, figures not tested"
else
    # figure_scripts_write_png_and_svg
    printf 'pol,x,y,z\na,1,1,2\nb,1,2,3\na,2,2,4\nb,2,3,1\n' > "$TMP/t.csv"
    "$BIN" reduce bin --bin 5 "$TMP/v1/steps.csv" > "$TMP/ts.csv"
    gnuplot -c plots/vs_x.gp "$TMP/t.csv" "$TMP/f1" "t" x "y z" pol 2>"$TMP/gp.err" || fail figure_scripts "vs_x.gp: $(cat "$TMP/gp.err")"
    gnuplot -c plots/cdf.gp "$TMP/f2" "t" "$TMP/e2e.dat" "E2E (ms)" 2>"$TMP/gp.err" || fail figure_scripts "cdf.gp: $(cat "$TMP/gp.err")"
    gnuplot -c plots/timeseries.gp "$TMP/f3" "t" run "$TMP/ts.csv" 2>"$TMP/gp.err" || fail figure_scripts "timeseries.gp: $(cat "$TMP/gp.err")"
    for f in f1 f2 f3; do
        for ext in png svg; do
            [ -s "$TMP/$f.$ext" ] || fail figure_scripts_write_png_and_svg "$f.$ext missing or empty"
        done
        if awk '/^<g [^>]*>$/ { h = 1; next } h && /^<\/g>$/ { bad = 1 } { h = 0 } END { exit !bad }' "$TMP/$f.svg"; then
            fail figure_scripts_write_png_and_svg "$f.svg has empty groups left (svg_tidy.sh)"
        fi
    done

    # plot_draws_runs_and_sweeps
    "$BIN" plot "$TMP/v1" "$TMP/v0" --out "$TMP/figs" --quiet 2>"$TMP/plot.err" || fail plot_draws_runs_and_sweeps "runs: $(cat "$TMP/plot.err")"
    for f in latency_cdf itl_ccdf over_time; do
        for ext in png svg; do
            [ -s "$TMP/figs/$f.$ext" ] || fail plot_draws_runs_and_sweeps "$f.$ext missing or empty"
        done
    done
    grep -q '"v0" "F"' "$TMP/figs/cdf_ttft.dat" || fail plot_draws_runs_and_sweeps "cdf_ttft.dat has no series labelled v0 (the folder's name)"
    printf 'trace = traces/samples/azure_conv_2023.csv\nmax-requests = 60\nscheduling-policy = vllm, sarathi\ntime-scale = 1, 0.5\n' > "$TMP/s.spec"
    "$BIN" sweep "$TMP/s.spec" --out "$TMP/sw" -j 1 --quiet >/dev/null 2>"$TMP/sweep.err" || fail plot_draws_runs_and_sweeps "sweep: $(cat "$TMP/sweep.err")"
    "$BIN" plot "$TMP/sw" --quiet 2>"$TMP/plot.err" || fail plot_draws_runs_and_sweeps "sweep: $(cat "$TMP/plot.err")"
    for ext in png svg; do
        [ -s "$TMP/sw/figures/sweep_sw.$ext" ] || fail plot_draws_runs_and_sweeps "sweep_sw.$ext missing or empty (default --out DIR/figures)"
    done
fi

if [ $fails = 0 ]; then echo "test_plots: all checks passed"; else echo "test_plots: $fails check(s) failed" >&2; exit 1; fi
