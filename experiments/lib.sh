# experiments/lib.sh: what every experiment script shares; sourced, not run.
# shellcheck shell=bash
#
# An experiment script answers one question in two phases:
#   run    write its traces and sweep specs under build/experiments/NAME/ (not committed), run
#          `tandem sweep` (resumable: a rerun only runs missing points), and reduce the outputs
#          into small files under experiments/results/NAME/ (committed);
#   plot   draw its figures into docs/figures/ from experiments/results/NAME/ alone, so that
#          `make plots` needs no simulation.
# `SCRIPT` alone does both; `SCRIPT run` or `SCRIPT plot` one of them.
#
# Environment: TANDEM_BIN (default build/tandem, built with `make` when missing), JOBS (sweep
# workers, default 0 = every core), RAW_ROOT (default build/experiments).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIN=${TANDEM_BIN:-build/tandem}
JOBS=${JOBS:-0}
RAW_ROOT=${RAW_ROOT:-build/experiments}
FIG=docs/figures
PLOTS=plots

# exp_init NAME: sets EXP, RAW (raw sweep outputs, created by the run phase) and RES (committed
# results).
exp_init() {
    EXP=$1
    RAW=$RAW_ROOT/$EXP
    RES=experiments/results/$EXP
    mkdir -p "$RES" "$FIG"
}

need_bin() {
    if [ ! -x "$BIN" ]; then
        echo "[$EXP] building $BIN"
        make -s "$BIN" >/dev/null
    fi
}

# gen_trace FILE ARGS...: `tandem trace gen ARGS --out FILE` unless FILE exists (the generator
# is deterministic, so an existing file is the same file).
gen_trace() {
    local out=$1; shift
    [ -f "$out" ] && return 0
    "$BIN" trace gen "$@" --out "$out.tmp"
    mv "$out.tmp" "$out"
}

# sweep NAME [SWEEP FLAGS...] < SPEC: writes the spec read from stdin to $RAW/NAME.spec and runs
# it into $RAW/NAME/. Points already there are not rerun.
# Every experiment's cost model is named in its spec (the roofline unless the spec says
# otherwise), so its figures do not move when tandem's default cost model does.
sweep() {
    local name=$1; shift
    local spec
    spec=$(cat)
    { grep -q '^cost-model *=' <<<"$spec" || echo "cost-model = roofline"; echo "$spec"; } > "$RAW/$name.spec"
    local t0=$SECONDS
    "$BIN" sweep "$RAW/$name.spec" --out "$RAW/$name" -j "$JOBS" "$@"
    echo "[$EXP] sweep $name: $((SECONDS - t0)) s"
}

# point_dir SWEEP COL=VALUE...: the directory of the one point of sweep SWEEP (under $RAW) whose
# results.csv row has these values; fails unless exactly one row matches.
point_dir() {
    local s=$1; shift
    local where ids
    where=$(IFS='&'; echo "$*")
    ids=$("$BIN" reduce select --where "$where" --keep id "$RAW/$s/results.csv" | tail -n +2)
    if [ "$(printf '%s\n' "$ids" | grep -c .)" != 1 ]; then
        echo "point_dir: $s: $* matches $(printf '%s\n' "$ids" | grep -c .) points, not 1" >&2
        return 1
    fi
    echo "$RAW/$s/points/$ids"
}

# keep_results SWEEP: copies the sweep's results.csv into $RES/SWEEP.csv (its rows are small and
# they are what every figure of the sweep is drawn from).
keep_results() { cp "$RAW/$1/results.csv" "$RES/$1.csv"; }

# gp SCRIPT [-e GNUPLOT_CMD]... ARGS...: runs plots/SCRIPT.gp with its arguments; the -e commands
# (optional settings such as logx=1) go before it.
gp() {
    local script=$1 opts=(); shift
    while [ "${1:-}" = -e ]; do opts+=(-e "$2"); shift 2; done
    gnuplot "${opts[@]+"${opts[@]}"}" -c "$PLOTS/$script.gp" "$@"
}

# exp_main "$@": runs the phases the command line asks for, and says how long each took.
exp_main() {
    local what=${1:-all} t0
    case $what in
        run | all)
            need_bin
            mkdir -p "$RAW"
            t0=$SECONDS; run; echo "[$EXP] run: $((SECONDS - t0)) s"
            [ "$what" = all ] || return 0 ;;&
        plot | all)
            need_bin
            t0=$SECONDS; plot; echo "[$EXP] plot: $((SECONDS - t0)) s" ;;
        *) echo "usage: $0 [run|plot|all]" >&2; exit 2 ;;
    esac
}

# trace_rate FILE: the trace's mean arrival rate (requests/s): rows / (last - first arrival), as
# `tandem reduce trace` computes it for any trace format (%.6g; empty when the span is 0).
trace_rate() {
    "$BIN" reduce trace "$1" | "$BIN" reduce select --keep mean_rate_per_s /dev/stdin | tail -n +2
}

# points_group_stats POINTS_DIR GROUP METRIC... < CSV: per-group latency statistics of many
# points. CSV (stdin) has a header and rows whose last column is a point id (e.g. the output of
# `tandem reduce select --keep time-scale,id`); for each row, `tandem reduce group` runs on
# POINTS_DIR/ID/requests.csv and its rows are prefixed with the row's other columns.
points_group_stats() {
    local dir=$1; shift
    local header line id vals first=1
    IFS= read -r header
    header=${header%,*}
    while IFS= read -r line; do
        id=${line##*,} vals=${line%,*}
        if [ $first = 1 ]; then
            "$BIN" reduce group --prefix-header "$header," --prefix "$vals," "$dir/$id/requests.csv" "$@"
            first=0
        else
            "$BIN" reduce group --no-header --prefix "$vals," "$dir/$id/requests.csv" "$@"
        fi
    done
}
