#!/usr/bin/env bash
# gpu_check.sh: the engine's GPU work in one go, from prebuilt binaries (the GPU machine has no
# Debian libraries to build with): kernel/model tests, the transformers comparison, benchmarks,
# and the per-kernel profile of whole steps.
#
# usage: BIN=build bash engine/gpu_check.sh [test|bench|profile|all]
#   bench: `bench_engine_gpu ${BENCH:-all}`; BENCH=offline runs engine/bench_offline.sh instead
#          (tandem's offline throughput beside transformers' generate and the roofline, into
#          $OUT/offline; its own knobs, MODELS, BATCHES, HF, ..., pass through; not part of all)
#   profile: `bench_engine_gpu profile` into $OUT/profile.log (not part of all)
# Logs go to $OUT (default /tmp/tandem-gpu-check); a short summary is printed last.
set -u -o pipefail
BIN=${BIN:-build}
OUT=${OUT:-/tmp/tandem-gpu-check}
what=${1:-all}
# Each stage is bounded, so a hang costs one stage, not the whole lease.
T_TEST=${T_TEST:-240} T_HF=${T_HF:-240} T_BENCH=${T_BENCH:-300} T_PROFILE=${T_PROFILE:-240}
mkdir -p "$OUT"
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit,enforced.power.limit --format=csv 2>&1 | tee "$OUT/gpu.txt"

if [ "$what" = test ] || [ "$what" = all ]; then
    echo "== test_kernels_gpu"
    TANDEM_REQUIRE_GPU=1 timeout -k 5 "$T_TEST" "$BIN/tests/test_kernels_gpu" 2>&1 | tee "$OUT/test_kernels_gpu.log" || status=1
    echo "== test_engine_gpu"
    TANDEM_REQUIRE_GPU=1 TANDEM_BIN="$BIN/tandem" timeout -k 5 "$T_TEST" "$BIN/tests/test_engine_gpu" 2>&1 | tee "$OUT/test_gpu.log" || status=1
    echo "== compare_hf"
    PYTHONUNBUFFERED=1 timeout -k 5 "$T_HF" python3 engine/compare_hf.py --tandem "$BIN/tandem" 2>&1 | tee "$OUT/compare_hf.log" || status=1
fi
if [ "$what" = profile ]; then
    echo "== bench_engine_gpu profile"
    timeout -k 5 "$T_PROFILE" "$BIN/bench_engine_gpu" profile 2>&1 | tee "$OUT/profile.log" || status=1
fi
if [ "$what" = bench ] && [ "${BENCH:-}" = offline ]; then
    echo "== bench_offline"
    # its stages are bounded one by one (T_RUN, T_HF_EAGER, T_HF_COMPILED), so no timeout here
    BIN="$BIN" OUT="$OUT/offline" bash engine/bench_offline.sh 2>&1 | tee "$OUT/bench_offline.log" || status=1
elif [ "$what" = bench ] || [ "$what" = all ]; then
    echo "== bench_engine_gpu"
    timeout -k 5 "$T_BENCH" "$BIN/bench_engine_gpu" "${BENCH:-all}" 2>&1 | tee "$OUT/bench.log" || status=1
fi

echo
echo "==================== summary ===================="
[ -f "$OUT/test_kernels_gpu.log" ] && grep -E "^[0-9]+%: Checks|Failures|:F:|:E:" "$OUT/test_kernels_gpu.log"
[ -f "$OUT/test_gpu.log" ] && grep -E "^[0-9]+%: Checks|Failures|:F:|:E:" "$OUT/test_gpu.log"
[ -f "$OUT/compare_hf.log" ] && grep -E "PASS|FAIL|greedy tokens:|rel L2 per row|compare_hf:" "$OUT/compare_hf.log"
[ -f "$OUT/bench.log" ] && grep -E "STEP|decode attention|prefill attention|ceiling" "$OUT/bench.log"
[ -f "$OUT/profile.log" ] && grep -E "^(PROFILE|CLOCKS|profile:)" "$OUT/profile.log"
[ -f "$OUT/bench_offline.log" ] && [ -f "$OUT/offline/table.md" ] && cat "$OUT/offline/table.md"
echo "gpu_check: $([ $status = 0 ] && echo all passed || echo FAILURES above)"
exit $status
