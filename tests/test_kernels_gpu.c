/*
 * test_kernels_gpu.c: each CUDA kernel (kernels/) against its plain-C twin (engine/cpu_ops.c,
 * engine/sampler.c), on fresh random inputs (a GSL generator seeded per test), at the shapes and
 * on the paths the engine launches it with. Without a GPU it prints why and passes (CI), unless
 * TANDEM_REQUIRE_GPU=1 (`make test-gpu`), when that is a failure.
 *
 * Every output buffer is poisoned with NaN bits before the kernel runs, so an element the kernel
 * failed to write shows up as NaN. Block tables are shuffled permutations; batches mix prefill
 * chunks and decodes.
 */
#include "testutil_gpu.h"

#if TANDEM_HAVE_CUDA
#include <cuda_runtime.h>
#include <gsl/gsl_randist.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "kernels/kernels.h"
#include "kernels/numerics.h"

#define CK_CUDA(call)                                                                             \
    do {                                                                                          \
        cudaError_t err_ = (call);                                                                \
        ck_assert_msg(err_ == cudaSuccess, "%s:%d: %s: %s", __FILE__, __LINE__, #call,            \
                      cudaGetErrorString(err_));                                                  \
    } while (0)


static void *dpoison(size_t bytes)
{
    void *p = NULL;
    CK_CUDA(cudaMalloc(&p, bytes));
    CK_CUDA(cudaMemset(p, 0xff, bytes)); /* NaN as float32 and as bf16 */
    return p;
}
static void *dupload(const void *h, size_t bytes)
{
    void *p = dpoison(bytes);
    CK_CUDA(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    return p;
}
static void download(void *h, const void *d, size_t bytes)
{
    CK_CUDA(cudaDeviceSynchronize());
    CK_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* Normal values rounded to bf16 (so CPU and GPU see the same numbers), with bf16 copies. */
static float *randn_bf16(gsl_rng *r, int64_t n, double std, uint16_t **bits)
{
    float *x = xmalloc(sizeof(float) * (size_t)n);
    uint16_t *b = xmalloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        b[i] = f32_to_bf16((float)gsl_ran_gaussian(r, std));
        x[i] = bf16_to_f32(b[i]);
    }
    *bits = b;
    return x;
}
static float *randn(gsl_rng *r, int64_t n, double std)
{
    float *x = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)gsl_ran_gaussian(r, std);
    return x;
}
static float *bf16_to_floats(const uint16_t *b, int64_t n)
{
    float *x = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = bf16_to_f32(b[i]);
    return x;
}

/* ---- kernels ---------------------------------------------------------------------------------- */

START_TEST(synth_weights_bitwise_equal_cpu)
{
    int64_t n = (1 << 20) + 3;
    uint16_t *d = dpoison(2 * (size_t)n), *g = xmalloc(2 * (size_t)n);
    float means[2] = {0.0f, 1.0f}, stds[2] = {0.0156f, 0.1f};
    for (int k = 0; k < 2; k++) {
        CK_CUDA(k_synth_bf16(d, n, 1234 + k, 17u + k, means[k], stds[k], 0));
        download(g, d, 2 * (size_t)n);
        int64_t diff = 0;
        for (int64_t i = 0; i < n; i++)
            diff += g[i] != synth_weight_bf16(1234 + k, 17u + k, (uint64_t)i, means[k], stds[k]);
        printf("  synth mean %g std %g: %lld of %lld differ\n", means[k], stds[k], (long long)diff, (long long)n);
        ck_assert_msg(diff == 0, "%lld synthetic weights differ between GPU and CPU", (long long)diff);
    }
    cudaFree(d), free(g);
}
END_TEST

START_TEST(embed_matches_cpu)
{
    gsl_rng *r = rng_for("embed");
    int32_t V = 1000, h = 4096, T = 77, tok[77];
    uint16_t *eb;
    float *ef = randn_bf16(r, (int64_t)V * h, 1.0, &eb);
    for (int i = 0; i < T; i++) tok[i] = (int32_t)gsl_rng_uniform_int(r, (unsigned long)V);
    /* every third row names the previous step's sampled id -1 - k instead (prev[k]) */
    int32_t given[77], prev[26];
    for (int i = 0; i < T; i++) given[i] = tok[i];
    for (int k = 0; 3 * k < T; k++) prev[k] = tok[3 * k], given[3 * k] = -1 - k;
    void *de = dupload(eb, 2 * (size_t)V * h), *dt = dupload(given, sizeof given), *dp = dupload(prev, sizeof prev),
         *dx = dpoison(4 * (size_t)T * h);
    CK_CUDA(k_embed(de, dt, dp, T, h, dx, 0));
    float *g = xmalloc(4 * (size_t)T * h), *c = xmalloc(4 * (size_t)T * h);
    download(g, dx, 4 * (size_t)T * h);
    cpu_embed(ef, tok, T, h, c);
    expect_close("embed T=77 h=4096, a third of the ids from the previous step", g, c, (int64_t)T * h, 0, 0); /* exact */
    cudaFree(de), cudaFree(dt), cudaFree(dp), cudaFree(dx);
    free(eb), free(ef), free(g), free(c);
    gsl_rng_free(r);
}
END_TEST

START_TEST(add_rmsnorm_matches_cpu)
{
    gsl_rng *r = rng_for("rmsnorm");
    int32_t hs[] = {128, 4096, 5120, 8192}, T = 37, rows[5] = {3, 0, 36, 3, 17};
    for (size_t k = 0; k < ARRAY_LEN(hs); k++) {
        int32_t h = hs[k];
        int64_t n = (int64_t)T * h;
        float *x = randn(r, n, 1.0), *dl = randn(r, n, 0.5);
        uint16_t *wb;
        float *w = randn_bf16(r, h, 0.1, &wb);
        for (int32_t i = 0; i < h; i++) w[i] += 1.0f, wb[i] = f32_to_bf16(w[i]), w[i] = bf16_to_f32(wb[i]);
        for (int mode = 0; mode < 3; mode++) { /* no delta; delta; delta + gathered rows */
            const int32_t *rw = mode == 2 ? rows : NULL;
            int32_t nr = mode == 2 ? 5 : T;
            float *dx = dupload(x, 4 * (size_t)n), *dd = dupload(dl, 4 * (size_t)n);
            void *dw = dupload(wb, 2 * (size_t)h), *dr = dupload(rows, sizeof rows);
            uint16_t *dout = dpoison(2 * (size_t)nr * h);
            CK_CUDA(k_add_rmsnorm(dx, mode ? dd : NULL, dw, rw ? dr : NULL, nr, h, 1e-5f, dout, 0));
            uint16_t *gb = xmalloc(2 * (size_t)nr * h);
            float *gx = xmalloc(4 * (size_t)n), *cx = xmalloc(4 * (size_t)n), *co = xmalloc(4 * (size_t)nr * h);
            download(gb, dout, 2 * (size_t)nr * h);
            download(gx, dx, 4 * (size_t)n);
            memcpy(cx, x, 4 * (size_t)n);
            cpu_add_rmsnorm(cx, mode ? dl : NULL, w, rw, nr, h, 1e-5f, co);
            float *go = bf16_to_floats(gb, (int64_t)nr * h);
            char what[96];
            snprintf(what, sizeof what, "add_rmsnorm h=%d %s: out", h,
                     mode == 0 ? "no delta" : mode == 1 ? "delta" : "delta, rows 3,0,36,3,17");
            expect_close(what, go, co, (int64_t)nr * h, TOL_NORM, TOL_ELEM);
            snprintf(what, sizeof what, "add_rmsnorm h=%d mode %d: residual x", h, mode);
            expect_close(what, gx, cx, n, 1e-6, 1e-6);
            cudaFree(dx), cudaFree(dd), cudaFree(dw), cudaFree(dr), cudaFree(dout);
            free(gb), free(gx), free(cx), free(co), free(go);
        }
        free(x), free(dl), free(w), free(wb);
    }
    gsl_rng_free(r);
}
END_TEST

static void model_like(model_config *mc, int32_t nh, int32_t nkv, int32_t hd, bool llama3)
{
    terr e = {{0}};
    model_config_load(mc, llama3 ? "llama-3.1-8b" : "llama-2-7b", &e);
    mc->num_heads = nh, mc->num_kv_heads = nkv, mc->head_dim = hd;
}

START_TEST(rope_kv_write_matches_cpu)
{
    gsl_rng *r = rng_for("rope");
    /* nh, nkv, hd, llama3 scaling, q columns past nh*hd (q_stride = nh*hd + that): the engine's
     * layout (q in the float qkv rows), dense q, padded rows; hd 40 takes the 4-wide path. */
    int32_t cfg[][5] = {{32, 32, 128, 0, 2 * 32 * 128}, {32, 8, 128, 1, 0}, {16, 16, 64, 0, 12},
                        {4, 1, 32, 1, 4}, {4, 2, 40, 0, 8}};
    for (size_t k = 0; k < ARRAY_LEN(cfg); k++) {
        model_config mc;
        model_like(&mc, cfg[k][0], cfg[k][1], cfg[k][2], cfg[k][3]);
        int32_t nh = mc.num_heads, nkv = mc.num_kv_heads, hd = mc.head_dim, T = 50, slots_n = 128;
        int32_t stride = (nh + 2 * nkv) * hd, qs = nh * hd + cfg[k][4], kvd = nkv * hd;
        int32_t pos[50], slot[50], perm[128];
        bool written[128] = {false};
        shuffle_ids(r, perm, slots_n);
        /* shuffled slots; every 7th row has none (-1): its q is written, its k and v are not */
        for (int i = 0; i < T; i++) {
            pos[i] = (int32_t)gsl_rng_uniform_int(r, 9000);
            slot[i] = i % 7 == 3 ? -1 : perm[i];
            if (slot[i] >= 0) written[slot[i]] = true;
        }
        /* the GEMM's bf16 output; the CPU rotates the same values */
        uint16_t *qkvb;
        float *qkv = randn_bf16(r, (int64_t)T * stride, 1.0, &qkvb), inv[128];
        cpu_rope_inv_freq(&mc, inv);
        void *dqkv = dupload(qkvb, 2 * (size_t)T * stride);
        float *dinv = dupload(inv, sizeof(float) * (size_t)(hd / 2)), *dq = dpoison(4 * (size_t)T * qs);
        int32_t *dp = dupload(pos, sizeof pos), *ds = dupload(slot, sizeof slot);
        /* caches with a guard slot in front, where a write for slot -1 would land */
        size_t cache = (size_t)(slots_n + 1) * kvd;
        uint16_t *dk = dpoison(2 * cache), *dv = dpoison(2 * cache);
        CK_CUDA(k_rope_kv_write(dqkv, dp, ds, T, nh, nkv, hd, dinv, dq, qs, dk + kvd, dv + kvd, 0));
        float *gq = xmalloc(4 * (size_t)T * qs), *ck = xcalloc(cache, 4), *cv = xcalloc(cache, 4);
        uint16_t *gk = xmalloc(2 * cache), *gv = xmalloc(2 * cache);
        download(gq, dq, 4 * (size_t)T * qs);
        download(gk, dk, 2 * cache), download(gv, dv, 2 * cache);
        cpu_rope(qkv, pos, T, nh, nkv, hd, inv);
        cpu_kv_write(qkv, slot, T, nh, nkv, hd, ck + kvd, cv + kvd, 1);
        /* q heads of every row; q's columns past nh*hd and the slots nobody maps keep the poison */
        float *gqs = xmalloc(4 * (size_t)T * nh * hd), *cqs = xmalloc(4 * (size_t)T * nh * hd);
        int64_t stray = 0;
        for (int t = 0; t < T; t++) {
            memcpy(gqs + (int64_t)t * nh * hd, gq + (int64_t)t * qs, 4 * (size_t)nh * hd);
            memcpy(cqs + (int64_t)t * nh * hd, qkv + (int64_t)t * stride, 4 * (size_t)nh * hd);
            for (int j = nh * hd; j < qs; j++) {
                uint32_t bits;
                memcpy(&bits, gq + (int64_t)t * qs + j, 4);
                stray += bits != 0xffffffffu;
            }
        }
        for (int s = -1; s < slots_n; s++) {
            if (s >= 0 && written[s]) continue;
            for (int j = 0; j < kvd; j++) {
                int64_t o = (int64_t)(s + 1) * kvd + j;
                stray += (gk[o] != 0xffff) + (gv[o] != 0xffff);
            }
        }
        /* k/v at the written slots only */
        int64_t kvn = 0;
        float *gks = xmalloc(4 * (size_t)T * kvd), *cks = xmalloc(4 * (size_t)T * kvd);
        float *gvs = xmalloc(4 * (size_t)T * kvd), *cvs = xmalloc(4 * (size_t)T * kvd);
        for (int t = 0; t < T; t++) {
            if (slot[t] < 0) continue;
            for (int j = 0; j < kvd; j++, kvn++) {
                int64_t s = (int64_t)(slot[t] + 1) * kvd + j;
                gks[kvn] = bf16_to_f32(gk[s]), cks[kvn] = ck[s], gvs[kvn] = bf16_to_f32(gv[s]), cvs[kvn] = cv[s];
            }
        }
        char what[96];
        snprintf(what, sizeof what, "rope q nh=%d nkv=%d hd=%d q_stride=%d%s", nh, nkv, hd, qs,
                 cfg[k][3] ? " llama3" : "");
        expect_close(what, gqs, cqs, (int64_t)T * nh * hd, 1e-5, 1e-4);
        snprintf(what, sizeof what, "rope+kv_write k cache nh=%d nkv=%d hd=%d", nh, nkv, hd);
        expect_close(what, gks, cks, kvn, TOL_NORM, TOL_ELEM);
        snprintf(what, sizeof what, "kv_write v cache nh=%d nkv=%d hd=%d", nh, nkv, hd);
        expect_close(what, gvs, cvs, kvn, 0, 0); /* the bf16 input, copied */
        ck_assert_msg(stray == 0, "rope nh=%d nkv=%d hd=%d q_stride=%d: %lld values written outside "
                      "q's columns or at slots no row maps (or slot -1)", nh, nkv, hd, qs, (long long)stray);
        cudaFree(dqkv), cudaFree(dinv), cudaFree(dq), cudaFree(dp), cudaFree(ds), cudaFree(dk), cudaFree(dv);
        free(qkv), free(qkvb), free(gq), free(ck), free(cv), free(gk), free(gv), free(gqs), free(cqs);
        free(gks), free(cks), free(gvs), free(cvs);
    }
    gsl_rng_free(r);
}
END_TEST

START_TEST(silu_mul_matches_cpu)
{
    gsl_rng *r = rng_for("silu");
    int32_t Is[] = {344, 11008}, T = 33;
    for (size_t k = 0; k < ARRAY_LEN(Is); k++) {
        int32_t I = Is[k];
        uint16_t *gub;
        float *gu = randn_bf16(r, (int64_t)T * 2 * I, 2.0, &gub);
        /* gates far out: exp(-g) overflows below g = -88, which must give 0, not NaN */
        const float far[] = {-100.0f, -1000.0f, 100.0f, 1000.0f, -88.0f, -80.0f};
        for (int i = 0; i < (int)ARRAY_LEN(far); i++) {
            int64_t at = (int64_t)(5 + i) * 2 * I + 3 * i; /* gate column 3i of row 5 + i */
            gub[at] = f32_to_bf16(far[i]), gu[at] = bf16_to_f32(gub[at]);
        }
        void *dgu = dupload(gub, 2 * (size_t)T * 2 * I);
        uint16_t *dout = dpoison(2 * (size_t)T * I), *gb = xmalloc(2 * (size_t)T * I);
        CK_CUDA(k_silu_mul(dgu, T, I, dout, 0));
        download(gb, dout, 2 * (size_t)T * I);
        float *g = bf16_to_floats(gb, (int64_t)T * I), *c = xmalloc(4 * (size_t)T * I);
        cpu_silu_mul(gu, T, I, c);
        char what[64];
        snprintf(what, sizeof what, "silu_mul T=%d I=%d", T, I);
        expect_close(what, g, c, (int64_t)T * I, TOL_NORM, TOL_ELEM);
        cudaFree(dgu), cudaFree(dout), free(gub), free(gu), free(gb), free(g), free(c);
    }
    gsl_rng_free(r);
}
END_TEST

START_TEST(skinny_gemm_matches_cpu)
{
    gsl_rng *r = rng_for("skinny");
    /* {64, 16384}: at M = 8 the activation (256 KB) is too large to stage in shared memory and
     * is read from global memory instead */
    int32_t shapes[][2] = {{4096, 4096}, {1000, 344}, {37, 11008}, {12288, 1024}, {64, 16384}};
    for (size_t k = 0; k < ARRAY_LEN(shapes); k++) {
        int32_t N = shapes[k][0], K = shapes[k][1];
        uint16_t *wb, *xb;
        float *w = randn_bf16(r, (int64_t)N * K, 1.0 / sqrt(K), &wb), *x = randn_bf16(r, 8 * (int64_t)K, 1.0, &xb);
        void *dw = dupload(wb, 2 * (size_t)N * K), *dx = dupload(xb, 2 * 8 * (size_t)K);
        float *c = xmalloc(4 * 8 * (size_t)N), *g = xmalloc(4 * 8 * (size_t)N);
        cpu_matmul(x, w, 8, N, K, c);
        const int32_t Ms[] = {1, 2, 3, 4, 8};
        for (size_t mi = 0; mi < ARRAY_LEN(Ms); mi++) {
            int32_t M = Ms[mi];
            for (int f32 = 0; f32 < 2; f32++) {
                void *dy = dpoison((size_t)M * N * (f32 ? 4 : 2));
                CK_CUDA(k_gemm_skinny(dx, dw, dy, f32, M, N, K, 0));
                if (f32) {
                    download(g, dy, 4 * (size_t)M * N);
                } else {
                    uint16_t *gb = xmalloc(2 * (size_t)M * N);
                    download(gb, dy, 2 * (size_t)M * N);
                    for (int64_t i = 0; i < (int64_t)M * N; i++) g[i] = bf16_to_f32(gb[i]);
                    free(gb);
                }
                char what[80];
                snprintf(what, sizeof what, "skinny gemm M=%d N=%d K=%d out %s", M, N, K, f32 ? "f32" : "bf16");
                expect_close(what, g, c, (int64_t)M * N, f32 ? 3e-5 : TOL_NORM, f32 ? 1e-4 : TOL_ELEM);
                cudaFree(dy);
            }
        }
        cudaFree(dw), cudaFree(dx), free(w), free(wb), free(x), free(xb), free(c), free(g);
    }
    gsl_rng_free(r);
}
END_TEST

/* The skinny GEMM's fused prologues and epilogues against the CPU composition of the unfused
 * operations: norm (rounded to bf16, as the GPU stages it) -> matmul -> RoPE + KV write, or ->
 * bf16 gate/up -> SiLU * up, or y += x w^T, or a norm over gathered rows -> matmul. */
static float *skinny_fused_run(const k_skinny_args *ka, size_t y_bytes, const float *y_init)
{
    void *dy = y_init ? dupload(y_init, y_bytes) : dpoison(y_bytes);
    k_skinny_args a = *ka;
    a.y = dy;
    CK_CUDA(k_gemm_skinny_fused(&a, 0));
    float *g = xmalloc(y_bytes);
    download(g, dy, y_bytes);
    cudaFree(dy);
    return g;
}

START_TEST(skinny_gemm_fused_matches_cpu)
{
    gsl_rng *r = rng_for("skinny_fused");
    const int32_t Ms[] = {1, 3, 8};
    const float eps = 1e-5f;
    /* norm + QKV GEMM + RoPE + KV write: MHA hd 32 and GQA hd 128 (llama3 RoPE) */
    int32_t cfg[][5] = {{4, 4, 32, 512, 0}, {8, 2, 128, 1024, 1}};
    for (size_t k = 0; k < ARRAY_LEN(cfg); k++) {
        model_config mc;
        model_like(&mc, cfg[k][0], cfg[k][1], cfg[k][2], cfg[k][4]);
        int32_t nh = mc.num_heads, nkv = mc.num_kv_heads, hd = mc.head_dim, K = cfg[k][3];
        int32_t N = (nh + 2 * nkv) * hd, slots_n = 64, perm[64], pos[8], slot[8];
        uint16_t *wb, *gb;
        float *w = randn_bf16(r, (int64_t)N * K, 1.0 / sqrt(K), &wb), *x = randn(r, 8 * (int64_t)K, 1.0);
        float *gam = randn_bf16(r, K, 0.1, &gb), inv[64];
        for (int32_t i = 0; i < K; i++) gb[i] = f32_to_bf16(gam[i] + 1.0f), gam[i] = bf16_to_f32(gb[i]);
        shuffle_ids(r, perm, slots_n);
        for (int i = 0; i < 8; i++) pos[i] = (int32_t)gsl_rng_uniform_int(r, 5000), slot[i] = perm[i];
        slot[1] = -1; /* a row that writes no KV */
        cpu_rope_inv_freq(&mc, inv);
        void *dw = dupload(wb, 2 * (size_t)N * K), *dx = dupload(x, 4 * 8 * (size_t)K), *dg = dupload(gb, 2 * (size_t)K);
        void *dpos = dupload(pos, sizeof pos), *dslot = dupload(slot, sizeof slot), *dinv = dupload(inv, sizeof inv);
        size_t cache = (size_t)slots_n * nkv * hd;
        for (size_t mi = 0; mi < ARRAY_LEN(Ms); mi++) {
            int32_t M = Ms[mi];
            uint16_t *dk = dpoison(2 * cache), *dv = dpoison(2 * cache);
            k_skinny_args a = {.x = dx, .norm_w = dg, .eps = eps, .w = dw, .M = M, .N = N, .K = K,
                               .pro = K_PRO_NORM, .epi = K_EPI_ROPE_KV, .positions = dpos,
                               .slot_mapping = dslot, .inv_freq = dinv, .k_cache = dk, .v_cache = dv,
                               .nh = nh, .nkv = nkv, .hd = hd};
            float *g = skinny_fused_run(&a, 4 * (size_t)M * N, NULL);
            /* CPU: norm -> bf16 -> matmul (kept for the unrotated k/v columns) -> RoPE -> KV */
            float *xc = xmalloc(4 * (size_t)M * K), *xn = xmalloc(4 * (size_t)M * K);
            float *c = xmalloc(4 * (size_t)M * N), *c0 = xmalloc(4 * (size_t)M * N);
            memcpy(xc, x, 4 * (size_t)M * K);
            cpu_add_rmsnorm(xc, NULL, gam, NULL, M, K, eps, xn);
            cpu_round_bf16(xn, (int64_t)M * K);
            cpu_matmul(xn, w, M, N, K, c);
            memcpy(c0, c, 4 * (size_t)M * N);
            cpu_rope(c, pos, M, nh, nkv, hd, inv);
            float *ck = xcalloc(cache, 4), *cv = xcalloc(cache, 4);
            cpu_kv_write(c, slot, M, nh, nkv, hd, ck, cv, 1);
            /* qkv as the unfused kernels leave it: q rotated, k and v not */
            for (int32_t m = 0; m < M; m++)
                memcpy(c + (int64_t)m * N + nh * hd, c0 + (int64_t)m * N + nh * hd, 4 * (size_t)(2 * nkv * hd));
            char what[128];
            snprintf(what, sizeof what, "skinny fused norm+qkv+rope M=%d nh=%d nkv=%d hd=%d K=%d: qkv", M, nh, nkv, hd, K);
            expect_close(what, g, c, (int64_t)M * N, TOL_NORM, TOL_ELEM);
            /* the caches at the written slots */
            uint16_t *gk = xmalloc(2 * cache), *gv = xmalloc(2 * cache);
            download(gk, dk, 2 * cache), download(gv, dv, 2 * cache);
            int64_t kvn = (int64_t)M * nkv * hd, o = 0;
            float *gks = xmalloc(4 * (size_t)kvn), *cks = xmalloc(4 * (size_t)kvn);
            float *gvs = xmalloc(4 * (size_t)kvn), *cvs = xmalloc(4 * (size_t)kvn);
            for (int32_t m = 0; m < M; m++) {
                if (slot[m] < 0) continue;
                for (int32_t j = 0; j < nkv * hd; j++, o++) {
                    int64_t sidx = (int64_t)slot[m] * nkv * hd + j;
                    gks[o] = bf16_to_f32(gk[sidx]), cks[o] = ck[sidx];
                    gvs[o] = bf16_to_f32(gv[sidx]), cvs[o] = cv[sidx];
                }
            }
            snprintf(what, sizeof what, "skinny fused rope M=%d: k cache", M);
            expect_close(what, gks, cks, o, TOL_NORM, TOL_ELEM);
            snprintf(what, sizeof what, "skinny fused M=%d: v cache", M);
            expect_close(what, gvs, cvs, o, TOL_NORM, TOL_ELEM);
            if (M > 1) { /* the skipped row's slot is untouched (still NaN) */
                int64_t skipped = 0;
                for (int32_t j = 0; j < nkv * hd; j++) skipped += gk[(int64_t)perm[1] * nkv * hd + j] == 0xffff;
                ck_assert_msg(skipped == nkv * hd, "slot -1: the k cache at the unused slot was written");
            }
            cudaFree(dk), cudaFree(dv);
            free(g), free(xc), free(xn), free(c), free(c0), free(ck), free(cv), free(gk), free(gv);
            free(gks), free(cks), free(gvs), free(cvs);
        }
        cudaFree(dw), cudaFree(dx), cudaFree(dg), cudaFree(dpos), cudaFree(dslot), cudaFree(dinv);
        free(w), free(wb), free(x), free(gam), free(gb);
    }

    /* norm + gate/up GEMM + SiLU * up; y += x w^T (odd N); norm over gathered rows + GEMM */
    int32_t K = 1024, I = 344;
    uint16_t *wb, *gb, *xb, *w2b;
    float *w = randn_bf16(r, (int64_t)2 * I * K, 1.0 / sqrt(K), &wb), *x = randn(r, 9 * (int64_t)K, 1.0);
    float *gam = randn_bf16(r, K, 0.1, &gb);
    for (int32_t i = 0; i < K; i++) gb[i] = f32_to_bf16(gam[i] + 1.0f), gam[i] = bf16_to_f32(gb[i]);
    int32_t N2 = 1001, K2 = 2752;
    float *w2 = randn_bf16(r, (int64_t)N2 * K2, 1.0 / sqrt(K2), &w2b), *x2 = randn_bf16(r, 8 * (int64_t)K2, 1.0, &xb);
    float *y0 = randn(r, 8 * (int64_t)N2, 1.0);
    int32_t rows[8] = {8, 0, 3, 3, 7, 1, 2, 5};
    void *dw = dupload(wb, 2 * (size_t)2 * I * K), *dx = dupload(x, 4 * 9 * (size_t)K), *dg = dupload(gb, 2 * (size_t)K);
    void *dw2 = dupload(w2b, 2 * (size_t)N2 * K2), *dx2 = dupload(xb, 2 * 8 * (size_t)K2), *drows = dupload(rows, sizeof rows);
    for (size_t mi = 0; mi < ARRAY_LEN(Ms); mi++) {
        int32_t M = Ms[mi];
        char what[128];
        float *xc = xmalloc(4 * 9 * (size_t)K), *xn = xmalloc(4 * 8 * (size_t)K);
        /* SiLU: the GPU writes bf16, read back as raw bits */
        k_skinny_args a = {.x = dx, .norm_w = dg, .eps = eps, .w = dw, .M = M, .N = 2 * I, .K = K,
                           .pro = K_PRO_NORM, .epi = K_EPI_SILU};
        uint16_t *dact = dpoison(2 * (size_t)M * I), *gact = xmalloc(2 * (size_t)M * I);
        a.y = dact;
        CK_CUDA(k_gemm_skinny_fused(&a, 0));
        download(gact, dact, 2 * (size_t)M * I);
        float *g = bf16_to_floats(gact, (int64_t)M * I);
        float *gu = xmalloc(4 * (size_t)M * 2 * I), *c = xmalloc(4 * (size_t)M * I);
        memcpy(xc, x, 4 * (size_t)M * K);
        cpu_add_rmsnorm(xc, NULL, gam, NULL, M, K, eps, xn);
        cpu_round_bf16(xn, (int64_t)M * K);
        cpu_matmul(xn, w, M, 2 * I, K, gu);
        cpu_round_bf16(gu, (int64_t)M * 2 * I);
        cpu_silu_mul(gu, M, I, c);
        snprintf(what, sizeof what, "skinny fused norm+gate_up+silu M=%d I=%d K=%d", M, I, K);
        expect_close(what, g, c, (int64_t)M * I, TOL_NORM, TOL_ELEM);
        cudaFree(dact), free(gact), free(g), free(gu), free(c);

        /* residual: y = y0 + x2 w2^T */
        k_skinny_args ra = {.x = dx2, .w = dw2, .M = M, .N = N2, .K = K2, .pro = K_PRO_NONE,
                            .epi = K_EPI_RESIDUAL};
        g = skinny_fused_run(&ra, 4 * (size_t)M * N2, y0);
        c = xmalloc(4 * (size_t)M * N2);
        cpu_matmul(x2, w2, M, N2, K2, c);
        for (int64_t i = 0; i < (int64_t)M * N2; i++) c[i] += y0[i];
        snprintf(what, sizeof what, "skinny fused residual y += x w^T M=%d N=%d K=%d", M, N2, K2);
        expect_close(what, g, c, (int64_t)M * N2, 3e-5, 1e-4);
        free(g), free(c);

        /* final norm over gathered (repeated) rows + LM-head-like GEMM, f32 out */
        k_skinny_args fa = {.x = dx, .x_rows = drows, .norm_w = dg, .eps = eps, .w = dw, .M = M,
                            .N = 2 * I, .K = K, .pro = K_PRO_NORM, .epi = K_EPI_F32};
        g = skinny_fused_run(&fa, 4 * (size_t)M * 2 * I, NULL);
        c = xmalloc(4 * (size_t)M * 2 * I);
        memcpy(xc, x, 4 * 9 * (size_t)K);
        cpu_add_rmsnorm(xc, NULL, gam, rows, M, K, eps, xn);
        cpu_round_bf16(xn, (int64_t)M * K);
        cpu_matmul(xn, w, M, 2 * I, K, c);
        snprintf(what, sizeof what, "skinny fused norm(rows 8,0,3,3,..)+gemm M=%d N=%d K=%d", M, 2 * I, K);
        expect_close(what, g, c, (int64_t)M * 2 * I, TOL_NORM, TOL_ELEM);
        free(g), free(c), free(xc), free(xn);
    }
    cudaFree(dw), cudaFree(dx), cudaFree(dg), cudaFree(dw2), cudaFree(dx2), cudaFree(drows);
    free(w), free(wb), free(x), free(gam), free(gb), free(w2), free(w2b), free(x2), free(xb), free(y0);
    gsl_rng_free(r);
}
END_TEST

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct attn_case {
    int32_t nh, nkv, hd, bs; /* bs: tokens per KV block */
} attn_case;

/* Sequences (ctx, n): n new rows after ctx cached tokens. The whole context's K/V is random
 * (as if written earlier); attention runs through the decode kernel for n == 1 and the prefill
 * kernel otherwise, as the engine splits a step. */
static void check_attention(gsl_rng *r, attn_case ac, const int32_t (*seqs)[2], int32_t B,
                            int32_t partition, int32_t extra_parts, const char *label)
{
    int32_t nh = ac.nh, nkv = ac.nkv, hd = ac.hd, bs = ac.bs, stride = (nh + 2 * nkv) * hd;
    int32_t T = 0, maxlen = 0, qsl[64], lens[64];
    qsl[0] = 0;
    for (int32_t b = 0; b < B; b++) {
        T += seqs[b][1];
        qsl[b + 1] = T;
        lens[b] = seqs[b][0] + seqs[b][1];
        maxlen = max_i32(maxlen, lens[b]);
    }
    int32_t S = (maxlen + bs - 1) / bs, nblocks = S * B;
    int32_t *perm = xmalloc(sizeof(int32_t) * (size_t)nblocks), *bt = xmalloc(sizeof(int32_t) * (size_t)nblocks);
    shuffle_ids(r, perm, nblocks);
    memcpy(bt, perm, sizeof(int32_t) * (size_t)nblocks);
    int32_t *pos = xmalloc(sizeof(int32_t) * (size_t)T);
    for (int32_t b = 0; b < B; b++)
        for (int32_t i = 0; i < seqs[b][1]; i++) pos[qsl[b] + i] = seqs[b][0] + i;
    int64_t cache = (int64_t)nblocks * bs * nkv * hd;
    uint16_t *kb, *vb;
    float *kf = randn_bf16(r, cache, 1.0, &kb), *vf = randn_bf16(r, cache, 1.0, &vb);
    float *qkv = randn(r, (int64_t)T * stride, 1.0);
    eng_step s = {.num_tokens = T, .num_seqs = B, .positions = pos, .query_start_loc = qsl,
                  .seq_lens = lens, .block_tables = bt, .block_table_stride = S};
    float *c = xmalloc(4 * (size_t)T * nh * hd);
    cpu_attention(qkv, kf, vf, &s, nh, nkv, hd, bs, c);

    int32_t dec[64], nd = 0, items[2 * 256], np = 0;
    for (int32_t b = 0; b < B; b++) {
        if (seqs[b][1] == 1) dec[nd++] = b;
        else
            for (int32_t i = 0; i < seqs[b][1]; i += K_PREFILL_TILE)
                items[2 * np] = b, items[2 * np + 1] = i, np++;
    }
    int32_t max_parts = (maxlen + partition - 1) / partition + extra_parts;
    float *dq = dupload(qkv, 4 * (size_t)T * stride);
    void *dk = dupload(kb, 2 * (size_t)cache), *dv = dupload(vb, 2 * (size_t)cache);
    int32_t *dqsl = dupload(qsl, 4 * (size_t)(B + 1)), *dlens = dupload(lens, 4 * (size_t)B);
    int32_t *dbt = dupload(bt, 4 * (size_t)nblocks), *ddec = dupload(dec, sizeof dec), *ditems = dupload(items, sizeof items);
    float *dpart = dpoison(4 * (size_t)B * nh * max_parts * (hd + 2));
    int32_t *dctr = dpoison(4 * (size_t)B * nh);
    CK_CUDA(cudaMemset(dctr, 0, 4 * (size_t)B * nh));
    uint16_t *dout = dpoison(2 * (size_t)T * nh * hd), *gb = xmalloc(2 * (size_t)T * nh * hd);
    k_attn_args a = {.qkv = dq, .qkv_stride = stride, .k_cache = dk, .v_cache = dv, .out = dout,
                     .out_stride = nh * hd, .query_start_loc = dqsl, .seq_lens = dlens,
                     .block_tables = dbt, .bt_stride = S, .nh = nh, .nkv = nkv, .hd = hd,
                     .block_size = bs, .scale = 1.0f / sqrtf((float)hd)};
    float *g = NULL;
    for (int rep = 0; rep < 2; rep++) { /* again: the split-K counters must have reset */
        CK_CUDA(k_decode_attention(&a, ddec, nd, partition, max_parts, dpart, dctr, 0));
        CK_CUDA(k_prefill_attention(&a, ditems, np, 0));
        download(gb, dout, 2 * (size_t)T * nh * hd);
        float *gr = bf16_to_floats(gb, (int64_t)T * nh * hd);
        if (rep == 0) {
            char what[128];
            snprintf(what, sizeof what, "attention %s nh=%d nkv=%d hd=%d bs=%d P=%d (%d dec, %d tiles)", label,
                     nh, nkv, hd, bs, partition, nd, np);
            expect_close_floor(what, gr, c, (int64_t)T * nh * hd, TOL_NORM, TOL_ELEM, 1.0);
            g = gr;
        } else {
            ck_assert_msg(memcmp(gr, g, 4 * (size_t)T * nh * hd) == 0,
                          "attention %s: a second launch gave other results (counters not reset?)", label);
            free(gr);
        }
    }
    int32_t zero_check[64];
    download(zero_check, dctr, 4 * (size_t)min_i32(B * nh, 64));
    for (int i = 0; i < min_i32(B * nh, 64); i++) ck_assert_msg(zero_check[i] == 0, "counter %d left at %d", i, zero_check[i]);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dqsl), cudaFree(dlens), cudaFree(dbt);
    cudaFree(ddec), cudaFree(ditems), cudaFree(dpart), cudaFree(dctr), cudaFree(dout);
    free(perm), free(bt), free(pos), free(kb), free(vb), free(kf), free(vf), free(qkv), free(c);
    free(gb), free(g);
}

/* At hd 128 the prefill kernel is the wgmma one on compute capability 9.0 with a power-of-two
 * block size, the mma.sync one otherwise (block size 24 here); other head dims take mma.sync. */
static const attn_case attn_cases[] = {
    {32, 32, 128, 16}, {32, 8, 128, 16}, {8, 8, 64, 16}, {4, 1, 32, 16}, {12, 4, 64, 16}, {16, 2, 128, 16},
    {32, 8, 128, 24}, {8, 8, 64, 24},
};

START_TEST(decode_attention_matches_cpu)
{
    gsl_rng *r = rng_for("decode");
    const int32_t seqs[][2] = {{0, 1}, {16, 1}, {254, 1}, {255, 1}, {256, 1}, {699, 1}, {1499, 1}, {3000, 1}};
    for (size_t k = 0; k < ARRAY_LEN(attn_cases); k++) {
        check_attention(r, attn_cases[k], seqs, (int32_t)ARRAY_LEN(seqs), 256, 0, "decode lens 1..3001");
        check_attention(r, attn_cases[k], seqs, (int32_t)ARRAY_LEN(seqs), 32 << (k % 3), 0, "decode lens 1..3001");
        if (k < 2) check_attention(r, attn_cases[k], seqs, 3, 64, 7, "decode, spare partitions");
    }
    /* a long context: 282 partitions of 32 to combine */
    const int32_t long_seq[][2] = {{9000, 1}};
    for (size_t k = 0; k < 2; k++) check_attention(r, attn_cases[k], long_seq, 1, 32, 0, "decode, 282 partitions");
    gsl_rng_free(r);
}
END_TEST

START_TEST(prefill_attention_matches_cpu_in_mixed_batches)
{
    gsl_rng *r = rng_for("prefill");
    /* On the H200 the wgmma kernel must run, not only the fallback. */
    int dev = 0, major = 0, minor = 0;
    CK_CUDA(cudaGetDevice(&dev));
    CK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major == 9 && minor == 0)
        ck_assert_msg(k_prefill_wgmma_ok(), "compute capability 9.0, but the wgmma prefill kernel cannot run");
    /* chunked prefill after a prefix, one-shot prefill, tiny chunks, decodes, a 65-row tail */
    const int32_t seqs[][2] = {{0, 100}, {37, 64}, {300, 130}, {5, 2}, {0, 1}, {1000, 1}, {64, 65}, {0, 200}};
    for (size_t k = 0; k < ARRAY_LEN(attn_cases); k++)
        check_attention(r, attn_cases[k], seqs, (int32_t)ARRAY_LEN(seqs), 64, 0, "mixed batch");
    gsl_rng_free(r);
}
END_TEST

/* ---- sampling --------------------------------------------------------------------------------- */

START_TEST(sampling_matches_cpu)
{
    gsl_rng *r = rng_for("sample");
    int32_t n = 64, V = 32000;
    float *logits = randn(r, (int64_t)n * V, 3.0), temp[64], topp[64], u[64], scratch[32000];
    logits[5 * V + 100] = logits[5 * V + 7] = 50.0f; /* a tie: the lower id wins */
    for (int i = 0; i < n; i++) {
        temp[i] = i < 16 ? 0.0f : (float)(0.3 + gsl_rng_uniform(r));
        topp[i] = i < 32 ? 1.0f : (float)(0.5 + 0.5 * gsl_rng_uniform(r));
        u[i] = (float)gsl_rng_uniform(r);
    }
    float *dl = dupload(logits, 4 * (size_t)n * V), *dt = dupload(temp, sizeof temp);
    float *dp = dupload(topp, sizeof topp), *du = dupload(u, sizeof u);
    int32_t *dout = dpoison(sizeof(int32_t) * 64), got[64];
    CK_CUDA(k_sample(dl, n, V, dt, dp, du, dout, 0));
    download(got, dout, sizeof got);
    int mismatched = 0;
    for (int i = 0; i < n; i++) {
        int32_t want = sample_row(logits + (int64_t)i * V, V, temp[i], topp[i], u[i], scratch);
        if (i < 16) ck_assert_msg(got[i] == want, "greedy row %d: gpu %d cpu %d", i, got[i], want);
        mismatched += got[i] != want;
    }
    printf("  sampling 64 rows x 32000: %d of 48 temperature/top-p rows differ from the CPU\n", mismatched);
    ck_assert_int_eq(got[5], 7);
    ck_assert_msg(mismatched <= 2, "%d sampled rows differ from the CPU sampler", mismatched);
    cudaFree(dl), cudaFree(dt), cudaFree(dp), cudaFree(du), cudaFree(dout);
    free(logits);
    gsl_rng_free(r);
}
END_TEST

static TCase *kernel_tests(void)
{
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, synth_weights_bitwise_equal_cpu);
    tcase_add_test(tc, embed_matches_cpu);
    tcase_add_test(tc, add_rmsnorm_matches_cpu);
    tcase_add_test(tc, rope_kv_write_matches_cpu);
    tcase_add_test(tc, silu_mul_matches_cpu);
    tcase_add_test(tc, skinny_gemm_matches_cpu);
    tcase_add_test(tc, skinny_gemm_fused_matches_cpu);
    tcase_add_test(tc, decode_attention_matches_cpu);
    tcase_add_test(tc, prefill_attention_matches_cpu_in_mixed_batches);
    tcase_add_test(tc, sampling_matches_cpu);
    return tc;
}

int main(void) { return gpu_run_tests("test_kernels_gpu", kernel_tests); }

#else /* built without CUDA */
int main(void) { return gpu_run_tests("test_kernels_gpu", NULL); }
#endif
