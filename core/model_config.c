/*
 * model_config.c: Hugging Face config.json -> model_config, with jansson.
 *
 * Only Llama-family decoder-only models are accepted (model_type "llama" or an architecture
 * ending in "LlamaForCausalLM"), and every field the engine and the cost model rely on is
 * checked, so a wrong file fails here with its name rather than later with a strange shape.
 *
 * Both spellings transformers writes are read: `rope_theta` + `rope_scaling` (up to 4.x) and
 * `rope_parameters` (5.x: theta, type and scaling in one object); `torch_dtype` or `dtype`; an
 * explicit `head_dim`; `eos_token_id` as a number or a list. A key that would change the model's
 * arithmetic and is not understood (a RoPE parameter tandem does not implement, biases on the
 * attention or MLP projections, two spellings that disagree) is an error naming it, never a
 * silent default.
 */
#include "model_config.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Largest value an integer field may take, where a model of that size is still something a GPU
 * could hold: beyond it a typo, and arithmetic on it could overflow. */
static int32_t int_max_of(const char *key)
{
    static const struct {
        const char *key;
        int32_t max;
    } caps[] = {
        {"hidden_size", 1 << 17},       {"intermediate_size", 1 << 20}, {"num_hidden_layers", 1 << 12},
        {"num_attention_heads", 1 << 12}, {"num_key_value_heads", 1 << 12}, {"head_dim", 1 << 12},
        {"vocab_size", 1 << 24},        {"max_position_embeddings", 1 << 24},
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        if (!strcmp(caps[i].key, key)) return caps[i].max;
    return INT32_MAX;
}

static int get_int(json_t *root, const char *key, int32_t *out, bool required, int32_t min,
                   const char *origin, terr *e)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) return terr_set(e, "%s: missing \"%s\"", origin, key);
        return 0;
    }
    if (!json_is_integer(v)) return terr_set(e, "%s: \"%s\" must be an integer", origin, key);
    json_int_t x = json_integer_value(v);
    if (x < min || x > int_max_of(key))
        return terr_set(e, "%s: \"%s\" = %lld is out of range [%d, %d]", origin, key, (long long)x, min,
                        int_max_of(key));
    *out = (int32_t)x;
    return 0;
}

static int get_num(json_t *root, const char *key, double *out, const char *origin, terr *e)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return terr_set(e, "%s: \"%s\" must be a number", origin, key);
    *out = json_number_value(v);
    return 0;
}

/* A RoPE object (`rope_scaling`, or transformers 5's `rope_parameters`, which also holds
 * rope_theta): its type and, for llama3, its factors. Every key must be one tandem implements. */
static int parse_rope(model_config *mc, json_t *rs, const char *what, const char *origin, terr *e)
{
    if (!json_is_object(rs)) return terr_set(e, "%s: \"%s\" must be an object", origin, what);
    static const char *const known[] = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor",
                                        "high_freq_factor", "original_max_position_embeddings"};
    const char *key;
    json_t *v;
    json_object_foreach(rs, key, v) {
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= !strcmp(key, known[i]);
        if (!ok) return terr_set(e, "%s: \"%s\".%s is not supported (tandem implements default and llama3 RoPE)",
                                 origin, what, key);
    }
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type) type = json_string_value(json_object_get(rs, "type"));
    if (!type) type = "default";
    if (strcmp(type, "llama3") && strcmp(type, "default"))
        return terr_set(e, "%s: %s type \"%s\" is not supported (default, llama3)", origin, what, type);
    if (strcmp(type, "llama3")) {
        if (json_object_get(rs, "factor"))
            return terr_set(e, "%s: \"%s\".factor with RoPE type default is not supported", origin, what);
        return 0;
    }
    mc->rope_scaling = ROPE_SCALING_LLAMA3;
    mc->rope_factor = 8.0;
    mc->rope_low_freq_factor = 1.0;
    mc->rope_high_freq_factor = 4.0;
    mc->rope_original_max_pos = 8192;
    if (get_num(rs, "factor", &mc->rope_factor, origin, e) ||
        get_num(rs, "low_freq_factor", &mc->rope_low_freq_factor, origin, e) ||
        get_num(rs, "high_freq_factor", &mc->rope_high_freq_factor, origin, e) ||
        get_int(rs, "original_max_position_embeddings", &mc->rope_original_max_pos, false, 1, origin, e))
        return -1;
    if (mc->rope_high_freq_factor <= mc->rope_low_freq_factor)
        return terr_set(e, "%s: %s high_freq_factor must exceed low_freq_factor", origin, what);
    return 0;
}

int model_config_parse(model_config *mc, const char *json_text, const char *origin, terr *e)
{
    json_error_t jerr;
    json_t *root = json_loads(json_text, 0, &jerr);
    if (!root) return terr_set(e, "%s:%d: invalid JSON: %s", origin, jerr.line, jerr.text);
    int rc = -1;
    if (!json_is_object(root)) {
        terr_set(e, "%s: not a JSON object", origin);
        goto out;
    }
    *mc = (model_config){0};
    snprintf(mc->name, sizeof mc->name, "%s", origin);

    const char *model_type = json_string_value(json_object_get(root, "model_type"));
    bool llama = model_type && strcmp(model_type, "llama") == 0;
    json_t *archs = json_object_get(root, "architectures");
    for (size_t i = 0; archs && json_is_array(archs) && i < json_array_size(archs); i++) {
        const char *a = json_string_value(json_array_get(archs, i));
        size_t n = a ? strlen(a) : 0;
        if (n >= 16 && strcmp(a + n - 16, "LlamaForCausalLM") == 0) llama = true;
    }
    if (!llama) {
        terr_set(e, "%s: model_type \"%s\" is not supported (tandem runs Llama-family models)",
                 origin, model_type ? model_type : "(none)");
        goto out;
    }
    const char *act = json_string_value(json_object_get(root, "hidden_act"));
    if (act && strcmp(act, "silu") != 0) {
        terr_set(e, "%s: hidden_act \"%s\" is not supported (only silu)", origin, act);
        goto out;
    }

    if (get_int(root, "hidden_size", &mc->hidden_size, true, 1, origin, e) ||
        get_int(root, "intermediate_size", &mc->intermediate_size, true, 1, origin, e) ||
        get_int(root, "num_hidden_layers", &mc->num_layers, true, 1, origin, e) ||
        get_int(root, "num_attention_heads", &mc->num_heads, true, 1, origin, e) ||
        get_int(root, "vocab_size", &mc->vocab_size, true, 1, origin, e) ||
        get_int(root, "max_position_embeddings", &mc->max_position_embeddings, true, 1, origin, e))
        goto out;
    mc->num_kv_heads = mc->num_heads;
    if (get_int(root, "num_key_value_heads", &mc->num_kv_heads, false, 1, origin, e)) goto out;
    if (mc->hidden_size % mc->num_heads) {
        terr_set(e, "%s: hidden_size %d is not a multiple of num_attention_heads %d", origin,
                 mc->hidden_size, mc->num_heads);
        goto out;
    }
    mc->head_dim = mc->hidden_size / mc->num_heads;
    if (get_int(root, "head_dim", &mc->head_dim, false, 1, origin, e)) goto out;
    if (mc->num_heads % mc->num_kv_heads) {
        terr_set(e, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                 origin, mc->num_heads, mc->num_kv_heads);
        goto out;
    }
    if (mc->head_dim % 2) {
        terr_set(e, "%s: head_dim %d must be even for RoPE", origin, mc->head_dim);
        goto out;
    }
    mc->rms_norm_eps = 1e-6;
    mc->rope_theta = 10000.0;
    if (get_num(root, "rms_norm_eps", &mc->rms_norm_eps, origin, e) ||
        get_num(root, "rope_theta", &mc->rope_theta, origin, e))
        goto out;
    if (!(mc->rms_norm_eps > 0 && mc->rms_norm_eps < 1)) {
        terr_set(e, "%s: \"rms_norm_eps\" = %g must be in (0, 1)", origin, mc->rms_norm_eps);
        goto out;
    }
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    mc->tie_word_embeddings = tie && json_is_true(tie);
    mc->bos_token_id = 1;
    mc->eos_token_id = 2;
    json_t *eos = json_object_get(root, "eos_token_id");
    if (eos && json_is_array(eos)) eos = json_array_get(eos, 0);
    if (eos && json_is_integer(eos)) mc->eos_token_id = (int32_t)json_integer_value(eos);
    if (get_int(root, "bos_token_id", &mc->bos_token_id, false, 0, origin, e)) goto out;
    if (mc->eos_token_id < 0 || mc->eos_token_id >= mc->vocab_size || mc->bos_token_id >= mc->vocab_size) {
        terr_set(e, "%s: eos_token_id %d / bos_token_id %d must be ids below vocab_size %d", origin, mc->eos_token_id,
                 mc->bos_token_id, mc->vocab_size);
        goto out;
    }

    const char *dtype = json_string_value(json_object_get(root, "torch_dtype"));
    if (!dtype) dtype = json_string_value(json_object_get(root, "dtype"));
    mc->dtype_bytes = 2;
    if (dtype && strcmp(dtype, "float32") == 0) mc->dtype_bytes = 4;
    else if (dtype && strcmp(dtype, "bfloat16") && strcmp(dtype, "float16")) {
        terr_set(e, "%s: torch_dtype \"%s\" is not supported (bfloat16, float16, float32)",
                 origin, dtype);
        goto out;
    }

    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < sizeof biases / sizeof biases[0]; i++)
        if (json_is_true(json_object_get(root, biases[i]))) {
            terr_set(e, "%s: \"%s\": true is not supported (tandem's Llama projections have no bias)", origin,
                     biases[i]);
            goto out;
        }
    json_t *rp = json_object_get(root, "rope_parameters");
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp)) {
            terr_set(e, "%s: \"rope_parameters\" must be an object", origin);
            goto out;
        }
        double theta = mc->rope_theta;
        if (get_num(rp, "rope_theta", &mc->rope_theta, origin, e)) goto out;
        if (json_object_get(root, "rope_theta") && theta != mc->rope_theta) {
            terr_set(e, "%s: \"rope_theta\" (%g) and \"rope_parameters\".rope_theta (%g) disagree", origin, theta,
                     mc->rope_theta);
            goto out;
        }
        json_t *rs = json_object_get(root, "rope_scaling");
        if (rs && !json_is_null(rs)) { /* both spellings: they must say the same */
            json_t *scaling = json_deep_copy(rp);
            json_object_del(scaling, "rope_theta");
            bool same = json_equal(scaling, rs);
            json_decref(scaling);
            if (!same) {
                terr_set(e, "%s: \"rope_scaling\" and \"rope_parameters\" disagree", origin);
                goto out;
            }
        }
        if (parse_rope(mc, rp, "rope_parameters", origin, e)) goto out;
    } else {
        json_t *rs = json_object_get(root, "rope_scaling");
        if (rs && !json_is_null(rs) && parse_rope(mc, rs, "rope_scaling", origin, e)) goto out;
    }
    if (!(mc->rope_theta > 1 && mc->rope_theta < 1e12)) {
        terr_set(e, "%s: rope_theta %g must be in (1, 1e12)", origin, mc->rope_theta);
        goto out;
    }
    if (mc->rope_scaling == ROPE_SCALING_LLAMA3 &&
        !(mc->rope_factor > 0 && mc->rope_low_freq_factor > 0 && mc->rope_high_freq_factor > 0)) {
        terr_set(e, "%s: the llama3 RoPE factors must be > 0", origin);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int model_config_load(model_config *mc, const char *spec, terr *e)
{
    for (const struct model_config_file *f = model_config_files; f->name; f++) {
        if (strcmp(f->name, spec) == 0) {
            char origin[160];
            snprintf(origin, sizeof origin, "configs/models/%s.json", spec);
            if (model_config_parse(mc, f->json, origin, e)) return -1;
            snprintf(mc->name, sizeof mc->name, "%s", spec);
            return 0;
        }
    }
    char path[4096];
    struct stat st;
    if (stat(spec, &st) != 0) {
        char names[1024] = "";
        for (const struct model_config_file *f = model_config_files; f->name; f++) {
            strncat(names, names[0] ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, f->name, sizeof names - strlen(names) - 1);
        }
        return terr_set(e, "--model: \"%s\" is neither a shipped model (%s) nor a path", spec,
                        names);
    }
    if (S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%s/config.json", spec);
    else snprintf(path, sizeof path, "%s", spec);
    char *text = read_text_file(path, NULL, e);
    if (!text) return -1;
    int rc = model_config_parse(mc, text, path, e);
    free(text);
    return rc;
}

int64_t model_num_params(const model_config *mc)
{
    int64_t h = mc->hidden_size, I = mc->intermediate_size, V = mc->vocab_size;
    int64_t q = (int64_t)mc->num_heads * mc->head_dim, kv = (int64_t)mc->num_kv_heads * mc->head_dim;
    int64_t per_layer = h * (q + 2 * kv) + q * h + 3 * h * I + 2 * h;
    return V * h + mc->num_layers * per_layer + h + (mc->tie_word_embeddings ? 0 : V * h);
}

int64_t model_kv_bytes_per_token(const model_config *mc, int dtype_bytes)
{
    return 2LL * mc->num_layers * mc->num_kv_heads * mc->head_dim * dtype_bytes;
}

void model_config_list(FILE *f)
{
    for (const struct model_config_file *c = model_config_files; c->name; c++)
        fprintf(f, "%s\n", c->name);
}
