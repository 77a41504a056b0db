#!/usr/bin/env bash
# bench_offline.sh: tandem's offline throughput beside transformers' generate, and against its
# roofline, from prebuilt binaries (the GPU machine has no Debian libraries to build with).
#
# The workload, per model (MODELS) and batch B (BATCHES): B requests of exactly PROMPT prompt +
# OUTPUT output tokens, all arriving at t = 0 (`tandem trace gen --rate inf --length-dist
# fixed`). A request runs until its trace's output length, never stopped by EOS: ignore_eos.
#   tandem    `tandem run --backend $BACKEND --max-num-seqs B --max-num-batched-tokens
#             $MAX_BATCHED_TOKENS $RUN_FLAGS` (vLLM's policy), REPEAT times in one engine; the
#             last repeat is the figure (the first one captures the CUDA graphs, as
#             transformers' warm-up compiles). Output tok/s and total s from its summary.json.
#   sim       `tandem sim` with the same flags and the run's KV block count: the default cost
#             model (the shipped profile of the model where there is one) and
#             `--cost-model roofline`, the "roofline s" of the table.
#   hf        engine/bench_hf.py: transformers' LlamaForCausalLM from the same config.json,
#             random bf16 weights, `generate`, eager and/or static cache + torch.compile.
# First a plan with rough GPU seconds per part (PLAN_ONLY=1 stops there); then tandem, HF eager,
# HF compiled; after each stage the markdown table is rewritten into $OUT/table.md, so a run cut
# short still leaves one. A run split into parts (HF=eager first, then TANDEM=0 HF=compiled per
# model, each into its own OUT) joins with `python3 engine/bench_hf.py table DIR1 DIR2 ...`.
#
# usage, from the repository root:
#   BIN=build [MODELS="llama-2-7b llama-3-8b llama-2-13b"] [BATCHES="1 16 64 256"]
#       [HF=eager,compiled|eager|compiled|none] bash engine/bench_offline.sh
#   DRY=1 bash engine/bench_offline.sh   the plumbing on the CPU backend: tiny-llama2, batches
#       1 and 4, 256 + 64 tokens, HF eager on the CPU when python3 has torch + transformers
# Other knobs: TANDEM=0 (skip tandem's side), REPEAT (2), PROMPT (512), OUTPUT (128),
#   MAX_BATCHED_TOKENS (8192, vLLM's default; at least PROMPT), RUN_FLAGS (more flags for run and
#   sim, e.g. "--gpu-memory-utilization 0.95"), BACKEND (cuda), HF_DEVICE (cuda), HF_ATTN (sdpa),
#   HF_COMPILE (forward: transformers' docs' recipe; auto: generate's own), HF_WARMUP_TOKENS (new
#   tokens of eager's warm-up generate, 8; compiled warms up with a whole one), OUT
#   (default /tmp/tandem-bench-offline), stage bounds T_RUN (per tandem run, 180 s), T_SIM (60 s),
#   T_HF_EAGER (per model, 360 s), T_HF_COMPILED (per model and batch, 360 s).
set -u -o pipefail

if [ "${DRY:-0}" = 1 ]; then
    BACKEND=${BACKEND:-cpu} MODELS=${MODELS:-tiny-llama2} BATCHES=${BATCHES:-1 4}
    PROMPT=${PROMPT:-256} OUTPUT=${OUTPUT:-64} HF_DEVICE=${HF_DEVICE:-cpu}
    if [ -z "${HF:-}" ]; then
        HF=none
        python3 -c "import torch, transformers" 2>/dev/null && HF=eager
    fi
fi
BIN=${BIN:-build}
OUT=${OUT:-/tmp/tandem-bench-offline}
MODELS=${MODELS:-llama-2-7b llama-3-8b llama-2-13b}
BATCHES=${BATCHES:-1 16 64 256}
HF=${HF:-eager,compiled}
TANDEM=${TANDEM:-1}
REPEAT=${REPEAT:-2}
PROMPT=${PROMPT:-512}
OUTPUT=${OUTPUT:-128}
MAX_BATCHED_TOKENS=${MAX_BATCHED_TOKENS:-8192}
RUN_FLAGS=${RUN_FLAGS:-}
BACKEND=${BACKEND:-cuda}
HF_DEVICE=${HF_DEVICE:-cuda}
HF_ATTN=${HF_ATTN:-sdpa}
HF_COMPILE=${HF_COMPILE:-forward}
HF_WARMUP_TOKENS=${HF_WARMUP_TOKENS:-8}
T_RUN=${T_RUN:-180} T_SIM=${T_SIM:-60} T_HF_EAGER=${T_HF_EAGER:-360} T_HF_COMPILED=${T_HF_COMPILED:-360}
OPEN_S=10 # rough: a tandem process's start (CUDA context, synthetic weights, KV allocation)

MODELS=${MODELS//,/ } BATCHES=${BATCHES//,/ } HF=${HF//,/ }
[ "$HF" = none ] && HF=
TANDEM_BIN=$BIN/tandem
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

say() { echo "[bench_offline] $*"; }
die() { echo "bench_offline: $*" >&2; exit 2; }

# ---- checks, before any GPU time is spent ---------------------------------------------------------
[ -x "$TANDEM_BIN" ] || die "no $TANDEM_BIN (BIN=$BIN): build with make (make MPI=0 for a machine without libmpi)"
command -v python3 >/dev/null || die "python3 is needed (the plan, the table and the transformers side)"
[ -f engine/bench_hf.py ] || die "run from the repository root (engine/bench_hf.py not found)"
[ "$MAX_BATCHED_TOKENS" -ge "$PROMPT" ] || die "MAX_BATCHED_TOKENS=$MAX_BATCHED_TOKENS is below PROMPT=$PROMPT"
for m in $MODELS; do
    [ -f "configs/models/$m.json" ] || die "MODELS: no configs/models/$m.json"
done
for i in $HF; do
    case $i in eager | compiled) ;; *) die "HF: '$i' is not eager, compiled or none" ;; esac
done
case $HF_COMPILE in forward | auto) ;; *) die "HF_COMPILE: '$HF_COMPILE' is not forward or auto" ;; esac
if [ -n "$HF" ] && [ "${PLAN_ONLY:-0}" != 1 ]; then
    python3 -c "import torch, transformers" 2>/dev/null || die "HF=${HF// /,}: python3 has no torch + transformers (HF=none skips that side)"
fi

mkdir -p "$OUT"/{traces,logs,hf,tandem} || die "cannot create $OUT"
{
    echo "date $(date -u +%FT%TZ)"
    echo "models $MODELS; batches $BATCHES; prompt $PROMPT; output $OUTPUT; hf ${HF:-none}; repeat $REPEAT"
    echo "tandem $("$TANDEM_BIN" --version 2>&1 | head -1); backend $BACKEND; run flags --max-num-batched-tokens $MAX_BATCHED_TOKENS $RUN_FLAGS"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
} > "$OUT/params.txt" 2>&1
cat "$OUT/params.txt"

# flags B: the serving flags of batch B, shared by run and sim
flags() { echo "--max-num-seqs $1 --max-num-batched-tokens $MAX_BATCHED_TOKENS $RUN_FLAGS"; }
json_get() { python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[k]
print(v)' "$@"; }
# last_run DIR: where `tandem run --repeat R --out DIR` put its last repeat (DIR/R; DIR when R = 1)
last_run() {
    local d=$1 r=0 x
    for x in "$d"/[0-9]*; do
        x=${x##*/}
        [[ $x =~ ^[0-9]+$ ]] && [ "$x" -gt "$r" ] && r=$x
    done
    if [ "$r" -gt 0 ]; then echo "$d/$r"; else echo "$d"; fi
}
write_table() {
    # shellcheck disable=SC2086
    python3 engine/bench_hf.py table "$OUT" --models "$MODELS" --batches "$BATCHES" \
        --prompt "$PROMPT" --output "$OUTPUT" > "$OUT/table.md.tmp" && mv "$OUT/table.md.tmp" "$OUT/table.md"
}

for b in $BATCHES; do
    "$TANDEM_BIN" trace gen --num-requests "$b" --rate inf --input-len "$PROMPT" --output-len "$OUTPUT" \
        --length-dist fixed --out "$OUT/traces/$b.csv" || die "tandem trace gen failed"
done

# ---- the plan: rough GPU seconds per part -----------------------------------------------------------
# tandem: the default cost model's prediction of each run (a sim, seconds of CPU), times REPEAT,
# plus the process start; transformers: bench_hf.py estimate (its rates are in the script).
say "plan (rough GPU seconds; the device tool gives a command at most 600 s):"
printf '  %-14s %-26s %8s\n' model part "est. s" | tee "$OUT/plan.txt"
total=0
for m in $MODELS; do
    if [ "$TANDEM" = 1 ]; then
        t=0
        for b in $BATCHES; do
            d=$OUT/tandem/$m/$b/plan-sim
            # shellcheck disable=SC2046
            timeout -k 5 "$T_SIM" "$TANDEM_BIN" sim --trace "$OUT/traces/$b.csv" --model "synthetic:$m" $(flags "$b") \
                --out "$d" --quiet > "$OUT/logs/plan-sim-$m-$b.log" 2>&1 || die "tandem sim failed: $OUT/logs/plan-sim-$m-$b.log"
            s=$(json_get "$d/summary.json" duration)
            t=$(awk -v t="$t" -v s="$s" -v r="$REPEAT" -v o="$OPEN_S" 'BEGIN { printf "%.0f", t + o + 1.3 * r * s }')
        done
        printf '  %-14s %-26s %8s\n' "$m" "tandem run x$REPEAT + sims" "$t" | tee -a "$OUT/plan.txt"
        total=$((total + t))
    fi
    for i in $HF; do
        est=$(python3 engine/bench_hf.py estimate --config "configs/models/$m.json" --impls "$i" \
            --batches "$BATCHES" --prompt "$PROMPT" --output "$OUTPUT" --compile "$HF_COMPILE" \
            --warmup-tokens "$HF_WARMUP_TOKENS") || die "bench_hf.py estimate failed"
        proc=$(awk '$1 == "process" { print $2 }' <<<"$est")
        # eager: one process a model; compiled: one a point
        t=$(awk -v p="$proc" -v i="$i" '$1 == i { t += $3 + (i == "compiled" ? p : 0) } END { printf "%.0f", t + (i == "eager" ? p : 0) }' <<<"$est")
        oom=$(awk '$1 != "process" && $4 == "oom" { printf " %s", $2 }' <<<"$est")
        what="HF $i"
        [ "$i" = compiled ] && what="HF compiled ($HF_COMPILE)"
        printf '  %-14s %-26s %8s%s\n' "$m" "$what" "$t" "${oom:+   likely OOM at batch$oom}" | tee -a "$OUT/plan.txt"
        total=$((total + t))
    done
done
printf '  %-14s %-26s %8s\n' total "" "$total" | tee -a "$OUT/plan.txt"
if [ "$total" -gt 540 ]; then
    say "more than ~9 minutes: split it into commands of their own OUT, e.g. HF=eager (tandem + HF eager),"
    say "  then TANDEM=0 HF=compiled MODELS=<one model> for each model, and join the parts with"
    say "  python3 engine/bench_hf.py table DIR1 DIR2 ... --models \"$MODELS\" --batches \"$BATCHES\""
fi
[ "${PLAN_ONLY:-0}" = 1 ] && exit 0

status=0
# ---- tandem: run, then sim with the run's KV blocks --------------------------------------------------
if [ "$TANDEM" = 1 ]; then
    for m in $MODELS; do
        for b in $BATCHES; do
            d=$OUT/tandem/$m/$b
            rm -rf "$d/run" "$d/sim-auto" "$d/sim-roofline" "$d/status"
            t0=$SECONDS
            # shellcheck disable=SC2046
            timeout -k 5 "$T_RUN" "$TANDEM_BIN" run --trace "$OUT/traces/$b.csv" --model "synthetic:$m" \
                --backend "$BACKEND" $(flags "$b") --repeat "$REPEAT" --out "$d/run" --quiet \
                > "$OUT/logs/run-$m-$b.log" 2>&1
            rc=$?
            if [ $rc != 0 ]; then
                if [ $rc = 124 ] || [ $rc = 137 ]; then
                    echo "timeout after $T_RUN s" > "$d/status"
                else
                    echo "failed, exit $rc: $(tail -1 "$OUT/logs/run-$m-$b.log")" > "$d/status"
                fi
                say "$m batch $b: tandem run $(cat "$d/status") ($OUT/logs/run-$m-$b.log)"
                status=1
                continue
            fi
            run=$(last_run "$d/run")
            blocks=$(json_get "$run/summary.json" config resolved num_gpu_blocks)
            gpu=$(json_get "$run/summary.json" config gpu) # the row the run found the device to be
            for cm in auto roofline; do
                # shellcheck disable=SC2046
                timeout -k 5 "$T_SIM" "$TANDEM_BIN" sim --trace "$OUT/traces/$b.csv" --model "synthetic:$m" $(flags "$b") \
                    --gpu "$gpu" --num-gpu-blocks-override "$blocks" --cost-model "$cm" --out "$d/sim-$cm" --quiet \
                    > "$OUT/logs/sim-$cm-$m-$b.log" 2>&1 || { say "$m batch $b: sim $cm failed"; status=1; }
            done
            # one line: the figures, or what is missing (rejected requests, e.g., exit 0 too)
            line=$(python3 - "$run/summary.json" "$d/sim-roofline/summary.json" "$b" "$OUTPUT" <<'EOP'
import json, sys
s = json.load(open(sys.argv[1]))
b, n = int(sys.argv[3]), int(sys.argv[4])
try:
    roof = "%.2f s" % json.load(open(sys.argv[2]))["duration"]
except (OSError, ValueError, KeyError):
    roof = "-"
ok = s["completed"] == b and s["total_output_tokens"] == b * n
print(("ok " if ok else "INCOMPLETE ") + "tandem %.2f s, %.0f output tok/s, %d of %d requests, %d of %d tokens, %d preemptions; roofline %s"
      % (s["duration"], s["output_throughput"], s["completed"], b, s["total_output_tokens"], b * n, s["num_preemptions"], roof))
EOP
            )
            if [ "${line%% *}" = ok ]; then
                echo ok > "$d/status"
            else
                echo "${line#* }" > "$d/status"
                status=1
            fi
            say "$m batch $b: ${line#ok } ($((SECONDS - t0)) s wall)"
        done
    done
    write_table
fi

# ---- transformers -------------------------------------------------------------------------------------
# hf_stage IMPL MODEL TIMEOUT BATCHES...: one bench_hf.py process; a record for its batches if it
# timed out or failed (the table shows it only where no point of its own was written).
hf_stage() {
    local impl=$1 m=$2 limit=$3; shift 3
    local log
    log=$OUT/logs/hf-$impl-$m-$(echo "$*" | tr ' ' '-').log
    timeout -k 10 "$limit" python3 engine/bench_hf.py run --config "configs/models/$m.json" --name "$m" \
        --impl "$impl" --batches "$*" --prompt "$PROMPT" --output "$OUTPUT" --device "$HF_DEVICE" \
        --attn "$HF_ATTN" --compile "$HF_COMPILE" --warmup-tokens "$HF_WARMUP_TOKENS" \
        --out "$OUT/hf/$m.jsonl" > "$log" 2>&1
    local rc=$?
    grep -E '^(bench_hf|HFBENCH)' "$log" | sed 's/^/  /'
    if [ $rc != 0 ]; then
        local st=error what
        what="failed, exit $rc: $(tail -1 "$log" | cut -c1-200)"
        if [ $rc = 124 ] || [ $rc = 137 ]; then
            st=timeout what="timeout after $limit s"
        fi
        say "$m HF $impl batches $*: $what ($log)"
        python3 -c 'import json, sys
print(json.dumps({"model": sys.argv[1], "impl": sys.argv[2], "status": sys.argv[3],
                  "error": sys.argv[4], "batches": [int(b) for b in sys.argv[5:]]}))' \
            "$m" "$impl" "$st" "$what" "$@" >> "$OUT/hf/$m.jsonl"
        status=1
    fi
}
for i in $HF; do
    for m in $MODELS; do
        t0=$SECONDS
        if [ "$i" = eager ]; then
            # shellcheck disable=SC2086
            hf_stage eager "$m" "$T_HF_EAGER" $BATCHES
        else
            for b in $BATCHES; do  # a process per point: a fresh compilation, and an OOM stays there
                hf_stage compiled "$m" "$T_HF_COMPILED" "$b"
            done
        fi
        say "$m HF $i: $((SECONDS - t0)) s"
        write_table
    done
done

write_table
echo
cat "$OUT/table.md"
say "table: $OUT/table.md; logs: $OUT/logs"
exit $status
