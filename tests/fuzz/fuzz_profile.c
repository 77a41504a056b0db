/*
 * fuzz_profile.c: a profile file (sim/profile_model.c) from any bytes: provenance lines,
 * heat_alpha, the header with or without padding_tokens, rows, and the fit. A profile that
 * loads must price any step at a positive, finite time, hot or cold.
 */
#include "core/model_config.h"
#include "fuzz_util.h"
#include "sim/gpu.h"
#include "sim/profile_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static model_config mc;
    static int loaded;
    terr e;
    if (!loaded) {
        if (model_config_load(&mc, "tiny-llama2", &e)) abort();
        loaded = 1;
    }
    const char *path = fuzz_write("profile.csv", NULL, data, size);
    cost_model_opts o = cost_model_opts_default();
    o.arg = path;
    o.force = true; /* another model's or GPU's profile is fitted too */
    void *m = profile_cost_model.create(&mc, gpu_find("h200"), &o, &e);
    if (!m) return 0;
    const step_shape shapes[] = {
        {.num_items = 1, .num_decode_seqs = 1, .num_emitting = 1, .decode_tokens = 1, .decode_keys = 100,
         .decode_keys_sq = 10000, .max_keys = 100},
        {.num_items = 2, .num_prefill_seqs = 2, .num_emitting = 2, .prefill_tokens = 600, .padding_tokens = 400,
         .prefill_pairs2 = 180600, .prefill_keys = 600, .max_keys = 500, .heat = 0.7},
        {.num_items = 3, .num_decode_seqs = 3, .num_emitting = 3, .decode_tokens = 3, .padding_tokens = 61,
         .decode_keys = 3000000, .decode_keys_sq = 3000000000000LL, .max_keys = 1000000, .swap_blocks = 7},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (profile_cost_model.step_ns(m, &shapes[i]) < 1) abort();
    profile_cost_model.destroy(m);
    return 0;
}
