#!/usr/bin/env bash
# experiments/fidelity.sh: how close is the simulator to the engine it models?
#
# Question: replay the same traces with the same policy on the real engine (`tandem run`, CUDA,
# H200 or H100) and in the simulator (`tandem sim`) with the roofline and with a profile of that engine
# (`tandem profile`); how far apart are throughput, TTFT, TPOT and E2E, and per step?
#
# Workloads (each on Llama-2-7B and Llama-3-8B, synthetic weights, vLLM V1 defaults unless said):
#   chat        Azure LLM inference 2023 conversation, first 1,000 requests, --time-scale 0.25
#   chat16      the same with --max-num-seqs 16
#   code        Azure code, first 600 requests, --time-scale 0.2 (bursty, long prompts)
#   offline     512 requests of 512 + 128 tokens at t = 0, --max-num-seqs 256
#   mixed-vllm, mixed-sarathi, mixed-vllm-v0
#               400 ShareGPT-length requests at t = 0 under each policy
#   preempt     chat with a KV cache of 2,000 blocks: preemptions (recompute)
#   preempt-swap  the same, preempting by swapping to host memory
#   static, static-vllm
#               Azure chat, first 400 requests, --time-scale 0.5, --max-num-seqs 64, under
#               static batching and under vllm: the continuous-vs-static question, measured
#
# A target is a model on a GPU row, MODEL_GPU as profiles are named (llama-3-8b_h200); GPU
# defaults to h200 below.
#
# Phases:
#   gpu MODEL [GPU]
#               on the GPU machine (a GPU of that row): writes the traces, profiles MODEL's
#               engine into the measured folder (unless it has its profile already), runs every workload not measured yet (or, again, those named
#               in $WORKLOADS) with `tandem run` ($REPEAT times each, default 1: `run --repeat`,
#               whose spread report and calibrate carry beside each error), and packs the
#               measured runs into $OUT/fidelity-MODEL_GPU.tar.gz after each (the device tool
#               brings it back). A run split over several leases: unpack the last tarball into
#               $RAW_ROOT/fidelity (or, for the committed one, set RESUME=1) and give the same
#               command again;
#               STOP_AFTER_S=N starts no workload once N seconds have gone (under a time limit,
#               so that none is cut off halfway, its time lost).
#   report      here: for each target of $TARGETS with committed runs
#               (experiments/results/fidelity/measured-MODEL_GPU.tar.gz), simulates each
#               workload with both cost models (the profile also nudged 0.1% either way:
#               sim_spread), runs `tandem compare`, and writes
#               experiments/results/fidelity/table.csv and steps.csv
#   plot        the figure, docs/figures/fidelity.{png,svg}, from the committed tables
#   calibrate [MODEL [GPU]]
#               here (default llama-2-7b on h200): does a profile calibrated on measured serving runs
#               (`tandem profile --from-runs`) predict a workload it has not seen? For each
#               workload W, three profiles simulate W: the grid the runs were compared with
#               (`grid`); the grid plus every other workload's steps (`loo`: leave W out); and
#               the grid plus the steps of the workloads that replay another trace than W's
#               (`lto`: leave W's trace out; chat, chat16, preempt, preempt-swap, static and
#               static-vllm all replay Azure chat, so `loo` has seen W's requests served
#               under another budget). Writes experiments/results/fidelity/calibrate.csv and
#               calibrate_steps.csv: report's columns, with `profile` for the cost model (the
#               target's rows replaced, other targets' kept).
#   ship MODEL [GPU]
#               here: configs/profiles/MODEL_GPU.csv, the profile `--cost-model auto` picks: the
#               grid measured beside the target's committed runs, calibrated on every one of them
#               (calibrate's `loo` and `lto` rows say how it predicts a workload it has not seen).
#   score       here: the committed tables held against the targets (output throughput within 2%;
#               mean, median and p99 of TTFT, TPOT and E2E within 5%; a workload's per-step
#               median |error| at most 3% and the bias of its total step time within 1%), for
#               each target and cost model of table.csv and each profile of calibrate.csv:
#               experiments/results/fidelity/score.csv (one row each) and misses.csv (every
#               figure off target, beside the measured runs' spread), and a line each here
#   graft MODEL GPU PROBE [KIND]
#               here: adds to the grid of the target's committed runs the points of PROBE (a
#               `tandem profile` of the same target from another machine or a newer grid) that
#               it lacks (only those of KIND, prefill, decode or mixed, when given), each time
#               divided by the median PROBE / grid ratio of its kind over the points both have
#               (machines of one row differ by a few percent), and packs the grid back into the
#               tarball; then report, calibrate and ship see the new points.
# `fidelity.sh` alone does report, plot and score.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
exp_init fidelity

# The targets report and plot go over, in the figure's order.
TARGETS="llama-2-7b_h200 llama-3-8b_h200 llama-3-8b_h100-sxm llama-2-7b_h100-sxm"

# measured DIR: whether DIR holds a measured run, or repeats of one (DIR/1 ..)
measured() { [ -f "$1/summary.json" ] || [ -f "$1/1/summary.json" ]; }

# name|trace|flags: one workload a line
workloads() {
    local chat=traces/samples/azure_conv_2023.csv code=traces/samples/azure_code_2023.csv
    cat <<EOW
chat|$chat|--max-requests 1000 --time-scale 0.25
chat16|$chat|--max-requests 1000 --time-scale 0.25 --max-num-seqs 16
code|$code|--max-requests 600 --time-scale 0.2
offline|$RAW/offline.csv|--max-num-seqs 256
mixed-vllm|$RAW/mixed400.csv|--scheduling-policy vllm
mixed-sarathi|$RAW/mixed400.csv|--scheduling-policy sarathi
mixed-vllm-v0|$RAW/mixed400.csv|--scheduling-policy vllm-v0
preempt|$chat|--max-requests 1000 --time-scale 0.25 --num-gpu-blocks-override 2000
preempt-swap|$chat|--max-requests 1000 --time-scale 0.25 --num-gpu-blocks-override 2000 --preemption-mode swap
static|$chat|--max-requests 400 --time-scale 0.5 --max-num-seqs 64 --scheduling-policy static
static-vllm|$chat|--max-requests 400 --time-scale 0.5 --max-num-seqs 64
EOW
}

traces() {
    mkdir -p "$RAW"
    gen_trace "$RAW/offline.csv" --num-requests 512 --rate inf --input-len 512 --output-len 128 --seed 1
    gen_trace "$RAW/mixed400.csv" --num-requests 400 --rate inf --length-dist file \
        --lengths-file traces/samples/sharegpt_lengths_5k.csv --max-len 3000 --seed 1
}

gpu() {
    local model=$1 gpu=${2:-h200} out=${OUT:?OUT: where the packed runs go}
    local t=${model}_$gpu
    traces
    local dir=$RAW/measured-$t
    # RESUME=1: go on from the committed runs (their profile and the workloads they hold)
    if [ "${RESUME:-0}" = 1 ] && [ ! -d "$dir" ]; then
        [ -f "$RES/measured-$t.tar.gz" ] || { echo "[$EXP] RESUME=1: no $RES/measured-$t.tar.gz" >&2; exit 1; }
        unpack "$RES/measured-$t.tar.gz" "$t"
    fi
    mkdir -p "$dir"
    local t0=$SECONDS
    if [ ! -f "$dir/$t.csv" ]; then # the shipped one is `ship`'s to write, here
        "$BIN" profile --model "synthetic:$model" --backend cuda --gpu "$gpu" --out "$dir/$t.csv" --quiet
        echo "[$EXP] $t: profile $((SECONDS - t0)) s"
    fi
    # packed after every workload, so that a lease that ends early still brings back what ran
    tar -C "$RAW" -czf "$out/fidelity-$t.tar.gz" "measured-$t"
    while IFS='|' read -r name trace flags; do
        case " ${WORKLOADS:-$name} " in *" $name "*) ;; *) continue ;; esac
        if [ -z "${WORKLOADS:-}" ] && measured "$dir/$name"; then
            echo "[$EXP] $t $name: measured already"
            continue
        fi
        if [ -n "${STOP_AFTER_S:-}" ] && [ "$SECONDS" -ge "$STOP_AFTER_S" ]; then
            echo "[$EXP] $t: ${SECONDS} s gone, STOP_AFTER_S=$STOP_AFTER_S: $name and the rest wait for the next call"
            break
        fi
        t0=$SECONDS
        rm -rf "${dir:?}/$name" # a run named again replaces the old one (whose repeats may differ)
        # shellcheck disable=SC2086
        "$BIN" run --trace "$trace" --model "synthetic:$model" --backend cuda --gpu "$gpu" $flags \
            --repeat "${REPEAT:-1}" --out "$dir/$name" --quiet \
            || echo "[$EXP] $t $name: FAILED"
        echo "[$EXP] $t $name: $((SECONDS - t0)) s"
        tar -C "$RAW" -czf "$out/fidelity-$t.tar.gz" "measured-$t"
    done < <(workloads)
}

# unpack PACKED TARGET: the committed runs of TARGET into $RAW, replacing what an earlier unpacking
# left (a workload re-measured with repeats is DIR/1 .. where it was DIR's own files)
unpack() {
    rm -rf "$RAW/measured-$2"
    tar -C "$RAW" -xzf "$1"
}

# nudged PROFILE FACTOR OUT: PROFILE with every measured time (median_ms .. max_ms, its last
# five columns) multiplied by FACTOR, into OUT: the same model, every step FACTOR as long.
nudged() {
    awk -F, -v OFS=, -v f="$2" '/^#/ || /^kind,/ { print; next }
        { for (i = NF - 4; i <= NF; i++) $i = sprintf("%.6f", $i * f); print }' "$1" > "$3"
}

# report: simulate every measured workload with both cost models, compare, and gather the
# comparisons into table.csv (request metrics) and steps.csv (per-step re-prediction by class).
# A profile's rows also carry sim_spread: how far the simulation moves when every step takes
# 0.1% longer or shorter, (max - min) / mean of the three simulated values. No run can tell
# times that close apart, so what moves is the simulator's own sensitivity (a queue that sits
# on a batch boundary), to read beside the measured runs' spread.
report() {
    traces
    local table=$RES/table.csv steps=$RES/steps.csv
    echo "model,gpu,workload,cost_model,metric,measured,simulated,rel_error,spread,sim_spread" > "$table.tmp"
    echo "model,gpu,workload,cost_model,class,steps,median_abs_rel_error,p90_abs_rel_error,median_rel_error,total_rel_error" \
        > "$steps.tmp"
    for t in $TARGETS; do
        local model=${t%%_*} gpu=${t#*_} packed=$RES/measured-$t.tar.gz
        [ -f "$packed" ] || { echo "[$EXP] no $packed: run the gpu phase first" >&2; continue; }
        unpack "$packed" "$t"
        local dir=$RAW/measured-$t
        # the profile measured beside these runs (the shipped one may be newer), and it nudged
        local prof=$dir/$t.csv
        [ -f "$prof" ] || prof=configs/profiles/$t.csv
        nudged "$prof" 0.999 "$RAW/nudged-$t-0.999.csv"
        nudged "$prof" 1.001 "$RAW/nudged-$t-1.001.csv"
        while IFS='|' read -r name trace flags; do
            measured "$dir/$name" || continue
            for cm in roofline "profile:$prof"; do
                local tag=${cm%%:*} sim=$RAW/sim-$t/$name-${cm%%:*} cmp=$RAW/cmp-$t/$name-${cm%%:*}
                # shellcheck disable=SC2086
                "$BIN" sim --trace "$trace" --model "$model" --gpu "$gpu" $flags --cost-model "$cm" --out "$sim" --quiet
                "$BIN" compare "$dir/$name" "$sim" --out "$cmp" --no-figures --quiet
                local nudges=()
                if [ "$tag" = profile ]; then
                    local f
                    for f in 0.999 1.001; do
                        # shellcheck disable=SC2086
                        "$BIN" sim --trace "$trace" --model "$model" --gpu "$gpu" $flags \
                            --cost-model "profile:$RAW/nudged-$t-$f.csv" --out "$sim-$f" --quiet
                        "$BIN" compare "$dir/$name" "$sim-$f" --out "$cmp-$f" --no-figures --quiet
                        nudges+=("$cmp-$f/metrics.csv")
                    done
                fi
                # metrics.csv's rows, each with the spread of its simulated value over the nudges
                awk -F, -v OFS=, -v n=$((${#nudges[@]} + 1)) '
                    FNR == 1 { file++; next }
                    file == 1 { row[++rows] = $0; key[rows] = $1 }
                    $3 != "" { v = $3 + 0; sum[$1] += v; seen[$1]++
                               if (seen[$1] == 1 || v < lo[$1]) lo[$1] = v
                               if (seen[$1] == 1 || v > hi[$1]) hi[$1] = v }
                    END { for (i = 1; i <= rows; i++) { k = key[i]; s = ""
                            if (n > 1 && seen[k] == n && sum[k] != 0) s = sprintf("%.6g", (hi[k] - lo[k]) / (sum[k] / n))
                            print row[i], s } }' "$cmp/metrics.csv" "${nudges[@]}" |
                    sed "s|^|$model,$gpu,$name,$tag,|" >> "$table.tmp"
                tail -n +2 "$cmp/step_classes.csv" | sed "s|^|$model,$gpu,$name,$tag,|" >> "$steps.tmp"
            done
        done < <(workloads)
    done
    mv "$table.tmp" "$table"
    mv "$steps.tmp" "$steps"
    echo "[$EXP] $table, $steps"
}

# trace_of WORKLOAD: the trace a workload replays (the first field of its flags that names one).
trace_of() {
    workloads | while IFS='|' read -r name trace flags; do [ "$name" = "$1" ] && echo "$trace"; done
}

# calibrate [MODEL [GPU]]: leave-one-out (and leave-trace-out) calibration; see the top of the file.
calibrate() {
    local model=${1:-llama-2-7b} gpu=${2:-h200}
    local t=${model}_$gpu
    traces
    local packed=$RES/measured-$t.tar.gz table=$RES/calibrate.csv steps=$RES/calibrate_steps.csv
    [ -f "$packed" ] || { echo "[$EXP] no $packed: run the gpu phase first" >&2; exit 1; }
    unpack "$packed" "$t"
    local dir=$RAW/measured-$t base=$RAW/measured-$t/$t.csv prof=$RAW/calib-$t
    mkdir -p "$prof"
    local names=() name trace flags
    while IFS='|' read -r name trace flags; do
        measured "$dir/$name" && names+=("$name")
    done < <(workloads)
    # shellcheck disable=SC2064 # the paths are fixed now
    trap "rm -f '$table.tmp' '$steps.tmp'" EXIT # a failed run leaves the tables as they were
    echo "model,gpu,workload,profile,metric,measured,simulated,rel_error,spread" > "$table.tmp"
    echo "model,gpu,workload,profile,class,steps,median_abs_rel_error,p90_abs_rel_error,median_rel_error,total_rel_error" \
        > "$steps.tmp"
    # the other targets' rows stay (the first two fields are the model and the GPU)
    if [ -f "$table" ]; then tail -n +2 "$table" | { grep -v "^$model,$gpu," || true; } >> "$table.tmp"; fi
    if [ -f "$steps" ]; then tail -n +2 "$steps" | { grep -v "^$model,$gpu," || true; } >> "$steps.tmp"; fi
    while IFS='|' read -r name trace flags; do
        measured "$dir/$name" || continue
        local loo=() lto=() other
        for other in "${names[@]}"; do
            [ "$other" = "$name" ] && continue
            loo+=("$dir/$other")
            [ "$(trace_of "$other")" = "$trace" ] || lto+=("$dir/$other")
        done
        "$BIN" profile --from-runs "$(IFS=,; echo "${loo[*]}")" --base "$base" --out "$prof/$name-loo.csv" --quiet
        "$BIN" profile --from-runs "$(IFS=,; echo "${lto[*]}")" --base "$base" --out "$prof/$name-lto.csv" --quiet
        for tag in grid loo lto; do
            local cm=profile:$prof/$name-$tag.csv sim=$RAW/calib-sim-$t/$name-$tag cmp=$RAW/calib-cmp-$t/$name-$tag
            [ $tag = grid ] && cm=profile:$base
            # shellcheck disable=SC2086
            "$BIN" sim --trace "$trace" --model "$model" --gpu "$gpu" $flags --cost-model "$cm" --out "$sim" --quiet
            "$BIN" compare "$dir/$name" "$sim" --out "$cmp" --no-figures --quiet
            tail -n +2 "$cmp/metrics.csv" | sed "s|^|$model,$gpu,$name,$tag,|" >> "$table.tmp"
            tail -n +2 "$cmp/step_classes.csv" | sed "s|^|$model,$gpu,$name,$tag,|" >> "$steps.tmp"
        done
        echo "[$EXP] calibrate $t $name"
    done < <(workloads)
    mv "$table.tmp" "$table"
    mv "$steps.tmp" "$steps"
    echo "[$EXP] $table, $steps"
}

# ship MODEL [GPU]: the shipped profile, calibrated on every committed run of the target.
ship() {
    local t=${1}_${2:-h200}
    local packed=$RES/measured-$t.tar.gz
    [ -f "$packed" ] || { echo "[$EXP] no $packed: run the gpu phase first" >&2; exit 1; }
    unpack "$packed" "$t"
    local dir=$RAW/measured-$t runs=() name trace flags
    while IFS='|' read -r name trace flags; do
        measured "$dir/$name" && runs+=("$dir/$name")
    done < <(workloads)
    "$BIN" profile --from-runs "$(IFS=,; echo "${runs[*]}")" --base "$dir/$t.csv" --out "configs/profiles/$t.csv"
}

# plot: figure.dat (one block per target: a row per workload, the errors in percent) from the
# two tables, then docs/figures/fidelity.{png,svg}.
plot() {
    local dat=$RES/figure.dat titles=""
    : > "$dat.tmp"
    local m metrics=output_throughput,mean_ttft_ms,median_tpot_ms,median_e2el_ms keep=workload
    for m in ${metrics//,/ } step; do keep=$keep,roofline_$m,profile_$m; done
    for t in $TARGETS; do
        local model=${t%%_*} gpu=${t#*_}
        grep -q "^$model,$gpu," "$RES/table.csv" || continue
        # "Llama-3-8B/H100": the block's title
        titles="$titles $(echo "$model" | sed 's/llama/Llama/; s/b$/B/')/$(echo "${gpu%%-*}" | tr a-z A-Z)"
        # long: workload, roofline_METRIC or profile_METRIC (or _step: the per-step median
        # absolute error of all steps), error in percent; then a row per workload (in
        # table.csv's order), space-separated
        { "$BIN" reduce select 'key={cost_model}_{metric}' 'pct={rel_error*100}' --keep workload,key,pct \
              --where "model=$model&gpu=$gpu&metric=${metrics//,/|}" "$RES/table.csv"
          "$BIN" reduce select 'key={cost_model}_step' 'pct={median_abs_rel_error*100}' --keep workload,key,pct \
              --where "model=$model&gpu=$gpu&class=all" "$RES/steps.csv" | tail -n +2
        } | "$BIN" reduce pivot /dev/stdin workload key pct | "$BIN" reduce select --keep "$keep" /dev/stdin |
            tail -n +2 | tr , ' ' >> "$dat.tmp"
        printf '\n\n' >> "$dat.tmp"
    done
    mv "$dat.tmp" "$dat"
    gnuplot -e "DAT='$dat'; OUT='$FIG/fidelity'; TITLES='${titles# }'" "$PLOTS/fidelity.gp"
    echo "[$EXP] $FIG/fidelity.png"
}

# score: the targets, as the top of the file says. The headline is the mean |error| of output
# throughput, mean TTFT, median TPOT and median E2E over a target's workloads.
score() {
    local out=$RES/score.csv misses=$RES/misses.csv
    # shellcheck disable=SC2064 # the paths are fixed now
    trap "rm -f '$out.tmp' '$misses.tmp'" EXIT
    echo "model,gpu,table,cost_model,workloads,headline_mean_abs_error,figures,figure_misses,largest_miss_metric,largest_miss,step_median_misses,step_bias_misses" \
        > "$out.tmp"
    echo "model,gpu,table,cost_model,workload,metric,rel_error,limit,spread" > "$misses.tmp"
    local name
    for name in table calibrate; do
        local metrics=$RES/$name.csv steps=$RES/steps.csv
        [ "$name" = calibrate ] && steps=$RES/calibrate_steps.csv
        if [ ! -f "$metrics" ] || [ ! -f "$steps" ]; then continue; fi
        awk -F, -v OFS=, -v table="$name" -v missfile="$misses.tmp" '
            FNR == 1 { file++; next }
            { k = $1 OFS $2 OFS table OFS $4
              if (!(k in seen)) { seen[k]; order[++n] = k } }
            file == 1 {
                e = $8 + 0; a = e < 0 ? -e : e
                if ($8 == "") next
                if ($5 ~ /^(output_throughput|mean_ttft_ms|median_tpot_ms|median_e2el_ms)$/) { head[k] += a; heads[k]++ }
                limit = $5 == "output_throughput" ? 0.02 : $5 ~ /^(mean|median|p99)_(ttft|tpot|e2el)_ms$/ ? 0.05 : 0
                if (!limit) next
                figs[k]++
                if (a > limit) {
                    miss[k]++
                    print $1, $2, table, $4, $3, $5, $8, limit, $9 >> missfile
                    if (a > worst[k]) { worst[k] = a; worst_at[k] = $3 " " $5; worst_e[k] = e }
                }
                next
            }
            $5 == "all" && $6 > 0 {
                wl[k]++
                if ($7 + 0 > 0.03) step_med[k]++
                b = $10 + 0; if (b > 0.01 || b < -0.01) step_bias[k]++
            }
            END { for (i = 1; i <= n; i++) { k = order[i]
                    if (!heads[k]) continue
                    printf "%s,%d,%.6g,%d,%d,%s,%s,%d,%d\n", k, wl[k], head[k] / heads[k], figs[k], miss[k] + 0,
                        worst_at[k], worst[k] ? sprintf("%.6g", worst_e[k]) : "", step_med[k] + 0, step_bias[k] + 0 } }
        ' "$metrics" "$steps" >> "$out.tmp"
    done
    mv "$out.tmp" "$out"
    mv "$misses.tmp" "$misses"
    trap - EXIT
    awk -F, 'NR > 1 { printf "[fidelity] %s %s %s %s: headline %.2f%%; %d of %d figures off target%s; steps: median |error| over 3%% in %d of %d workloads, bias outside 1%% in %d\n",
                      $1, $2, $3, $4, 100 * $6, $8, $7, $8 ? sprintf(" (largest %s %+.1f%%)", $9, 100 * $10) : "", $11, $5, $12 }' "$out"
    echo "[$EXP] $out, $misses"
}

# graft MODEL GPU PROBE [KIND]: see the top of the file.
graft() {
    local t=${1}_$2 probe=$3 kind=${4:-}
    local packed=$RES/measured-$t.tar.gz
    [ -f "$packed" ] || { echo "[$EXP] no $packed: run the gpu phase first" >&2; exit 1; }
    [ -f "$probe" ] || { echo "[$EXP] graft: no profile $probe" >&2; exit 2; }
    unpack "$packed" "$t"
    local grid=$RAW/measured-$t/$t.csv
    # A point is its first twelve columns (the step's shape); a grid written before padding_tokens
    # (eleven) gains that column as 0. Times are the last five columns.
    awk -F, -v OFS=, -v probe="$probe" -v only="$kind" '
        function shape(padded,   k, i) {
            k = $1; for (i = 2; i <= 6; i++) k = k OFS $i
            k = k OFS (padded ? $7 : 0)
            for (i = padded ? 8 : 7; i <= NF - 6; i++) k = k OFS $i
            return k
        }
        function median(a, n,   i, j, x) {
            for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        FNR == 1 { file++ }
        /^kind,/ { if (file == 1) { padded[file] = $7 == "padding_tokens"; header = $0 } else padded[file] = $7 == "padding_tokens"
                   if (file == 2 && !padded[2]) { print FILENAME ": a profile without padding_tokens" > "/dev/stderr"; exit 2 }
                   next }
        /^#/ { if (file == 1) { if ($0 ~ /^# tandem profile /) $0 = "# tandem profile 2"; top[++ntop] = $0 }
               else if ($0 ~ /^# (device|tandem|date): /) from = from (from ? "; " : "") substr($0, 3)
               next }
        file == 1 { k = shape(padded[1]); ms[k] = $(NF - 4); row[++nrow] = k; times[k] = $(NF - 4)
                    for (i = NF - 3; i <= NF; i++) times[k] = times[k] OFS $i
                    rep[k] = $(NF - 5); next }
        { k = shape(1)
          if (k in ms) { r[$1, ++nr[$1]] = $(NF - 4) / ms[k]; next }
          if (only == "" || $1 == only) { extra[++nextra] = $0; xkind[nextra] = $1 } }
        END {
            if (file < 2) exit 2
            for (kd in nr) { n = 0; delete a; for (i = 1; i <= nr[kd]; i++) a[++n] = r[kd, i]; ratio[kd] = median(a, n) }
            note = ""; added = 0
            for (i = 1; i <= nextra; i++) if (!(xkind[i] in ratio)) { print probe ": no point of kind " xkind[i] " in both" > "/dev/stderr"; exit 2 }
            for (kd in ratio) note = note sprintf(" %s %.4f (%d points)", kd, ratio[kd], nr[kd])
            for (i = 1; i <= ntop; i++) print top[i]
            printf "# grafted: %d %spoints of %s (%s), each time divided by the median ratio of its kind to this grid over the points both have:%s\n", nextra, only ? only " " : "", probe, from, note
            if (!padded[1]) { split(header, h, ","); header = ""; for (i = 1; i <= length(h); i++) header = header (i > 1 ? "," : "") h[i] (i == 6 ? ",padding_tokens" : "") }
            print header
            for (i = 1; i <= nrow; i++) print row[i], rep[row[i]], times[row[i]]
            for (i = 1; i <= nextra; i++) {
                n = split(extra[i], f, ","); s = f[1]
                for (j = 2; j <= n; j++) s = s OFS (j > n - 5 ? sprintf("%.4f", f[j] / ratio[xkind[i]]) : f[j])
                print s
            }
        }' "$grid" "$probe" > "$grid.tmp"
    mv "$grid.tmp" "$grid"
    tar -C "$RAW" -czf "$packed.tmp" "measured-$t"
    mv "$packed.tmp" "$packed"
    grep '^# grafted' "$grid"
}

case ${1:-all} in
gpu) gpu "${2:?gpu MODEL [GPU]}" "${3:-h200}" ;;
report) report ;;
plot) plot ;;
calibrate) calibrate "${2:-llama-2-7b}" "${3:-h200}" ;;
ship) ship "${2:?ship MODEL [GPU]}" "${3:-h200}" ;;
graft) graft "${2:?graft MODEL GPU PROBE [KIND]}" "${3:?graft MODEL GPU PROBE [KIND]}" "${4:?graft MODEL GPU PROBE [KIND]}" "${5:-}" ;;
score) score ;;
all) report && plot && score ;;
*) echo "usage: $0 gpu MODEL [GPU] | report | plot | score | calibrate [MODEL [GPU]] | ship MODEL [GPU] | graft MODEL GPU PROBE [KIND] | all" >&2; exit 2 ;;
esac
