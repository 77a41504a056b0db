/*
 * cpu_backend.c: the forward pass in plain C, float32, over the same paged KV layout as the GPU
 * (engine.h). It is the oracle for the GPU tests and what CI runs; it is slow on purpose
 * (naive loops, no threads), so use it on small models.
 *
 * With cpu_round_bf16 it rounds where the CUDA backend holds bf16: weights, the KV cache, and
 * the inputs of every GEMM (normed activations, attention output, SiLU output); the residual
 * stream, GEMM outputs and all accumulations stay float32 as on the GPU. (The GPU's unfused
 * path, which prefill takes, also stores QKV in bf16 before RoPE; its fused decode path does
 * not. The twin follows the fused path; the difference is within the tests' bf16 tolerance.)
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/weights.h"

typedef struct cpu_layer {
    float *attn_norm; /* (h) */
    float *wqkv;      /* (nh*hd + 2*nkv*hd, h) */
    float *wo;        /* (h, nh*hd) */
    float *mlp_norm;  /* (h) */
    float *wgu;       /* (2I, h) */
    float *wdown;     /* (h, I) */
} cpu_layer;

typedef struct cpu_model {
    model_config mc;
    engine_opts o;
    float *embed;      /* (V, h) */
    float *final_norm; /* (h) */
    float *lm_head;    /* (V, h); == embed when tied */
    cpu_layer *layers; /* (L) */
    float *kv;         /* (L, 2, (num_blocks + 1) * block_size, nkv, hd): + the pad block */
    float *host_kv;    /* (num_host_blocks, L, 2, block_size, nkv, hd): the swap pool */
    float *inv_freq;   /* (hd/2) */
    /* workspace, sized for max_tokens rows */
    float *x;      /* (T, h) residual stream */
    float *xn;     /* (T, h) */
    float *qkv;    /* (T, qkv_dim) */
    float *attn;   /* (T, nh*hd) */
    float *tmp;    /* (T, h) */
    float *gu;     /* (T, 2I) */
    float *act;    /* (T, I) */
    float *logits; /* (max_seqs, V) */
    float *scratch; /* (V) sampling */
    /* (2, max_seqs) sampled ids, the halves taking turns as on the GPU: token id -1 - k of a step
     * is row k of the last sample_start's half */
    int32_t *sampled;
    int32_t start_half, wait_half; /* the halves the next sample_start and sample_wait use */
    int32_t *tok;                  /* (T) a step's token ids with those resolved */
} cpu_model;

static void cpu_destroy(void *self)
{
    cpu_model *m = self;
    if (!m) return;
    for (int32_t l = 0; m->layers && l < m->mc.num_layers; l++) {
        cpu_layer *L = &m->layers[l];
        free(L->attn_norm), free(L->wqkv), free(L->wo), free(L->mlp_norm), free(L->wgu), free(L->wdown);
    }
    if (m->lm_head != m->embed) free(m->lm_head);
    free(m->embed), free(m->final_norm), free(m->layers), free(m->kv), free(m->host_kv), free(m->inv_freq);
    free(m->x), free(m->xn), free(m->qkv), free(m->attn), free(m->tmp), free(m->gu), free(m->act);
    free(m->logits), free(m->scratch), free(m->sampled), free(m->tok);
    free(m);
}

static float *alloc_fused(const model_config *mc, wt_fused f)
{
    int64_t rows, cols;
    wt_fused_shape(mc, f, &rows, &cols);
    return xmalloc(sizeof(float) * (size_t)(rows * cols));
}

static float *fused_ptr(cpu_model *m, const wt_tensor *t)
{
    int64_t rows, cols;
    wt_fused_shape(&m->mc, t->fused, &rows, &cols);
    cpu_layer *L = t->layer >= 0 ? &m->layers[t->layer] : NULL;
    float *base = NULL;
    switch (t->fused) {
    case WF_EMBED: base = m->embed; break;
    case WF_ATTN_NORM: base = L->attn_norm; break;
    case WF_QKV: base = L->wqkv; break;
    case WF_O: base = L->wo; break;
    case WF_MLP_NORM: base = L->mlp_norm; break;
    case WF_GU: base = L->wgu; break;
    case WF_DOWN: base = L->wdown; break;
    case WF_FINAL_NORM: base = m->final_norm; break;
    case WF_LM_HEAD: base = m->lm_head; break;
    case WF_NUM: break;
    }
    return base + t->row_offset * cols;
}

static int cpu_open(void **self, const model_config *mc, const engine_opts *o,
                    const struct wt_source *src, terr *e)
{
    cpu_model *m = xcalloc(1, sizeof *m);
    m->mc = *mc;
    m->o = *o;
    int64_t h = mc->hidden_size, I = mc->intermediate_size, V = mc->vocab_size, T = o->max_tokens;
    int64_t qd = (int64_t)mc->num_heads * mc->head_dim, kvd = (int64_t)mc->num_kv_heads * mc->head_dim;
    m->embed = alloc_fused(mc, WF_EMBED);
    m->final_norm = alloc_fused(mc, WF_FINAL_NORM);
    m->lm_head = mc->tie_word_embeddings ? m->embed : alloc_fused(mc, WF_LM_HEAD);
    m->layers = xcalloc((size_t)mc->num_layers, sizeof *m->layers);
    for (int32_t l = 0; l < mc->num_layers; l++) {
        cpu_layer *L = &m->layers[l];
        L->attn_norm = alloc_fused(mc, WF_ATTN_NORM);
        L->wqkv = alloc_fused(mc, WF_QKV);
        L->wo = alloc_fused(mc, WF_O);
        L->mlp_norm = alloc_fused(mc, WF_MLP_NORM);
        L->wgu = alloc_fused(mc, WF_GU);
        L->wdown = alloc_fused(mc, WF_DOWN);
    }
    int32_t n = wt_count(mc);
    wt_tensor *ts = xcalloc((size_t)n, sizeof *ts);
    wt_list(mc, ts);
    for (int32_t i = 0; i < n; i++) {
        float *dst = fused_ptr(m, &ts[i]);
        if (wt_read_f32(src, &ts[i], dst, e)) {
            free(ts);
            cpu_destroy(m);
            return ENGINE_ERR_INPUT;
        }
        if (o->cpu_round_bf16) cpu_round_bf16(dst, ts[i].rows * ts[i].cols);
    }
    free(ts);

    int64_t slots = (int64_t)(o->num_blocks + 1) * o->block_size;
    m->kv = xcalloc((size_t)(mc->num_layers * 2 * slots * kvd), sizeof(float));
    if (o->num_host_blocks)
        m->host_kv = xcalloc((size_t)o->num_host_blocks * (size_t)(mc->num_layers * 2 * o->block_size * kvd),
                             sizeof(float));
    m->inv_freq = xmalloc(sizeof(float) * (size_t)(mc->head_dim / 2));
    cpu_rope_inv_freq(mc, m->inv_freq);
    m->x = xmalloc(sizeof(float) * (size_t)(T * h));
    m->xn = xmalloc(sizeof(float) * (size_t)(T * h));
    m->qkv = xmalloc(sizeof(float) * (size_t)(T * (qd + 2 * kvd)));
    m->attn = xmalloc(sizeof(float) * (size_t)(T * qd));
    m->tmp = xmalloc(sizeof(float) * (size_t)(T * h));
    m->gu = xmalloc(sizeof(float) * (size_t)(T * 2 * I));
    m->act = xmalloc(sizeof(float) * (size_t)(T * I));
    m->logits = xmalloc(sizeof(float) * (size_t)(o->max_seqs * V));
    m->scratch = xmalloc(sizeof(float) * (size_t)V);
    m->sampled = xcalloc(2 * (size_t)o->max_seqs, sizeof(int32_t));
    m->tok = xmalloc(sizeof(int32_t) * (size_t)T);
    *self = m;
    return 0;
}

static int cpu_forward(void *self, const eng_step *s, terr *e)
{
    cpu_model *m = self;
    const model_config *mc = &m->mc;
    int32_t T = s->num_tokens, h = mc->hidden_size, I = mc->intermediate_size;
    int32_t nh = mc->num_heads, nkv = mc->num_kv_heads, hd = mc->head_dim;
    int32_t qkv_dim = (nh + 2 * nkv) * hd;
    float eps = (float)mc->rms_norm_eps;
    int rb = m->o.cpu_round_bf16;
    int64_t layer_kv = (int64_t)(m->o.num_blocks + 1) * m->o.block_size * nkv * hd;

    const int32_t *prev = m->sampled + (int64_t)(m->start_half ^ 1) * m->o.max_seqs;
    for (int32_t t = 0; t < T; t++) m->tok[t] = s->token_ids[t] < 0 ? prev[-1 - s->token_ids[t]] : s->token_ids[t];
    cpu_embed(m->embed, m->tok, T, h, m->x);
    for (int32_t l = 0; l < mc->num_layers; l++) {
        cpu_layer *L = &m->layers[l];
        float *k_cache = m->kv + 2 * l * layer_kv, *v_cache = k_cache + layer_kv;
        /* The previous layer's MLP output is added here, fused with this layer's norm. */
        cpu_add_rmsnorm(m->x, l ? m->tmp : NULL, L->attn_norm, NULL, T, h, eps, m->xn);
        if (rb) cpu_round_bf16(m->xn, (int64_t)T * h);
        cpu_matmul(m->xn, L->wqkv, T, qkv_dim, h, m->qkv);
        cpu_rope(m->qkv, s->positions, T, nh, nkv, hd, m->inv_freq);
        cpu_kv_write(m->qkv, s->slot_mapping, T, nh, nkv, hd, k_cache, v_cache, rb);
        cpu_attention(m->qkv, k_cache, v_cache, s, nh, nkv, hd, m->o.block_size, m->attn);
        if (rb) cpu_round_bf16(m->attn, (int64_t)T * nh * hd);
        cpu_matmul(m->attn, L->wo, T, h, nh * hd, m->tmp);
        cpu_add_rmsnorm(m->x, m->tmp, L->mlp_norm, NULL, T, h, eps, m->xn);
        if (rb) cpu_round_bf16(m->xn, (int64_t)T * h);
        cpu_matmul(m->xn, L->wgu, T, 2 * I, h, m->gu);
        if (rb) cpu_round_bf16(m->gu, (int64_t)T * 2 * I); /* the GPU stores gate/up in bf16 */
        cpu_silu_mul(m->gu, T, I, m->act);
        if (rb) cpu_round_bf16(m->act, (int64_t)T * I);
        cpu_matmul(m->act, L->wdown, T, h, I, m->tmp);
    }
    /* Last residual add and the final norm, for the logits rows only. */
    int32_t N = s->num_logits;
    cpu_add_rmsnorm(m->x, m->tmp, m->final_norm, s->logits_rows, N, h, eps, m->xn);
    if (rb) cpu_round_bf16(m->xn, (int64_t)N * h);
    cpu_matmul(m->xn, m->lm_head, N, mc->vocab_size, h, m->logits);
    (void)e;
    return 0;
}

/* Samples at once (the CPU runs nothing in the background); sample_wait hands the ids over. */
static int cpu_sample_start(void *self, int32_t n, const eng_sampling *sp, terr *e)
{
    cpu_model *m = self;
    int32_t V = m->mc.vocab_size, *out = m->sampled + (int64_t)m->start_half * m->o.max_seqs;
    m->start_half ^= 1;
    for (int32_t i = 0; i < n; i++)
        out[i] = sample_row(m->logits + (int64_t)i * V, V, sp->temperature[i], sp->top_p[i],
                            sp->uniform[i], m->scratch);
    (void)e;
    return 0;
}

static int cpu_sample_wait(void *self, int32_t n, int32_t *out, terr *e)
{
    cpu_model *m = self;
    memcpy(out, m->sampled + (int64_t)m->wait_half * m->o.max_seqs, sizeof(int32_t) * (size_t)n);
    m->wait_half ^= 1;
    (void)e;
    return 0;
}

static int cpu_logits(void *self, int32_t n, float *out, terr *e)
{
    cpu_model *m = self;
    memcpy(out, m->logits, sizeof(float) * (size_t)n * (size_t)m->mc.vocab_size);
    (void)e;
    return 0;
}

/* Each block's K and V of every layer, between the cache and the host pool. */
static int cpu_swap(void *self, bool to_host, int32_t n, const int32_t *dev, const int32_t *host, terr *e)
{
    cpu_model *m = self;
    int64_t blk = (int64_t)m->o.block_size * m->mc.num_kv_heads * m->mc.head_dim; /* floats */
    int64_t layer_kv = (int64_t)(m->o.num_blocks + 1) * blk, parts = 2 * m->mc.num_layers;
    size_t bytes = sizeof(float) * (size_t)blk;
    for (int32_t i = 0; i < n; i++)
        for (int64_t p = 0; p < parts; p++) {
            float *d = m->kv + p * layer_kv + dev[i] * blk, *h = m->host_kv + (host[i] * parts + p) * blk;
            if (to_host) memcpy(h, d, bytes);
            else memcpy(d, h, bytes);
        }
    return 0;
}

static int cpu_sync(void *self, terr *e)
{
    (void)self, (void)e;
    return 0;
}

const engine_backend_ops cpu_backend_ops = {
    .name = "cpu",
    .open = cpu_open,
    .forward = cpu_forward,
    .sample_start = cpu_sample_start,
    .sample_wait = cpu_sample_wait,
    .logits = cpu_logits,
    .swap = cpu_swap,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
};
