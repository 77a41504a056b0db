/*
 * fuzz_safetensors.c: a safetensors file (engine/safetensors.c: st_open) from any bytes: the
 * 8-byte header length, the JSON header, dtypes, shapes and data offsets. Every tensor of a
 * file that opens must lie inside it, so reading all of its bytes is safe.
 */
#include "engine/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("model.safetensors", NULL, data, size);
    st_file f;
    terr e;
    if (st_open(&f, path, &e)) return 0;
    volatile uint8_t sum = 0;
    for (int32_t i = 0; i < f.num_tensors; i++) {
        const uint8_t *p = st_tensor_data(&f, &f.tensors[i]);
        int64_t bytes = st_numel(&f.tensors[i]) * st_dtype_size(f.tensors[i].dtype);
        for (int64_t k = 0; k < bytes; k++) sum += p[k]; /* ASan: inside the mapping */
        if (st_find(&f, f.tensors[i].name) == NULL) abort();
    }
    st_close(&f);
    return 0;
}
