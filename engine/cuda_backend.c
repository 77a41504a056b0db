/*
 * cuda_backend.c: the forward pass on the GPU: host C code that allocates everything at open,
 * then per step copies the step's flat arrays to the device in one transfer and enqueues the
 * kernels (kernels/) and cuBLAS GEMMs on one stream. Nothing is allocated per step.
 *
 * Precision: weights, KV cache and GEMM inputs are bf16; the residual stream, GEMM outputs
 * (except gate/up, and QKV outside the fused path: stored bf16), attention softmax and all
 * accumulations are float32. The bf16 QKV halves the bytes the GEMM writes and RoPE reads at
 * prefill (vLLM rounds there too); RoPE writes q back as float32 for the attention kernels.
 *
 * Per layer:  norm -> QKV GEMM -> RoPE+KV write -> attention (decode rows: split-K kernel;
 * prefill rows: tensor-core kernel) -> O GEMM (+= residual) -> norm -> gate/up GEMM -> SiLU*up ->
 * down GEMM (+= residual); then the final norm over the logits rows only and the LM head. The
 * residual adds are the GEMMs' own (cuBLAS beta = 1, or the skinny kernel's epilogue), so the
 * norms only read the residual stream.
 * GEMMs with at most SKINNY_MAX_ROWS (2) rows use the weight-streaming kernel (k_gemm_skinny),
 * others cuBLAS (bf16 in, fp32 compute). Steps of at most 2 rows (decode) run fused, five
 * kernels a layer: norm + QKV GEMM + RoPE + KV write, attention, O GEMM + residual, norm +
 * gate/up GEMM + SiLU*up, down GEMM + residual (k_gemm_skinny_fused); at batch 1 each separate
 * small kernel cost more in launch and drain than its work. From 4 rows the cuBLAS path is
 * faster (`bench_engine_gpu steps`: B4 4.94 against 5.63 ms fused, B8 5.49 against 9.44): the
 * weight-streaming kernel multiplies on CUDA cores, whose work per weight byte grows with M.
 * Pure-decode steps of one or two sequences run all layers in one persistent kernel instead,
 * where it supports the model's shape (k_decode_stream): the same five operations as phases,
 * with the weights and KV streamed through shared memory ahead of them (two sequences on an H100:
 * 5.26 ms against 6.50 for the five kernels a layer, Llama-2-7B at context 1024). Kernels are
 * launched as programmatic dependents (kernels/kernels.h), so each overlaps its predecessor's
 * tail.
 *
 * Pure-decode steps replay CUDA graphs, one per (graph batch size, context-length bucket), all
 * captured at open (as vLLM captures its graphs at start-up), so that no step of a run pays for
 * a capture or for the first use of a kernel. The graph batch sizes are vLLM's: 1, 2, 4, then
 * every multiple of 8, up to the largest decode step; a step of B sequences runs the smallest
 * graph of at least B, its extra rows padding (token 0 at position 0 of a scratch block that
 * only the backend owns, so they write no block of the scheduler's; their logits are computed
 * after the real ones and never read). The decode attention grid covers the bucket (a power of
 * two); blocks past a sequence's length exit at once, so a graph serves every length in its
 * bucket. Open also runs prefill steps over a ladder of token counts, so that the cuBLAS kernels
 * that serving will pick are loaded before the first request.
 *
 * Decode attention splits each context into partitions of 64..256 tokens, the largest that still
 * gives the GPU three blocks an SM (kernels/decode_layout.h k_decode_partition): on an H200,
 * Llama-2-7B's single sequence of 2048 tokens uses 128, and 8 of them 256.
 */
#include "engine/engine.h"

#if TANDEM_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "engine/cuda_libs.h"
#include "engine/weights.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

_Static_assert(CU_ERR_DEVICE == ENGINE_ERR_DEVICE, "a failed CUDA call is a device error");

#define PF_TILE K_PREFILL_TILE
#define SKINNY_MAX_ROWS 2 /* GEMMs of at most this many rows stream weights (k_gemm_skinny) */

/* A cuBLAS call through the table loaded at open (engine/cuda_libs.h), checked as BLAS_CALL
 * checks a linked one: 0, or CU_ERR_DEVICE with e set. */
#define BLAS(call) cuda_lib_blas_status(e, m->cublas, m->cublas->call, __FILE__, __LINE__, #call)

typedef struct cuda_layer {
    bf16_t *attn_norm; /* (h) */
    bf16_t *wqkv;      /* (nh*hd + 2*nkv*hd, h) */
    bf16_t *wo;        /* (h, nh*hd) */
    bf16_t *mlp_norm;  /* (h) */
    bf16_t *wgu;       /* (2I, h) */
    bf16_t *wdown;     /* (h, I) */
} cuda_layer;

#define WARMUP_FIRST_TOKENS (SKINNY_MAX_ROWS + 1) /* the smallest step cuBLAS runs */

/* Where a step's arrays sit in the metadata buffer (int32 offsets); a function of the counts
 * only, so a captured graph's pointers stay valid for every step of the same shape. */
typedef struct meta_layout {
    int64_t tok, pos, slot, qsl, lens, rows, dec, items, bt, total;
    int32_t S; /* block table row length: the step's longest row, not max_model_len's (bytes up) */
} meta_layout;

typedef struct tile {
    int32_t seq, first, key; /* key: the tile's last position, larger first (longest work first) */
} tile;

typedef struct cuda_model {
    model_config mc;
    engine_opts o;
    int32_t S;         /* the longest block table row: max_model_len's */
    int64_t part_cap;  /* decode partials capacity: sequences x partitions per sequence */
    int32_t num_sms;   /* the GPU's, for the decode partition (k_decode_partition) */
    int32_t max_items; /* prefill attention tiles per step */
    int32_t qkv_dim;
    cudaStream_t stream;
    const cuda_blas *cublas; /* the library, loaded at open */
    ktrace_meter *ktrace;    /* the kernel time of each step (o.kernel_trace), else NULL */
    cublasHandle_t blas;
    void *blas_ws;
    bf16_t *weights; /* every weight, one allocation */
    bf16_t *embed, *final_norm, *lm_head;
    cuda_layer *layers;
    bf16_t *kv;       /* (L, 2, slots, nkv, hd) */
    int64_t layer_kv; /* elements of one layer's K (or V) */
    float *inv_freq;  /* (hd/2) */
    /* activations, sized for max_tokens rows (logits: max_seqs rows) */
    float *x;      /* (T, h) residual stream */
    bf16_t *xn;    /* (T, h) */
    float *qkv;    /* (T, qkv_dim) after RoPE (the unfused path writes only its q columns) */
    bf16_t *qkv16; /* (T, qkv_dim) QKV GEMM output on the unfused path */
    bf16_t *attn;  /* (T, nh*hd) */
    bf16_t *gu;    /* (T, 2I) */
    bf16_t *act;   /* (T, I) */
    bf16_t *xrows; /* (N, h) final norm of the logits rows */
    float *logits; /* (N, V) */
    float *partials; /* decode split-K partials */
    int32_t *counters;
    /* persistent decode kernel (NULL when it does not run the model) */
    k_layer_w *d_layers; /* (L) */
    float *ds_partials;  /* (ds_seqs, nh, k_decode_stream_grid(), hd + 4) */
    int32_t ds_seqs;     /* largest pure-decode step it runs (1..K_DECODE_STREAM_MAX_SEQS), 0: none */
    unsigned *ds_barrier;
    int32_t *h_meta, *d_meta; /* pinned host / device step arrays */
    int64_t meta_cap;
    cudaEvent_t meta_copied; /* h_meta may be refilled once this has fired */
    /* Sampling: a step's parameters go up from h_samp and its ids come down to h_tok, in one of
     * two halves by turns, so that the next step's sampling can be enqueued before the host has
     * read this one's (asynchronous scheduling); tok_ready[i] fires when half i's ids are down.
     * d_tok holds the last sampled step's ids for the next step's embedding (k_embed's prev). */
    float *h_samp, *d_samp;  /* (2, 3, N) / (3, N): temperature, top_p, uniform */
    int32_t *h_tok, *d_tok;  /* (2, N) / (N) sampled ids */
    cudaEvent_t tok_ready[2];
    int32_t start_half, wait_half; /* the halves the next sample_start and sample_wait use */
    tile *tiles;             /* (max_items) host scratch for ordering prefill tiles */
    /* decode graphs: graphs[i * num_buckets + j] for batch size graph_sizes[i] and context
     * bucket K_DECODE_PARTITION << j */
    int32_t *graph_sizes; /* (num_graph_sizes) ascending; the last is the largest decode step */
    int32_t num_graph_sizes, num_buckets;
    cudaGraphExec_t *graphs; /* (num_graph_sizes * num_buckets), NULL until captured */
    int32_t scratch_block;   /* KV block after the scheduler's num_blocks: padding rows write it */
    uint8_t *row_used;       /* (max_seqs) host scratch for ordering a padded step's logits rows */
    /* swap (engine.h): a pinned host pool, copied on a stream of its own */
    bf16_t *host_kv;           /* (num_host_blocks, L, 2, block elements) */
    cudaStream_t swap_stream;
    cudaEvent_t forwarded, swapped; /* end of the last enqueued forward / swap */
    bool wait_swap;            /* the next forward must wait for `swapped` (a swap-in) */
    uint8_t *swapping_out;     /* (num_blocks) read by a swap-out that may still run */
    int32_t *out_blocks;       /* (num_out) the blocks marked in swapping_out */
    int32_t num_out, cap_out;
    void **cp_dst, **cp_src;   /* batched copy arguments, grown as needed */
    size_t *cp_size, cp_cap;
} cuda_model;

static meta_layout layout_for(int32_t T, int32_t B, int32_t N, int32_t nd, int32_t np, int32_t S)
{
    meta_layout l;
    l.tok = 0;
    l.pos = l.tok + T;
    l.slot = l.pos + T;
    l.qsl = l.slot + T;
    l.lens = l.qsl + B + 1;
    l.rows = l.lens + B;
    l.dec = l.rows + N;
    l.items = l.dec + nd;
    l.bt = l.items + 2 * (int64_t)np;
    l.total = l.bt + (int64_t)B * S;
    l.S = S;
    return l;
}

static int64_t pow2_at_least(int64_t x)
{
    int64_t p = 1;
    while (p < x) p *= 2;
    return p;
}

/* Decode attention partition size for nd sequences whose longest context is `len`
 * (kernels/decode_layout.h's rule), and the partitions of that context. */
static int32_t pick_partition(const cuda_model *m, int32_t nd, int32_t len, int32_t *parts)
{
    int32_t P = k_decode_partition(m->mc.num_heads, m->mc.num_kv_heads, nd, len, m->num_sms, m->part_cap);
    *parts = (int32_t)div_ceil_i64(len, P);
    return P;
}

static void cuda_destroy(void *self)
{
    cuda_model *m = self;
    if (!m) return;
    if (m->stream) cudaStreamSynchronize(m->stream);
    if (m->swap_stream) cudaStreamSynchronize(m->swap_stream), cudaStreamDestroy(m->swap_stream);
    if (m->forwarded) cudaEventDestroy(m->forwarded);
    if (m->swapped) cudaEventDestroy(m->swapped);
    cudaFreeHost(m->host_kv);
    free(m->swapping_out), free(m->out_blocks), free(m->cp_dst), free(m->cp_src), free(m->cp_size);
    for (int32_t i = 0; m->graphs && i < m->num_graph_sizes * m->num_buckets; i++)
        if (m->graphs[i]) cudaGraphExecDestroy(m->graphs[i]);
    free(m->graphs), free(m->graph_sizes), free(m->row_used);
    if (m->blas) m->cublas->cublasDestroy_v2(m->blas);
    void *dev[] = {m->blas_ws, m->weights, m->kv, m->inv_freq, m->x, m->xn, m->qkv, m->qkv16,
                   m->attn, m->gu, m->act, m->xrows, m->logits, m->partials, m->counters,
                   m->d_layers, m->ds_partials, m->ds_barrier, m->d_meta, m->d_samp, m->d_tok};
    for (size_t i = 0; i < ARRAY_LEN(dev); i++) cudaFree(dev[i]);
    cudaFreeHost(m->h_meta), cudaFreeHost(m->h_samp), cudaFreeHost(m->h_tok);
    if (m->meta_copied) cudaEventDestroy(m->meta_copied);
    for (int i = 0; i < 2; i++)
        if (m->tok_ready[i]) cudaEventDestroy(m->tok_ready[i]);
    if (m->stream) cudaStreamDestroy(m->stream);
    ktrace_meter_close(m->ktrace);
    free(m->layers);
    free(m->tiles);
    free(m);
}

/* The KV cache is sized by the caller from the GPU it names (tandem's --gpu), not from this device. */
static const char *kv_size_hint(const char *what)
{
    return strcmp(what, "the KV cache") ? ""
                                        : " (the cache is sized for the GPU that --gpu names and "
                                          "--gpu-memory-utilization: name this one, or set --num-gpu-blocks-override)";
}

static int dev_alloc(void **p, size_t bytes, const char *what, terr *e)
{
    cudaError_t err = cudaMalloc(p, bytes ? bytes : 16);
    if (err == cudaSuccess) return 0;
    *p = NULL;
    size_t free_b = 0, total_b = 0;
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        terr_set(e, "cuda: allocating %.3f GB for %s failed: the device has %.3f of %.3f GB free%s", bytes / 1e9,
                 what, free_b / 1e9, total_b / 1e9, kv_size_hint(what));
    else
        terr_set(e, "cuda: allocating %.3f GB for %s failed: %s", bytes / 1e9, what, cudaGetErrorString(err));
    return ENGINE_ERR_DEVICE;
}

static bf16_t *fused_base(cuda_model *m, const wt_tensor *t)
{
    cuda_layer *L = t->layer >= 0 ? &m->layers[t->layer] : NULL;
    switch (t->fused) {
    case WF_EMBED: return m->embed;
    case WF_ATTN_NORM: return L->attn_norm;
    case WF_QKV: return L->wqkv;
    case WF_O: return L->wo;
    case WF_MLP_NORM: return L->mlp_norm;
    case WF_GU: return L->wgu;
    case WF_DOWN: return L->wdown;
    case WF_FINAL_NORM: return m->final_norm;
    case WF_LM_HEAD: return m->lm_head;
    case WF_NUM: break;
    }
    return NULL;
}

/* Carves the weight buffers out of one allocation (256-byte aligned pieces). */
static int alloc_weights(cuda_model *m, terr *e)
{
    const model_config *mc = &m->mc;
    int64_t total = 0;
    int64_t rows, cols;
    for (int pass = 0; pass < 2; pass++) {
        int64_t off = 0;
#define TAKE(ptr, f)                                                                              \
    do {                                                                                          \
        wt_fused_shape(mc, f, &rows, &cols);                                                      \
        if (pass) ptr = m->weights + off;                                                         \
        off += (rows * cols + 127) / 128 * 128;                                                   \
    } while (0)
        TAKE(m->embed, WF_EMBED);
        TAKE(m->final_norm, WF_FINAL_NORM);
        if (!mc->tie_word_embeddings) TAKE(m->lm_head, WF_LM_HEAD);
        for (int32_t l = 0; l < mc->num_layers; l++) {
            cuda_layer *L = &m->layers[l];
            TAKE(L->attn_norm, WF_ATTN_NORM);
            TAKE(L->wqkv, WF_QKV);
            TAKE(L->wo, WF_O);
            TAKE(L->mlp_norm, WF_MLP_NORM);
            TAKE(L->wgu, WF_GU);
            TAKE(L->wdown, WF_DOWN);
        }
#undef TAKE
        if (!pass) {
            total = off;
            int rc = dev_alloc((void **)&m->weights, (size_t)total * 2, "the weights", e);
            if (rc) return rc;
        }
    }
    if (mc->tie_word_embeddings) m->lm_head = m->embed;
    return 0;
}

static int load_weights(cuda_model *m, const wt_source *src, terr *e)
{
    int32_t n = wt_count(&m->mc);
    wt_tensor *ts = xcalloc((size_t)n, sizeof *ts);
    wt_list(&m->mc, ts);
    int64_t most = 0;
    for (int32_t i = 0; i < n; i++) most = max_i64(most, ts[i].rows * ts[i].cols);
    uint16_t *staging = src->synthetic ? NULL : xmalloc((size_t)most * 2);
    int rc = 0;
    for (int32_t i = 0; i < n && rc == 0; i++) {
        int64_t rows, cols;
        wt_fused_shape(&m->mc, ts[i].fused, &rows, &cols);
        bf16_t *dst = fused_base(m, &ts[i]) + ts[i].row_offset * cols;
        int64_t count = ts[i].rows * ts[i].cols;
        if (src->synthetic) {
            rc = CU_CALL(k_synth_bf16(dst, count, src->seed, ts[i].synth_id, ts[i].synth_mean,
                                      ts[i].synth_std, m->stream));
        } else if (wt_read_bf16(src, &ts[i], staging, e)) {
            rc = ENGINE_ERR_INPUT;
        } else {
            rc = CU_CALL(cudaMemcpy(dst, staging, (size_t)count * 2, cudaMemcpyHostToDevice));
        }
    }
    free(staging);
    free(ts);
    if (rc) return rc;
    CU_TRY(cudaStreamSynchronize(m->stream));
    return 0;
}

static int cuda_open(void **self, const model_config *mc, const engine_opts *o,
                     const struct wt_source *src, terr *e)
{
    int ndev = 0, dev = 0, sms = 0;
    cudaError_t derr = cudaGetDeviceCount(&ndev);
    if (derr != cudaSuccess || ndev == 0) {
        terr_set(e, "--backend cuda: no CUDA device (%s)",
                 derr != cudaSuccess ? cudaGetErrorString(derr) : "none found");
        return ENGINE_ERR_DEVICE;
    }
    if ((derr = cudaGetDevice(&dev)) != cudaSuccess ||
        (derr = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) {
        terr_set(e, "--backend cuda: cannot query the device: %s", cudaGetErrorString(derr));
        return ENGINE_ERR_DEVICE;
    }
    int32_t h = mc->hidden_size, I = mc->intermediate_size, hd = mc->head_dim;
    if (hd != 32 && hd != 64 && hd != 128)
        return terr_set(e, "%s: head_dim %d is not supported by the CUDA kernels (32, 64, 128)",
                        mc->name, hd);
    if (h % 8 || I % 8 || h > 16384)
        return terr_set(e, "%s: the CUDA kernels need hidden_size and intermediate_size to be "
                           "multiples of 8 (and hidden_size <= 16384)", mc->name);
    const cuda_blas *cublas = cuda_blas_get(e); /* loaded here, not at start: cuda_libs.h */
    if (!cublas) return ENGINE_ERR_DEVICE;

    cuda_model *m = xcalloc(1, sizeof *m);
    *self = m;
    m->cublas = cublas;
    m->mc = *mc;
    m->o = *o;
    m->S = (int32_t)div_ceil_i64(o->max_model_len, o->block_size);
    m->part_cap = (int64_t)o->max_seqs * div_ceil_i64(pow2_at_least(o->max_model_len), K_DECODE_PARTITION);
    m->num_sms = sms;
    m->max_items = (int32_t)div_ceil_i64(o->max_tokens, PF_TILE) + o->max_seqs;
    m->qkv_dim = (mc->num_heads + 2 * mc->num_kv_heads) * hd;
    m->layers = xcalloc((size_t)mc->num_layers, sizeof *m->layers);
    m->tiles = xcalloc((size_t)m->max_items, sizeof *m->tiles);
    m->row_used = xcalloc((size_t)o->max_seqs, 1);
    /* Graph batch sizes up to the largest decode step (min(max_seqs, max_tokens) rows); context
     * buckets up to max_model_len. */
    int32_t cap = (int32_t)min_i64(o->max_seqs, o->max_tokens);
    m->graph_sizes = xcalloc((size_t)cap, sizeof *m->graph_sizes);
    for (int32_t b = 1; b <= cap; b++) {
        int32_t g = k_decode_graph_rows(b, cap);
        if (m->num_graph_sizes == 0 || m->graph_sizes[m->num_graph_sizes - 1] != g)
            m->graph_sizes[m->num_graph_sizes++] = g;
    }
    for (int64_t len = K_DECODE_PARTITION;; len *= 2) {
        m->num_buckets++;
        if (len >= o->max_model_len) break;
    }
    m->graphs = xcalloc((size_t)m->num_graph_sizes * (size_t)m->num_buckets, sizeof *m->graphs);
    int rc = ENGINE_ERR_DEVICE;
#define TRY(call)                                                                                 \
    do {                                                                                          \
        if ((rc = (call))) goto fail;                                                             \
    } while (0)
#define CU(call) TRY(CU_CALL(call))
    /* The kernel trace starts before the first graph is captured, so that every graph is
     * instantiated while CUPTI traces (engine/kernel_trace.h). */
    if (o->kernel_trace && ktrace_meter_open(&m->ktrace, e)) goto fail;
    CU(k_init()); /* kernel attributes, before any graph capture */
    CU(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&m->meta_copied, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) CU(cudaEventCreateWithFlags(&m->tok_ready[i], cudaEventDisableTiming));
    TRY(BLAS(cublasCreate_v2(&m->blas)));
    TRY(BLAS(cublasSetStream_v2(m->blas, m->stream)));
    TRY(dev_alloc(&m->blas_ws, 32u << 20, "the cuBLAS workspace", e));
    /* no allocation inside graph capture */
    TRY(BLAS(cublasSetWorkspace_v2(m->blas, m->blas_ws, 32u << 20)));

    TRY(alloc_weights(m, e));
    TRY(load_weights(m, src, e));

    int64_t T = o->max_tokens, N = o->max_seqs, V = mc->vocab_size;
    int64_t qd = (int64_t)mc->num_heads * hd;
    m->scratch_block = o->num_blocks; /* one block past the scheduler's */
    m->layer_kv = (int64_t)(o->num_blocks + 1) * o->block_size * mc->num_kv_heads * hd;
    TRY(dev_alloc((void **)&m->kv, (size_t)(2 * mc->num_layers * m->layer_kv) * 2, "the KV cache", e));
    /* The cache starts full of values, as a server's is once requests have come and gone: a
     * profile's decode reads context it never wrote, and zeros cost the board less power to move
     * and multiply than values do. Nothing else reads a slot before writing it. */
    CU(k_synth_bf16(m->kv, 2 * mc->num_layers * m->layer_kv, o->weight_seed, 0xffffffffu, 0.0f, 1.0f, m->stream));
    float *inv = xmalloc(sizeof(float) * (size_t)(hd / 2));
    cpu_rope_inv_freq(mc, inv);
    if ((rc = dev_alloc((void **)&m->inv_freq, sizeof(float) * (size_t)(hd / 2), "RoPE", e))) {
        free(inv);
        goto fail;
    }
    cudaError_t cerr = cudaMemcpy(m->inv_freq, inv, sizeof(float) * (size_t)(hd / 2), cudaMemcpyHostToDevice);
    free(inv);
    CU(cerr);
    TRY(dev_alloc((void **)&m->x, (size_t)(T * h) * 4, "activations", e));
    TRY(dev_alloc((void **)&m->xn, (size_t)(T * h) * 2, "activations", e));
    TRY(dev_alloc((void **)&m->qkv, (size_t)(T * m->qkv_dim) * 4, "activations", e));
    TRY(dev_alloc((void **)&m->qkv16, (size_t)(T * m->qkv_dim) * 2, "activations", e));
    TRY(dev_alloc((void **)&m->attn, (size_t)(T * qd) * 2, "activations", e));
    TRY(dev_alloc((void **)&m->gu, (size_t)(T * 2 * I) * 2, "activations", e));
    TRY(dev_alloc((void **)&m->act, (size_t)(T * I) * 2, "activations", e));
    TRY(dev_alloc((void **)&m->xrows, (size_t)(N * h) * 2, "activations", e));
    TRY(dev_alloc((void **)&m->logits, (size_t)(N * V) * 4, "logits", e));
    TRY(dev_alloc((void **)&m->partials, (size_t)m->part_cap * mc->num_heads * (hd + 2) * 4,
                  "attention partials", e));
    TRY(dev_alloc((void **)&m->counters, (size_t)N * mc->num_heads * 4, "attention counters", e));
    CU(cudaMemsetAsync(m->counters, 0, (size_t)N * mc->num_heads * 4, m->stream));
    /* The persistent decode kernel runs pure-decode steps of as many sequences as it is built
     * for and the model's shape allows (docs/engine.md, "The streamed decode kernel"): every
     * count up to ds_seqs, so the first count it does not run ends the search. */
    int32_t stream_seqs = o->stream_seqs < 0 ? K_DECODE_STREAM_MAX_SEQS : o->stream_seqs;
    for (int32_t M = 1; M <= stream_seqs && M <= K_DECODE_STREAM_MAX_SEQS; M++) {
        if (!k_decode_stream_supported(M, h, I, mc->num_heads, mc->num_kv_heads, hd,
                                       (int32_t)min_i64(INT32_MAX, (int64_t)M * o->max_model_len)))
            break;
        m->ds_seqs = M;
    }
    if (m->ds_seqs > 0) {
        k_layer_w *lw = xcalloc((size_t)mc->num_layers, sizeof *lw);
        for (int32_t i = 0; i < mc->num_layers; i++) {
            const cuda_layer *L = &m->layers[i];
            bf16_t *kc = m->kv + 2 * i * m->layer_kv;
            lw[i] = (k_layer_w){L->attn_norm, L->wqkv, L->wo, L->mlp_norm, L->wgu, L->wdown, kc,
                                kc + m->layer_kv};
        }
        size_t lw_bytes = sizeof *lw * (size_t)mc->num_layers;
        if ((rc = dev_alloc((void **)&m->d_layers, lw_bytes, "layer table", e))) {
            free(lw);
            goto fail;
        }
        cerr = cudaMemcpy(m->d_layers, lw, lw_bytes, cudaMemcpyHostToDevice);
        free(lw);
        CU(cerr);
        TRY(dev_alloc((void **)&m->ds_partials,
                      (size_t)m->ds_seqs * mc->num_heads * k_decode_stream_grid() * (hd + 4) * 4,
                      "attention partials", e));
        TRY(dev_alloc((void **)&m->ds_barrier, sizeof(unsigned) * K_DECODE_SYNC_WORDS(mc->num_layers),
                      "grid barrier", e));
    }
    m->meta_cap = layout_for((int32_t)T, (int32_t)N, (int32_t)N, (int32_t)N, m->max_items, m->S).total;
    TRY(dev_alloc((void **)&m->d_meta, (size_t)m->meta_cap * 4, "step arrays", e));
    CU(cudaMallocHost((void **)&m->h_meta, (size_t)m->meta_cap * 4));
    TRY(dev_alloc((void **)&m->d_samp, (size_t)(3 * N) * 4, "sampling", e));
    CU(cudaMallocHost((void **)&m->h_samp, (size_t)(2 * 3 * N) * 4));
    TRY(dev_alloc((void **)&m->d_tok, (size_t)N * 4, "sampling", e));
    CU(cudaMallocHost((void **)&m->h_tok, (size_t)(2 * N) * 4));
    if (o->num_host_blocks) {
        size_t pool = (size_t)o->num_host_blocks * (size_t)(2 * mc->num_layers) * (size_t)o->block_size *
                      (size_t)(mc->num_kv_heads * hd) * 2;
        cudaError_t herr = cudaHostAlloc((void **)&m->host_kv, pool, cudaHostAllocDefault);
        if (herr != cudaSuccess) {
            m->host_kv = NULL;
            rc = terr_set(e, "cuda: pinning %.3f GB of host memory for the swap space failed: %s", pool / 1e9,
                          cudaGetErrorString(herr));
            goto fail;
        }
        CU(cudaStreamCreateWithFlags(&m->swap_stream, cudaStreamNonBlocking));
        CU(cudaEventCreateWithFlags(&m->forwarded, cudaEventDisableTiming));
        CU(cudaEventCreateWithFlags(&m->swapped, cudaEventDisableTiming));
        m->swapping_out = xcalloc((size_t)o->num_blocks, 1);
    }
    CU(cudaStreamSynchronize(m->stream));
    return 0;
#undef TRY
#undef CU
fail:
    cuda_destroy(m);
    *self = NULL;
    return rc;
}

/* y = x w^T, or y += x w^T when `accumulate` (y float: the residual add). */
static int gemm(cuda_model *m, const bf16_t *x, const bf16_t *w, void *y, int y_f32, int accumulate,
                int32_t M, int32_t N, int32_t K, terr *e)
{
    if (M <= SKINNY_MAX_ROWS) {
        k_skinny_args a = {.x = x, .w = w, .y = y, .M = M, .N = N, .K = K, .pro = K_PRO_NONE,
                           .epi = accumulate ? K_EPI_RESIDUAL : y_f32 ? K_EPI_F32 : K_EPI_BF16};
        CU_TRY(k_gemm_skinny_fused(&a, m->stream));
        return 0;
    }
    /* cuBLAS is column-major: row-major y (M, N) is y^T (N, M) = op(w) x^T, where w's (N, K)
     * rows read column-major are a (K, N) matrix, hence OP_T; x's rows are x^T's columns. */
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    return BLAS(cublasGemmEx(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, CUDA_R_16BF, K, x,
                             CUDA_R_16BF, K, &beta, y, y_f32 ? CUDA_R_32F : CUDA_R_16BF, N,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* Enqueues the whole forward pass for a step whose arrays are at `l` in d_meta. */
static int enqueue_forward(cuda_model *m, int32_t T, int32_t B, int32_t N, int32_t nd, int32_t np,
                           int32_t partition, int32_t max_parts, const meta_layout *l, terr *e)
{
    const model_config *mc = &m->mc;
    int32_t h = mc->hidden_size, I = mc->intermediate_size, nh = mc->num_heads,
            nkv = mc->num_kv_heads, hd = mc->head_dim;
    float eps = (float)mc->rms_norm_eps;
    const int32_t *d = m->d_meta;
    k_attn_args a = {
        .qkv = m->qkv, .qkv_stride = m->qkv_dim, .out = m->attn, .out_stride = nh * hd,
        .query_start_loc = d + l->qsl, .seq_lens = d + l->lens, .block_tables = d + l->bt,
        .bt_stride = l->S, .nh = nh, .nkv = nkv, .hd = hd, .block_size = m->o.block_size,
        .scale = 1.0f / sqrtf((float)hd),
    };
    (void)B;
    /* Decode-sized steps run fused (see the top of this file); the norm prologue stages the
     * normalised rows in shared memory, hence the size limit. */
    bool fuse = T <= SKINNY_MAX_ROWS && (int64_t)T * h * 2 <= K_SKINNY_SMEM;
    CU_TRY(k_embed(m->embed, d + l->tok, m->d_tok, T, h, m->x, m->stream));
    bool persistent = fuse && nd == T && np == 0 && T <= m->ds_seqs;
    if (persistent) {
        k_decode_args ds = {
            .layers = m->d_layers, .num_layers = mc->num_layers, .M = T, .h = h, .I = I, .nh = nh,
            .nkv = nkv, .hd = hd, .eps = eps, .scale = a.scale, .x = m->x, .qkv = m->qkv,
            .attn = m->attn, .act = m->act, .partials = m->ds_partials, .barrier = m->ds_barrier,
            .positions = d + l->pos, .slot_mapping = d + l->slot, .seq_lens = d + l->lens,
            .block_tables = d + l->bt, .bt_stride = l->S, .block_size = m->o.block_size,
            .inv_freq = m->inv_freq,
            .max_tokens = (int32_t)min_i64(INT32_MAX, (int64_t)T * m->o.max_model_len),
        };
        CU_TRY(cudaMemsetAsync(m->ds_barrier, 0, sizeof(unsigned) * K_DECODE_SYNC_WORDS(mc->num_layers),
                               m->stream));
        CU_TRY(k_decode_stream(&ds, m->stream));
    }
    for (int32_t li = 0; li < mc->num_layers && !persistent; li++) {
        cuda_layer *L = &m->layers[li];
        bf16_t *kc = m->kv + 2 * li * m->layer_kv, *vc = kc + m->layer_kv;
        a.k_cache = kc, a.v_cache = vc;
        if (fuse) {
            k_skinny_args q = {.x = m->x, .norm_w = L->attn_norm, .eps = eps, .w = L->wqkv,
                               .y = m->qkv, .M = T, .N = m->qkv_dim, .K = h, .pro = K_PRO_NORM,
                               .epi = K_EPI_ROPE_KV, .positions = d + l->pos,
                               .slot_mapping = d + l->slot, .inv_freq = m->inv_freq,
                               .k_cache = kc, .v_cache = vc, .nh = nh, .nkv = nkv, .hd = hd};
            CU_TRY(k_gemm_skinny_fused(&q, m->stream));
        } else {
            CU_TRY(k_add_rmsnorm(m->x, NULL, L->attn_norm, NULL, T, h, eps, m->xn, m->stream));
            if (gemm(m, m->xn, L->wqkv, m->qkv16, 0, 0, T, m->qkv_dim, h, e)) return ENGINE_ERR_DEVICE;
            CU_TRY(k_rope_kv_write(m->qkv16, d + l->pos, d + l->slot, T, nh, nkv, hd, m->inv_freq,
                                   m->qkv, m->qkv_dim, kc, vc, m->stream));
        }
        CU_TRY(k_decode_attention(&a, d + l->dec, nd, partition, max_parts, m->partials, m->counters,
                                  m->stream));
        CU_TRY(k_prefill_attention(&a, d + l->items, np, m->stream));
        if (gemm(m, m->attn, L->wo, m->x, 1, 1, T, h, nh * hd, e)) return ENGINE_ERR_DEVICE;
        if (fuse) {
            k_skinny_args g = {.x = m->x, .norm_w = L->mlp_norm, .eps = eps, .w = L->wgu,
                               .y = m->act, .M = T, .N = 2 * I, .K = h, .pro = K_PRO_NORM,
                               .epi = K_EPI_SILU};
            CU_TRY(k_gemm_skinny_fused(&g, m->stream));
        } else {
            CU_TRY(k_add_rmsnorm(m->x, NULL, L->mlp_norm, NULL, T, h, eps, m->xn, m->stream));
            if (gemm(m, m->xn, L->wgu, m->gu, 0, 0, T, 2 * I, h, e)) return ENGINE_ERR_DEVICE;
            CU_TRY(k_silu_mul(m->gu, T, I, m->act, m->stream));
        }
        if (gemm(m, m->act, L->wdown, m->x, 1, 1, T, h, I, e)) return ENGINE_ERR_DEVICE;
    }
    if (N > 0) {
        if (fuse && N <= SKINNY_MAX_ROWS && (int64_t)N * h * 2 <= K_SKINNY_SMEM) {
            k_skinny_args f = {.x = m->x, .x_rows = d + l->rows, .norm_w = m->final_norm,
                               .eps = eps, .w = m->lm_head, .y = m->logits, .M = N,
                               .N = mc->vocab_size, .K = h, .pro = K_PRO_NORM, .epi = K_EPI_F32};
            CU_TRY(k_gemm_skinny_fused(&f, m->stream));
        } else {
            CU_TRY(k_add_rmsnorm(m->x, NULL, m->final_norm, d + l->rows, N, h, eps, m->xrows, m->stream));
            if (gemm(m, m->xrows, m->lm_head, m->logits, 1, 0, N, mc->vocab_size, h, e))
                return ENGINE_ERR_DEVICE;
        }
    }
    return 0;
}

static int cmp_tile(const void *a, const void *b)
{
    const tile *x = a, *y = b;
    return x->key != y->key ? (y->key > x->key ? 1 : -1) : (x->seq != y->seq ? x->seq - y->seq : x->first - y->first);
}

/* The decode graph for a step of B sequences whose longest context is max_len: *g its batch size,
 * *slot where its exec lives. */
static cudaGraphExec_t *decode_graph_for(cuda_model *m, int32_t B, int32_t max_len, int32_t *g,
                                         int32_t *bucket)
{
    int32_t i = 0;
    while (m->graph_sizes[i] < B) i++; /* B <= the last size */
    int32_t j = 0;
    while ((int64_t)K_DECODE_PARTITION << j < max_len) j++;
    *g = m->graph_sizes[i];
    *bucket = K_DECODE_PARTITION << j;
    return &m->graphs[i * m->num_buckets + j];
}

/* The layout of a decode graph of G rows for contexts up to `bucket`: block table rows as long as
 * the bucket's contexts need. */
static meta_layout decode_layout(const cuda_model *m, int32_t G, int32_t bucket)
{
    int32_t S = (int32_t)min_i64(m->S, div_ceil_i64(bucket, m->o.block_size));
    return layout_for(G, G, G, G, 0, S);
}

/* Fills h_meta for a pure-decode step padded to G rows: s's B rows, then padding rows at the
 * scratch block (s may be NULL: all padding). Logits rows: s's, then every other row. */
static void fill_decode_meta(cuda_model *m, const eng_step *s, int32_t G, const meta_layout *l)
{
    int32_t *h = m->h_meta, B = s ? s->num_seqs : 0, N = s ? s->num_logits : 0, bs = m->o.block_size;
    if (B) {
        memcpy(h + l->tok, s->token_ids, sizeof(int32_t) * (size_t)B);
        memcpy(h + l->pos, s->positions, sizeof(int32_t) * (size_t)B);
        memcpy(h + l->slot, s->slot_mapping, sizeof(int32_t) * (size_t)B);
        memcpy(h + l->lens, s->seq_lens, sizeof(int32_t) * (size_t)B);
    }
    for (int32_t b = 0; b < B; b++)
        memcpy(h + l->bt + (int64_t)b * l->S, s->block_tables + (int64_t)b * s->block_table_stride,
               sizeof(int32_t) * (size_t)((s->seq_lens[b] + bs - 1) / bs));
    for (int32_t b = B; b < G; b++) { /* padding rows: one token each at the scratch block */
        h[l->tok + b] = 0, h[l->pos + b] = 0, h[l->slot + b] = m->scratch_block * bs, h[l->lens + b] = 1;
        h[l->bt + (int64_t)b * l->S] = m->scratch_block;
    }
    for (int32_t b = 0; b <= G; b++) h[l->qsl + b] = b;
    for (int32_t b = 0; b < G; b++) h[l->dec + b] = b;
    for (int32_t k = 0; k < N; k++) {
        h[l->rows + k] = s->logits_rows[k];
        m->row_used[s->logits_rows[k]] = 1;
    }
    for (int32_t r = 0, k = N; r < G; r++) {
        if (!m->row_used[r]) h[l->rows + k++] = r;
        m->row_used[r] = 0;
    }
}

/* Captures (and uploads) the decode graph of G rows for contexts up to `bucket`. */
static int capture_decode_graph(cuda_model *m, int32_t G, int32_t bucket, cudaGraphExec_t *out, terr *e)
{
    int32_t parts, P = pick_partition(m, G, bucket, &parts);
    meta_layout l = decode_layout(m, G, bucket);
    cudaGraph_t graph;
    CU_TRY(cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal));
    int rc = enqueue_forward(m, G, G, G, G, 0, P, parts, &l, e);
    cudaError_t end = cudaStreamEndCapture(m->stream, &graph);
    if (rc) {
        if (end == cudaSuccess) cudaGraphDestroy(graph);
        return rc;
    }
    CU_TRY(end);
    cudaError_t inst = cudaGraphInstantiate(out, graph, 0);
    cudaGraphDestroy(graph);
    CU_TRY(inst);
    CU_TRY(cudaGraphUpload(*out, m->stream));
    return 0;
}

/* A pure-decode step through its graph (captured now if open did not). */
static int forward_decode_graph(cuda_model *m, const eng_step *s, int32_t max_len, terr *e)
{
    int32_t G, bucket;
    cudaGraphExec_t *g = decode_graph_for(m, s->num_seqs, max_len, &G, &bucket);
    meta_layout l = decode_layout(m, G, bucket);
    CU_TRY(cudaEventSynchronize(m->meta_copied));
    fill_decode_meta(m, s, G, &l);
    CU_TRY(cudaMemcpyAsync(m->d_meta, m->h_meta, (size_t)l.total * 4, cudaMemcpyHostToDevice, m->stream));
    CU_TRY(cudaEventRecord(m->meta_copied, m->stream));
    if (!*g && capture_decode_graph(m, G, bucket, g, e)) return ENGINE_ERR_DEVICE;
    CU_TRY(cudaGraphLaunch(*g, m->stream));
    return 0;
}

/* Swaps copy every layer's K and V of each block with one batched copy on the swap stream, after
 * the forward passes enqueued so far (a swap-out reads what they wrote). The copy engines do the
 * work, so a swap-out runs beside the next forward pass unless that pass writes one of the blocks
 * being copied out (wait_for_swaps); a swap-in is always waited for, since the step that swaps a
 * request in runs it. */
static int cuda_swap(void *self, bool to_host, int32_t n, const int32_t *dev, const int32_t *host, terr *e)
{
    cuda_model *m = self;
    const model_config *mc = &m->mc;
    size_t parts = 2 * (size_t)mc->num_layers, count = (size_t)n * parts;
    int64_t blk = (int64_t)m->o.block_size * mc->num_kv_heads * mc->head_dim; /* elements */
    if (count > m->cp_cap) {
        m->cp_cap = count;
        m->cp_dst = xrealloc(m->cp_dst, count * sizeof *m->cp_dst);
        m->cp_src = xrealloc(m->cp_src, count * sizeof *m->cp_src);
        m->cp_size = xrealloc(m->cp_size, count * sizeof *m->cp_size);
    }
    for (int32_t i = 0; i < n; i++)
        for (size_t p = 0; p < parts; p++) {
            size_t k = (size_t)i * parts + p;
            bf16_t *d = m->kv + (int64_t)p * m->layer_kv + dev[i] * blk;
            bf16_t *h = m->host_kv + ((int64_t)host[i] * (int64_t)parts + (int64_t)p) * blk;
            m->cp_dst[k] = to_host ? (void *)h : (void *)d;
            m->cp_src[k] = to_host ? (void *)d : (void *)h;
            m->cp_size[k] = (size_t)blk * 2;
        }
    CU_TRY(cudaEventRecord(m->forwarded, m->stream));
    CU_TRY(cudaStreamWaitEvent(m->swap_stream, m->forwarded, 0));
    struct cudaMemcpyAttributes attr = {
        .srcAccessOrder = cudaMemcpySrcAccessOrderStream,
        .flags = cudaMemcpyFlagPreferOverlapWithCompute,
    };
    size_t attr_at = 0;
    cudaError_t err = cudaMemcpyBatchAsync(m->cp_dst, (const void *const *)m->cp_src, m->cp_size, count, &attr,
                                           &attr_at, 1, m->swap_stream);
    if (err == cudaErrorNotSupported) { /* a driver without batched copies: one call each */
        (void)cudaGetLastError();
        for (size_t k = 0; k < count; k++)
            CU_TRY(cudaMemcpyAsync(m->cp_dst[k], m->cp_src[k], m->cp_size[k], cudaMemcpyDefault, m->swap_stream));
    } else {
        CU_TRY(err);
    }
    CU_TRY(cudaEventRecord(m->swapped, m->swap_stream));
    if (!to_host) {
        m->wait_swap = true;
        return 0;
    }
    if (m->num_out + n > m->cap_out) {
        m->cap_out = m->num_out + n;
        m->out_blocks = xrealloc(m->out_blocks, sizeof *m->out_blocks * (size_t)m->cap_out);
    }
    for (int32_t i = 0; i < n; i++)
        if (!m->swapping_out[dev[i]]++) m->out_blocks[m->num_out++] = dev[i];
    return 0;
}

/* Before a forward pass: waits for the swaps it depends on (see cuda_swap). */
static int wait_for_swaps(cuda_model *m, const eng_step *s, terr *e)
{
    if (!m->wait_swap && m->num_out == 0) return 0;
    bool wait = m->wait_swap;
    for (int32_t t = 0; t < s->num_tokens && !wait; t++)
        wait = m->swapping_out[s->slot_mapping[t] / m->o.block_size];
    if (!wait) return 0;
    CU_TRY(cudaStreamWaitEvent(m->stream, m->swapped, 0));
    for (int32_t i = 0; i < m->num_out; i++) m->swapping_out[m->out_blocks[i]] = 0;
    m->num_out = 0;
    m->wait_swap = false;
    return 0;
}

static int cuda_forward(void *self, const eng_step *s, terr *e)
{
    cuda_model *m = self;
    if (wait_for_swaps(m, s, e)) return ENGINE_ERR_DEVICE;
    int32_t T = s->num_tokens, B = s->num_seqs, N = s->num_logits;
    int32_t nd = 0, np = 0, max_len = 0, longest = 1;
    for (int32_t b = 0; b < B; b++) {
        int32_t n = s->query_start_loc[b + 1] - s->query_start_loc[b];
        longest = max_i32(longest, s->seq_lens[b]);
        if (n == 1) {
            nd++;
            max_len = max_i32(max_len, s->seq_lens[b]);
        } else {
            np += (int32_t)div_ceil_i64(n, PF_TILE);
        }
    }
    if (nd == B && np == 0 && m->o.cuda_graphs) return forward_decode_graph(m, s, max_len, e);
    int32_t max_blocks = (int32_t)div_ceil_i64(longest, m->o.block_size);

    meta_layout l = layout_for(T, B, N, nd, np, max_blocks);
    /* The previous step's copy out of h_meta must be done before it is overwritten. */
    CU_TRY(cudaEventSynchronize(m->meta_copied));
    int32_t *h = m->h_meta;
    memcpy(h + l.tok, s->token_ids, sizeof(int32_t) * (size_t)T);
    memcpy(h + l.pos, s->positions, sizeof(int32_t) * (size_t)T);
    memcpy(h + l.slot, s->slot_mapping, sizeof(int32_t) * (size_t)T);
    memcpy(h + l.qsl, s->query_start_loc, sizeof(int32_t) * (size_t)(B + 1));
    memcpy(h + l.lens, s->seq_lens, sizeof(int32_t) * (size_t)B);
    memcpy(h + l.rows, s->logits_rows, sizeof(int32_t) * (size_t)N);
    tile *tiles = m->tiles;
    int32_t k = 0, t = 0;
    for (int32_t b = 0; b < B; b++) {
        int32_t q0 = s->query_start_loc[b], n = s->query_start_loc[b + 1] - q0;
        if (n == 1) {
            h[l.dec + k++] = b;
            continue;
        }
        for (int32_t i = 0; i < n; i += PF_TILE)
            tiles[t++] = (tile){b, i, s->seq_lens[b] - n + min_i32(i + PF_TILE, n) - 1};
    }
    qsort(tiles, (size_t)np, sizeof *tiles, cmp_tile);
    for (int32_t i = 0; i < np; i++) {
        h[l.items + 2 * i] = tiles[i].seq;
        h[l.items + 2 * i + 1] = tiles[i].first;
    }
    for (int32_t b = 0; b < B; b++) {
        int32_t nblk = (int32_t)div_ceil_i64(s->seq_lens[b], m->o.block_size);
        memcpy(h + l.bt + (int64_t)b * l.S, s->block_tables + (int64_t)b * s->block_table_stride,
               sizeof(int32_t) * (size_t)nblk);
    }
    CU_TRY(cudaMemcpyAsync(m->d_meta, h, (size_t)l.total * 4, cudaMemcpyHostToDevice, m->stream));
    CU_TRY(cudaEventRecord(m->meta_copied, m->stream));
    int32_t parts, P = pick_partition(m, nd, max_len, &parts);
    return enqueue_forward(m, T, B, N, nd, np, P, parts, &l, e);
}

/* Start-up work that would otherwise land on the first steps of a run: every decode graph is
 * captured and run once (padding rows only), and prefill steps of one sequence over a ladder of
 * token counts (x1.25 from 9 to the largest step) load the GEMM kernels cuBLAS picks for them.
 * The prefill steps write KV blocks 0.. of the cache, which holds nothing yet. */
static int cuda_warmup(void *self, terr *e)
{
    cuda_model *m = self;
    const engine_opts *o = &m->o;
    for (int32_t i = 0; o->cuda_graphs && i < m->num_graph_sizes; i++) {
        int32_t G = m->graph_sizes[i];
        for (int32_t j = 0; j < m->num_buckets; j++)
            if (capture_decode_graph(m, G, K_DECODE_PARTITION << j, &m->graphs[i * m->num_buckets + j], e))
                return ENGINE_ERR_DEVICE;
        meta_layout l = decode_layout(m, G, K_DECODE_PARTITION);
        CU_TRY(cudaEventSynchronize(m->meta_copied));
        fill_decode_meta(m, NULL, G, &l);
        CU_TRY(cudaMemcpyAsync(m->d_meta, m->h_meta, (size_t)l.total * 4, cudaMemcpyHostToDevice, m->stream));
        CU_TRY(cudaEventRecord(m->meta_copied, m->stream));
        CU_TRY(cudaGraphLaunch(m->graphs[i * m->num_buckets], m->stream));
    }
    int64_t max_t = min_i64(min_i64(o->max_tokens, o->max_model_len), (int64_t)o->num_blocks * o->block_size);
    int32_t *rows = xmalloc(sizeof(int32_t) * (size_t)(4 * max_t + 2)), *bt = rows + 3 * max_t;
    int32_t *tok = rows, *pos = rows + max_t, *slot = rows + 2 * max_t, qsl[2] = {0, 0};
    int32_t stride = (int32_t)div_ceil_i64(max_t, o->block_size), rc = 0;
    for (int32_t b = 0; b < stride; b++) bt[b] = b;
    for (int64_t t = WARMUP_FIRST_TOKENS; t <= max_t && !rc; t = t == max_t ? max_t + 1 : min_i64(max_t, t + 1 + t / 4)) {
        for (int32_t p = 0; p < t; p++) tok[p] = p % m->mc.vocab_size, pos[p] = p, slot[p] = p;
        qsl[1] = (int32_t)t;
        int32_t last = (int32_t)t - 1, len = (int32_t)t;
        eng_step st = {.num_tokens = (int32_t)t, .num_seqs = 1, .token_ids = tok, .positions = pos,
                       .slot_mapping = slot, .query_start_loc = qsl, .seq_lens = &len,
                       .block_tables = bt, .block_table_stride = stride, .num_logits = 1,
                       .logits_rows = &last};
        rc = cuda_forward(m, &st, e);
    }
    free(rows);
    if (rc) return rc;
    CU_TRY(cudaStreamSynchronize(m->stream)); /* the warm-up's kernels are in no step's window */
    return 0;
}

/* Enqueues the sampling of the last forward's n logits rows behind it, and the ids' copy down,
 * without waiting: the ids stay on the device for the next step's embedding (d_tok). The halves
 * of h_samp / h_tok take turns (engine.c keeps at most two samplings unwaited, in order). */
static int cuda_sample_start(void *self, int32_t n, const eng_sampling *sp, terr *e)
{
    cuda_model *m = self;
    int32_t half = m->start_half, N = m->o.max_seqs;
    m->start_half ^= 1;
    if (n > 0) {
        float *hs = m->h_samp + (int64_t)half * 3 * N;
        CU_TRY(cudaEventSynchronize(m->tok_ready[half]));
        memcpy(hs, sp->temperature, sizeof(float) * (size_t)n);
        memcpy(hs + n, sp->top_p, sizeof(float) * (size_t)n);
        memcpy(hs + 2 * n, sp->uniform, sizeof(float) * (size_t)n);
        CU_TRY(cudaMemcpyAsync(m->d_samp, hs, sizeof(float) * (size_t)(3 * n), cudaMemcpyHostToDevice,
                               m->stream));
        CU_TRY(k_sample(m->logits, n, m->mc.vocab_size, m->d_samp, m->d_samp + n, m->d_samp + 2 * n,
                        m->d_tok, m->stream));
        CU_TRY(cudaMemcpyAsync(m->h_tok + (int64_t)half * N, m->d_tok, sizeof(int32_t) * (size_t)n,
                               cudaMemcpyDeviceToHost, m->stream));
    }
    CU_TRY(cudaEventRecord(m->tok_ready[half], m->stream)); /* with no rows, the step's end */
    return 0;
}

/* Waits for the oldest unwaited sample_start (and so for its step) and copies its n ids to out. */
static int cuda_sample_wait(void *self, int32_t n, int32_t *out, terr *e)
{
    cuda_model *m = self;
    int32_t half = m->wait_half;
    m->wait_half ^= 1;
    CU_TRY(cudaEventSynchronize(m->tok_ready[half]));
    memcpy(out, m->h_tok + (int64_t)half * m->o.max_seqs, sizeof(int32_t) * (size_t)n);
    return 0;
}

static int cuda_logits(void *self, int32_t n, float *out, terr *e)
{
    cuda_model *m = self;
    CU_TRY(cudaMemcpyAsync(out, m->logits, sizeof(float) * (size_t)n * (size_t)m->mc.vocab_size,
                           cudaMemcpyDeviceToHost, m->stream));
    CU_TRY(cudaStreamSynchronize(m->stream));
    return 0;
}

static int cuda_sync(void *self, terr *e)
{
    cuda_model *m = self;
    CU_TRY(cudaStreamSynchronize(m->stream));
    return 0;
}

static ktrace_meter *cuda_kernel_meter(void *self) { return ((cuda_model *)self)->ktrace; }

const engine_backend_ops cuda_backend_ops = {
    .name = "cuda",
    .open = cuda_open,
    .forward = cuda_forward,
    .sample_start = cuda_sample_start,
    .sample_wait = cuda_sample_wait,
    .logits = cuda_logits,
    .swap = cuda_swap,
    .sync = cuda_sync,
    .warmup = cuda_warmup,
    .kernel_meter = cuda_kernel_meter,
    .destroy = cuda_destroy,
};

void *engine_cuda_stream(engine *eng)
{
    if (!eng->ops || strcmp(eng->ops->name, "cuda") != 0) return NULL;
    return ((cuda_model *)eng->self)->stream;
}

#else /* built without CUDA */

static int no_cuda_open(void **self, const model_config *mc, const engine_opts *o,
                        const struct wt_source *src, terr *e)
{
    (void)self, (void)mc, (void)o, (void)src;
    terr_set(e, "--backend cuda: this tandem was built without CUDA (CUDA=0 or no nvcc)");
    return ENGINE_ERR_DEVICE;
}

const engine_backend_ops cuda_backend_ops = {.name = "cuda", .open = no_cuda_open};

void *engine_cuda_stream(engine *eng)
{
    (void)eng;
    return NULL;
}

#endif
