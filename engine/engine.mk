# engine.mk: the engine's make targets (included by the main Makefile).
#
#   make test-gpu    GPU kernel and model tests (TANDEM_REQUIRE_GPU=1) and the comparison with
#                    transformers; needs an NVIDIA GPU and, for the comparison, PyTorch +
#                    transformers in python3.
#   make bench-gpu   kernel and whole-step benchmarks on the GPU (figures: docs/engine.md);
#                    BENCH=kernels, decode, steps, swap or host for one part; BENCH=offline
#                    for the offline throughput of whole models beside transformers' generate
#                    and the roofline (engine/bench_offline.sh: needs PyTorch + transformers,
#                    ~10+ minutes; its knobs MODELS, BATCHES, HF, ... pass through the
#                    environment).
#   make profile-gpu whole steps kernel by kernel (CUPTI trace) with the GPU's clocks (NVML).
#   make calib       build/roofline_probe (sim/calib/roofline_probe.cu): the rates the cost
#                    model's constants stand on; run it on the GPU machine (not part of `all`).
#
# Both build here and run engine/gpu_check.sh, which runs prebuilt binaries only (the GPU
# machine has no Debian libraries to build with). For a GPU machine without libmpi, build with
# `make MPI=0` (tandem links OpenMPI dynamically otherwise) and copy build/ there.

ENGINE_BENCH := $(BUILD)/bench_engine_gpu
ENGINE_BENCH_OBJS := $(BUILD)/rel/engine/bench/bench_gpu.o $(BUILD)/rel/engine/bench/profile_gpu.o

ifeq ($(CUDA),1)
$(ENGINE_BENCH): $(ENGINE_BENCH_OBJS) $(REL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUBLAS_LIBS)
all: $(ENGINE_BENCH)
else
$(ENGINE_BENCH):
	@echo "bench-gpu needs CUDA (nvcc)" >&2; exit 1
endif

# The GPU tests share tests/testutil_gpu.c (comparisons with the CPU reference, the skip rule).
GPU_TESTS := $(BUILD)/tests/test_kernels_gpu $(BUILD)/tests/test_engine_gpu
$(GPU_TESTS): $(BUILD)/chk/tests/testutil_gpu.o

test-gpu: $(BUILD)/tandem $(GPU_TESTS)
	BIN=$(BUILD) bash engine/gpu_check.sh test

bench-gpu: $(BUILD)/tandem $(ENGINE_BENCH)
	BIN=$(BUILD) bash engine/gpu_check.sh bench

profile-gpu: $(ENGINE_BENCH)
	BIN=$(BUILD) bash engine/gpu_check.sh profile

# The cost model's calibration probe (its output on this project's H200: sim/calib/h200-probe.txt).
CALIB_PROBE := $(BUILD)/roofline_probe
.PHONY: calib
ifeq ($(CUDA),1)
calib: $(CALIB_PROBE)
$(CALIB_PROBE): sim/calib/roofline_probe.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -I. -Icore -MMD -MP -o $@ $< -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lcublas
else
calib:
	@echo "calib needs CUDA (nvcc)" >&2; exit 1
endif

# `make bench-ktrace` (also part of `make bench`): the kernel trace's bookkeeping per step, on
# the CPU (tests/bench/bench_ktrace.c). A benchmark, not a test.
.PHONY: bench-ktrace
bench: bench-ktrace
$(BUILD)/bench/bench_ktrace: $(BUILD)/rel/tests/bench/bench_ktrace.o $(REL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
bench-ktrace: $(BUILD)/bench/bench_ktrace
	$(BUILD)/bench/bench_ktrace
