# kernels.mk: kernels/dev, the kernels' lab (included by the main Makefile).
#
#   make dev-kernels   builds each kernels/dev/*.cu into build/dev/ (kernels/dev/README.md)
#
# Not part of `all`, `test` or CI: the product ships kernels/*.cu only. The programs include the
# product's headers (kernels/*.cuh), so they measure the code the product runs.

DEV_KERNELS := $(patsubst kernels/dev/%.cu,$(BUILD)/dev/%,$(wildcard kernels/dev/*.cu))

.PHONY: dev-kernels
ifeq ($(CUDA),1)
dev-kernels: $(DEV_KERNELS)

$(BUILD)/dev/%: kernels/dev/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -I. -Icore -MMD -MP -o $@ $< $(CUBLAS_LIBS)
else
dev-kernels:
	@echo "dev-kernels needs CUDA (nvcc)" >&2; exit 1
endif
