/* weights.c: see weights.h. */
#include "engine/weights.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/numerics.h"

/* Synthetic values. Matrices are N(0, 1/fan_in), so every projection keeps unit-scale
 * activations at any width (for h = 4096 that is 0.016, close to Hugging Face's 0.02 init; a
 * fixed 0.02 makes a tiny model's layers vanish and its greedy output one repeated token). The
 * embedding is N(0, 0.02): small against the layers' outputs, so even with a tied LM head the
 * model does not just predict its input token again. Norm weights are 1 + N(0, 0.1) rather than
 * exactly 1, so a kernel that ignored or misindexed them would show. */
#define SYNTH_EMBED_STD 0.02f
#define SYNTH_NORM_STD 0.1f

static int32_t add(wt_tensor *out, int32_t n, const char *name, int32_t layer, int32_t ndim,
                   int64_t rows, int64_t cols, wt_fused fused, int64_t row_offset, uint32_t id)
{
    if (out) {
        wt_tensor *t = &out[n];
        *t = (wt_tensor){0};
        snprintf(t->name, sizeof t->name, "%s", name);
        t->layer = layer;
        t->ndim = ndim;
        t->rows = rows;
        t->cols = cols;
        t->fused = fused;
        t->row_offset = row_offset;
        t->synth_id = id;
        bool norm = ndim == 1;
        t->synth_mean = norm ? 1.0f : 0.0f;
        t->synth_std = norm ? SYNTH_NORM_STD
                       : fused == WF_EMBED ? SYNTH_EMBED_STD
                                           : (float)(1.0 / sqrt((double)cols));
    }
    return n + 1;
}

int32_t wt_list(const model_config *mc, wt_tensor *out)
{
    int64_t h = mc->hidden_size, I = mc->intermediate_size, V = mc->vocab_size;
    int64_t q = (int64_t)mc->num_heads * mc->head_dim, kv = (int64_t)mc->num_kv_heads * mc->head_dim;
    int32_t n = 0;
    n = add(out, n, "model.embed_tokens.weight", -1, 2, V, h, WF_EMBED, 0, 0);
    for (int32_t l = 0; l < mc->num_layers; l++) {
        char nm[96];
        uint32_t id = 1 + 16 * (uint32_t)l;
#define L(suffix) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), nm)
        n = add(out, n, L("input_layernorm.weight"), l, 1, h, 1, WF_ATTN_NORM, 0, id + 0);
        n = add(out, n, L("self_attn.q_proj.weight"), l, 2, q, h, WF_QKV, 0, id + 1);
        n = add(out, n, L("self_attn.k_proj.weight"), l, 2, kv, h, WF_QKV, q, id + 2);
        n = add(out, n, L("self_attn.v_proj.weight"), l, 2, kv, h, WF_QKV, q + kv, id + 3);
        n = add(out, n, L("self_attn.o_proj.weight"), l, 2, h, q, WF_O, 0, id + 4);
        n = add(out, n, L("post_attention_layernorm.weight"), l, 1, h, 1, WF_MLP_NORM, 0, id + 5);
        n = add(out, n, L("mlp.gate_proj.weight"), l, 2, I, h, WF_GU, 0, id + 6);
        n = add(out, n, L("mlp.up_proj.weight"), l, 2, I, h, WF_GU, I, id + 7);
        n = add(out, n, L("mlp.down_proj.weight"), l, 2, h, I, WF_DOWN, 0, id + 8);
#undef L
    }
    uint32_t id = 1 + 16 * (uint32_t)mc->num_layers;
    n = add(out, n, "model.norm.weight", -1, 1, h, 1, WF_FINAL_NORM, 0, id);
    if (!mc->tie_word_embeddings) n = add(out, n, "lm_head.weight", -1, 2, V, h, WF_LM_HEAD, 0, id + 1);
    return n;
}

void wt_fused_shape(const model_config *mc, wt_fused f, int64_t *rows, int64_t *cols)
{
    int64_t h = mc->hidden_size, I = mc->intermediate_size, V = mc->vocab_size;
    int64_t q = (int64_t)mc->num_heads * mc->head_dim, kv = (int64_t)mc->num_kv_heads * mc->head_dim;
    switch (f) {
    case WF_EMBED:
    case WF_LM_HEAD: *rows = V, *cols = h; return;
    case WF_ATTN_NORM:
    case WF_MLP_NORM:
    case WF_FINAL_NORM: *rows = h, *cols = 1; return;
    case WF_QKV: *rows = q + 2 * kv, *cols = h; return;
    case WF_O: *rows = h, *cols = q; return;
    case WF_GU: *rows = 2 * I, *cols = h; return;
    case WF_DOWN: *rows = h, *cols = I; return;
    case WF_NUM: break;
    }
    *rows = *cols = 0;
}

void wt_source_synthetic(wt_source *s, uint64_t seed)
{
    *s = (wt_source){0};
    s->synthetic = true;
    s->seed = seed;
}

void wt_source_close(wt_source *s)
{
    if (!s->synthetic) st_checkpoint_close(&s->ckpt);
    *s = (wt_source){0};
}

static int check_tensor(const st_file *f, const st_tensor *st, const wt_tensor *t, terr *e)
{
    if (st->dtype != ST_BF16 && st->dtype != ST_F16 && st->dtype != ST_F32)
        return terr_set(e, "%s: tensor \"%s\" has dtype %s; supported: BF16, F16, F32", f->path,
                        t->name, st_dtype_name(st->dtype));
    bool ok = st->ndim == t->ndim && st->shape[0] == t->rows && (t->ndim == 1 || st->shape[1] == t->cols);
    if (!ok) {
        char got[128] = "[", want[64];
        for (int32_t i = 0; i < st->ndim; i++) {
            size_t k = strlen(got);
            snprintf(got + k, sizeof got - k, "%s%lld", i ? ", " : "", (long long)st->shape[i]);
        }
        strncat(got, "]", sizeof got - strlen(got) - 1);
        if (t->ndim == 1) snprintf(want, sizeof want, "[%lld]", (long long)t->rows);
        else snprintf(want, sizeof want, "[%lld, %lld]", (long long)t->rows, (long long)t->cols);
        return terr_set(e, "%s: tensor \"%s\" has shape %s, the config needs %s", f->path, t->name,
                        got, want);
    }
    return 0;
}

int wt_source_open_checkpoint(wt_source *s, const model_config *mc, const char *dir, terr *e)
{
    *s = (wt_source){0};
    if (st_checkpoint_open(&s->ckpt, dir, e)) return -1;
    int32_t n = wt_count(mc);
    wt_tensor *ts = xcalloc((size_t)n, sizeof *ts);
    wt_list(mc, ts);
    int rc = 0;
    for (int32_t i = 0; i < n && rc == 0; i++) {
        const st_file *f;
        const st_tensor *st;
        rc = st_checkpoint_find(&s->ckpt, ts[i].name, &f, &st, e) || check_tensor(f, st, &ts[i], e)
                 ? -1 : 0;
    }
    free(ts);
    if (rc) wt_source_close(s);
    return rc;
}

/* Element i of a checkpoint tensor as float (the data may be unaligned: memcpy). */
static inline float load_elem(const uint8_t *p, st_dtype dt, int64_t i)
{
    if (dt == ST_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t b;
    memcpy(&b, p + 2 * i, 2);
    return dt == ST_BF16 ? bf16_to_f32(b) : f16_to_f32(b);
}

static int find(const wt_source *s, const wt_tensor *t, const st_file **f, const st_tensor **st,
                terr *e)
{
    if (st_checkpoint_find(&s->ckpt, t->name, f, st, e)) return -1;
    return check_tensor(*f, *st, t, e);
}

/* A checkpoint's weights must be finite: one NaN or Inf makes every logit NaN. The scan rides
 * on the copy the read makes anyway. */
static int not_finite(const st_file *f, const wt_tensor *t, int64_t i, float v, terr *e)
{
    return terr_set(e, "%s: tensor \"%s\" holds %s at element %lld (weights must be finite)", f->path, t->name,
                    isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", (long long)i);
}

static inline bool bf16_finite(uint16_t b) { return (b & 0x7f80) != 0x7f80; }

int wt_read_f32(const wt_source *s, const wt_tensor *t, float *dst, terr *e)
{
    int64_t n = t->rows * t->cols;
    if (s->synthetic) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = bf16_to_f32(synth_weight_bf16(s->seed, t->synth_id, (uint64_t)i, t->synth_mean,
                                                   t->synth_std));
        return 0;
    }
    const st_file *f;
    const st_tensor *st;
    if (find(s, t, &f, &st, e)) return -1;
    const uint8_t *p = st_tensor_data(f, st);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i] = load_elem(p, st->dtype, i))) return not_finite(f, t, i, dst[i], e);
    return 0;
}

int wt_read_bf16(const wt_source *s, const wt_tensor *t, uint16_t *dst, terr *e)
{
    int64_t n = t->rows * t->cols;
    if (s->synthetic) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = synth_weight_bf16(s->seed, t->synth_id, (uint64_t)i, t->synth_mean, t->synth_std);
        return 0;
    }
    const st_file *f;
    const st_tensor *st;
    if (find(s, t, &f, &st, e)) return -1;
    const uint8_t *p = st_tensor_data(f, st);
    if (st->dtype == ST_BF16) memcpy(dst, p, (size_t)n * 2);
    else for (int64_t i = 0; i < n; i++) dst[i] = f32_to_bf16(load_elem(p, st->dtype, i));
    for (int64_t i = 0; i < n; i++) /* after rounding: an F32 beyond bf16's range is Inf too */
        if (!bf16_finite(dst[i])) return not_finite(f, t, i, bf16_to_f32(dst[i]), e);
    return 0;
}

/* ---- writing a checkpoint ---------------------------------------------------------------- */

char *model_config_to_json(const model_config *mc)
{
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    json_object_set_new(c, "model_type", json_string("llama"));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "hidden_size", json_integer(mc->hidden_size));
    json_object_set_new(c, "intermediate_size", json_integer(mc->intermediate_size));
    json_object_set_new(c, "num_hidden_layers", json_integer(mc->num_layers));
    json_object_set_new(c, "num_attention_heads", json_integer(mc->num_heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(mc->num_kv_heads));
    json_object_set_new(c, "head_dim", json_integer(mc->head_dim));
    json_object_set_new(c, "vocab_size", json_integer(mc->vocab_size));
    json_object_set_new(c, "max_position_embeddings", json_integer(mc->max_position_embeddings));
    json_object_set_new(c, "rms_norm_eps", json_real(mc->rms_norm_eps));
    json_object_set_new(c, "rope_theta", json_real(mc->rope_theta));
    if (mc->rope_scaling == ROPE_SCALING_LLAMA3)
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:s,s:f,s:f,s:f,s:i}", "rope_type", "llama3", "factor",
                                      mc->rope_factor, "low_freq_factor", mc->rope_low_freq_factor,
                                      "high_freq_factor", mc->rope_high_freq_factor,
                                      "original_max_position_embeddings",
                                      mc->rope_original_max_pos));
    else
        json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_boolean(mc->tie_word_embeddings));
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "mlp_bias", json_false());
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    json_object_set_new(c, "bos_token_id", json_integer(mc->bos_token_id));
    json_object_set_new(c, "eos_token_id", json_integer(mc->eos_token_id));
    char *s = json_dumps(c, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(c);
    return s;
}

typedef struct write_ctx {
    const wt_source *src;
    const wt_tensor *ts;
    uint16_t *buf;
} write_ctx;

static const void *tensor_bytes(void *ctx, int32_t i, terr *e)
{
    write_ctx *w = ctx;
    return wt_read_bf16(w->src, &w->ts[i], w->buf, e) ? NULL : w->buf;
}

int wt_write_checkpoint(const wt_source *s, const model_config *mc, const char *dir, terr *e)
{
    if (mkdir_p(dir)) return terr_set(e, "%s: cannot create directory: %s", dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return terr_set(e, "%s: cannot create: %s", path, strerror(errno));
    char *json = model_config_to_json(mc);
    int ok = fputs(json, f) >= 0 && fputc('\n', f) != EOF;
    free(json);
    if (fclose(f) || !ok) return terr_set(e, "%s: write failed", path);

    int32_t n = wt_count(mc);
    wt_tensor *ts = xcalloc((size_t)n, sizeof *ts);
    st_write_tensor *ws = xcalloc((size_t)n, sizeof *ws);
    wt_list(mc, ts);
    int64_t most = 0;
    for (int32_t i = 0; i < n; i++) {
        ws[i] = (st_write_tensor){.name = ts[i].name, .dtype = ST_BF16, .ndim = ts[i].ndim};
        ws[i].shape[0] = ts[i].rows;
        ws[i].shape[1] = ts[i].cols;
        most = max_i64(most, ts[i].rows * ts[i].cols);
    }
    write_ctx w = {s, ts, xmalloc((size_t)most * 2)};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = st_write(path, ws, n, tensor_bytes, &w, e);
    free(w.buf);
    free(ws);
    free(ts);
    return rc;
}
