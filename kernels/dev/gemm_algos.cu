// gemm_algos.cu: the decode GEMMs the engine leaves to cuBLAS (3..256 rows), under the algorithm
// cublasGemmEx picks (CUBLAS_GEMM_DEFAULT, what engine/cuda_backend.c calls) against every
// algorithm cuBLASLt's heuristic offers for the same problem (its first 16; the first 4 of them
// also with split-K 2, 4, 8 and 16). The
// question: does choosing the algorithm by timing it, once per shape at engine open, buy back the
// mid-batch decode steps' distance from the copy roofline (docs/engine.md, Known limits: o_proj
// streams at ~47% of the copy ceiling at 4-32 rows)? A lab tool: `make dev-kernels`, then on the
// GPU machine
//
//   build/dev/gemm_algos [MODEL]   # llama-2-7b (default), llama-3-8b, llama-2-13b
//
// The engine's layout: y (M, N) = x (M, K) w^T with w (N, K) row-major bf16, fp32 compute; QKV
// and gate/up write bf16, O and down add to the fp32 residual stream (beta = 1). Each candidate
// is first checked against the default's output (relative L2 over the whole y, from the same
// x, w and starting y), then timed (lab.cuh's time_ms). The weights rotate over enough copies
// that no launch finds its bytes in L2, as a serving step's layer never does; launches are timed
// replayed from a CUDA graph, as the engine's decode steps are. Rate: bytes read
// and written (w, x, y; y twice when accumulated) / time, beside a device-to-device copy of 1 GiB.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kernels/cuda_check.h"
#include "kernels/dev/lab.cuh"

#define LT(call)                                                                                  \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

#define POOL_BYTES (768ll << 20) // weight copies rotate over at least this much
#define WS_BYTES (32u << 20)     // the engine's cuBLAS workspace
#define MAX_ALGOS 16  // the heuristic's candidates tried
#define SPLIT_ALGOS 4 // of which the first this many also with split-K 2..16

static cudaStream_t st;
static cublasHandle_t blas;
static cublasLtHandle_t lt;
static void *ws;

typedef struct problem {
    const char *name;
    int M, N, K, acc; // acc: y fp32 += x w^T, else y bf16 = x w^T
    __nv_bfloat16 *w, *x;
    void *y;
    int copies, next;
    // cuBLASLt's view of the same problem
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    const cublasLtMatmulAlgo_t *algo; // NULL: cublasGemmEx's default
} problem;

static void fill_bf16(__nv_bfloat16 *d, int64_t n, unsigned seed)
{
    __nv_bfloat16 *h = (__nv_bfloat16 *)malloc(sizeof *h * n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = __float2bfloat16(((int)(seed >> 9) % 2001 - 1000) * 1e-4f);
    }
    CUDA_CHECK(cudaMemcpy(d, h, sizeof *h * n, cudaMemcpyHostToDevice));
    free(h);
}

static void launch(void *ctx)
{
    problem *p = (problem *)ctx;
    const __nv_bfloat16 *w = p->w + (int64_t)(p->next++ % p->copies) * p->N * p->K;
    const float alpha = 1.0f, beta = p->acc ? 1.0f : 0.0f;
    if (!p->algo) {
        LT(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, p->N, p->M, p->K, &alpha, w, CUDA_R_16BF, p->K,
                        p->x, CUDA_R_16BF, p->K, &beta, p->y, p->acc ? CUDA_R_32F : CUDA_R_16BF, p->N,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    LT(cublasLtMatmul(lt, p->op, &alpha, w, p->la, p->x, p->lb, &beta, p->y, p->lc, p->y, p->lc, p->algo,
                      ws, WS_BYTES, st));
}

static double bytes_of(const problem *p)
{
    double y = (double)p->M * p->N * (p->acc ? 8 : 2);
    return (double)p->N * p->K * 2 + (double)p->M * p->K * 2 + y;
}

// y after one launch from a fixed starting y, as floats
static void run_once(problem *p, float *out)
{
    int64_t n = (int64_t)p->M * p->N;
    size_t ysz = p->acc ? 4 : 2;
    void *h = malloc(ysz * n);
    for (int64_t i = 0; i < n; i++) {
        if (p->acc) ((float *)h)[i] = (float)(i % 7) * 0.01f;
        else ((__nv_bfloat16 *)h)[i] = __float2bfloat16(0.0f);
    }
    CUDA_CHECK(cudaMemcpy(p->y, h, ysz * n, cudaMemcpyHostToDevice));
    p->next = 0;
    launch(p);
    CUDA_CHECK(cudaMemcpy(h, p->y, ysz * n, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++)
        out[i] = p->acc ? ((float *)h)[i] : __bfloat162float(((__nv_bfloat16 *)h)[i]);
    free(h);
}

static double rel_l2(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) num += (double)(a[i] - b[i]) * (a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

static int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t what)
{
    int v = 0;
    size_t got;
    cublasLtMatmulAlgoConfigGetAttribute(a, what, &v, sizeof v, &got);
    return v;
}

// Median ms of one launch of p, timed as a CUDA graph of GRAPH_LAUNCHES (so that the host's cost
// of a cuBLAS call, which at a few rows can exceed the kernel's, is not what is timed; the engine
// replays its decode steps as graphs too).
#define GRAPH_LAUNCHES 20
static void launch_graph(void *ctx) { CUDA_CHECK(cudaGraphLaunch(*(cudaGraphExec_t *)ctx, st)); }

static double time_graph(problem *p)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < GRAPH_LAUNCHES; i++) launch(p);
    CUDA_CHECK(cudaStreamEndCapture(st, &g));
    CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    const double t = time_ms(launch_graph, &ge, st) / GRAPH_LAUNCHES;
    CUDA_CHECK(cudaGraphExecDestroy(ge));
    CUDA_CHECK(cudaGraphDestroy(g));
    return t;
}

// Times one problem under the default and every candidate: one table row.
static void measure(problem *p, double copy_gbs)
{
    int64_t n = (int64_t)p->M * p->N;
    float *ref = (float *)malloc(sizeof *ref * n), *got = (float *)malloc(sizeof *got * n);
    p->algo = NULL;
    run_once(p, ref);
    const double t_def = time_graph(p);

    // candidates: the heuristic's list, each as offered and with split-K 2..16 where valid
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    size_t wsb = WS_BYTES;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t heur[MAX_ALGOS];
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->lc, p->lc, pref, MAX_ALGOS, heur, &found));
    cublasLtMatmulPreferenceDestroy(pref);

    double best = 1e30, first = 0;
    int best_i = -1, best_split = 0, tried = 0, bad = 0;
    cublasLtMatmulAlgo_t best_algo;
    for (int i = 0; i < found; i++) {
        static const int splits[] = {0, 2, 4, 8, 16};
        for (unsigned s = 0; s < (i < SPLIT_ALGOS ? sizeof splits / sizeof *splits : 1); s++) {
            cublasLtMatmulAlgo_t a = heur[i].algo;
            if (splits[s]) {
                if (algo_attr(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) == splits[s]) continue;
                int k = splits[s];
                if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &k, sizeof k))
                    continue;
            }
            cublasLtMatmulHeuristicResult_t chk;
            if (cublasLtMatmulAlgoCheck(lt, p->op, p->la, p->lb, p->lc, p->lc, &a, &chk) != CUBLAS_STATUS_SUCCESS ||
                chk.workspaceSize > WS_BYTES)
                continue;
            p->algo = &a;
            run_once(p, got);
            tried++;
            if (rel_l2(got, ref, n) > 1e-2) { // a split-K that sums in bf16, say: not the engine's numbers
                bad++;
                continue;
            }
            const double t = time_graph(p);
            if (i == 0 && !splits[s]) first = t;
            if (t < best) best = t, best_i = i, best_split = algo_attr(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), best_algo = a;
        }
    }
    p->algo = NULL;
    const double gb = bytes_of(p) / 1e6;
    printf("| %-7s | %4d | %5d x %5d | %7.4f (%3.0f%%) | %7.4f (%3.0f%%) | %7.4f (%3.0f%%) | %2d: tile %d, split %d, %d stages | %2d/%2d/%d | %5.2f |\n",
           p->name, p->M, p->N, p->K, t_def, 100 * gb / t_def / copy_gbs, first, first > 0 ? 100 * gb / first / copy_gbs : 0,
           best, 100 * gb / best / copy_gbs, best_i, best_i >= 0 ? algo_attr(&best_algo, CUBLASLT_ALGO_CONFIG_TILE_ID) : -1,
           best_split, best_i >= 0 ? algo_attr(&best_algo, CUBLASLT_ALGO_CONFIG_STAGES_ID) : -1, found, tried, bad,
           t_def / best);
    free(ref);
    free(got);
}

static void problem_open(problem *p, const char *name, int M, int N, int K, int acc, __nv_bfloat16 *w,
                         int copies, __nv_bfloat16 *x, void *y)
{
    memset(p, 0, sizeof *p);
    p->name = name, p->M = M, p->N = N, p->K = K, p->acc = acc, p->w = w, p->copies = copies, p->x = x, p->y = y;
    LT(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, K, N, K));
    LT(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, K, M, K));
    LT(cublasLtMatrixLayoutCreate(&p->lc, acc ? CUDA_R_32F : CUDA_R_16BF, N, M, N));
}

static void problem_close(problem *p)
{
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->op);
}

int main(int argc, char **argv)
{
    const char *model = argc > 1 ? argv[1] : "llama-2-7b";
    int h, I, qkv;
    if (!strcmp(model, "llama-2-7b")) h = 4096, I = 11008, qkv = 3 * 4096;
    else if (!strcmp(model, "llama-3-8b")) h = 4096, I = 14336, qkv = 4096 + 2 * 1024;
    else if (!strcmp(model, "llama-2-13b")) h = 5120, I = 13824, qkv = 3 * 5120;
    else {
        fprintf(stderr, "gemm_algos: unknown model '%s' (llama-2-7b, llama-3-8b, llama-2-13b)\n", model);
        return 2;
    }
    CUDA_CHECK(cudaStreamCreate(&st));
    LT(cublasCreate(&blas));
    LT(cublasSetStream(blas, st));
    CUDA_CHECK(cudaMalloc(&ws, WS_BYTES));
    LT(cublasSetWorkspace(blas, ws, WS_BYTES));
    LT(cublasLtCreate(&lt));
    const double copy_gbs = lab_copy_gbs(st);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %s: copy ceiling %.0f GB/s; ms (share of the copy ceiling)\n\n", prop.name, model, copy_gbs);
    printf("| GEMM    | rows | N     x K     | default (GemmEx)  | heuristic's first | best candidate    | best: index, config | offered/tried/wrong | default / best |\n");
    printf("|---|---:|---|---:|---:|---:|---|---|---:|\n");

    struct { const char *name; int N, K, acc; } ops[] = {
        {"qkv", qkv, h, 0}, {"o", h, h, 1}, {"gate_up", 2 * I, h, 0}, {"down", h, I, 1}};
    const int rows[] = {4, 8, 16, 32, 64, 128, 256};
    const int max_m = 256;
    __nv_bfloat16 *x;
    void *y;
    CUDA_CHECK(cudaMalloc(&x, sizeof(__nv_bfloat16) * max_m * I));
    CUDA_CHECK(cudaMalloc(&y, sizeof(float) * max_m * 2 * I));
    fill_bf16(x, (int64_t)max_m * I, 7);
    for (unsigned o = 0; o < sizeof ops / sizeof *ops; o++) {
        const int64_t wbytes = (int64_t)ops[o].N * ops[o].K * 2;
        const int copies = (int)((POOL_BYTES + wbytes - 1) / wbytes);
        __nv_bfloat16 *w;
        CUDA_CHECK(cudaMalloc(&w, wbytes * copies));
        fill_bf16(w, (int64_t)ops[o].N * ops[o].K, 11);
        for (int c = 1; c < copies; c++)
            CUDA_CHECK(cudaMemcpy(w + (int64_t)c * ops[o].N * ops[o].K, w, wbytes, cudaMemcpyDeviceToDevice));
        for (unsigned r = 0; r < sizeof rows / sizeof *rows; r++) {
            problem p;
            problem_open(&p, ops[o].name, rows[r], ops[o].N, ops[o].K, ops[o].acc, w, copies, x, y);
            measure(&p, copy_gbs);
            problem_close(&p);
        }
        CUDA_CHECK(cudaFree(w));
    }
    return 0;
}
