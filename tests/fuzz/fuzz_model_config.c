/*
 * fuzz_model_config.c: a model's config.json (core/model_config.c) from any bytes: JSON, the
 * two spellings of RoPE, and the bounds on every number. A config that loads must have the
 * sizes the rest of tandem relies on.
 */
#include "core/model_config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    model_config mc;
    terr e;
    if (model_config_parse(&mc, text, "config.json", &e) == 0) {
        if (mc.hidden_size < 1 || mc.num_layers < 1 || mc.num_heads < 1 || mc.num_kv_heads < 1 ||
            mc.vocab_size < 1 || mc.head_dim < 1 || !(mc.rms_norm_eps > 0) || !(mc.rope_theta > 0) ||
            mc.eos_token_id >= mc.vocab_size)
            abort();
    }
    free(text);
    return 0;
}
