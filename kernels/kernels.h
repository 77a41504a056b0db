/*
 * kernels.h: the CUDA kernels of the forward pass, behind extern "C" launchers (zeux/calm's
 * split: C host code, CUDA only in kernels/). Each launcher enqueues on `stream` and returns
 * the launch error (cudaGetLastError), which the caller checks.
 *
 * Every kernel has a plain-C twin in engine/cpu_ops.c (or engine/sampler.c) that
 * tests/test_kernels_gpu.c checks it against on fresh random inputs.
 *
 * Types: bf16 values travel as their raw 16 bits (uint16_t) so C can hold them; the residual
 * stream is float32, GEMM outputs float32 or bf16 as each launcher says. Shapes as in engine.h:
 * T token rows, h hidden, nh/nkv heads of hd dims, I MLP width; qkv rows are
 * [q (nh*hd) | k (nkv*hd) | v]. KV caches (one layer): (num_blocks * block_size slots, nkv, hd)
 * bf16.
 *
 * Programmatic dependent launch: kernels are launched so that the next one may start while this
 * one drains; each kernel reads nothing written by an earlier kernel, and writes nothing, before
 * its griddepcontrol.wait. Only constant data (weights) is touched before that point, which lets
 * the skinny GEMM start streaming weights early.
 */
#ifndef TANDEM_KERNELS_H
#define TANDEM_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/decode_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t bf16_t;

/* dst[i] = synth_weight_bf16(seed, tensor_id, i, mean, std) (kernels/numerics.h), i < n. */
cudaError_t k_synth_bf16(bf16_t *dst, int64_t n, uint64_t seed, uint32_t tensor_id, float mean,
                         float std, cudaStream_t stream);

/* x[t] = embed[tokens[t]]: embed (V, h) bf16, x (T, h) float. h % 8 == 0. A token id -1 - k
 * stands for prev[k] (the previous step's sampled ids, on the device; NULL when none is). */
cudaError_t k_embed(const bf16_t *embed, const int32_t *tokens, const int32_t *prev, int32_t T, int32_t h,
                    float *x, cudaStream_t stream);

/* Fused residual add + RMSNorm, as cpu_add_rmsnorm: for n rows r (rows[i], or i if rows is
 * NULL): y = x[r] + delta[r] (delta may be NULL); out[i] = bf16(y * rsqrt(mean(y^2) + eps) * w);
 * without rows x[r] = y is stored (a no-op without delta, skipped). h % 8 == 0, h <= 16384. */
cudaError_t k_add_rmsnorm(float *x, const float *delta, const bf16_t *w, const int32_t *rows,
                          int32_t n, int32_t h, float eps, bf16_t *out, cudaStream_t stream);

/* RoPE (rotate_half pairing, angle = pos * inv_freq[i]) on the q and k heads of each row of
 * qkv (T, (nh + 2 nkv) hd) bf16 (the unfused path's QKV GEMM output): rotated q written to
 * q (T, q_stride) float, head i at columns [i*hd, (i+1)*hd) (other columns untouched); rotated k
 * and v written as bf16 into the caches at slot_mapping[t] (skipped when negative; q is still
 * written). hd % 8 == 0, hd <= 256, q_stride % 4 == 0 and >= nh*hd, else cudaErrorInvalidValue. */
cudaError_t k_rope_kv_write(const bf16_t *qkv, const int32_t *positions, const int32_t *slot_mapping,
                            int32_t T, int32_t nh, int32_t nkv, int32_t hd, const float *inv_freq,
                            float *q, int32_t q_stride, bf16_t *k_cache, bf16_t *v_cache,
                            cudaStream_t stream);

/* out[t][i] = bf16(silu(gu[t][i]) * gu[t][I + i]): gu (T, 2I) bf16, out (T, I). I % 8 == 0. */
cudaError_t k_silu_mul(const bf16_t *gu, int32_t T, int32_t I, bf16_t *out, cudaStream_t stream);

/* y = x w^T for few rows (M <= 8): x (M, K) bf16, w (N, K) bf16, y (M, N) float or bf16.
 * Weight streaming (k_gemm_skinny_fused with K_PRO_NONE and K_EPI_F32 / K_EPI_BF16). K % 8 == 0. */
cudaError_t k_gemm_skinny(const bf16_t *x, const bf16_t *w, void *y, int y_is_f32, int32_t M,
                          int32_t N, int32_t K, cudaStream_t stream);

/* What the skinny GEMM does to its activation before the product (prologue)... */
enum k_skinny_pro {
    K_PRO_NONE, /* x: bf16 (M, K) */
    K_PRO_NORM, /* x: float residual stream; row m is RMSNorm(x[rows ? rows[m] : m]) * norm_w,
                   rounded to bf16, as k_add_rmsnorm without delta. Needs M*K*2 <= K_SKINNY_SMEM */
};
/* ... and to its result (epilogue). */
enum k_skinny_epi {
    K_EPI_F32,      /* y (M, N) float */
    K_EPI_BF16,     /* y (M, N) bf16 */
    K_EPI_RESIDUAL, /* y (M, N) float, y += result (the residual add) */
    K_EPI_SILU,     /* N = 2I rows [gate | up]: y (M, I) bf16 = silu(bf16(gate)) * bf16(up), as
                       k_silu_mul on a bf16 gate/up */
    K_EPI_ROPE_KV,  /* N = (nh + 2 nkv) hd, y = qkv (M, N) float: as k_rope_kv_write after the
                       GEMM, but on the float32 products (not rounded to bf16 first): q columns
                       rotated, k and v columns unrotated, rotated k and v written to the caches
                       at slot_mapping[m] (skipped when negative) */
};

/* Largest activation (M * K * 2 bytes) staged in shared memory; K_PRO_NORM needs it staged. */
#define K_SKINNY_SMEM (200 * 1024)

typedef struct k_skinny_args {
    const void *x;          /* bf16 (M, K) or, for K_PRO_NORM, float (.., K) */
    const int32_t *x_rows;  /* K_PRO_NORM: row of x for each m (NULL: m) */
    const bf16_t *norm_w;   /* K_PRO_NORM: (K) */
    float eps;
    const bf16_t *w;        /* (N, K) */
    void *y;                /* see k_skinny_epi */
    int32_t M, N, K;
    int pro, epi;           /* k_skinny_pro, k_skinny_epi */
    /* K_EPI_ROPE_KV */
    const int32_t *positions, *slot_mapping; /* (M) */
    const float *inv_freq;                   /* (hd/2) */
    bf16_t *k_cache, *v_cache;
    int32_t nh, nkv, hd;
} k_skinny_args;

/* The weight-streaming GEMM for M <= 8 rows with a fused prologue and epilogue: a persistent
 * grid (two blocks per SM) whose warps each stream pairs of weight rows with 16-byte loads, two
 * batches in flight, the first ones issued before waiting for the previous kernel. K % 8 == 0. */
cudaError_t k_gemm_skinny_fused(const k_skinny_args *a, cudaStream_t stream);

/* Sets the kernels' shared-memory limits; call once before capturing CUDA graphs (launchers
 * otherwise do it on first use). */
cudaError_t k_init(void);

/* What both attention kernels read. */
typedef struct k_attn_args {
    const float *qkv;             /* (T, qkv_stride) after RoPE */
    int32_t qkv_stride;
    const bf16_t *k_cache, *v_cache;
    bf16_t *out;                  /* (T, out_stride): head h at columns [h*hd, (h+1)*hd) */
    int32_t out_stride;
    const int32_t *query_start_loc; /* (B+1) */
    const int32_t *seq_lens;        /* (B) */
    const int32_t *block_tables;    /* (B, bt_stride) */
    int32_t bt_stride;
    int32_t nh, nkv, hd, block_size;
    float scale;                  /* 1/sqrt(hd) */
} k_attn_args;

/* Decode attention for the sequences listed in decode_seqs (each has exactly one new row):
 * grid (head groups, num_decode, max_partitions); blocks past a sequence's length exit.
 * partials: (num_decode, nh, max_partitions, hd + 2) floats; counters: (num_decode, nh) ints,
 * zero before the first launch and left zero by every launch. hd in {32, 64, 128}. */
cudaError_t k_decode_attention(const k_attn_args *a, const int32_t *decode_seqs, int32_t num_decode,
                               int32_t partition, int32_t max_partitions, float *partials,
                               int32_t *counters, cudaStream_t stream);

/* Query rows per block of the prefill kernel. */
#define K_PREFILL_TILE 128

/* Causal attention for query tiles of K_PREFILL_TILE rows: items (num_items, 2) = (sequence, first row
 * offset within it). Row i of sequence b is position seq_len - n_b + i and attends keys
 * 0..position, all read from the paged cache (the new chunk's K/V were written first): this
 * serves prefill and chunked prefill alike. Tensor cores (wgmma on compute capability 9.0 at
 * hd 128 with a power-of-two block size, mma.sync otherwise; bf16, fp32 accumulate), online
 * softmax. hd in {32, 64, 128}. */
cudaError_t k_prefill_attention(const k_attn_args *a, const int32_t *items, int32_t num_items,
                                cudaStream_t stream);

/* Nonzero on a GPU that runs the wgmma prefill kernel (compute capability 9.0). */
int k_prefill_wgmma_ok(void);

/* One layer's weights and KV cache, as the streamed decode kernel reads them (device array). */
typedef struct k_layer_w {
    const bf16_t *attn_norm, *wqkv, *wo, *mlp_norm, *wgu, *wdown;
    bf16_t *k_cache, *v_cache;
} k_layer_w;

/* The most sequences k_decode_stream is built for. */
#define K_DECODE_STREAM_MAX_SEQS 2

/* A pure-decode step of M sequences through every layer (sequence b owning row b; M up to
 * K_DECODE_STREAM_MAX_SEQS). */
typedef struct k_decode_args {
    const k_layer_w *layers; /* (num_layers), device memory */
    int32_t num_layers;
    int32_t M, h, I, nh, nkv, hd; /* M: 1..K_DECODE_STREAM_MAX_SEQS */
    float eps, scale;       /* RMSNorm epsilon; 1/sqrt(hd) */
    float *x;               /* (M, h) residual stream: embeddings in, last layer's output out */
    float *qkv;             /* (M, (nh + 2 nkv) hd) scratch */
    bf16_t *attn, *act;     /* (M, nh*hd), (M, I) scratch */
    float *partials;        /* (M, nh, k_decode_stream_grid(), hd + 4) scratch */
    unsigned *barrier;      /* K_DECODE_SYNC_WORDS(num_layers) counters, zero at launch */
    const int32_t *positions, *slot_mapping; /* (M) */
    const int32_t *seq_lens;                 /* (M), KV length after this step */
    const int32_t *block_tables;             /* (M, bt_stride) */
    int32_t bt_stride, block_size;
    const float *inv_freq;  /* (hd/2) */
    int32_t max_tokens;     /* >= the sum of seq_lens of any launch (sizes shared memory) */
    /* Filled by k_decode_stream: */
    int32_t slot_bytes, nslots, ring_off, scratch_off, toks_off, smem, tps, upr[4], hg, q_off;
} k_decode_args;

/* Counters (unsigned) of k_decode_args.barrier for a model of L layers: the grid barrier's, each
 * GEMM phase's unit claims (128 bytes apart), 16 a layer for the attention merge, then two a layer
 * (128 bytes apart) for the QKV phase's early signals. */
#define K_DECODE_SYNC_WORDS(L) (32 * (1 + 4 * (L)) + 16 * (L) + 64 * (L))

/* Blocks of a k_decode_stream launch (one per SM): the partials buffer has this many per
 * sequence and head. */
int32_t k_decode_stream_grid(void);

/* Whether k_decode_stream runs this shape at M sequences (1..K_DECODE_STREAM_MAX_SEQS): hd 64 or
 * 128, nh a multiple of 8 and at most 32, and a shared-memory ring of at least 3 slots next to
 * the staged activation. */
int k_decode_stream_supported(int32_t M, int32_t h, int32_t I, int32_t nh, int32_t nkv, int32_t hd,
                              int32_t max_tokens);

/* Every layer of a pure-decode step in one persistent kernel (kernels/decode_stream.cu): the
 * fused path's five operations a layer as phases between grid barriers, while a producer warp per
 * block streams the block's share of every weight matrix and of the context's KV rows through a
 * shared-memory ring with bulk copies, ahead of the phases. Launched cooperatively (every block
 * resident), not as a programmatic dependent. The GEMM arithmetic is the fused path's; attention
 * sums in another order. */
cudaError_t k_decode_stream(const k_decode_args *a, cudaStream_t stream);

/* One token per row of logits (n, V), as engine/sampler.c: greedy when temperature <= 0, else
 * temperature + top-p with the given uniform draws. */
cudaError_t k_sample(const float *logits, int32_t n, int32_t V, const float *temperature,
                     const float *top_p, const float *uniform, int32_t *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
