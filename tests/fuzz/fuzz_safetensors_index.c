/*
 * fuzz_safetensors_index.c: a sharded checkpoint's model.safetensors.index.json
 * (engine/safetensors.c: st_checkpoint_open) from any bytes, beside one valid shard,
 * "a.safetensors" (two tiny tensors, "x" and "y"), so that inputs naming it reach the lookup.
 */
#include "engine/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const void *shard_bytes(void *ctx, int32_t i, terr *e)
{
    static const float x[2] = {1, 2}, y[3] = {3, 4, 5};
    (void)ctx, (void)e;
    return i == 0 ? (const void *)x : (const void *)y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int have_shard;
    terr e;
    if (!have_shard) {
        char shard[512];
        snprintf(shard, sizeof shard, "%s/a.safetensors", fuzz_dir());
        st_write_tensor w[2] = {{"x", ST_F32, 1, {2}}, {"y", ST_F32, 1, {3}}};
        if (st_write(shard, w, 2, shard_bytes, NULL, &e)) abort();
        have_shard = 1;
    }
    fuzz_write("model.safetensors.index.json", NULL, data, size);
    st_checkpoint c;
    if (st_checkpoint_open(&c, fuzz_dir(), &e)) return 0;
    const char *names[] = {"x", "y", "z"};
    for (int i = 0; i < 3; i++) {
        const st_file *f;
        const st_tensor *t;
        if (st_checkpoint_find(&c, names[i], &f, &t, &e) == 0 && (!f || !t)) abort();
    }
    st_checkpoint_close(&c);
    return 0;
}
