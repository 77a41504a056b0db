/*
 * roofline.c: the `roofline` cost model. A step's time is the sum, over the parts of the
 * forward pass, of max(compute time, memory time, shortest kernel time), plus swaps and fixed
 * host overheads. docs/costmodel.md derives each term and gives the source of each constant.
 *
 * Parts (all layers are identical, so per-layer parts are costed once and multiplied by L):
 *   per layer  qkv, o_proj, gate_up, down   GEMMs over T = batch->num_tokens tokens (plus
 *                                           num_padding_tokens: rows computed for nothing)
 *              attn_prefill, attn_decode    each group summed over its items, then one roofline
 *                                           (the kernels batch the items)
 *              elementwise                  norms, RoPE, KV-cache write, SiLU-and-mul
 *   per step   embed_norm                   embedding gather and the final norm
 *              lm_head, sampler             over the E = batch->num_emitting rows that sample
 *              launch_bound                 host launch time beyond the GPU's (small steps)
 *              swap                         blocks x bytes/block over the host link
 *              overhead                     fixed + per item
 *
 * Invariants: step_ns does O(items) integer/double arithmetic and no allocation (it runs once
 * per simulated step); the sums over items are exact int64; the result is rounded to ns once.
 * Time never decreases when a batch gains tokens, context, items or swaps.
 */
#include "sim/roofline.h"

#include <math.h>
#include <stdlib.h>

/* Kernels per layer outside GEMMs and attention: 2 fused add+RMSNorm, RoPE, KV-cache write,
 * SiLU-and-mul. */
#define ELEMENTWISE_KERNELS_PER_LAYER 5
/* Per step: embedding gather, final fused add+RMSNorm. */
#define EMBED_NORM_KERNELS 2
/* Sampler: logits to fp32, softmax, sample. Bytes per logit: read bf16 (2) + write fp32 (4),
 * softmax read + write (8), sampling read (4). */
#define SAMPLER_KERNELS 3
#define SAMPLER_BYTES_PER_LOGIT 18.0

enum { GEMM_QKV, GEMM_O, GEMM_GATE_UP, GEMM_DOWN, NUM_GEMMS };
static const char *const gemm_names[NUM_GEMMS] = {"qkv", "o_proj", "gate_up", "down"};

typedef struct gemm_shape {
    double flops_per_token;     /* 2 x in x out */
    double weight_bytes;        /* in x out x 2 */
    double act_bytes_per_token; /* (in + out) x 2 */
} gemm_shape;

typedef struct roofline {
    roofline_params p;
    double layers;
    gemm_shape gemm[NUM_GEMMS]; /* one layer's */
    gemm_shape lm_head;
    double gemm_flops_s;               /* bf16_flops x gemm_eff_max */
    double weight_bytes_s;             /* gpu->weight_stream_bytes_s */
    double attn_flops_s;               /* bf16_flops x attn_prefill_flops_eff */
    double attn_bytes_s;               /* mem_bw x attn_mem_eff */
    double elementwise_bytes_s;        /* mem_bw x elementwise_mem_eff */
    double q_width;                    /* heads x head_dim */
    double kv_bytes_per_token_layer;   /* K + V of one token in one layer */
    double qo_bytes_per_token;         /* attention reads Q and writes O: 2 x q_width x 2 */
    double elementwise_bytes_per_token_layer;
    double embed_norm_bytes_per_token;
    double vocab;
    double kernel_min_s, launch_s, step_overhead_s, item_overhead_s;
    double swap_bytes_per_block;       /* all layers' K and V of one block */
    double host_link_bytes_s;
} roofline;

static gemm_shape make_gemm(int64_t in, int64_t out)
{
    return (gemm_shape){
        .flops_per_token = 2.0 * (double)in * (double)out,
        .weight_bytes = (double)in * (double)out * WEIGHT_DTYPE_BYTES,
        .act_bytes_per_token = (double)(in + out) * WEIGHT_DTYPE_BYTES,
    };
}

void *roofline_create_with(const model_config *mc, const gpu_spec *gpu,
                           const cost_model_opts *opts, const roofline_params *p, terr *e)
{
    cost_model_opts o = opts ? *opts : cost_model_opts_default();
    roofline_params rp = p ? *p : gpu->roofline;
    if (o.block_size <= 0)
        return terr_set(e, "--block-size %d: must be positive", o.block_size), NULL;
    if (o.kv_dtype_bytes != 1 && o.kv_dtype_bytes != 2 && o.kv_dtype_bytes != 4)
        return terr_set(e, "roofline: KV dtype of %d bytes is not supported (1, 2 or 4)",
                        o.kv_dtype_bytes), NULL;
    if (!(rp.gemm_eff_max > 0 && rp.gemm_half_tokens >= 0 && rp.attn_prefill_flops_eff > 0 &&
          rp.attn_mem_eff > 0 && rp.elementwise_mem_eff > 0 && rp.kernel_min_ns >= 0 &&
          rp.launch_ns >= 0 && rp.step_overhead_ns >= 0 && rp.item_overhead_ns >= 0))
        return terr_set(e, "roofline: efficiencies must be positive and overheads non-negative"),
               NULL;

    roofline *r = xcalloc(1, sizeof *r);
    r->p = rp;
    int64_t h = mc->hidden_size, I = mc->intermediate_size;
    int64_t q_width = (int64_t)mc->num_heads * mc->head_dim;
    int64_t kv_width = (int64_t)mc->num_kv_heads * mc->head_dim;
    r->layers = mc->num_layers;
    r->gemm[GEMM_QKV] = make_gemm(h, q_width + 2 * kv_width);
    r->gemm[GEMM_O] = make_gemm(q_width, h);
    r->gemm[GEMM_GATE_UP] = make_gemm(h, 2 * I);
    r->gemm[GEMM_DOWN] = make_gemm(I, h);
    r->lm_head = make_gemm(h, mc->vocab_size);
    r->gemm_flops_s = gpu->bf16_flops * rp.gemm_eff_max;
    r->weight_bytes_s = gpu->weight_stream_bytes_s;
    r->attn_flops_s = gpu->bf16_flops * rp.attn_prefill_flops_eff;
    r->attn_bytes_s = gpu->mem_bw_bytes_s * rp.attn_mem_eff;
    r->elementwise_bytes_s = gpu->mem_bw_bytes_s * rp.elementwise_mem_eff;
    r->q_width = (double)q_width;
    r->kv_bytes_per_token_layer = 2.0 * (double)kv_width * o.kv_dtype_bytes;
    r->qo_bytes_per_token = 2.0 * (double)q_width * WEIGHT_DTYPE_BYTES;
    /* Per token per layer, in elements: two fused add+RMSNorms read x and the residual and
     * write both (4h each); RoPE rewrites q and k in place; the cache write reads k, v and
     * writes them into the cache; SiLU-and-mul reads gate and up (2I) and writes I. */
    r->elementwise_bytes_per_token_layer =
        (double)(8 * h + 2 * (q_width + kv_width) + 3 * I) * WEIGHT_DTYPE_BYTES +
        2.0 * (double)kv_width * (WEIGHT_DTYPE_BYTES + o.kv_dtype_bytes);
    /* Embedding: read a row, write it (2h); final fused add+RMSNorm (4h). */
    r->embed_norm_bytes_per_token = 6.0 * (double)h * WEIGHT_DTYPE_BYTES;
    r->vocab = mc->vocab_size;
    r->kernel_min_s = rp.kernel_min_ns * 1e-9;
    r->launch_s = rp.launch_ns * 1e-9;
    r->step_overhead_s = rp.step_overhead_ns * 1e-9;
    r->item_overhead_s = rp.item_overhead_ns * 1e-9;
    r->swap_bytes_per_block =
        (double)o.block_size * (double)model_kv_bytes_per_token(mc, o.kv_dtype_bytes);
    r->host_link_bytes_s = gpu->host_link_bytes_s;
    return r;
}

static void *roofline_create(const model_config *mc, const gpu_spec *gpu,
                             const cost_model_opts *opts, terr *e)
{
    return roofline_create_with(mc, gpu, opts, NULL, e);
}

static void roofline_destroy(void *self) { free(self); }

static inline double max3(double a, double b, double c)
{
    double m = a > b ? a : b;
    return m > c ? m : c;
}

/* Adds one part: max(compute, memory, floor) x times (times = layers for per-layer parts). */
static inline double part(cost_breakdown *bd, const char *name, double compute_s,
                          double memory_s, double floor_s, double times)
{
    double t = max3(compute_s, memory_s, floor_s) * times;
    if (bd && bd->num_parts < COST_MAX_PARTS)
        bd->parts[bd->num_parts++] = (cost_part){name, compute_s * times, memory_s * times, t};
    return t;
}

/* One GEMM over `rows` rows (see roofline_params for the efficiency curve). */
static inline double gemm_part(const roofline *r, cost_breakdown *bd, const char *name,
                               const gemm_shape *g, double rows, double times)
{
    double compute = g->flops_per_token * (rows + r->p.gemm_half_tokens) / r->gemm_flops_s;
    double memory = (g->weight_bytes + rows * g->act_bytes_per_token) / r->weight_bytes_s;
    return part(bd, name, compute, memory, r->kernel_min_s, times);
}

static int64_t roofline_cost(void *self, const step_shape *b, cost_breakdown *bd)
{
    const roofline *r = self;
    if (bd) *bd = (cost_breakdown){0};
    int64_t swap_blocks = b->swap_blocks;
    if (b->num_items == 0 && swap_blocks == 0) return 0;

    double total = 0.0;
    if (b->num_items > 0) {
        /* The shape's exact integer sums: prefill_pairs2 is twice the causal (query, key)
         * pairs, prefill_keys the keys read, prefill_tokens the queries. */
        int64_t pf_pairs2 = b->prefill_pairs2, pf_keys = b->prefill_keys, pf_queries = b->prefill_tokens;
        int64_t dec_keys = b->decode_keys, num_dec = b->num_decode_seqs;
        /* padding rows (static batching) go through every GEMM and elementwise kernel */
        double L = r->layers, T = (double)(b->prefill_tokens + b->decode_tokens + b->padding_tokens);
        double kmin = r->kernel_min_s;
        for (int g = 0; g < NUM_GEMMS; g++)
            total += gemm_part(r, bd, gemm_names[g], &r->gemm[g], T, L);
        if (pf_queries > 0) {
            /* 4 x pairs x q_width: QK^T and PV, 2 FLOPs per multiply-add each. */
            double flops = 2.0 * (double)pf_pairs2 * r->q_width;
            double bytes = (double)pf_keys * r->kv_bytes_per_token_layer +
                           (double)pf_queries * r->qo_bytes_per_token;
            total += part(bd, "attn_prefill", flops / r->attn_flops_s, bytes / r->attn_bytes_s,
                          kmin, L);
        }
        if (num_dec > 0) {
            double flops = 4.0 * (double)dec_keys * r->q_width;
            double bytes = (double)dec_keys * r->kv_bytes_per_token_layer +
                           (double)num_dec * r->qo_bytes_per_token;
            total += part(bd, "attn_decode", flops / r->attn_flops_s, bytes / r->attn_bytes_s,
                          kmin, L);
        }
        total += part(bd, "elementwise", 0.0,
                      T * r->elementwise_bytes_per_token_layer / r->elementwise_bytes_s,
                      ELEMENTWISE_KERNELS_PER_LAYER * kmin, L);
        total += part(bd, "embed_norm", 0.0,
                      T * r->embed_norm_bytes_per_token / r->elementwise_bytes_s,
                      EMBED_NORM_KERNELS * kmin, 1.0);
        if (b->num_emitting > 0) {
            double E = b->num_emitting;
            total += gemm_part(r, bd, "lm_head", &r->lm_head, E, 1.0);
            total += part(bd, "sampler", 0.0,
                          E * r->vocab * SAMPLER_BYTES_PER_LOGIT / r->elementwise_bytes_s,
                          SAMPLER_KERNELS * kmin, 1.0);
        }
        /* The host launches kernels while the GPU runs earlier ones: only launch time beyond
         * the GPU's adds to the step. */
        double kernels = L * (NUM_GEMMS + ELEMENTWISE_KERNELS_PER_LAYER + (pf_queries > 0) +
                              (num_dec > 0)) +
                         EMBED_NORM_KERNELS + (b->num_emitting > 0 ? 1 + SAMPLER_KERNELS : 0);
        double launch = kernels * r->launch_s;
        total += part(bd, "launch_bound", 0.0, 0.0, launch > total ? launch - total : 0.0, 1.0);
    }
    if (swap_blocks > 0)
        total += part(bd, "swap", 0.0,
                      (double)swap_blocks * r->swap_bytes_per_block / r->host_link_bytes_s, 0.0,
                      1.0);
    total += part(bd, "overhead", 0.0, 0.0,
                  r->step_overhead_s + r->item_overhead_s * b->num_items, 1.0);
    if (bd) bd->total_s = total;
    int64_t ns = llround(total * 1e9);
    return ns > 0 ? ns : 1;
}

static int64_t roofline_step_ns(void *self, const step_shape *s) { return roofline_cost(self, s, NULL); }

static int64_t roofline_explain(void *self, const step_shape *b, cost_breakdown *bd)
{
    return roofline_cost(self, b, bd);
}

const cost_model_ops roofline_cost_model = {
    .name = "roofline",
    .summary = "per part max(compute, memory) with measured H200 rates (docs/costmodel.md)",
    .create = roofline_create,
    .step_ns = roofline_step_ns,
    .destroy = roofline_destroy,
    .explain = roofline_explain,
};
