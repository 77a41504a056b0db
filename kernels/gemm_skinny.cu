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
#include "kernels/skinny.cuh"

template <int M, int PRO, int EPI>
__global__ void __launch_bounds__(SK_THREADS, 2)
skinny_kernel(k_skinny_args a, int staged)
{
    extern __shared__ __align__(16) uint4 s_x[]; // (M, K/8) when staged
    skinny_run<M, PRO, EPI>(a, staged, s_x, [] {
        griddep_wait();
        griddep_launch_next();
    });
}

static int num_sms(void)
{
    static int n = 0;
    if (n == 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
            n = 132;
    }
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

cudaError_t k_prefill_init(void); // attention.cu

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
