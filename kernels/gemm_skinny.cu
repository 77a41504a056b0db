// gemm_skinny.cu: y = x w^T for M <= 8 rows (decode), where the cost is streaming the weights
// once, with the small operations around a decode GEMM fused in (the RMSNorm before it; the
// residual add, SiLU * up, or RoPE + KV write after it): at batch 1 each separate kernel costs a
// few microseconds of launch, ramp-up and drain, more than the work it does.
//
// Layout of the work. A persistent grid (two blocks of 8 warps per SM, or one when the staged
// activation is large) whose warps take tasks of two weight rows, task t going to warp
// t mod (warps in the grid), warps numbered across blocks first so that the last, partial round
// is spread over every SM. A warp streams its rows with 16-byte loads (SK_U per lane per row per
// batch), in two register batches: while one batch is multiplied the other is in flight, and each
// register is reloaded as soon as it has been used, across task boundaries, so a warp never
// drains its pipeline until its last task. The first two batches are issued before
// griddepcontrol.wait (weights are never written, so reading them early is safe) and overlap the
// previous kernel's tail.
//
// The activation (M, K) is staged once per block in shared memory as bf16 (computed there by
// the prologue: RMSNorm of the fp32 residual rows, which every block recomputes: 16 KB of L2
// reads per row, far less than its weight rows). The two rows of a task are chosen so that the
// epilogue has what it needs in one warp: rows i and i + hd/2 of a q or k head (the RoPE pair),
// rows i and I + i of gate/up (the SiLU pair), or rows 2t and 2t + 1.
//
// Bytes: N*K*2 of weights (+ M*K activations from L2, + M*N outputs); FLOPs: 2*M*N*K, far below
// the tensor-core rate, so the kernel is memory bound and is judged by weight bytes / time.
#include "kernels/skinny_rows.cuh"

#define SK_WARPS 8
#define SK_THREADS (SK_WARPS * 32)
#define SK_U 4 // 16-byte loads per lane, per weight row, per batch

// staged: the activation is copied to (or, K_PRO_NORM, computed in) shared memory.
template <int M, int PRO, int EPI>
__global__ void __launch_bounds__(SK_THREADS, 2)
skinny_kernel(k_skinny_args a, int staged)
{
    extern __shared__ __align__(16) uint4 s_x[]; // (M, K/8) when staged
    __shared__ float s_red[SK_WARPS][M];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int N = a.N, C = a.K / 8; // 16-byte chunks per row
    const int nwarps = gridDim.x * SK_WARPS, gw = warp * gridDim.x + blockIdx.x;
    const int ntasks = sk_tasks(EPI, N);
    const int spt = (C + 32 * SK_U - 1) / (32 * SK_U); // steps (batches) per task
    const int mine = gw < ntasks ? (ntasks - 1 - gw) / nwarps + 1 : 0;
    const int nsteps = mine * spt;
    const uint4 *w = reinterpret_cast<const uint4 *>(a.w);
    const uint4 zero = make_uint4(0, 0, 0, 0);

    // Batch of step s into v (zeros past the end).
    auto load = [&](int s, uint4 (&v)[2][SK_U]) {
        int t = gw + (s / spt) * nwarps, base = (s % spt) * 32 * SK_U, r0, r1;
        task_rows<EPI>(a, t, r0, r1);
        bool ok = s < nsteps, ok1 = ok && r1 < N;
#pragma unroll
        for (int u = 0; u < SK_U; u++) {
            int c = base + lane + 32 * u;
            v[0][u] = ok && c < C ? ld_stream(w + (int64_t)r0 * C + c) : zero;
            v[1][u] = ok1 && c < C ? ld_stream(w + (int64_t)r1 * C + c) : zero;
        }
    };
    uint4 A[2][SK_U], B[2][SK_U];
    load(0, A);
    load(1, B);
    griddep_wait();
    griddep_launch_next();

    // Prologue: the activation rows.
    const uint4 *xs = s_x;
    if (PRO == K_PRO_NORM) {
        const float *xf = reinterpret_cast<const float *>(a.x);
        const uint4 *nw = reinterpret_cast<const uint4 *>(a.norm_w);
        float ss[M], inv[M];
#pragma unroll
        for (int m = 0; m < M; m++) {
            const int64_t row = a.x_rows ? a.x_rows[m] : m;
            const float4 *xr = reinterpret_cast<const float4 *>(xf + row * a.K);
            ss[m] = 0;
            for (int c = threadIdx.x; c < C; c += SK_THREADS) {
                float4 p = xr[2 * c], q = xr[2 * c + 1];
                ss[m] += p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w + q.x * q.x + q.y * q.y +
                         q.z * q.z + q.w * q.w;
            }
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
#pragma unroll
        for (int m = 0; m < M; m++) {
            const int64_t row = a.x_rows ? a.x_rows[m] : m;
            const float4 *xr = reinterpret_cast<const float4 *>(xf + row * a.K);
            for (int c = threadIdx.x; c < C; c += SK_THREADS) {
                float4 p = xr[2 * c], q = xr[2 * c + 1];
                float y[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w}, wf[8], o[8];
                bf16x8_to_f32(nw[c], wf);
#pragma unroll
                for (int j = 0; j < 8; j++) o[j] = y[j] * inv[m] * wf[j];
                s_x[m * C + c] = f32_to_bf16x8(o);
            }
        }
    } else if (staged) {
        const uint4 *xg = reinterpret_cast<const uint4 *>(a.x);
        for (int i = threadIdx.x; i < M * C; i += SK_THREADS) s_x[i] = xg[i];
    } else {
        xs = reinterpret_cast<const uint4 *>(a.x);
    }
    __syncthreads();

    float acc[2][M];
#pragma unroll
    for (int m = 0; m < M; m++) acc[0][m] = acc[1][m] = 0;

    // Multiplies step s's batch (in v), refilling v with step s + 2 register by register; at a
    // task's last step, reduces over the warp and runs the epilogue.
    auto step = [&](int s, uint4 (&v)[2][SK_U]) {
        const int base = (s % spt) * 32 * SK_U, s2 = s + 2;
        int t2 = gw + (s2 / spt) * nwarps, base2 = (s2 % spt) * 32 * SK_U, q0, q1;
        task_rows<EPI>(a, t2, q0, q1);
        const bool ok = s2 < nsteps, ok1 = ok && q1 < N;
#pragma unroll
        for (int u = 0; u < SK_U; u++) {
            const int c = base + lane + 32 * u;
            if (c < C) {
#pragma unroll
                for (int m = 0; m < M; m++) {
                    uint4 xv = xs[m * C + c];
                    acc[0][m] += dot8(v[0][u], xv);
                    acc[1][m] += dot8(v[1][u], xv);
                }
            }
            const int c2 = base2 + lane + 32 * u;
            v[0][u] = ok && c2 < C ? ld_stream(w + (int64_t)q0 * C + c2) : zero;
            v[1][u] = ok1 && c2 < C ? ld_stream(w + (int64_t)q1 * C + c2) : zero;
        }
        if (s % spt == spt - 1) {
#pragma unroll
            for (int m = 0; m < M; m++) {
                acc[0][m] = warp_sum(acc[0][m]);
                acc[1][m] = warp_sum(acc[1][m]);
            }
            if (lane < M) {
                float v0 = acc[0][0], v1 = acc[1][0];
#pragma unroll
                for (int m = 1; m < M; m++)
                    if (lane == m) v0 = acc[0][m], v1 = acc[1][m];
                epilogue<EPI>(a, gw + (s / spt) * nwarps, lane, v0, v1);
            }
#pragma unroll
            for (int m = 0; m < M; m++) acc[0][m] = acc[1][m] = 0;
        }
    };
    for (int s = 0; s < nsteps; s += 2) {
        step(s, A);
        if (s + 1 < nsteps) step(s + 1, B);
    }
}

static int num_sms(void)
{
    static const int n = k_device_attr(cudaDevAttrMultiProcessorCount, 132);
    return n;
}

template <int M, int PRO, int EPI> static cudaError_t skinny_attr(void)
{
    static bool done = false;
    if (done) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(skinny_kernel<M, PRO, EPI>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, K_SKINNY_SMEM);
    done = err == cudaSuccess;
    return err;
}

template <int M, int PRO, int EPI>
static cudaError_t launch_sk(const k_skinny_args *a, cudaStream_t stream)
{
    cudaError_t err = skinny_attr<M, PRO, EPI>();
    if (err != cudaSuccess) return err;
    size_t xbytes = (size_t)M * a->K * 2;
    int staged = xbytes <= K_SKINNY_SMEM;
    if (PRO == K_PRO_NORM && !staged) return cudaErrorInvalidValue;
    size_t smem = staged ? xbytes : 0;
    // Two blocks per SM (16 warps) keep enough loads in flight; one (to let the next kernel's
    // blocks start early under PDL) measured slower on every shape and in the decode step.
    int per_sm = smem <= 100 * 1024 ? 2 : 1;
    int blocks = num_sms() * per_sm, needed = (sk_tasks(EPI, a->N) + SK_WARPS - 1) / SK_WARPS;
    if (blocks > needed) blocks = needed;
    return k_launch(skinny_kernel<M, PRO, EPI>, dim3(blocks), dim3(SK_THREADS), smem, stream, *a, staged);
}

// The (prologue, epilogue) pairs the engine uses.
#define SK_COMBOS(X)                                                                              \
    X(K_PRO_NONE, K_EPI_F32)                                                                      \
    X(K_PRO_NONE, K_EPI_BF16)                                                                     \
    X(K_PRO_NONE, K_EPI_RESIDUAL)                                                                 \
    X(K_PRO_NORM, K_EPI_F32)                                                                      \
    X(K_PRO_NORM, K_EPI_SILU)                                                                     \
    X(K_PRO_NORM, K_EPI_ROPE_KV)

template <int PRO, int EPI> static cudaError_t launch_pe(const k_skinny_args *a, cudaStream_t stream)
{
    switch (a->M) {
    case 1: return launch_sk<1, PRO, EPI>(a, stream);
    case 2: return launch_sk<2, PRO, EPI>(a, stream);
    case 3: return launch_sk<3, PRO, EPI>(a, stream);
    case 4: return launch_sk<4, PRO, EPI>(a, stream);
    case 5: return launch_sk<5, PRO, EPI>(a, stream);
    case 6: return launch_sk<6, PRO, EPI>(a, stream);
    case 7: return launch_sk<7, PRO, EPI>(a, stream);
    case 8: return launch_sk<8, PRO, EPI>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t k_gemm_skinny_fused(const k_skinny_args *a, cudaStream_t stream)
{
    if (a->K % 8 || a->N < 1 || a->M < 1 || a->M > 8) return cudaErrorInvalidValue;
    if (a->epi == K_EPI_SILU && a->N % 2) return cudaErrorInvalidValue;
    if (a->epi == K_EPI_ROPE_KV && (a->hd % 2 || a->N != (a->nh + 2 * a->nkv) * a->hd))
        return cudaErrorInvalidValue;
#define SK_DISPATCH(P, E)                                                                         \
    if (a->pro == P && a->epi == E) return launch_pe<P, E>(a, stream);
    SK_COMBOS(SK_DISPATCH)
#undef SK_DISPATCH
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t k_gemm_skinny(const bf16_t *x, const bf16_t *w, void *y, int y_is_f32,
                                     int32_t M, int32_t N, int32_t K, cudaStream_t stream)
{
    k_skinny_args a = {};
    a.x = x, a.w = w, a.y = y, a.M = M, a.N = N, a.K = K;
    a.pro = K_PRO_NONE, a.epi = y_is_f32 ? K_EPI_F32 : K_EPI_BF16;
    return k_gemm_skinny_fused(&a, stream);
}

template <int PRO, int EPI> static cudaError_t attr_all_m(void)
{
    cudaError_t e[8] = {skinny_attr<1, PRO, EPI>(), skinny_attr<2, PRO, EPI>(),
                        skinny_attr<3, PRO, EPI>(), skinny_attr<4, PRO, EPI>(),
                        skinny_attr<5, PRO, EPI>(), skinny_attr<6, PRO, EPI>(),
                        skinny_attr<7, PRO, EPI>(), skinny_attr<8, PRO, EPI>()};
    for (int i = 0; i < 8; i++)
        if (e[i] != cudaSuccess) return e[i];
    return cudaSuccess;
}

extern "C" cudaError_t k_init(void)
{
    cudaError_t err;
#define SK_ATTR(P, E)                                                                             \
    if ((err = attr_all_m<P, E>()) != cudaSuccess) return err;
    SK_COMBOS(SK_ATTR)
#undef SK_ATTR
    num_sms();
    return k_prefill_init();
}
