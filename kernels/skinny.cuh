// skinny.cuh: the body of the weight-streaming GEMM for M <= 8 rows (gemm_skinny.cu describes
// the layout of the work), shared by its own kernel and by the persistent decode kernel
// (decode_layers.cu), which runs it once per projection of every layer.
//
// Everything an earlier kernel or an earlier phase of the same kernel wrote (the residual
// stream, staged activations, the residual read-modify-write) is read with ld.global.cg, from
// L2: a multiprocessor's L1 is not coherent with other multiprocessors' stores, and inside one
// persistent kernel a line cached in L1 during one phase may be stale in the next. Weights,
// never written, stream through the non-coherent path.
#pragma once

#include "kernels/common.cuh"

#define SK_WARPS 8
#define SK_THREADS (SK_WARPS * 32)
#define SK_U 4 // 16-byte loads per lane, per weight row, per batch

__device__ __forceinline__ float dot8(uint4 w, uint4 x)
{
    const __nv_bfloat162 *wp = reinterpret_cast<const __nv_bfloat162 *>(&w);
    const __nv_bfloat162 *xp = reinterpret_cast<const __nv_bfloat162 *>(&x);
    float acc = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 a = __bfloat1622float2(wp[i]), b = __bfloat1622float2(xp[i]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
    return acc;
}

__host__ __device__ __forceinline__ int sk_tasks(int epi, int N)
{
    return epi == K_EPI_SILU ? N / 2 : (N + 1) / 2;
}

// The two weight rows of task t (r1 may be N when N is odd: no row).
template <int EPI>
__device__ __forceinline__ void task_rows(const k_skinny_args &a, int t, int &r0, int &r1)
{
    if (EPI == K_EPI_SILU) {
        r0 = t;
        r1 = t + a.N / 2;
    } else if (EPI == K_EPI_ROPE_KV) {
        int half = a.hd / 2, qk = (a.nh + a.nkv) * half;
        if (t < qk) {
            r0 = (t / half) * a.hd + t % half;
            r1 = r0 + half;
        } else { // v columns start at (nh + nkv) * hd = 2 * qk
            r0 = 2 * t;
            r1 = r0 + 1;
        }
    } else {
        r0 = 2 * t;
        r1 = r0 + 1;
    }
}

__device__ __forceinline__ uint16_t bf16_bits(float v)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Row m's results v0, v1 of task t (rows r0, r1).
template <int EPI>
__device__ __forceinline__ void epilogue(const k_skinny_args &a, int t, int m, float v0, float v1)
{
    int r0, r1;
    task_rows<EPI>(a, t, r0, r1);
    const int N = a.N;
    if (EPI == K_EPI_F32 || EPI == K_EPI_RESIDUAL) {
        float *y = reinterpret_cast<float *>(a.y) + (int64_t)m * N;
        if (EPI == K_EPI_RESIDUAL) {
            y[r0] = __ldcg(y + r0) + v0;
            if (r1 < N) y[r1] = __ldcg(y + r1) + v1;
        } else {
            y[r0] = v0;
            if (r1 < N) y[r1] = v1;
        }
    } else if (EPI == K_EPI_BF16) {
        uint16_t *y = reinterpret_cast<uint16_t *>(a.y) + (int64_t)m * N;
        y[r0] = bf16_bits(v0);
        if (r1 < N) y[r1] = bf16_bits(v1);
    } else if (EPI == K_EPI_SILU) {
        // gate/up rounded to bf16 first, as the unfused path stores them
        float g = __bfloat162float(__float2bfloat16_rn(v0)), u = __bfloat162float(__float2bfloat16_rn(v1));
        reinterpret_cast<uint16_t *>(a.y)[(int64_t)m * (N / 2) + t] = bf16_bits(g / (1.0f + expf(-g)) * u);
    } else { // K_EPI_ROPE_KV, as rope_kv_kernel
        float *y = reinterpret_cast<float *>(a.y) + (int64_t)m * N;
        const int hd = a.hd, half = hd / 2, qk = (a.nh + a.nkv) * half;
        const int64_t slot = a.slot_mapping[m];
        if (t < qk) {
            const int head = t / half, i = t % half;
            float s, c;
            sincosf(__fmul_rn((float)a.positions[m], a.inv_freq[i]), &s, &c);
            const float x1 = v0, x2 = v1;
            const float o1 = x1 * c - x2 * s, o2 = x2 * c + x1 * s;
            if (head < a.nh) {
                y[r0] = o1;
                y[r1] = o2;
            } else {
                y[r0] = v0;
                y[r1] = v1;
                if (slot >= 0) {
                    bf16_t *kc = a.k_cache + (slot * a.nkv + (head - a.nh)) * hd;
                    kc[i] = bf16_bits(o1);
                    kc[i + half] = bf16_bits(o2);
                }
            }
        } else {
            y[r0] = v0;
            y[r1] = v1;
            if (slot >= 0) {
                bf16_t *vc = a.v_cache + slot * a.nkv * hd + (r0 - 2 * qk);
                vc[0] = bf16_bits(v0);
                vc[1] = bf16_bits(v1);
            }
        }
    }
}

// One GEMM by the whole grid: warps issue their first two batches of weight loads, call
// wait() (which returns once the activation may be read: griddepcontrol.wait for a kernel of
// its own, a grid barrier inside the persistent kernel), then build the activation in shared
// memory s_x (staged) and stream the rest. staged: the activation is copied to (or, K_PRO_NORM,
// computed in) s_x; else it is read from global memory (K_PRO_NONE only).
template <int M, int PRO, int EPI, typename Wait>
__device__ __forceinline__ void skinny_run(const k_skinny_args a, int staged, uint4 *s_x, Wait wait)
{
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
    wait();

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
                float4 p = __ldcg(xr + 2 * c), q = __ldcg(xr + 2 * c + 1);
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
                float4 p = __ldcg(xr + 2 * c), q = __ldcg(xr + 2 * c + 1);
                float y[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w}, wf[8], o[8];
                bf16x8_to_f32(nw[c], wf);
#pragma unroll
                for (int j = 0; j < 8; j++) o[j] = y[j] * inv[m] * wf[j];
                s_x[m * C + c] = f32_to_bf16x8(o);
            }
        }
    } else if (staged) {
        const uint4 *xg = reinterpret_cast<const uint4 *>(a.x);
        for (int i = threadIdx.x; i < M * C; i += SK_THREADS) s_x[i] = __ldcg(xg + i);
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
