# tests/fuzz.mk: fuzz harnesses for every parser of outside input (tests/fuzz/*.c), built with
# clang's libFuzzer under AddressSanitizer and UndefinedBehaviorSanitizer in build/fuzz (no CUDA
# or MPI), each started from its seed corpus in tests/fuzz/corpus/NAME.
#
#   make fuzz                    every harness for FUZZ_SECONDS (20) each: what CI runs
#   make fuzz-long               every harness for FUZZ_LONG_SECONDS (3600) each, one per core
#   make fuzz FUZZ_SECONDS=600 FUZZ_ONLY=fuzz_trace_azure   one harness, longer
#
# New inputs the fuzzer finds go to build/fuzz/corpus/NAME (the seeds stay as committed); a
# crash leaves build/fuzz/crash-* (rerun one: build/fuzz/bin/NAME build/fuzz/crash-...), and
# the target fails. clang and its runtime (clang, libclang-rt-dev) are installed when missing,
# as `make deps` installs the rest.

FUZZ_TRACES  := fuzz_trace_azure fuzz_trace_vidur fuzz_trace_mooncake fuzz_trace_tandem
FUZZ_NAMES   := $(FUZZ_TRACES) fuzz_sweep_spec fuzz_model_config fuzz_profile fuzz_safetensors fuzz_safetensors_index
FUZZ_ONLY    ?= $(FUZZ_NAMES)
FUZZ_SECONDS ?= 20
FUZZ_LONG_SECONDS ?= 3600
FUZZ_CFLAGS  := -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
                -fno-omit-frame-pointer -Wno-error
FUZZ_BUILD   := build/fuzz

.PHONY: fuzz fuzz-long fuzz-deps fuzz-bins
fuzz-deps:
	@echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' | \
	  clang -x c -fsanitize=fuzzer - -o /dev/null 2>/dev/null || { \
	  echo "fuzz: clang with libFuzzer is missing; installing clang libclang-rt-dev"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang libclang-rt-dev \
	    || { echo "fuzz: apt-get failed; install clang and libclang-rt-dev by hand" >&2; exit 1; }; }

# the harnesses, built by a make of their own in build/fuzz with clang and the fuzz flags
fuzz-bins: fuzz-deps
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang CUDA=0 MPI=0 CFLAGS='$(FUZZ_CFLAGS)' \
	  $(addprefix $(FUZZ_BUILD)/bin/,$(FUZZ_ONLY))

# fuzz_run SECONDS, JOBS: each harness of FUZZ_ONLY in turn, from its seeds
define fuzz_run
	@fail=0; for n in $(FUZZ_ONLY); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$n; \
	  echo "fuzz: $$n for $(1) s"; \
	  $(FUZZ_BUILD)/bin/$$n -max_total_time=$(1) -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
	    -artifact_prefix=$(FUZZ_BUILD)/crash-$$n- -print_final_stats=1 $(2) \
	    $(FUZZ_BUILD)/corpus/$$n tests/fuzz/corpus/$$n 2>$(FUZZ_BUILD)/$$n.log \
	    || { fail=1; tail -n 40 $(FUZZ_BUILD)/$$n.log; }; \
	  grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' $(FUZZ_BUILD)/$$n.log | tail -n 1; \
	done; \
	if [ $$fail = 0 ]; then echo "make fuzz: no crash"; else echo "make fuzz: CRASHES above" >&2; exit 1; fi
endef

fuzz: fuzz-bins
	$(call fuzz_run,$(FUZZ_SECONDS),)
fuzz-long: fuzz-bins
	$(call fuzz_run,$(FUZZ_LONG_SECONDS),-fork=$(shell nproc 2>/dev/null || echo 2))

# (in the make above, BUILD is build/fuzz: REL_OBJS are the product's sources built for fuzzing)
$(BUILD)/bin/fuzz_%: $(BUILD)/rel/tests/fuzz/fuzz_%.o $(REL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)
$(BUILD)/rel/tests/fuzz/fuzz_trace_%.o: tests/fuzz/fuzz_trace.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -DFUZZ_TRACE_$* -c $< -o $@
