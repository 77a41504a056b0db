// decode_ring.cuh: the streamed decode kernel's shared-memory ring and its GEMM consumers
// (decode_stream.cu): a producer warp fills ring slots with bulk copies (TMA, cp.async.bulk) and
// eight consumer warps multiply what lands there. Apart so that kernels/dev can measure the ring
// and the consumers alone with the very code the kernel runs.
//
// Ring slot s has two mbarriers: full[s] (the producer's arrive.expect_tx; the copies complete
// it) and empty[s] (one arrival per consumer warp once it has read the slot). Unit k of the
// block's stream goes to slot k mod ns with parity (k div ns) & 1.
//
// Quiet: while the consumers wait on L2 round trips of their own (grid barriers, staging, the
// attention merge), consumer thread 0 sets ds_quiet and the producer keeps at most one unit's
// copies pending, so that its stream does not queue in front of those round trips; the ring is
// full by then anyway. A consumer that needs ring data ends the quiet first, so it can never wait
// on a held producer.
#pragma once

#include "kernels/skinny_rows.cuh"

#define DS_CWARPS 8
#define DS_CTHREADS (DS_CWARPS * 32)
#define DS_THREADS (DS_CTHREADS + 64) // + the producer warp + the signal warp
// Named barriers (0 is __syncthreads): the consumer warps alone, and three that the consumer
// warps arrive at and the signal warp waits at (or the reverse), once a layer each.
#define DS_BAR_CONSUMERS 1
#define DS_BAR_Q_PASSED 2 // consumers -> signal: this block's Q rows are stored
#define DS_BAR_QKV_DONE 3 // consumers -> signal: all this block's QKV rows are stored
#define DS_BAR_Q_READY 4  // signal -> consumers: every block's Q rows are stored, the first segment's staged
#define DS_MAX_SLOTS 16

// ---- PTX wrappers: mbarriers, bulk copies, named barriers ----------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity)
{
    asm volatile("{\n\t.reg .pred p;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra WAIT_%=;\n}" ::"r"(smem_u32(b)),
                 "r"(parity)
                 : "memory");
}

// bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned), completing on bar.
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar,
                                          uint64_t policy)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
                 : "memory");
}

__device__ __forceinline__ uint64_t evict_first_policy()
{
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

// The consumer warps only (the producer never joins).
__device__ __forceinline__ void consumer_sync()
{
    asm volatile("bar.sync %0, %1;" ::"n"(DS_BAR_CONSUMERS), "n"(DS_CTHREADS) : "memory");
}

// The consumer warps and the signal warp. An arrival does not wait; it guarantees that the
// arriving thread's earlier memory accesses are performed, for the threads that wait there, when
// the barrier completes (PTX ISA, barrier.cta).
template <int ID> __device__ __forceinline__ void signal_sync()
{
    asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(DS_CTHREADS + 32) : "memory");
}
template <int ID> __device__ __forceinline__ void signal_arrive()
{
    asm volatile("bar.arrive %0, %1;" ::"n"(ID), "n"(DS_CTHREADS + 32) : "memory");
}

// Consumer thread 0 sets it while its block's producer is to hold its copies (see the top).
__shared__ int ds_quiet;
__device__ __forceinline__ int quiet_now() { return *(volatile int *)&ds_quiet; }
__device__ __forceinline__ void set_quiet(int on) { *(volatile int *)&ds_quiet = on; }

// ceil(2^32 / the ring's slot count) (ds_ring::set_ns)
__shared__ unsigned ds_magic;

struct ds_ring {
    unsigned char *slots;
    uint64_t *full, *empty;
    int *unit; // per slot: the GEMM unit it holds, or -1 for the end of the block's share of a phase
    int ns, slot_bytes;
    unsigned k; // units passed through the ring so far (this thread's count)
    int inflight; // producer: at most this many units' copies pending (0: the ring's slots)

    // The slot count, and (thread 0, before the block's first __syncthreads) the multiplier that
    // divides by it: every unit pays a division for its slot and parity, and the generic one
    // (~20 instructions) was a tenth of a consumer warp's. In shared memory, as a register it
    // pushed the kernel past its 168.
    __device__ __forceinline__ void set_ns(int n)
    {
        ns = n;
        if (threadIdx.x == 0) ds_magic = (unsigned)((0x100000000ull + (unsigned)n - 1) / (unsigned)n);
    }
    // i / ns, exact for i < 2^28 (ns <= 16; a launch passes a few thousand units through a ring)
    __device__ __forceinline__ unsigned lap(unsigned i) const { return __umulhi(i, ds_magic); }
    __device__ __forceinline__ unsigned idx(unsigned i) const { return i - lap(i) * ns; }      // i % ns
    __device__ __forceinline__ unsigned char *slot(unsigned i) const { return slots + (size_t)idx(i) * slot_bytes; }
    // Waits until unit k's bytes have landed, ending the producer's quiet first.
    __device__ __forceinline__ void wait_full()
    {
        if (quiet_now()) set_quiet(0);
        mbar_wait(&full[idx(k)], lap(k) & 1);
    }
    // Producer, before filling unit k's slot: until the consumers have freed it and, with an
    // in-flight limit, unit k - inflight has landed; while quiet, until unit k - 1 has landed.
    __device__ __forceinline__ void acquire()
    {
        if (k >= (unsigned)ns) mbar_wait(&empty[idx(k)], (lap(k) - 1) & 1);
        if (inflight && k >= (unsigned)inflight) {
            const unsigned j = k - inflight;
            mbar_wait(&full[idx(j)], lap(j) & 1);
        }
        if (quiet_now()) {
            if (k >= 1u) { // in-flight limit 1 while quiet
                const unsigned j = k - 1;
                mbar_wait(&full[idx(j)], lap(j) & 1);
            } else {
                while (quiet_now()) {
                }
            }
        }
    }
    // Every thread, before the block's first __syncthreads: the ring's mbarriers (2 x
    // DS_MAX_SLOTS at the start of smem; thread 0 initialises them, the slot multiplier and the
    // quiet flag), its ns slots of slot_bytes at smem + slots_off, the per-slot unit ids (s_unit,
    // may be null), at most `fly` units pending (0: no limit), no count, not quiet.
    __device__ __forceinline__ void setup(unsigned char *smem, int slots_off, int n, int bytes, int fly, int *s_unit)
    {
        full = reinterpret_cast<uint64_t *>(smem);
        empty = full + DS_MAX_SLOTS;
        slots = smem + slots_off;
        unit = s_unit;
        set_ns(n);
        slot_bytes = bytes, k = 0, inflight = fly;
        if (threadIdx.x == 0) {
            set_quiet(0);
            for (int s = 0; s < ns; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], DS_CWARPS);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
    }
    // This warp is done with unit k's slot (one arrival per consumer warp frees it).
    __device__ __forceinline__ void release()
    {
        __syncwarp();
        if ((threadIdx.x & 31) == 0) mbar_arrive(&empty[idx(k)]);
    }
};

// The block's units of one GEMM phase, as the producer sends them, up to its end marker. A unit's
// rows are split into warp tasks of whole rows (the RoPE or SiLU pair, or one row), task q of
// the block's k-th ring unit going to warp (k * tasks + q) mod 8, so
// that consecutive units run on different warps at once; the warp sums its rows and runs their
// epilogue itself (lane m for sequence m). No block-wide synchronisation per unit: every warp
// waits for each unit's bytes and releases the slot, reading it or not.
// With qunits >= 0 (the QKV phase: units below qunits hold Q rows), each warp tells the signal
// warp when it is past the block's Q units (a block's units only increase), and when it is past
// all of them.
// RPW: rows a warp task, 2 for the RoPE and SiLU pairs; residual tasks may take two rows too
// (upr even), which loads and converts the input once for both.
template <int M, int EPI, int RPW = (EPI == K_EPI_ROPE_KV || EPI == K_EPI_SILU) ? 2 : 1>
__device__ __forceinline__ void consume_gemm(const k_skinny_args &sa, int upr, const uint4 *xs, ds_ring &ring,
                                             int qunits = -1)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, C = sa.K / 8, tpu = upr / RPW;
    bool q_passed = qunits < 0;
    for (;; ring.k++) {
        ring.wait_full();
        const int u = ring.unit[ring.idx(ring.k)];
        if (!q_passed && (u < 0 || u >= qunits)) {
            signal_arrive<DS_BAR_Q_PASSED>();
            q_passed = true;
        }
        if (u < 0) { // the producer's end-of-phase marker
            ring.release();
            ring.k++;
            if (qunits >= 0) signal_arrive<DS_BAR_QKV_DONE>();
            return;
        }
        const int f0 = u * upr, rows = min(upr, sa.N - f0);
        const int q = (int)((warp + DS_CWARPS - (ring.k * tpu) % DS_CWARPS) % DS_CWARPS);
        if (q >= tpu || q * RPW >= rows) {
            ring.release();
            continue;
        }
        float acc[RPW][M];
#pragma unroll
        for (int r = 0; r < RPW; r++)
#pragma unroll
            for (int m = 0; m < M; m++) acc[r][m] = 0;
        const uint4 *ws = reinterpret_cast<const uint4 *>(ring.slot(ring.k)) + q * RPW * C;
#pragma unroll 4
        for (int c = lane; c < C; c += 32) {
            uint4 xv[M];
#pragma unroll
            for (int m = 0; m < M; m++) xv[m] = xs[m * C + c];
#pragma unroll
            for (int r = 0; r < RPW; r++) {
                const uint4 wv = ws[r * C + c];
#pragma unroll
                for (int m = 0; m < M; m++) acc[r][m] += dot8(wv, xv[m]);
            }
        }
        ring.release();
#pragma unroll
        for (int r = 0; r < RPW; r++)
#pragma unroll
            for (int m = 0; m < M; m++) acc[r][m] = warp_sum(acc[r][m]);
        if (lane < M) {
            float v[RPW];
#pragma unroll
            for (int r = 0; r < RPW; r++) {
                v[r] = acc[r][0];
#pragma unroll
                for (int m = 1; m < M; m++)
                    if (lane == m) v[r] = acc[r][m];
            }
            if (EPI != K_EPI_RESIDUAL) {
                epilogue<EPI>(sa, (f0 >> 1) + q, lane, v[0], v[RPW - 1]);
            } else { // flat row f is weight row f
                // A reduction in L2 (red.global.add, no value returned) rather than a load and a
                // store: the warp goes on at once instead of after an L2 round trip (~2 us while
                // the stream runs), which sat on the tail of the O and down phases. Each element
                // gets one add a phase, so the sum is the same as with a load and a store.
#pragma unroll
                for (int r = 0; r < RPW; r++)
                    if (q * RPW + r < rows)
                        atomicAdd(reinterpret_cast<float *>(sa.y) + (int64_t)lane * sa.N + f0 + q * RPW + r, v[r]);
            }
        }
    }
}
