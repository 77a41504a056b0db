/*
 * cpu_ops.h: the forward pass's operations in plain C, float32: the CPU backend is built from
 * them, and each is the twin a CUDA kernel in kernels/ is tested against (tests/test_kernels_gpu.c).
 *
 * Shapes follow engine.h; "qkv" rows hold q (nh*hd), then k (nkv*hd), then v (nkv*hd). KV
 * caches are (num_slots, nkv, hd) for one layer, slot = block*block_size + offset.
 */
#ifndef TANDEM_CPU_OPS_H
#define TANDEM_CPU_OPS_H

#include <stdint.h>

#include "core/model_config.h"
#include "engine/engine.h"

/* x[t] = embed[tokens[t]]: embed (V, h), x (T, h). */
void cpu_embed(const float *embed, const int32_t *tokens, int32_t T, int32_t h, float *x);

/* The fused residual add + RMSNorm. For each of n rows r (rows[i], or i when rows is NULL):
 * y = x[r] + delta[r] (delta may be NULL), out[i] = y / sqrt(mean(y^2) + eps) * w. Without
 * rows, x[r] = y is stored back (the residual stream moves on); with rows (the final norm over
 * the logits rows, which may repeat) x is left alone. x, delta (.., h); out (n, h). */
void cpu_add_rmsnorm(float *x, const float *delta, const float *w, const int32_t *rows, int32_t n,
                     int32_t h, float eps, float *out);

/* y = x w^T: x (M, K), w (N, K), y (M, N). */
void cpu_matmul(const float *x, const float *w, int32_t M, int32_t N, int32_t K, float *y);

/* RoPE inverse frequencies (hd/2), with Llama-3 scaling when the config asks for it, computed
 * as transformers does (float32 of theta^(-2i/hd), then the llama3 adjustment). */
void cpu_rope_inv_freq(const model_config *mc, float *inv_freq);

/* Rotates the q and k heads of each row by its position, Hugging Face "rotate_half" pairing:
 * (x[i], x[i + hd/2]) for i < hd/2, angle = pos * inv_freq[i]. qkv (T, (nh + 2 nkv) hd). */
void cpu_rope(float *qkv, const int32_t *positions, int32_t T, int32_t nh, int32_t nkv, int32_t hd,
              const float *inv_freq);

/* Copies each row's k and v into the caches at slot_mapping[t] (rounded to bf16 if asked);
 * rows with a negative slot are skipped. */
void cpu_kv_write(const float *qkv, const int32_t *slot_mapping, int32_t T, int32_t nh, int32_t nkv,
                  int32_t hd, float *k_cache, float *v_cache, int to_bf16);

/* Causal attention over the paged cache: row t of sequence b attends keys 0..positions[t] of b,
 * found through b's block table. out (T, nh*hd). */
void cpu_attention(const float *qkv, const float *k_cache, const float *v_cache, const eng_step *s,
                   int32_t nh, int32_t nkv, int32_t hd, int32_t block_size, float *out);

/* out[t][i] = silu(gu[t][i]) * gu[t][I + i]: gu (T, 2I), out (T, I). */
void cpu_silu_mul(const float *gu, int32_t T, int32_t I, float *out);

void cpu_round_bf16(float *x, int64_t n);

#endif
