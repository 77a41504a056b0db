/* cpu_ops.c: see cpu_ops.h. Written for clarity, not speed: this is the oracle. */
#include "engine/cpu_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/numerics.h"

void cpu_embed(const float *embed, const int32_t *tokens, int32_t T, int32_t h, float *x)
{
    for (int32_t t = 0; t < T; t++)
        memcpy(x + (int64_t)t * h, embed + (int64_t)tokens[t] * h, sizeof(float) * (size_t)h);
}

void cpu_add_rmsnorm(float *x, const float *delta, const float *w, const int32_t *rows, int32_t n,
                     int32_t h, float eps, float *out)
{
    for (int32_t i = 0; i < n; i++) {
        int64_t r = rows ? rows[i] : i;
        float *xr = x + r * h, *o = out + (int64_t)i * h;
        for (int32_t j = 0; j < h; j++) o[j] = xr[j] + (delta ? delta[r * h + j] : 0.0f);
        if (!rows) memcpy(xr, o, sizeof(float) * (size_t)h);
        double ss = 0;
        for (int32_t j = 0; j < h; j++) ss += (double)o[j] * o[j];
        float inv = (float)(1.0 / sqrt(ss / h + eps));
        for (int32_t j = 0; j < h; j++) o[j] = o[j] * inv * w[j];
    }
}

void cpu_matmul(const float *x, const float *w, int32_t M, int32_t N, int32_t K, float *y)
{
    for (int32_t m = 0; m < M; m++) {
        const float *xm = x + (int64_t)m * K;
        for (int32_t n = 0; n < N; n++) {
            const float *wn = w + (int64_t)n * K;
            float acc = 0;
            for (int32_t k = 0; k < K; k++) acc += xm[k] * wn[k];
            y[(int64_t)m * N + n] = acc;
        }
    }
}

void cpu_rope_inv_freq(const model_config *mc, float *inv_freq)
{
    int32_t hd = mc->head_dim;
    for (int32_t i = 0; i < hd / 2; i++) {
        double f = (float)(1.0 / pow(mc->rope_theta, (double)(2 * i) / hd));
        if (mc->rope_scaling == ROPE_SCALING_LLAMA3) {
            double low_wavelen = mc->rope_original_max_pos / mc->rope_low_freq_factor;
            double high_wavelen = mc->rope_original_max_pos / mc->rope_high_freq_factor;
            double wavelen = 2 * M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / mc->rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (mc->rope_original_max_pos / wavelen - mc->rope_low_freq_factor) /
                                (mc->rope_high_freq_factor - mc->rope_low_freq_factor);
                f = (1 - smooth) * f / mc->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}

void cpu_rope(float *qkv, const int32_t *positions, int32_t T, int32_t nh, int32_t nkv, int32_t hd,
              const float *inv_freq)
{
    int32_t stride = (nh + 2 * nkv) * hd, half = hd / 2;
    for (int32_t t = 0; t < T; t++) {
        for (int32_t head = 0; head < nh + nkv; head++) { /* q heads, then k heads */
            float *v = qkv + (int64_t)t * stride + (int64_t)head * hd;
            for (int32_t i = 0; i < half; i++) {
                float angle = (float)positions[t] * inv_freq[i]; /* float32, as transformers */
                float c = (float)cos(angle), s = (float)sin(angle);
                float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * c - x2 * s;
                v[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

void cpu_kv_write(const float *qkv, const int32_t *slot_mapping, int32_t T, int32_t nh, int32_t nkv,
                  int32_t hd, float *k_cache, float *v_cache, int to_bf16)
{
    int32_t stride = (nh + 2 * nkv) * hd, kvdim = nkv * hd;
    for (int32_t t = 0; t < T; t++) {
        if (slot_mapping[t] < 0) continue; /* no slot (as the kernels: padding rows) */
        const float *k = qkv + (int64_t)t * stride + (int64_t)nh * hd, *v = k + kvdim;
        float *kc = k_cache + (int64_t)slot_mapping[t] * kvdim;
        float *vc = v_cache + (int64_t)slot_mapping[t] * kvdim;
        for (int32_t j = 0; j < kvdim; j++) {
            kc[j] = to_bf16 ? round_bf16(k[j]) : k[j];
            vc[j] = to_bf16 ? round_bf16(v[j]) : v[j];
        }
    }
}

void cpu_attention(const float *qkv, const float *k_cache, const float *v_cache, const eng_step *s,
                   int32_t nh, int32_t nkv, int32_t hd, int32_t block_size, float *out)
{
    int32_t stride = (nh + 2 * nkv) * hd, group = nh / nkv;
    float scale = 1.0f / sqrtf((float)hd);
    int32_t max_len = 0;
    for (int32_t b = 0; b < s->num_seqs; b++) max_len = max_i32(max_len, s->seq_lens[b]);
    float *score = xmalloc(sizeof(float) * (size_t)max_len);
    for (int32_t b = 0; b < s->num_seqs; b++) {
        const int32_t *bt = s->block_tables + (int64_t)b * s->block_table_stride;
        for (int32_t t = s->query_start_loc[b]; t < s->query_start_loc[b + 1]; t++) {
            int32_t nkeys = s->positions[t] + 1;
            for (int32_t head = 0; head < nh; head++) {
                const float *q = qkv + (int64_t)t * stride + (int64_t)head * hd;
                int32_t kvh = head / group;
                float mx = -INFINITY;
                for (int32_t j = 0; j < nkeys; j++) {
                    int64_t slot = (int64_t)bt[j / block_size] * block_size + j % block_size;
                    const float *k = k_cache + (slot * nkv + kvh) * hd;
                    float dot = 0;
                    for (int32_t d = 0; d < hd; d++) dot += q[d] * k[d];
                    score[j] = dot * scale;
                    mx = fmaxf(mx, score[j]);
                }
                double sum = 0;
                for (int32_t j = 0; j < nkeys; j++) {
                    score[j] = expf(score[j] - mx);
                    sum += score[j];
                }
                float *o = out + (int64_t)t * nh * hd + (int64_t)head * hd;
                for (int32_t d = 0; d < hd; d++) o[d] = 0;
                for (int32_t j = 0; j < nkeys; j++) {
                    int64_t slot = (int64_t)bt[j / block_size] * block_size + j % block_size;
                    const float *v = v_cache + (slot * nkv + kvh) * hd;
                    float p = (float)(score[j] / sum);
                    for (int32_t d = 0; d < hd; d++) o[d] += p * v[d];
                }
            }
        }
    }
    free(score);
}

void cpu_silu_mul(const float *gu, int32_t T, int32_t I, float *out)
{
    for (int32_t t = 0; t < T; t++) {
        const float *g = gu + (int64_t)t * 2 * I, *u = g + I;
        for (int32_t i = 0; i < I; i++) out[(int64_t)t * I + i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void cpu_round_bf16(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = round_bf16(x[i]);
}
