// gemm_ring.cu: a candidate for the decode GEMMs at 2-32 rows (engine/cuda_backend.c runs cuBLAS
// there, at 46-89% of the copy ceiling; o_proj worst): y = x w^T streamed through a shared-memory
// ring filled by bulk copies, multiplied on tensor cores. A lab tool: `make dev-kernels`, then on
// the GPU machine
//
//   build/dev/gemm_ring
//
// The kernel. A persistent grid, one block an SM: a producer warp and eight consumer warps. The
// work is cut into units of 64 weight rows x 256 columns (32 KB) and the block takes a contiguous
// run of the units in tile-major order (stream-K: every block gets the same bytes, a tile may be
// shared by two blocks). For each unit the producer copies the 64 weight row segments and the
// M activation row segments of the same columns into a ring slot with one cp.async.bulk a row
// (rows padded to 528 bytes, so ldmatrix's eight rows fall in different banks); consumer warp i
// multiplies the slot's rows 8i..8i+7 against the activations with mma.sync m16n8k16 (activation
// rows past M are zeros) and frees the slot. At the end of a tile, or of its run, a warp adds its
// fp32 sums into y (atomics: two blocks may share a tile). y must be zero before the launch.
//
// Bytes in flight: the ring holds 4-5 units a block (about 200 KB), against ~32 KB that one SM's
// share of the copy rate needs to cover a microsecond of latency, so the stream should not wait
// on loads as the register-buffered kernels do.
//
// Checked first against a CPU reference (fp32 sums over the same bf16 values) at o_proj's and
// down_proj's shapes, then timed (lab.cuh's rule, y not zeroed between launches) at Llama-2-7B's
// decode GEMM shapes for M = 1, 2, 4, 8, 16, 32, each beside cuBLAS's bf16 GEMM of the same
// shape (fp32 out, default algorithm) on the same weights, and a device-to-device copy.
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/decode_ring.cuh"
#include "kernels/elementwise.cu"
#include "kernels/cuda_check.h"
#include "kernels/dev/lab.cuh"
#include "kernels/numerics.h"

#define GR_CWARPS 8
#define GR_THREADS ((GR_CWARPS + 1) * 32)
#define GR_TN (GR_CWARPS * 8) // weight rows a unit: 8 a consumer warp
#define GR_TK 256             // columns a unit
#define GR_LDS (GR_TK + 8)    // a slot row, bf16 elements (528 bytes)
#define GR_BARS 256           // bytes for the ring's mbarriers, ahead of the slots

template <int MT> __host__ __device__ constexpr int gr_slot_elems() { return (GR_TN + 16 * MT) * GR_LDS; }

// MT: 16-row tiles of activations (M <= 16 * MT).
template <int MT>
__global__ void __launch_bounds__(GR_THREADS, 1)
gemm_ring_kernel(const bf16_t *x, const bf16_t *w, float *y, int M, int N, int K, int ns)
{
    extern __shared__ __align__(128) unsigned char smem[];
    uint64_t *full = reinterpret_cast<uint64_t *>(smem), *empty = full + ns;
    bf16_t *slots = reinterpret_cast<bf16_t *>(smem + GR_BARS);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int KC = K / GR_TK, units = N / GR_TN * KC;
    const int u0 = (int)((int64_t)units * blockIdx.x / gridDim.x), u1 = (int)((int64_t)units * (blockIdx.x + 1) / gridDim.x);

    if (threadIdx.x == 0)
        for (int s = 0; s < ns; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], GR_CWARPS);
    // activation rows past M stay zero in every slot (the copies never write them)
    for (int s = 0; s < ns; s++)
        for (int i = threadIdx.x; i < (16 * MT - M) * GR_LDS; i += GR_THREADS)
            slots[(size_t)s * gr_slot_elems<MT>() + (GR_TN + M) * GR_LDS + i] = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();

    if (warp == GR_CWARPS) { // producer
        const uint64_t evict_first = evict_first_policy();
        uint64_t evict_last;
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(evict_last));
        for (int u = u0, i = 0; u < u1; u++, i++) {
            const int s = i % ns, tile = u / KC, kc = u % KC;
            mbar_wait(&empty[s], ((i / ns) & 1) ^ 1);
            bf16_t *dst = slots + (size_t)s * gr_slot_elems<MT>();
            if (lane == 0) mbar_expect_tx(&full[s], (unsigned)(GR_TN + M) * GR_TK * 2);
            __syncwarp();
            for (int r = lane; r < GR_TN + M; r += 32) {
                const bool wrow = r < GR_TN;
                const bf16_t *src = wrow ? w + (int64_t)(tile * GR_TN + r) * K + kc * GR_TK
                                         : x + (int64_t)(r - GR_TN) * K + kc * GR_TK;
                bulk_copy(dst + r * GR_LDS, src, GR_TK * 2, &full[s], wrow ? evict_first : evict_last);
            }
        }
        return;
    }

    float acc[MT][4] = {};
    for (int u = u0, i = 0; u < u1; u++, i++) {
        const int s = i % ns, tile = u / KC;
        mbar_wait(&full[s], (i / ns) & 1);
        const bf16_t *ws = slots + (size_t)s * gr_slot_elems<MT>(), *xs = ws + GR_TN * GR_LDS;
#pragma unroll 2
        for (int kk = 0; kk < GR_TK / 16; kk += 2) { // 32 columns: four 8 x 8 matrices of this warp's rows
            uint32_t b[4];
            ldmatrix_x4(b, ws + (8 * warp + (lane & 7)) * GR_LDS + kk * 16 + (lane >> 3) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                uint32_t a[2][4];
                ldmatrix_x4(a[0], xs + (mt * 16 + (lane & 15)) * GR_LDS + kk * 16 + (lane >> 4) * 8);
                ldmatrix_x4(a[1], xs + (mt * 16 + (lane & 15)) * GR_LDS + kk * 16 + 16 + (lane >> 4) * 8);
                mma_bf16(acc[mt], a[0], b[0], b[1]);
                mma_bf16(acc[mt], a[1], b[2], b[3]);
            }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
        if (u + 1 == u1 || (u + 1) / KC != tile) { // the tile's sums (or this block's part of them)
            const int n = tile * GR_TN + 8 * warp + 2 * (lane & 3);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int m = mt * 16 + (lane >> 2) + 8 * h;
                    if (m < M) {
                        atomicAdd(&y[(int64_t)m * N + n], acc[mt][2 * h]);
                        atomicAdd(&y[(int64_t)m * N + n + 1], acc[mt][2 * h + 1]);
                    }
                    acc[mt][2 * h] = acc[mt][2 * h + 1] = 0;
                }
        }
    }
}

static cudaStream_t st;
static cublasHandle_t blas;
static int sms, failures;

typedef struct gemm {
    const bf16_t *x, *w;
    float *y;
    int M, N, K;
    bool cublas; // time cuBLAS instead of the ring kernel
} gemm;

// y (M, N) = x (M, K) w^T with w (N, K), both row-major: in cuBLAS's column-major terms
// y^T (N, M) = w (K, N)^T x^T (K, M).
static void cublas_gemm(const gemm *g)
{
    const float one = 1, zero = 0;
    cublasStatus_t s = cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, g->N, g->M, g->K, &one, g->w, CUDA_R_16BF, g->K,
                                     g->x, CUDA_R_16BF, g->K, &zero, g->y, CUDA_R_32F, g->N, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasGemmEx: status %d\n", (int)s);
        exit(1);
    }
}

static int slots_for(int mt)
{
    int max_smem = k_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, 101376);
    int per = (GR_TN + 16 * mt) * GR_LDS * 2, ns = (max_smem - GR_BARS) / per;
    return ns > 16 ? 16 : ns;
}

template <int MT> static void launch_mt(const gemm *g)
{
    static int ns; // once per variant, outside the timed launches
    static size_t smem;
    if (!ns) {
        ns = slots_for(MT);
        smem = GR_BARS + (size_t)ns * gr_slot_elems<MT>() * 2;
        CUDA_CHECK(cudaFuncSetAttribute(gemm_ring_kernel<MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    gemm_ring_kernel<MT><<<sms, GR_THREADS, smem, st>>>(g->x, g->w, g->y, g->M, g->N, g->K, ns);
    CUDA_CHECK(cudaGetLastError());
}

static void do_gemm(void *ctx)
{
    const gemm *g = (const gemm *)ctx;
    if (g->cublas) cublas_gemm(g);
    else if (g->M <= 16) launch_mt<1>(g);
    else launch_mt<2>(g);
}

// y of M rows against fp32 sums of the same bf16 products on the host.
static void check(const char *name, int M, int N, int K)
{
    gemm g = {NULL, NULL, NULL, M, N, K, false};
    bf16_t *dx, *dw;
    CUDA_CHECK(cudaMalloc((void **)&dx, (size_t)M * K * 2));
    CUDA_CHECK(cudaMalloc((void **)&dw, (size_t)N * K * 2));
    CUDA_CHECK(cudaMalloc((void **)&g.y, (size_t)M * N * 4));
    CUDA_CHECK(k_synth_bf16(dx, (int64_t)M * K, 3, 1, 0, 1.0f, st));
    CUDA_CHECK(k_synth_bf16(dw, (int64_t)N * K, 3, 2, 0, 0.02f, st));
    CUDA_CHECK(cudaMemsetAsync(g.y, 0, (size_t)M * N * 4, st));
    g.x = dx, g.w = dw;
    do_gemm(&g);
    float *y = (float *)malloc((size_t)M * N * 4), *xf = (float *)malloc((size_t)M * K * 4);
    CUDA_CHECK(cudaMemcpyAsync(y, g.y, (size_t)M * N * 4, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    for (int64_t i = 0; i < (int64_t)M * K; i++) xf[i] = bf16_to_f32(synth_weight_bf16(3, 1, (uint64_t)i, 0, 1.0f));
    float *wr = (float *)malloc((size_t)K * 4);
    double num = 0, den = 0;
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) wr[k] = bf16_to_f32(synth_weight_bf16(3, 2, (uint64_t)n * K + k, 0, 0.02f));
        for (int m = 0; m < M; m++) {
            float r = 0;
            for (int k = 0; k < K; k++) r += xf[(int64_t)m * K + k] * wr[k];
            double d = (double)y[(int64_t)m * N + n] - r;
            num += d * d, den += (double)r * r;
        }
    }
    const double rel = sqrt(num / den);
    const bool ok = rel < 1e-4;
    failures += !ok;
    printf("check: %s M=%d N=%d K=%d: rel L2 %.2e %s\n", name, M, N, K, rel, ok ? "ok" : "FAILED");
    free(y), free(xf), free(wr);
    cudaFree(dx), cudaFree(dw), cudaFree(g.y);
}

int main(void)
{
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(blas, st) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "gemm_ring: cannot create a cuBLAS handle\n");
        return 1;
    }
    sms = k_device_attr(cudaDevAttrMultiProcessorCount, 132);
    printf("gemm_ring: %d SMs, %d / %d ring slots (M <= 16 / 32)\n", sms, slots_for(1), slots_for(2));
    static const int check_m[] = {1, 3, 16, 17, 32};
    for (size_t i = 0; i < sizeof check_m / sizeof *check_m; i++) {
        check("o_proj", check_m[i], 4096, 4096);
        check("down_proj", check_m[i], 4096, 11008);
    }

    const double copy_gbs = lab_copy_gbs(st);
    printf("\ncopy ceiling: %.0f GB/s (1 GiB device to device, read + written)\n\n", copy_gbs);

    // Llama-2-7B's decode GEMMs; each weight is one of several copies, so no launch finds it in L2
    static const struct { const char *name; int N, K; } shapes[] = {
        {"qkv", 12288, 4096}, {"o", 4096, 4096}, {"gate_up", 22016, 4096}, {"down", 4096, 11008}};
    static const int ms[] = {1, 2, 4, 8, 16, 32};
    printf("| GEMM    | N x K         | kernel | M=1 ms (%% of copy) | M=2            | M=4            | M=8            | M=16           | M=32           |\n");
    printf("|---------|---------------|--------|----------------|----------------|----------------|----------------|----------------|----------------|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int N = shapes[s].N, K = shapes[s].K;
        const size_t wbytes = (size_t)N * K * 2;
        const int copies = (int)((512ull << 20) / wbytes + 1);
        bf16_t *w, *x;
        float *y;
        CUDA_CHECK(cudaMalloc((void **)&w, wbytes * copies));
        CUDA_CHECK(cudaMalloc((void **)&x, (size_t)32 * K * 2));
        CUDA_CHECK(cudaMalloc((void **)&y, (size_t)32 * N * 4));
        CUDA_CHECK(k_synth_bf16(w, (int64_t)N * K * copies, 4, 2, 0, 0.02f, st));
        CUDA_CHECK(k_synth_bf16(x, (int64_t)32 * K, 4, 1, 0, 1.0f, st));
        CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)32 * N * 4, st));
        for (int lib = 0; lib < 2; lib++) {
            printf("| %-7s | %5d x %-5d | %-6s |", shapes[s].name, N, K, lib ? "cuBLAS" : "ring");
            for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
                struct rot {
                    gemm g;
                    const bf16_t *w0;
                    size_t step;
                    int copies, next;
                } r = {{x, w, y, ms[mi], N, K, lib == 1}, w, (size_t)N * K, copies, 0};
                auto launch = [](void *c) {
                    rot *q = (rot *)c;
                    q->g.w = q->w0 + q->step * q->next;
                    q->next = (q->next + 1) % q->copies;
                    do_gemm(&q->g);
                };
                const double ms_t = time_ms(launch, &r, st);
                printf(" %.4f (%5.1f%%) |", ms_t, 100.0 * wbytes / (ms_t * 1e-3) / (copy_gbs * 1e9));
            }
            printf("\n");
        }
        cudaFree(w), cudaFree(x), cudaFree(y);
    }
    cublasDestroy(blas);
    printf("\ngemm_ring: %s\n", failures ? "CHECKS FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
