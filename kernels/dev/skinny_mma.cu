// skinny_mma.cu: the decode GEMMs of 3-8 rows on tensor cores, streaming the weights as the
// product's skinny kernel does at one and two rows (kernels/gemm_skinny.cu), with its fused
// prologue (RMSNorm) and epilogues (RoPE + KV write, SiLU * up, residual add). The question: can
// decode steps of 3-8 sequences run the fused path, five kernels a layer, faster than the
// nine-kernel cuBLAS path (docs/engine.md: 74-83% of the copy roofline on an H100, 0.42 ms of
// element-wise kernels and 0.64 ms of gaps a step at 4 sequences)? The product's kernel multiplies
// on CUDA cores, whose work per weight byte grows with M (46% of the copy ceiling at 8 rows);
// here mma.sync does the products and the rows cost nothing. A lab tool: `make dev-kernels`,
// then on the GPU machine
//
//   build/dev/skinny_mma [MODEL]   # llama-2-7b (default), llama-3-8b, llama-2-13b
//
// For M = 1..8 and each of a layer's four GEMMs in the engine's fused form (norm + QKV + RoPE +
// KV write, O += residual, norm + gate/up + SiLU, down += residual) and the LM head (final norm
// + GEMM): the product's kernel (k_gemm_skinny_fused), this one (from 3 rows; first checked
// against the product's output from the same inputs), and the engine's cuBLAS path (the GEMM
// with the norm, RoPE + KV write or SiLU * up kernel beside it). Then a whole layer of each
// without attention (the fused path's four kernels, the cuBLAS path's eight) back to back as
// the engine launches them, weights rotating over layers enough that none is in L2. Times are
// lab.cuh's time_ms; rates are weight bytes / time against a device-to-device copy.
//
// One whole-step A/B exists (`bench_engine_gpu steps`, one H100, the engine with this kernel
// dispatched from M = 3 and SKINNY_MAX_ROWS 8 in engine/cuda_backend.c): with a norm prologue that
// loaded its rows one after another and two steps in flight, batch 4 at context 1024 took 6.85 ms
// against 6.58 on the cuBLAS path, batch 8 7.83 against 7.20. Below, the prologue issues every
// row's loads before using any (one L2 round trip a chunk, not one a row) and four steps are in
// flight: the version this program measures.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "kernels/dev/lab.cuh"
#include "kernels/elementwise.cu" // the cuBLAS path's norm, RoPE + KV write and SiLU * up
#include "kernels/gemm_skinny.cu" // the product's kernel, prologue and epilogues

// gemm_skinny.cu's k_init sets the prefill kernels' limits too; nothing here launches them.
cudaError_t k_prefill_init(void) { return cudaSuccess; }

// The activation rows (M, K) as bf16 chunks of 8, row m at m * stride: staged in shared memory
// (s_x), computed there by the RMSNorm prologue, or (too large to stage) read from global memory
// where they lie (stride C). Ends with the block synchronised.
template <int M, int PRO>
__device__ __forceinline__ const uint4 *lab_stage_x(const k_skinny_args &a, uint4 *s_x, float (*s_red)[M],
                                                    int staged, int stride)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, C = a.K / 8;
    const uint4 *xs = s_x;
    if (PRO == K_PRO_NORM) {
        // Two passes over the rows (sum of squares, then the scaled rows), each issuing the loads
        // of every row before using any: one L2 round trip per pass and chunk, not one per row.
        const float4 *xr[M];
        float ss[M], inv[M];
#pragma unroll
        for (int m = 0; m < M; m++) {
            xr[m] = reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(a.x) +
                                                     (a.x_rows ? a.x_rows[m] : m) * (int64_t)a.K);
            ss[m] = 0;
        }
        const uint4 *nw = reinterpret_cast<const uint4 *>(a.norm_w);
        for (int c = threadIdx.x; c < C; c += SK_THREADS) {
            float4 p[M], q[M];
#pragma unroll
            for (int m = 0; m < M; m++) p[m] = xr[m][2 * c], q[m] = xr[m][2 * c + 1];
#pragma unroll
            for (int m = 0; m < M; m++)
                ss[m] += p[m].x * p[m].x + p[m].y * p[m].y + p[m].z * p[m].z + p[m].w * p[m].w +
                         q[m].x * q[m].x + q[m].y * q[m].y + q[m].z * q[m].z + q[m].w * q[m].w;
        }
#pragma unroll
        for (int m = 0; m < M; m++) {
            ss[m] = warp_sum(ss[m]);
            if (lane == 0) s_red[warp][m] = ss[m];
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < M; m++) {
            float tot = 0;
#pragma unroll
            for (int k = 0; k < SK_WARPS; k++) tot += s_red[k][m];
            inv[m] = rsqrtf(tot / (float)a.K + a.eps);
        }
        for (int c = threadIdx.x; c < C; c += SK_THREADS) {
            float4 p[M], q[M];
#pragma unroll
            for (int m = 0; m < M; m++) p[m] = xr[m][2 * c], q[m] = xr[m][2 * c + 1];
            float wf[8];
            bf16x8_to_f32(nw[c], wf);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float y[8] = {p[m].x, p[m].y, p[m].z, p[m].w, q[m].x, q[m].y, q[m].z, q[m].w};
                float o[8];
#pragma unroll
                for (int j = 0; j < 8; j++) o[j] = y[j] * inv[m] * wf[j];
                s_x[m * stride + c] = f32_to_bf16x8(o);
            }
        }
    } else if (staged) {
        const uint4 *xg = reinterpret_cast<const uint4 *>(a.x);
        for (int c = threadIdx.x; c < C; c += SK_THREADS) {
            uint4 v[M];
#pragma unroll
            for (int m = 0; m < M; m++) v[m] = xg[m * C + c];
#pragma unroll
            for (int m = 0; m < M; m++) s_x[m * stride + c] = v[m];
        }
    } else {
        xs = reinterpret_cast<const uint4 *>(a.x);
    }
    __syncthreads();
    return xs;
}

// The tensor-core variant, for 3 to 8 rows, where the CUDA cores' work per weight byte (M FMAs a
// weight) would fall behind the stream. mma.sync m16n8k16 with the activation as A (rows m < M of
// its 16, the rest zero) and 8 weight rows as B (one per lane group g = lane / 4): what a lane
// loads is a fragment as it stands. Lane (g, t) loads 16 bytes of weight row g and of activation
// row g at chunk 4u + t of its segment; the 8 values serve two products of k = 16, the first
// taking values 0-3 for the fragment's k = 2t, 2t+1, 2t+8, 2t+9, the second values 4-7. That
// numbers k within each 32 differently from memory but alike in A and B, so the sum is the same.
//
// A block takes tiles of 8 weight rows (the rows of tasks 4T .. 4T + 3: pairs in adjacent
// columns, so that the lane holding output column 2t holds 2t + 1 too, as the epilogue needs) and
// splits K among its warps, in segments of SKM_U * 32 values, warp w taking segments w, w + 8, ..
// Each warp's 8 x 8 partial goes to shared memory at a tile's end; one warp sums them and runs the
// epilogue while the others stream the next tile. Weight loads run two steps ahead across tiles,
// as in skinny_kernel.
#define SKM_U 4     // 16-byte loads per lane per step (one weight row each)
#define SKM_DEPTH 4 // steps in flight: 8 KB a warp, as skinny_kernel's two batches of two rows
#define SKM_PAD 4 // chunks of padding after each staged row: row g + 1 starts 64 bytes on in the banks

template <int M, int PRO, int EPI>
__global__ void __launch_bounds__(SK_THREADS, 2)
skinny_mma(k_skinny_args a, int staged)
{
    extern __shared__ __align__(16) uint4 s_x[]; // (M, C + SKM_PAD) when staged
    __shared__ float s_red[SK_WARPS][M];
    __shared__ float2 s_part[2][SK_WARPS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int N = a.N, C = a.K / 8; // 16-byte chunks per row
    const int ntiles = (sk_tasks(EPI, N) + 3) / 4, ntasks = sk_tasks(EPI, N);
    const int nseg = (C + 4 * SKM_U - 1) / (4 * SKM_U);
    const int spt = (nseg + SK_WARPS - 1) / SK_WARPS; // steps per tile, alike for every warp
    const int mine = blockIdx.x < ntiles ? (ntiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const int nsteps = mine * spt;
    const uint4 *w = reinterpret_cast<const uint4 *>(a.w);
    const uint4 zero = make_uint4(0, 0, 0, 0);

    // Step s's weights into v (zeros past the end): tile s / spt of this block, segment
    // warp + 8 (s % spt), lane g's row: task 4T + g / 2, its first row or its second.
    auto load = [&](int s, uint4 (&v)[SKM_U]) {
        const int tile = blockIdx.x + (s / spt) * gridDim.x, seg = warp + SK_WARPS * (s % spt);
        const int task = 4 * tile + (g >> 1);
        int r0, r1;
        task_rows<EPI>(a, task, r0, r1);
        const int r = g & 1 ? r1 : r0;
        const bool ok = s < nsteps && seg < nseg && task < ntasks && r < N;
        const uint4 *wr = w + (int64_t)r * C + seg * 4 * SKM_U + t;
        const int left = C - seg * 4 * SKM_U - t;
#pragma unroll
        for (int u = 0; u < SKM_U; u++) v[u] = ok && 4 * u < left ? ld_stream(wr + 4 * u) : zero;
    };
    uint4 v[SKM_DEPTH][SKM_U]; // the first two before the prologue, whose registers they share
    load(0, v[0]);
    load(1, v[1]);
    griddep_wait();
    griddep_launch_next();

    const int stride = staged ? C + SKM_PAD : C;
    const uint4 *xs = lab_stage_x<M, PRO>(a, s_x, s_red, staged, stride);
#pragma unroll
    for (int d = 2; d < SKM_DEPTH; d++) load(d, v[d]);
    const uint4 *xrow = xs + (int64_t)(g < M ? g : 0) * stride + t;

    float acc[4] = {0, 0, 0, 0};
    auto step = [&](int s, uint4 (&w)[SKM_U]) {
        const int seg = warp + SK_WARPS * (s % spt), left = C - seg * 4 * SKM_U - t;
#pragma unroll
        for (int u = 0; u < SKM_U; u++) {
            const uint4 xv = g < M && seg < nseg && 4 * u < left ? xrow[seg * 4 * SKM_U + 4 * u] : zero;
            const uint32_t a0[4] = {xv.x, 0, xv.y, 0}, a1[4] = {xv.z, 0, xv.w, 0};
            mma_bf16(acc, a0, w[u].x, w[u].y);
            mma_bf16(acc, a1, w[u].z, w[u].w);
        }
        load(s + SKM_DEPTH, w);
        if (s % spt == spt - 1) { // the tile's end: sum the warps' partials, then the epilogue
            const int i = s / spt, buf = i & 1;
            s_part[buf][warp][lane] = make_float2(acc[0], acc[1]);
            acc[0] = acc[1] = 0;
            __syncthreads();
            if (warp == i % SK_WARPS) {
                float v0 = 0, v1 = 0;
#pragma unroll
                for (int k = 0; k < SK_WARPS; k++) {
                    const float2 p = s_part[buf][k][lane];
                    v0 += p.x, v1 += p.y;
                }
                const int task = 4 * (blockIdx.x + i * gridDim.x) + t;
                if (g < M && task < ntasks) epilogue<EPI>(a, task, g, v0, v1);
            }
        }
    };
    for (int s = 0; s < nsteps; s += SKM_DEPTH) {
#pragma unroll
        for (int d = 0; d < SKM_DEPTH; d++)
            if (s + d < nsteps) step(s + d, v[d]);
    }
}

template <int M, int PRO, int EPI> static cudaError_t launch_mma_m(const k_skinny_args *a, cudaStream_t st)
{
    static bool attr = false;
    if (!attr) {
        CUDA_CHECK(cudaFuncSetAttribute(skinny_mma<M, PRO, EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        K_SKINNY_SMEM + 8 * SKM_PAD * 16));
        attr = true;
    }
    const int staged = (size_t)M * a->K * 2 <= K_SKINNY_SMEM;
    if (PRO == K_PRO_NORM && !staged) return cudaErrorInvalidValue;
    const size_t smem = staged ? (size_t)M * (a->K / 8 + SKM_PAD) * 16 : 0;
    int blocks = num_sms() * (smem <= 100 * 1024 ? 2 : 1), needed = (sk_tasks(EPI, a->N) + 3) / 4;
    if (blocks > needed) blocks = needed;
    return k_launch(skinny_mma<M, PRO, EPI>, dim3(blocks), dim3(SK_THREADS), smem, st, *a, staged);
}

template <int PRO, int EPI> static cudaError_t launch_mma_pe(const k_skinny_args *a, cudaStream_t st)
{
    switch (a->M) {
    case 3: return launch_mma_m<3, PRO, EPI>(a, st);
    case 4: return launch_mma_m<4, PRO, EPI>(a, st);
    case 5: return launch_mma_m<5, PRO, EPI>(a, st);
    case 6: return launch_mma_m<6, PRO, EPI>(a, st);
    case 7: return launch_mma_m<7, PRO, EPI>(a, st);
    case 8: return launch_mma_m<8, PRO, EPI>(a, st);
    default: return cudaErrorInvalidValue;
    }
}

// k_gemm_skinny_fused's contract, on tensor cores (3 <= M <= 8).
static cudaError_t mma_fused(const k_skinny_args *a, cudaStream_t st)
{
#define MMA_DISPATCH(P, E)                                                                        \
    if (a->pro == P && a->epi == E) return launch_mma_pe<P, E>(a, st);
    SK_COMBOS(MMA_DISPATCH)
#undef MMA_DISPATCH
    return cudaErrorInvalidValue;
}

// ---- the harness -------------------------------------------------------------------------------

typedef struct shape {
    const char *name;
    int h, I, nh, nkv, hd, vocab;
} shape;

static const shape shapes[] = {
    {"llama-2-7b", 4096, 11008, 32, 32, 128, 32000},
    {"llama-3-8b", 4096, 14336, 32, 8, 128, 128256},
    {"llama-2-13b", 5120, 13824, 40, 40, 128, 32000},
};

enum { OP_QKV, OP_O, OP_GU, OP_DOWN, OP_HEAD, NUM_OPS };
static const char *op_names[NUM_OPS] = {"norm+qkv+rope+kv", "o += residual", "norm+gate_up+silu",
                                        "down += residual", "norm+lm_head"};

#define NUM_LAYERS 4 // weight copies: a layer of Llama-2-7B is 0.4 GB, far past the 50-60 MB L2

typedef struct bench {
    const shape *s;
    bf16_t *w[NUM_LAYERS][NUM_OPS]; // lm_head: one copy, [0][OP_HEAD]
    int N[NUM_OPS], K[NUM_OPS];
    float *resid;                   // (8, h) fp32 residual stream, the norms' input
    bf16_t *xin[NUM_OPS];           // bf16 inputs of o and down: attention output, SiLU output
    void *y[NUM_OPS];               // outputs
    bf16_t *norm_w, *k_cache, *v_cache;
    bf16_t *xn, *qkv16, *gu, *act; // the cuBLAS path's: normed rows, its GEMMs' bf16 outputs
    float *q;                      // its rotated q
    int32_t *pos, *slot;
    float *inv_freq;
    cublasHandle_t blas;
    cudaStream_t st;
} bench;

static bf16_t *random_bf16(size_t n, unsigned seed, float scale)
{
    uint16_t *h = (uint16_t *)malloc(n * 2);
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float v = ((float)(s >> 8) / 16777216.0f - 0.5f) * 2 * scale;
        uint32_t u;
        memcpy(&u, &v, 4);
        h[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
    bf16_t *d;
    CUDA_CHECK(cudaMalloc(&d, n * 2));
    CUDA_CHECK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// The fused op `op` of layer l at M rows as the engine calls it (y freshly poisoned by the caller
// when it is checked).
static k_skinny_args op_args(const bench *b, int op, int l, int M)
{
    const shape *s = b->s;
    k_skinny_args a = {};
    a.M = M, a.N = b->N[op], a.K = b->K[op], a.w = b->w[op == OP_HEAD ? 0 : l][op], a.y = b->y[op];
    a.eps = 1e-5f, a.norm_w = b->norm_w;
    switch (op) {
    case OP_QKV:
        a.x = b->resid, a.pro = K_PRO_NORM, a.epi = K_EPI_ROPE_KV;
        a.positions = b->pos, a.slot_mapping = b->slot, a.inv_freq = b->inv_freq;
        a.k_cache = b->k_cache, a.v_cache = b->v_cache, a.nh = s->nh, a.nkv = s->nkv, a.hd = s->hd;
        break;
    case OP_GU: a.x = b->resid, a.pro = K_PRO_NORM, a.epi = K_EPI_SILU; break;
    case OP_HEAD: a.x = b->resid, a.pro = K_PRO_NORM, a.epi = K_EPI_F32; break;
    default: a.x = b->xin[op], a.pro = K_PRO_NONE, a.epi = K_EPI_RESIDUAL; break;
    }
    return a;
}

static size_t out_bytes(const bench *b, int op, int M)
{
    return op == OP_GU ? (size_t)M * b->s->I * 2 : (size_t)M * b->N[op] * 4;
}

// op as the engine's cuBLAS path runs it (engine/cuda_backend.c enqueue_forward): the norm
// before QKV, gate/up and the head, the GEMM (bf16 out for QKV and gate/up, fp32 += for O and
// down, fp32 for the head), RoPE + KV write after QKV, SiLU * up after gate/up.
static void cublas_op(const bench *b, int op, int l, int M)
{
    const shape *s = b->s;
    const float alpha = 1, beta = op == OP_O || op == OP_DOWN ? 1.0f : 0.0f;
    const bool f32 = op != OP_QKV && op != OP_GU;
    const bf16_t *x = op == OP_O ? b->xin[OP_O] : op == OP_DOWN ? b->act : b->xn;
    void *y = op == OP_QKV ? (void *)b->qkv16 : op == OP_GU ? (void *)b->gu : b->y[op];
    if (op == OP_QKV || op == OP_GU || op == OP_HEAD)
        CUDA_CHECK(k_add_rmsnorm(b->resid, NULL, b->norm_w, NULL, M, s->h, 1e-5f, b->xn, b->st));
    CUBLAS_CHECK(cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, b->N[op], M, b->K[op], &alpha,
                              b->w[op == OP_HEAD ? 0 : l][op], CUDA_R_16BF, b->K[op], x, CUDA_R_16BF,
                              b->K[op], &beta, y, f32 ? CUDA_R_32F : CUDA_R_16BF, b->N[op],
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (op == OP_QKV)
        CUDA_CHECK(k_rope_kv_write(b->qkv16, b->pos, b->slot, M, s->nh, s->nkv, s->hd, b->inv_freq, b->q,
                                   b->N[OP_QKV], b->k_cache, b->v_cache, b->st));
    if (op == OP_GU) CUDA_CHECK(k_silu_mul(b->gu, M, s->I, b->act, b->st));
}

typedef struct run {
    bench *b;
    int op, M, kind, l; // kind: 0 product, 1 tensor cores, 2 the cuBLAS path; op NUM_OPS: a layer
} run;

static void launch(void *ctx)
{
    run *r = (run *)ctx;
    r->l = (r->l + 1) % NUM_LAYERS;
    for (int op = 0; op < OP_HEAD; op++) {
        if (r->op != NUM_OPS && r->op != op) continue;
        if (r->kind == 2) {
            cublas_op(r->b, op, r->l, r->M);
            continue;
        }
        k_skinny_args a = op_args(r->b, op, r->l, r->M);
        CUDA_CHECK(r->kind == 0 ? k_gemm_skinny_fused(&a, r->b->st) : mma_fused(&a, r->b->st));
    }
    if (r->op == OP_HEAD) {
        if (r->kind == 2) {
            cublas_op(r->b, OP_HEAD, 0, r->M);
        } else {
            k_skinny_args a = op_args(r->b, OP_HEAD, 0, r->M);
            CUDA_CHECK(r->kind == 0 ? k_gemm_skinny_fused(&a, r->b->st) : mma_fused(&a, r->b->st));
        }
    }
}

// rel L2 of the tensor-core kernel's output against the product's, from the same inputs.
static double check(bench *b, int op, int M)
{
    const size_t n = out_bytes(b, op, M);
    void *h[2];
    for (int k = 0; k < 2; k++) {
        h[k] = malloc(n);
        if (op == OP_O || op == OP_DOWN) CUDA_CHECK(cudaMemset(b->y[op], 0, n)); // += from zero
        k_skinny_args a = op_args(b, op, 0, M);
        CUDA_CHECK(k == 0 ? k_gemm_skinny_fused(&a, b->st) : mma_fused(&a, b->st));
        CUDA_CHECK(cudaStreamSynchronize(b->st));
        CUDA_CHECK(cudaMemcpy(h[k], b->y[op], n, cudaMemcpyDeviceToHost));
    }
    double num = 0, den = 0;
    const size_t count = op == OP_GU ? n / 2 : n / 4;
    for (size_t i = 0; i < count; i++) {
        double p, q;
        if (op == OP_GU) {
            uint32_t u = (uint32_t)((uint16_t *)h[0])[i] << 16, v = (uint32_t)((uint16_t *)h[1])[i] << 16;
            float fp, fq;
            memcpy(&fp, &u, 4), memcpy(&fq, &v, 4);
            p = fp, q = fq;
        } else {
            p = ((float *)h[0])[i], q = ((float *)h[1])[i];
        }
        num += (p - q) * (p - q), den += p * p;
    }
    free(h[0]), free(h[1]);
    return sqrt(num / (den > 0 ? den : 1));
}

int main(int argc, char **argv)
{
    const shape *s = &shapes[0];
    for (size_t i = 0; argc > 1 && i < sizeof shapes / sizeof *shapes; i++)
        if (!strcmp(argv[1], shapes[i].name)) s = &shapes[i];
    if (argc > 1 && strcmp(argv[1], s->name)) {
        fprintf(stderr, "skinny_mma: unknown model %s (llama-2-7b, llama-3-8b, llama-2-13b)\n", argv[1]);
        return 2;
    }
    bench b = {};
    b.s = s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&b.st, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&b.blas));
    CUBLAS_CHECK(cublasSetStream(b.blas, b.st));
    CUDA_CHECK(k_init());
    const int qkv = (s->nh + 2 * s->nkv) * s->hd;
    const int N[NUM_OPS] = {qkv, s->h, 2 * s->I, s->h, s->vocab};
    const int K[NUM_OPS] = {s->h, s->nh * s->hd, s->h, s->I, s->h};
    memcpy(b.N, N, sizeof N), memcpy(b.K, K, sizeof K);
    for (int l = 0; l < NUM_LAYERS; l++)
        for (int op = 0; op < NUM_OPS; op++)
            if (op != OP_HEAD || l == 0)
                b.w[l][op] = random_bf16((size_t)N[op] * K[op], 10 * l + op, 1.0f / sqrtf((float)K[op]));
    float *hr = (float *)malloc((size_t)8 * s->h * 4);
    for (int i = 0; i < 8 * s->h; i++) hr[i] = sinf(0.37f * (float)i) + 0.1f * (float)(i % 5);
    CUDA_CHECK(cudaMalloc(&b.resid, (size_t)8 * s->h * 4));
    CUDA_CHECK(cudaMemcpy(b.resid, hr, (size_t)8 * s->h * 4, cudaMemcpyHostToDevice));
    free(hr);
    b.xin[OP_O] = random_bf16((size_t)8 * s->nh * s->hd, 90, 1.0f);
    b.xin[OP_DOWN] = random_bf16((size_t)8 * s->I, 91, 1.0f);
    for (int op = 0; op < NUM_OPS; op++) CUDA_CHECK(cudaMalloc(&b.y[op], (size_t)8 * N[op] * 4));
    b.norm_w = random_bf16(s->h > s->I ? s->h : s->I, 92, 1.0f);
    b.xn = random_bf16((size_t)8 * s->h, 95, 1.0f);
    b.qkv16 = random_bf16((size_t)8 * qkv, 96, 1.0f);
    b.gu = random_bf16((size_t)8 * 2 * s->I, 97, 1.0f);
    b.act = random_bf16((size_t)8 * s->I, 98, 1.0f);
    CUDA_CHECK(cudaMalloc(&b.q, (size_t)8 * qkv * 4));
    b.k_cache = random_bf16((size_t)8 * s->nkv * s->hd, 93, 1.0f);
    b.v_cache = random_bf16((size_t)8 * s->nkv * s->hd, 94, 1.0f);
    int32_t hp[8], hs[8];
    float hf[128];
    for (int m = 0; m < 8; m++) hp[m] = 1000 + 37 * m, hs[m] = m;
    for (int i = 0; i < s->hd / 2; i++) hf[i] = powf(10000.0f, -2.0f * (float)i / (float)s->hd);
    CUDA_CHECK(cudaMalloc(&b.pos, sizeof hp));
    CUDA_CHECK(cudaMalloc(&b.slot, sizeof hs));
    CUDA_CHECK(cudaMalloc(&b.inv_freq, sizeof hf));
    CUDA_CHECK(cudaMemcpy(b.pos, hp, sizeof hp, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b.slot, hs, sizeof hs, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b.inv_freq, hf, sizeof hf, cudaMemcpyHostToDevice));

    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    const double copy = lab_copy_gbs(b.st);
    printf("skinny_mma: %s on %s, copy %.0f GB/s; ms (share of the copy rate: weight bytes / time)\n\n",
           s->name, p.name, copy);

    int bad = 0;
    for (int M = 3; M <= 8; M++)
        for (int op = 0; op < NUM_OPS; op++) {
            const double e = check(&b, op, M);
            if (!(e < 1e-2)) printf("CHECK FAILED: %s M=%d rel L2 %.3g\n", op_names[op], M, e), bad = 1;
        }
    printf("check: tensor cores against the product's kernel, every op at M = 3..8: %s\n\n",
           bad ? "FAILED" : "rel L2 < 1e-2");
    if (bad) return 1;

    printf("| op | M | product kernel | tensor cores | cuBLAS path |\n|---|---:|---:|---:|---:|\n");
    for (int op = 0; op <= NUM_OPS; op++) {
        double wb = 0;
        for (int o = 0; o < OP_HEAD; o++) wb += op == NUM_OPS || op == o ? 2.0 * N[o] * K[o] : 0;
        if (op == OP_HEAD) wb = 2.0 * N[op] * K[op];
        for (int M = 1; M <= 8; M++) {
            double t[3];
            for (int kind = 0; kind < 3; kind++) {
                run r = {&b, op, M, kind, 0};
                t[kind] = kind == 1 && M < 3 ? 0 : time_ms(launch, &r, b.st);
            }
            const char *name = op == NUM_OPS ? "layer, no attention" : op_names[op];
            printf("| %s | %d | %.4f (%.0f%%) |", name, M, t[0],
                   100 * wb / (t[0] * 1e-3) / (copy * 1e9));
            if (M >= 3) printf(" %.4f (%.0f%%) |", t[1], 100 * wb / (t[1] * 1e-3) / (copy * 1e9));
            else printf(" |");
            printf(" %.4f (%.0f%%) |\n", t[2], 100 * wb / (t[2] * 1e-3) / (copy * 1e9));
        }
    }
    return 0;
}
