# tandem: one scheduling core, two backends (cost-model simulator and CUDA engine).
#
# `make` builds build/tandem; `make demo` and `make test` are the only two commands a fresh
# machine needs: every goal first runs `deps`, which installs the Debian packages that are missing.
#
# Two object trees are built from the same sources:
#   build/rel/  -O2, what build/tandem links
#   build/chk/  -O1 -DTANDEM_CHECKS=1, what tests link: invariants are checked after every step
# CUDA sources (kernels/*.cu) are compiled when nvcc is found (CI has it; no GPU is needed to
# compile). Set CUDA=0 to build without them. OpenMPI is linked when mpicc is found (sweeps
# across machines); MPI=0 builds without it, e.g. for a machine that has no libmpi.

.DEFAULT_GOAL := all

# ---- dependencies: checked first, by every goal ---------------------------------------------------
# The outer make installs missing Debian packages, then re-runs itself with TANDEM_DEPS_READY=1,
# so that what the packages bring (mpicc, headers) is seen when the build's variables are set.
# Headers and tools whose absence means a Debian package must be installed.
DEP_MARKERS := /usr/include/gsl/gsl_rng.h /usr/include/csv.h /usr/include/jansson.h /usr/bin/mpicc \
               /usr/include/check.h /usr/include/xxhash.h /usr/bin/gnuplot /usr/bin/pkg-config
DEB_PKGS    := libgsl-dev libcsv-dev libjansson-dev check libsubunit-dev libxxhash-dev gnuplot-nox pkg-config time bc libopenmpi-dev openmpi-bin
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

deps:
	@missing=""; for f in $(DEP_MARKERS); do [ -e $$f ] || missing="$$missing $$f"; done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: missing$$missing; installing: $(DEB_PKGS)"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(DEB_PKGS) \
	    || { echo "deps: apt-get failed; install these packages by hand: $(DEB_PKGS)" >&2; exit 1; }; \
	fi

ifneq ($(TANDEM_DEPS_READY),1)
GOALS := $(or $(MAKECMDGOALS),all)
ifeq ($(filter-out clean deps,$(GOALS)),)
clean:
	rm -rf build
else
# The build uses every core unless -j is given (the Hopper kernels alone take minutes on one).
PARALLEL = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 2))
.PHONY: forward $(GOALS)
$(GOALS): forward ; @:
forward:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory TANDEM_DEPS_READY=1 $(PARALLEL) $(MAKECMDGOALS)
endif
else

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90
# The wgmma kernel needs the architecture-specific target (sm_90a SASS runs on compute
# capability 9.0 only; the PTX beside it compiles the kernel to a trap it never reaches).
CUDA_ARCH_WGMMA ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
CUDA    ?= $(if $(NVCC),1,0)

BUILD   := build
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CSTD    := -std=c11 -D_GNU_SOURCE
INCS    := -I. -Icore
CFLAGS  ?= -O2 -g
CFLAGS_ALL = $(CSTD) $(WARN) $(INCS) $(CFLAGS) -MMD -MP
# Debian libraries are linked statically so the binary also runs on the GPU machine, which has
# none of them; the C library and libm stay dynamic. Of CUDA, only the runtime is linked
# (statically; it loads the driver itself when first called): cuBLAS and CUPTI are loaded with
# dlopen when the CUDA engine opens (engine/cuda_libs.h), from the run path set here, so that
# commands that never open it do not map them (~215 MB).
STATIC_LIBS := -Wl,-Bstatic -lgsl -lgslcblas -lcsv -ljansson -lxxhash -Wl,-Bdynamic
LDLIBS  := $(STATIC_LIBS) -lm -lpthread -ldl

ifeq ($(CUDA),1)
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter -lineinfo
CFLAGS_ALL += -DTANDEM_HAVE_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -lrt -lstdc++
# for programs that call cuBLAS themselves (bench_engine_gpu)
CUBLAS_LIBS := -lcublasLt -lcublas
# CUPTI (the kernel trace: `tandem run`'s kernel time per step, `bench_engine_gpu profile`):
# headers from where the toolkit keeps them (or CUPTI_INC); the library is loaded at run time,
# from the run path (CUPTI_LIB's too, when it is not beside cuBLAS). Without the headers the
# kernel trace says why it cannot run.
CUPTI_INC ?= $(firstword $(foreach d,$(CUDA_HOME)/include $(CUDA_HOME)/extras/CUPTI/include,$(if $(wildcard $(d)/cupti.h),$(d))))
CUPTI_LIB ?= $(firstword $(foreach d,$(CUDA_HOME)/lib64 $(CUDA_HOME)/extras/CUPTI/lib64,$(if $(wildcard $(d)/libcupti.so*),$(d))))
ifneq ($(CUPTI_INC),)
CFLAGS_ALL += -DTANDEM_HAVE_CUPTI=1 $(if $(filter $(CUDA_HOME)/include,$(CUPTI_INC)),,-I$(CUPTI_INC))
endif
ifneq ($(filter-out $(CUDA_HOME)/lib64,$(CUPTI_LIB)),)
LDLIBS  += -Wl,-rpath,$(CUPTI_LIB)
endif
CU_SRCS := $(wildcard kernels/*.cu)
else
CU_SRCS :=
endif

MPICC   ?= $(shell command -v mpicc 2>/dev/null)
MPI     ?= $(if $(MPICC),1,0)
ifeq ($(MPI),1)
CFLAGS_ALL += -DTANDEM_HAVE_MPI=1 $(shell $(MPICC) --showme:compile)
LDLIBS  += $(shell $(MPICC) --showme:link)
endif

# Every C source of the product, except the CLI's main (tests have their own).
LIB_DIRS := core policies policies/routers sim traces engine cli
LIB_SRCS := $(filter-out cli/main.c,$(wildcard $(addsuffix /*.c,$(LIB_DIRS))))
EMBED_SRC := $(BUILD)/gen/embedded_configs.c
TEST_SRCS := $(wildcard tests/test_*.c)

PROFILES_SRC := $(BUILD)/gen/embedded_profiles.c
GEN_SRCS := $(EMBED_SRC) $(PROFILES_SRC) $(BUILD)/gen/version.c
REL_OBJS := $(LIB_SRCS:%.c=$(BUILD)/rel/%.o) $(GEN_SRCS:$(BUILD)/gen/%.c=$(BUILD)/rel/gen/%.o) $(CU_SRCS:%.cu=$(BUILD)/rel/%.cu.o)
CHK_OBJS := $(LIB_SRCS:%.c=$(BUILD)/chk/%.o) $(GEN_SRCS:$(BUILD)/gen/%.c=$(BUILD)/chk/gen/%.o) $(CU_SRCS:%.cu=$(BUILD)/rel/%.cu.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)

.PHONY: all deps demo test test-sanitize test-gpu bench bench-gpu profile-gpu clean plots
# Objects reached through pattern rules are not intermediates to delete: keep them.
.SECONDARY:
all: $(BUILD)/tandem

# ---- product ------------------------------------------------------------------------------------
$(BUILD)/tandem: $(BUILD)/rel/cli/main.o $(REL_OBJS)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# C objects are compiled for one set of flags, named by a stamp file: when the flags change (e.g.
# MPI=0 and back), they and everything linked from them are deleted, so that nothing compiled for
# the other setting is used. (CUDA objects do not depend on these flags.)
FLAGS_STAMP := $(BUILD)/flags-$(shell printf '%s' '$(CFLAGS_ALL)' | md5sum | cut -c1-12)
ifeq ($(wildcard $(FLAGS_STAMP)),)
$(shell mkdir -p $(BUILD) && rm -f $(BUILD)/flags-* $(BUILD)/tandem $(BUILD)/bench_engine_gpu && \
  rm -rf $(BUILD)/tests && find $(BUILD) -name '*.o' ! -name '*.cu.o' -delete && touch $(FLAGS_STAMP))
endif

$(BUILD)/rel/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/chk/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -O2 -O3,$(CFLAGS_ALL)) -O1 -DTANDEM_CHECKS=1 -c $< -o $@

$(BUILD)/rel/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -I. -Icore -MMD -MP -c $< -o $@
$(BUILD)/rel/kernels/prefill_wgmma.cu.o: CUDA_ARCH = $(CUDA_ARCH_WGMMA)

# embed_files HEADER,STRUCT,ARRAY,FILES,EXT: a C array {name, text} of the files' contents (one
# C string each, name = file name without EXT), ending with {0, 0}, written to $@.
define embed_files
	@mkdir -p $(dir $@)
	@{ echo '/* generated by the Makefile from $(sort $(dir $(4))) */'; \
	   echo '#include "$(1)"'; \
	   echo 'const struct $(2) $(3)[] = {'; \
	   for f in $(sort $(4)); do \
	     printf '  { "%s", ' "$$(basename $$f $(5))"; \
	     sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $$f | tr -d '\n'; \
	     echo ' },'; \
	   done; \
	   echo '  { 0, 0 } };'; } > $@
endef

# The shipped model configs (Hugging Face config.json files) are compiled into the binary, so
# `--model llama-2-7b` works from any directory; so are the shipped profiles
# (configs/profiles/MODEL_GPU.csv, `tandem profile` output), of which the default cost model
# uses the one that matches --model and --gpu.
$(EMBED_SRC): $(wildcard configs/models/*.json) Makefile
	$(call embed_files,core/model_config.h,model_config_file,model_config_files,$(wildcard configs/models/*.json),.json)
# (a profile's kernel table, MODEL_GPU.kernels.csv beside it, is no profile)
SHIPPED_PROFILES := $(filter-out %.kernels.csv,$(wildcard configs/profiles/*.csv))
$(PROFILES_SRC): $(SHIPPED_PROFILES) Makefile
	$(call embed_files,sim/profile_model.h,profile_file,shipped_profiles,$(SHIPPED_PROFILES),.csv)
$(BUILD)/rel/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@
$(BUILD)/chk/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(INCS) -O1 -g -c $< -o $@

# The version string (`git describe` of the tree), rewritten only when it changes, so a build
# says what it was built from without recompiling anything else.
TANDEM_VERSION := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(shell mkdir -p $(BUILD)/gen && printf '/* generated by the Makefile */\nconst char tandem_version[] = "%s";\n' \
  '$(TANDEM_VERSION)' > $(BUILD)/gen/version.c.new && \
  { cmp -s $(BUILD)/gen/version.c.new $(BUILD)/gen/version.c && rm -f $(BUILD)/gen/version.c.new || \
    mv $(BUILD)/gen/version.c.new $(BUILD)/gen/version.c; })

# ---- tests --------------------------------------------------------------------------------------
CHECK_LIBS := -Wl,-Bstatic -lcheck -lsubunit -Wl,-Bdynamic -lrt
$(BUILD)/tests/%: $(BUILD)/chk/tests/%.o $(BUILD)/chk/tests/testutil.o $(CHK_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -g $(filter -fsanitize% -fno-sanitize%,$(CFLAGS)) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# Tests run from the repository root (they read traces/samples and tests/data) and each one
# fails with a message that says what differed. CK_DEFAULT_TIMEOUT guards against hangs only.
test: $(BUILD)/tandem $(TEST_BINS)
	@fail=0; for t in $(TEST_BINS); do \
	  CK_DEFAULT_TIMEOUT=600 TANDEM_BIN=$(BUILD)/tandem $$t || fail=1; \
	done; \
	for s in $(wildcard tests/*.sh); do TANDEM_BIN=$(BUILD)/tandem bash $$s || fail=1; done; \
	if [ $$fail = 0 ]; then echo "make test: all tests passed"; else echo "make test: FAILURES above"; exit 1; fi

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer, in its own tree
# (build/san; no CUDA or MPI, whose runtimes the sanitizers do not know). A few minutes on 2
# cores, so not part of `make test`.
SANITIZE_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
test-sanitize:
	@env ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1 \
	  $(MAKE) --no-print-directory BUILD=$(BUILD)/san CUDA=0 MPI=0 CFLAGS='$(SANITIZE_FLAGS)' test

# ---- demo ---------------------------------------------------------------------------------------
DEMO_OUT := $(BUILD)/demo
demo: $(BUILD)/tandem
	$(BUILD)/tandem sim --trace traces/samples/azure_conv_2023.csv --out $(DEMO_OUT)

# ---- benchmarks (not tests) ---------------------------------------------------------------------
bench: $(BUILD)/tandem
	bash tests/bench/bench_sim.sh

clean:
	rm -rf $(BUILD)

# Parts with targets of their own (engine/engine.mk: test-gpu, bench-gpu; ...) add them here.
include $(sort $(wildcard */*.mk))

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

endif
