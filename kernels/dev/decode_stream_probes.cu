// decode_stream_probes.cu: the streamed decode kernel's parts alone, with the code the kernel runs
// (kernels/decode_ring.cuh), so that what the memory stream itself reaches can be told from what
// the phases and their barriers cost (kernels/decode_stream.cu). A lab tool: `make dev-kernels`,
// then on the GPU machine
//
//   build/dev/decode_stream_probes [probe]      probe 1, 2 or 3; none: all three
//     1 read     plain 16-byte loads over 1 GiB from every SM, four in flight a thread: the rate
//                memory gives loads that nothing waits on
//     2 stream   the ring alone: each block's producer warp copies units of `rows` weight rows
//                with one bulk copy a row, at most `inflight` units pending (0: the whole ring),
//                and the consumer warps only free the slots; units go to blocks round robin
//     3 consume  the GEMM consumers alone at batch 1: `units` ring units of a phase's shape
//                whose bytes are already in shared memory (nothing is copied)
//
// Each probe is first checked against a CPU reference (1 and 2: a position-weighted checksum of
// every word that went through; 3: the products, from a known fill of the ring), then timed: the
// median of 9 samples of 10 launches after 10 warm-up launches, on 1 GiB of random data, beside
// a device-to-device copy timed the same way (bytes read + written).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/decode_ring.cuh"
#include "kernels/dev/lab.cuh"
#include "kernels/numerics.h"

#define DATA_BYTES ((int64_t)1 << 30)
#define CHECK_BYTES ((int64_t)64 << 20) // what the checks stream (the CPU sums it)
#define RING_BYTES (192 * 1024)          // the ring of probes 2 and 3 (the kernel's is ~190 KB)

static int sms(void) { return k_device_attr(cudaDevAttrMultiProcessorCount, 132); }

__global__ void fill_kernel(uint32_t *p, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)synth_mix64((uint64_t)i);
}

// What the checks of probes 1 and 2 add up: word w (32 bits) at word index i.
__host__ __device__ inline uint32_t weigh(uint32_t w, uint64_t i) { return w * (2u * (uint32_t)i + 1u); }

__device__ inline uint32_t warp_add_u32(uint32_t v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- 1: plain loads -----------------------------------------------------------------------------

// The words of src, four 16-byte loads in flight a thread. CHECK: the weighted sum of every word
// into *sink; else *sink is written only on an impossible value, which keeps the loads.
template <bool CHECK>
__global__ void __launch_bounds__(512) read_kernel(const uint4 *src, int64_t n, uint32_t *sink)
{
    uint32_t acc = 0;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += 4 * step) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = i + j * step < n ? __ldcs(src + i + j * step) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (CHECK) {
                const uint64_t w = 4 * (uint64_t)(i + j * step);
                acc += weigh(v[j].x, w) + weigh(v[j].y, w + 1) + weigh(v[j].z, w + 2) + weigh(v[j].w, w + 3);
            } else {
                acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
            }
        }
    }
    if (CHECK) {
        acc = warp_add_u32(acc);
        if ((threadIdx.x & 31) == 0) atomicAdd(sink, acc);
    } else if (acc == 0x9e3779b9u) {
        *sink = acc;
    }
}

template <bool CHECK> static void read_probe(const void *src, int64_t bytes, uint32_t *sink, cudaStream_t st)
{
    read_kernel<CHECK><<<sms() * 4, 512, 0, st>>>(static_cast<const uint4 *>(src), bytes / 16, sink);
    CUDA_CHECK(cudaGetLastError());
}

// ---- 2: the ring's stream -----------------------------------------------------------------------

// Block b streams units b, b + grid, .. of `rows` rows of row_bytes each (a unit is consecutive
// bytes of src). CHECK: the consumer warps add up the weighted words of every unit before they
// free its slot, into *sink.
template <bool CHECK>
__global__ void __launch_bounds__(DS_THREADS, 1)
    stream_kernel(const unsigned char *src, int64_t units, int row_bytes, int rows, int ns, int inflight,
                  uint32_t *sink)
{
    extern __shared__ __align__(128) unsigned char smem[];
    ds_ring ring;
    ring.setup(smem, 2 * DS_MAX_SLOTS * 8, ns, rows * row_bytes, inflight, nullptr);
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t mine = units > blockIdx.x ? (units - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    if (warp == DS_CWARPS) {
        const uint64_t pol = evict_first_policy();
        for (int64_t i = 0; i < mine; i++, ring.k++) {
            const unsigned char *u = src + (blockIdx.x + i * gridDim.x) * (int64_t)ring.slot_bytes;
            ring.acquire();
            if (lane == 0) mbar_expect_tx(&ring.full[ring.idx(ring.k)], ring.slot_bytes);
            __syncwarp();
            if (lane < rows)
                bulk_copy(ring.slot(ring.k) + lane * row_bytes, u + lane * row_bytes, row_bytes,
                          &ring.full[ring.idx(ring.k)], pol);
        }
    } else if (warp < DS_CWARPS) {
        uint32_t acc = 0;
        for (int64_t i = 0; i < mine; i++, ring.k++) {
            ring.wait_full();
            if (CHECK) {
                const uint32_t *w = reinterpret_cast<const uint32_t *>(ring.slot(ring.k));
                const uint64_t base = (uint64_t)(blockIdx.x + i * gridDim.x) * (ring.slot_bytes / 4);
                for (int j = threadIdx.x; j < ring.slot_bytes / 4; j += DS_CTHREADS) acc += weigh(w[j], base + j);
            }
            ring.release();
        }
        if (CHECK) {
            acc = warp_add_u32(acc);
            if (lane == 0) atomicAdd(sink, acc);
        }
    }
}

// Streams the whole units of `bytes`; returns the bytes they hold.
template <bool CHECK>
static int64_t stream_probe(const void *src, int64_t bytes, int row_bytes, int rows, int inflight, uint32_t *sink,
                            cudaStream_t st)
{
    const int64_t unit = (int64_t)row_bytes * rows;
    if (row_bytes % 16 || rows < 1 || rows > 32 || unit > RING_BYTES) {
        fprintf(stderr, "stream: %d rows of %d bytes do not fit a ring slot\n", rows, row_bytes);
        exit(2);
    }
    const int ns = (int)(RING_BYTES / unit < DS_MAX_SLOTS ? RING_BYTES / unit : DS_MAX_SLOTS);
    const int smem = 2 * DS_MAX_SLOTS * 8 + ns * (int)unit;
    CUDA_CHECK(cudaFuncSetAttribute(stream_kernel<CHECK>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    stream_kernel<CHECK><<<sms(), DS_THREADS, smem, st>>>(static_cast<const unsigned char *>(src), bytes / unit,
                                                          row_bytes, rows, ns, inflight < ns ? inflight : 0, sink);
    CUDA_CHECK(cudaGetLastError());
    return bytes / unit * unit;
}

// ---- 3: the GEMM consumers ----------------------------------------------------------------------

// The ring's slot s, element i, and the staged activation's element i (CHECK's fill).
__host__ __device__ inline uint16_t slot_elem(int s, int64_t i) { return synth_weight_bf16(7, s, i, 0.0f, 0.5f); }
__host__ __device__ inline uint16_t x_elem(int64_t i) { return synth_weight_bf16(7, 99, i, 0.0f, 1.0f); }

// Each block's producer hands its consumers `units` units (then the end marker) whose bytes are
// whatever the slots hold, and they run consume_gemm on them as the kernel does (M = 1, each
// block its own N values of y). CHECK: the slots and the staged activation are filled first with
// known values.
template <int EPI, int RPW, bool CHECK>
__global__ void __launch_bounds__(DS_THREADS, 1) consume_kernel(k_skinny_args sa, int upr, int units, int ns,
                                                                 int slot_bytes)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int s_unit[DS_MAX_SLOTS];
    ds_ring ring;
    ring.setup(smem, 2 * DS_MAX_SLOTS * 8, ns, slot_bytes, 0, s_unit);
    uint16_t *xs16 = reinterpret_cast<uint16_t *>(ring.slots + (size_t)ns * slot_bytes);
    if (CHECK) {
        uint16_t *sl = reinterpret_cast<uint16_t *>(ring.slots);
        for (int64_t i = threadIdx.x; i < (int64_t)ns * slot_bytes / 2; i += blockDim.x)
            sl[i] = slot_elem((int)(i / (slot_bytes / 2)), i % (slot_bytes / 2));
        for (int i = threadIdx.x; i < sa.K; i += blockDim.x) xs16[i] = x_elem(i);
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp == DS_CWARPS) {
        for (int u = 0; u <= units; u++, ring.k++) {
            ring.acquire();
            if (lane == 0) ring.unit[ring.idx(ring.k)] = u < units ? u : -1, mbar_arrive(&ring.full[ring.idx(ring.k)]);
            __syncwarp();
        }
    } else if (warp < DS_CWARPS) {
        sa.y = static_cast<float *>(sa.y) + (int64_t)blockIdx.x * sa.N;
        consume_gemm<1, EPI, RPW>(sa, upr, reinterpret_cast<const uint4 *>(xs16), ring);
    }
}

struct consume_shape {
    int K, rows, paired; // rows of K a unit (pairs of rows when paired, as gate/up)
    const char *name;
};

// Runs the consumers on `units` units of shape c into y (zeroed first); returns the weight bytes.
template <bool CHECK> static double consume_probe(consume_shape c, int units, float *y, cudaStream_t st)
{
    const int upr = c.paired ? 2 * c.rows : c.rows, slot = upr * c.K * 2;
    if (c.K % 256 || c.rows < 1 || slot > RING_BYTES) {
        fprintf(stderr, "consume: %d rows of K = %d do not fit a ring slot\n", upr, c.K);
        exit(2);
    }
    const int ns = RING_BYTES / slot < DS_MAX_SLOTS ? RING_BYTES / slot : DS_MAX_SLOTS;
    const int smem = 2 * DS_MAX_SLOTS * 8 + ns * slot + c.K * 2;
    k_skinny_args sa = {};
    sa.M = 1, sa.K = c.K, sa.N = units * upr, sa.y = y;
    // as the kernel: SiLU pairs; residual rows two a task where a unit has an even number
    auto kern = c.paired ? consume_kernel<K_EPI_SILU, 2, CHECK>
                         : upr % 2 ? consume_kernel<K_EPI_RESIDUAL, 1, CHECK> : consume_kernel<K_EPI_RESIDUAL, 2, CHECK>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (CHECK) CUDA_CHECK(cudaMemsetAsync(y, 0, sizeof(float) * (size_t)sms() * sa.N, st));
    kern<<<sms(), DS_THREADS, smem, st>>>(sa, upr, units, ns, slot);
    CUDA_CHECK(cudaGetLastError());
    return (double)sms() * units * upr * c.K * 2;
}

// ---- the CPU side, timing ---------------------------------------------------------------------

static int failures;

static void expect(bool ok, const char *what)
{
    printf("  check %-60s %s\n", what, ok ? "ok" : "FAILED");
    failures += !ok;
}

static uint32_t weighed_sum(const uint32_t *w, int64_t n)
{
    uint32_t s = 0;
    for (int64_t i = 0; i < n; i++) s += weigh(w[i], (uint64_t)i);
    return s;
}

static uint32_t run_sum(void (*launch)(void *), void *ctx, uint32_t *sink, cudaStream_t st)
{
    uint32_t got = 0;
    CUDA_CHECK(cudaMemsetAsync(sink, 0, 4, st));
    launch(ctx);
    CUDA_CHECK(cudaMemcpyAsync(&got, sink, 4, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    return got;
}

static double copy_gbs; // the device-to-device copy, GB/s (read + written)

static void row(const char *probe, const char *shape, double ms, double bytes)
{
    const double gbs = bytes / ms / 1e6;
    printf("| %-8s | %-44s | %8.3f | %8.1f | %5.1f%% |\n", probe, shape, ms, gbs, 100 * gbs / copy_gbs);
}

struct ctx_t {
    cudaStream_t st;
    void *src;
    int64_t bytes;
    uint32_t *sink;
    int row_bytes, rows, inflight, units;
    consume_shape shape;
    float *y;
};

static void do_read(void *p)
{
    ctx_t *c = static_cast<ctx_t *>(p);
    read_probe<false>(c->src, c->bytes, c->sink, c->st);
}
static void do_read_check(void *p)
{
    ctx_t *c = static_cast<ctx_t *>(p);
    read_probe<true>(c->src, c->bytes, c->sink, c->st);
}
static void do_stream(void *p)
{
    ctx_t *c = static_cast<ctx_t *>(p);
    stream_probe<false>(c->src, c->bytes, c->row_bytes, c->rows, c->inflight, c->sink, c->st);
}
static void do_stream_check(void *p)
{
    ctx_t *c = static_cast<ctx_t *>(p);
    stream_probe<true>(c->src, c->bytes, c->row_bytes, c->rows, c->inflight, c->sink, c->st);
}
static void do_consume(void *p)
{
    ctx_t *c = static_cast<ctx_t *>(p);
    consume_probe<false>(c->shape, c->units, c->y, c->st);
}

static void probe_read(ctx_t *c, const uint32_t *host)
{
    c->bytes = CHECK_BYTES;
    expect(run_sum(do_read_check, c, c->sink, c->st) == weighed_sum(host, CHECK_BYTES / 4),
           "read: weighted sum of 64 MiB");
    c->bytes = DATA_BYTES;
    row("read", "1 GiB, 16-byte loads, 4 in flight a thread", time_ms(do_read, c, c->st), (double)DATA_BYTES);
}

static void probe_stream(ctx_t *c, const uint32_t *host)
{
    static const struct { int row_bytes, rows, inflight; } v[] = {
        {8192, 4, 1}, {8192, 4, 2}, {8192, 4, 3}, {8192, 4, 4}, {8192, 4, 0},
        {22016, 1, 2}, {22016, 1, 3}, {22016, 1, 0}, {16384, 2, 2}, {4096, 8, 2},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        c->row_bytes = v[i].row_bytes, c->rows = v[i].rows, c->inflight = v[i].inflight;
        char shape[64], fl[16] = "ring";
        if (c->inflight) snprintf(fl, sizeof fl, "%d", c->inflight);
        snprintf(shape, sizeof shape, "%d x %d B a unit, %s in flight", c->rows, c->row_bytes, fl);
        c->bytes = CHECK_BYTES;
        const int64_t checked = (int64_t)c->rows * c->row_bytes * (CHECK_BYTES / ((int64_t)c->rows * c->row_bytes));
        char what[96];
        snprintf(what, sizeof what, "stream %s: weighted sum", shape);
        expect(run_sum(do_stream_check, c, c->sink, c->st) == weighed_sum(host, checked / 4), what);
        c->bytes = DATA_BYTES;
        const int64_t unit = (int64_t)c->rows * c->row_bytes;
        row("stream", shape, time_ms(do_stream, c, c->st), (double)(DATA_BYTES / unit * unit));
    }
}

// The CPU's products of the check fill, as consume_kernel<.., true> leaves one block's y: float
// sums, or (paired) bf16 silu(gate) * up of bf16-rounded gate and up, as the epilogue.
static void consume_reference(consume_shape c, int units, float *ref)
{
    const int upr = c.paired ? 2 * c.rows : c.rows, slot = upr * c.K * 2;
    const int ns = RING_BYTES / slot < DS_MAX_SLOTS ? RING_BYTES / slot : DS_MAX_SLOTS;
    for (int u = 0; u < units; u++) {
        const int s = u % ns; // unit u is the u-th through the block's ring
        float v[16];
        for (int r = 0; r < upr; r++) {
            double acc = 0;
            for (int k = 0; k < c.K; k++)
                acc += (double)bf16_to_f32(slot_elem(s, (int64_t)r * c.K + k)) * bf16_to_f32(x_elem(k));
            v[r] = (float)acc;
        }
        for (int r = 0; r < upr; r++) {
            if (!c.paired) {
                ref[u * upr + r] = v[r];
            } else if (r % 2 == 0) {
                const float g = round_bf16(v[r]), up = round_bf16(v[r + 1]);
                ref[(u * upr + r) / 2] = round_bf16(g / (1.0f + expf(-g)) * up);
            }
        }
    }
}

static void probe_consume(ctx_t *c)
{
    static const consume_shape v[] = {
        {4096, 4, 0, "O (4 rows of K=4096 a unit)"},
        {4096, 2, 1, "QKV, gate/up (2 pairs of K=4096)"},
        {11008, 1, 0, "down (1 row of K=11008)"},
    };
    c->units = 512;
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        const int upr = v[i].paired ? 2 * v[i].rows : v[i].rows, N = c->units * upr;
        const int n = v[i].paired ? N / 2 : N; // outputs a block
        consume_probe<true>(v[i], c->units, c->y, c->st);
        float *got = static_cast<float *>(malloc(sizeof(float) * (size_t)sms() * N));
        float *ref = static_cast<float *>(malloc(sizeof(float) * (size_t)n));
        CUDA_CHECK(cudaMemcpyAsync(got, c->y, sizeof(float) * (size_t)sms() * N, cudaMemcpyDeviceToHost, c->st));
        CUDA_CHECK(cudaStreamSynchronize(c->st));
        consume_reference(v[i], c->units, ref);
        double ss = 0;
        for (int j = 0; j < n; j++) ss += (double)ref[j] * ref[j];
        const double rms = sqrt(ss / n), tol = v[i].paired ? 2e-2 : 1e-3;
        int64_t bad = 0;
        for (int b = 0; b < sms(); b++)
            for (int j = 0; j < n; j++) {
                const float g = v[i].paired ? bf16_to_f32(reinterpret_cast<const uint16_t *>(got + (int64_t)b * N)[j])
                                            : got[(int64_t)b * N + j];
                bad += !(fabs((double)g - ref[j]) <= tol * (fabs(ref[j]) + rms));
            }
        char what[96];
        snprintf(what, sizeof what, "consume %s: products", v[i].name);
        expect(bad == 0, what);
        free(got), free(ref);
        c->shape = v[i];
        const double bytes = consume_probe<false>(v[i], c->units, c->y, c->st);
        const double ms = time_ms(do_consume, c, c->st);
        char shape[96];
        snprintf(shape, sizeof shape, "%s, %.1f GB/s an SM", v[i].name, bytes / sms() / ms / 1e6);
        row("consume", shape, ms, bytes);
    }
}

int main(int argc, char **argv)
{
    const int which = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2 || which < 0 || which > 3) {
        fprintf(stderr, "usage: %s [1 read | 2 stream | 3 consume] (none: all)\n", argv[0]);
        return 2;
    }
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    printf("decode_stream_probes: %s, %d SMs\n\n", p.name, p.multiProcessorCount);
    ctx_t c = {};
    CUDA_CHECK(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&c.src, (size_t)DATA_BYTES));
    CUDA_CHECK(cudaMalloc((void **)&c.sink, 4));
    CUDA_CHECK(cudaMalloc((void **)&c.y, sizeof(float) * (size_t)sms() * 512 * 8));
    fill_kernel<<<sms() * 8, 256, 0, c.st>>>(static_cast<uint32_t *>(c.src), DATA_BYTES / 4);
    CUDA_CHECK(cudaGetLastError());
    uint32_t *host = static_cast<uint32_t *>(malloc((size_t)CHECK_BYTES));
    CUDA_CHECK(cudaMemcpyAsync(host, c.src, (size_t)CHECK_BYTES, cudaMemcpyDeviceToHost, c.st));
    CUDA_CHECK(cudaStreamSynchronize(c.st));

    c.bytes = DATA_BYTES;
    copy_gbs = lab_copy_gbs(c.st);
    printf("| probe    | shape                                        |       ms |     GB/s | of copy |\n");
    printf("|----------|----------------------------------------------|----------|----------|---------|\n");
    printf("| copy     | 1 GiB device to device, read + written       |          | %8.1f |  100.0%% |\n", copy_gbs);
    if (which == 0 || which == 1) probe_read(&c, host);
    if (which == 0 || which == 2) probe_stream(&c, host);
    if (which == 0 || which == 3) probe_consume(&c);
    free(host);
    printf("\ndecode_stream_probes: %s\n", failures ? "CHECKS FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
