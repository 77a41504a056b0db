# engine.mk: the engine's make targets (included by the main Makefile).
#
#   make test-gpu    GPU kernel and model tests (TANDEM_REQUIRE_GPU=1) and the comparison with
#                    transformers; needs an NVIDIA GPU and, for the comparison, PyTorch +
#                    transformers in python3.
#   make bench-gpu   kernel and whole-step benchmarks on the GPU (figures: docs/engine.md).
#
# Both build here and run engine/gpu_check.sh, which runs prebuilt binaries only (the GPU
# machine has no Debian libraries to build with). For a GPU machine without libmpi, build with
# `make MPI=0` (tandem links OpenMPI dynamically otherwise) and copy build/ there.

ENGINE_BENCH := $(BUILD)/bench_engine_gpu

ifeq ($(CUDA),1)
$(ENGINE_BENCH): $(BUILD)/rel/engine/bench/bench_gpu.o $(REL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
all: $(ENGINE_BENCH)
else
$(ENGINE_BENCH):
	@echo "bench-gpu needs CUDA (nvcc)" >&2; exit 1
endif

test-gpu: $(BUILD)/tandem $(BUILD)/tests/test_engine_gpu
	BIN=$(BUILD) bash engine/gpu_check.sh test

bench-gpu: $(BUILD)/tandem $(ENGINE_BENCH)
	BIN=$(BUILD) bash engine/gpu_check.sh bench

