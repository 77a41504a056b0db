#!/usr/bin/env bash
# experiments/run_all.sh: every experiment, simulations included, then every figure.
#
#   experiments/run_all.sh [run|plot|all]     (default all)
#
# Each experiment is resumable: its sweeps keep their points under build/experiments/, so a
# rerun only simulates what is missing, then reduces the outputs into experiments/results/ and
# redraws docs/figures/. From a fresh clone the whole set takes about a minute on 2 cores (see
# each script's timing lines). `make plots` redraws the figures alone, from committed results.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
t0=$SECONDS
for name in batching max_num_seqs priority chunked_prefill vllm_paper cluster; do
    bash "experiments/$name.sh" "$what"
done
echo "run_all: $((SECONDS - t0)) s"
