/*
 * test_engine_gpu.c: the CUDA engine against the CPU engine (cpu_round_bf16: bf16 where the GPU
 * rounds), whole models on steps that take every path of the CUDA backend's dispatch
 * (engine/cuda_backend.c): steps of more than 8 rows (cuBLAS GEMMs and the separate norm, RoPE
 * and SiLU kernels) with logits of every row (cuBLAS LM head) or of a few (the weight-streaming
 * LM head), decode steps of 2-8 rows (five fused kernels a layer), decode steps of one sequence
 * (the persistent decode kernel, where it runs the model), in CUDA graphs and without; and
 * `tandem generate` on both backends. The kernels one by one: test_kernels_gpu.c. Without a GPU
 * it prints why and passes (CI), unless TANDEM_REQUIRE_GPU=1 (`make test-gpu`).
 */
#include "testutil_gpu.h"

#if TANDEM_HAVE_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "testutil.h"

static int open_engine_opts(engine *eng, const char *model, const char *backend, bool graphs, int32_t host_blocks,
                            bool kernel_trace)
{
    engine_opts o;
    engine_opts_default(&o);
    o.model = model;
    o.backend = backend;
    o.weight_seed = 99;
    o.block_size = 16;
    o.num_blocks = 64;
    o.max_tokens = 128;
    o.max_seqs = 64;
    o.max_model_len = 256;
    o.cpu_round_bf16 = true;
    o.cuda_graphs = graphs;
    o.num_host_blocks = host_blocks;
    o.kernel_trace = kernel_trace;
    terr e = {{0}};
    int rc = engine_open(eng, &o, &e);
    ck_assert_msg(rc == 0, "engine_open(%s, %s): %s", model, backend, e.msg);
    return rc;
}

static int open_engine(engine *eng, const char *model, const char *backend, bool graphs)
{
    return open_engine_opts(eng, model, backend, graphs, 0, false);
}

enum { SCRIPT_STEPS = 8 };

/* Steps over three sequences with shuffled blocks: prefills (every row's logits), then a step
 * mixing a prefill chunk, a decode and a fresh prompt (every row's), then a chunk and a decode
 * (only the last row's of each), then pure decodes of all three (captured as a graph, then
 * replayed) and of one alone. The logits go into out (rows x V), in order; returns the row
 * count. per_step (SCRIPT_STEPS, or NULL) gets each step's kernel time (a traced engine): each
 * step is a window on the engine's meter, settled once at the end, as `tandem run` does. */
static int32_t run_script(engine *eng, const int32_t *perm, float *out, ktrace_step *per_step)
{
    enum { STEPS = SCRIPT_STEPS, MAX_LEN = 80 };
    int32_t V = eng->mc.vocab_size, S = 16, bs = 16;
    int32_t seq[3][MAX_LEN];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < MAX_LEN; i++) seq[s][i] = (i * 31 + s * 7 + 3) % V;
    int32_t bt[3 * 16];
    for (int i = 0; i < 48; i++) bt[i] = perm[i];
    /* (ctx, n) of each sequence; last: logits of each sequence's last row only */
    static const struct { int32_t rows[3][2]; bool last; } steps[STEPS] = {
        {{{0, 40}, {0, 9}, {0, 0}}, false},   /* A prefills 40, B prefills 9 (T = 49) */
        {{{40, 13}, {9, 1}, {0, 6}}, false},  /* A chunk, B decodes, C prefills (T = 20) */
        {{{53, 9}, {10, 1}, {0, 0}}, true},   /* A chunk, B decodes (T = 10, 2 logits rows) */
        {{{62, 1}, {11, 1}, {6, 1}}, false},  /* pure decode (captured as a graph) */
        {{{63, 1}, {12, 1}, {7, 1}}, false},  /* pure decode (replayed) */
        {{{64, 1}, {13, 1}, {8, 1}}, false},
        {{{65, 1}, {0, 0}, {0, 0}}, false},   /* one sequence: the persistent kernel (a graph) */
        {{{66, 1}, {0, 0}, {0, 0}}, false},
    };
    int32_t total = 0;
    ktrace_meter *meter = per_step ? engine_kernel_meter(eng) : NULL;
    if (per_step) ck_assert_msg(meter, "a traced engine without a kernel meter");
    for (int st = 0; st < STEPS; st++) {
        int32_t T = 0, B = 0, N = 0, qsl[4] = {0}, lens[3], toks[128], pos[128], slots[128], rows[128], bts[48];
        for (int s = 0; s < 3; s++) {
            int32_t ctx = steps[st].rows[s][0], n = steps[st].rows[s][1];
            if (!n) continue;
            for (int i = 0; i < n; i++, T++) {
                int32_t p = ctx + i;
                toks[T] = seq[s][p], pos[T] = p;
                slots[T] = bt[s * S + p / bs] * bs + p % bs;
                if (!steps[st].last || i == n - 1) rows[N++] = T;
            }
            memcpy(bts + B * S, bt + s * S, sizeof(int32_t) * (size_t)S);
            lens[B] = ctx + n;
            qsl[++B] = T;
        }
        eng_step s = {.num_tokens = T, .num_seqs = B, .token_ids = toks, .positions = pos,
                      .slot_mapping = slots, .query_start_loc = qsl, .seq_lens = lens,
                      .block_tables = bts, .block_table_stride = S, .num_logits = N,
                      .logits_rows = rows};
        terr e = {{0}};
        if (meter) ktrace_meter_begin(meter);
        ck_assert_msg(engine_forward(eng, &s, &e) == 0, "step %d: %s", st, e.msg);
        ck_assert_msg(engine_logits(eng, out + (int64_t)total * V, &e) == 0, "%s", e.msg); /* synced */
        if (meter) { /* a traced step samples too, as `run`'s do, so the trace sees the sampler */
            float temp[128], top_p[128], u[128];
            int32_t picked[128];
            for (int i = 0; i < N; i++) temp[i] = i % 2 ? 0.8f : 0, top_p[i] = 0.9f, u[i] = 0.5f;
            eng_sampling sp = {.temperature = temp, .top_p = top_p, .uniform = u};
            ck_assert_msg(engine_sample(eng, &sp, picked, &e) == 0, "step %d: %s", st, e.msg);
            ktrace_meter_end(meter);
        }
        total += N;
    }
    if (meter) { /* without a forced flush the steps settle late, if at all: then every one */
        const ktrace_step *k;
        size_t n;
        int settled = 0;
        terr e = {{0}};
        ck_assert_msg(ktrace_meter_settle(meter, false, &k, &n, &e) == 0, "%s", e.msg);
        for (size_t i = 0; i < n; i++) per_step[settled++] = k[i];
        ck_assert_msg(ktrace_meter_settle(meter, true, &k, &n, &e) == 0, "%s", e.msg);
        for (size_t i = 0; i < n; i++) per_step[settled++] = k[i];
        ck_assert_msg(settled == STEPS, "%d of %d steps settled", settled, STEPS);
        ktrace_counts c = ktrace_meter_counts(meter);
        printf("  kernel trace: %lld records lost, %lld outside the steps, %lld of the warm-up\n",
               (long long)c.lost, (long long)c.outside, (long long)c.warmup);
        ck_assert_msg(c.lost == 0 && c.outside == 0, "%lld kernel records lost, %lld outside every step",
                      (long long)c.lost, (long long)c.outside);
    }
    return total;
}

static void check_model(const char *model)
{
    gsl_rng *r = rng_for(model);
    int32_t perm[64];
    shuffle_ids(r, perm, 64);
    engine cpu, gpu, gpu_plain;
    open_engine(&cpu, model, "cpu", false);
    open_engine(&gpu, model, "cuda", true);
    int32_t V = cpu.mc.vocab_size;
    float *lc = xmalloc(4 * (size_t)128 * V), *lg = xmalloc(4 * (size_t)128 * V);
    float *lp = xmalloc(4 * (size_t)128 * V);
    int32_t rows = run_script(&cpu, perm, lc, NULL);
    for (int64_t i = 0; i < (int64_t)rows * V; i++) lg[i] = NAN;
    run_script(&gpu, perm, lg, NULL);
    char what[128];
    snprintf(what, sizeof what, "model %s: logits, GPU vs CPU (bf16-rounding twin)", model);
    expect_close(what, lg, lc, (int64_t)rows * V, 2e-2, 8e-2);
    int agree = 0;
    for (int32_t i = 0; i < rows; i++)
        agree += sample_argmax(lg + (int64_t)i * V, V) == sample_argmax(lc + (int64_t)i * V, V);
    printf("  %s: greedy argmax agrees on %d of %d rows\n", model, agree, rows);
    ck_assert_msg(agree >= rows * 9 / 10, "%s: argmax agrees on only %d of %d rows", model, agree, rows);

    /* Graphs change scheduling, not arithmetic: bitwise-equal logits. */
    open_engine(&gpu_plain, model, "cuda", false);
    run_script(&gpu_plain, perm, lp, NULL);
    ck_assert_msg(memcmp(lp, lg, 4 * (size_t)rows * V) == 0,
                  "%s: logits with CUDA graphs differ from plain launches", model);
    printf("  %s: graphs == plain launches, bitwise\n", model);
    engine_close(&gpu_plain);
    engine_close(&cpu), engine_close(&gpu);
    free(lc), free(lg), free(lp);
    gsl_rng_free(r);
}

START_TEST(model_gpu_matches_cpu_tiny)
{
    check_model("synthetic:tiny-llama2");
    check_model("synthetic:tiny-llama3");
}
END_TEST

START_TEST(model_gpu_matches_cpu_small)
{
    check_model("synthetic:small-llama3");
}
END_TEST

/* Pure-decode steps of one sequence (the persistent decode kernel), from a context shorter than
 * the grid (most blocks own no token) to ~1000 tokens (several ring slots of KV per block), in
 * shuffled blocks, in a graph and without, against the same decodes run by five fused kernels a
 * layer, which the tests above tie to the CPU: the reference engine decodes a second, short
 * sequence in the same steps. Only attention's summation order differs. */
/* stream_seqs: engine_opts' (0: no persistent decode kernel, the five kernels a layer). */
static void open_big(engine *eng, const char *model, bool graphs, int32_t stream_seqs)
{
    engine_opts o;
    engine_opts_default(&o);
    o.model = model;
    o.backend = "cuda";
    o.weight_seed = 7;
    o.block_size = 16;
    o.num_blocks = 320;
    o.max_tokens = 1024;
    o.max_seqs = 8;
    o.max_model_len = 1024;
    o.cuda_graphs = graphs;
    o.stream_seqs = stream_seqs;
    terr e = {{0}};
    ck_assert_msg(engine_open(eng, &o, &e) == 0, "engine_open(%s): %s", model, e.msg);
}

/* pair: the persistent engines decode both sequences (the kernel at M = 2), else sequence 0 alone. */
static void check_persistent(const char *model, bool pair)
{
    enum { BS = 16, S = 64, COMPANION = 5 }; /* 64 blocks (1024 tokens) per sequence */
    gsl_rng *r = rng_for("persistent");
    int32_t perm[320];
    shuffle_ids(r, perm, 320);
    engine engs[3]; /* the five-kernel reference, persistent in a graph, persistent without */
    open_big(&engs[0], model, true, 0);
    open_big(&engs[1], model, true, -1);
    open_big(&engs[2], model, false, -1);
    int32_t V = engs[0].mc.vocab_size;
    float *lr = xmalloc(4 * (size_t)2 * V), *lp = xmalloc(4 * (size_t)2 * V);
    static const int32_t lens[] = {17, 260, 1000};
    int32_t *toks = xmalloc(sizeof(int32_t) * 1024 * 3);
    int32_t *pos = toks + 1024, *slots = pos + 1024;
    for (int k = 0; k < (int)ARRAY_LEN(lens); k++) {
        /* Sequence 0 prefills len - 3 tokens alone (the same GEMMs in every engine), then
         * decodes three; in the reference engine (and in every engine, pair) sequence 1
         * prefills COMPANION tokens first and decodes beside it. */
        for (int32_t step = -2; step < 3; step++) {
            for (int g = 0; g < 3; g++) {
                if (step == -2 && g > 0 && !pair) continue;
                int32_t T = 0, n_seq = 0, qsl[3] = {0}, seq_lens[2], rows[2], tables[2 * S];
                const int32_t b0 = step == -2 ? 1 : 0, b1 = step == -1 || (g > 0 && !pair) ? 1 : 2;
                for (int32_t b = b0; b < b1; b++) {
                    int32_t len = b == 0 ? lens[k] : COMPANION + 3;
                    int32_t ctx = step < 0 ? 0 : len - 3 + step, n = step < 0 ? len - 3 : 1;
                    for (int32_t i = 0; i < n; i++, T++) {
                        int32_t p = ctx + i;
                        toks[T] = (p * 7 + b * 131 + 5) % V, pos[T] = p;
                        slots[T] = perm[b * S + p / BS] * BS + p % BS;
                    }
                    memcpy(tables + n_seq * S, perm + b * S, sizeof(int32_t) * S);
                    rows[n_seq] = T - 1;
                    seq_lens[n_seq] = ctx + n;
                    qsl[++n_seq] = T;
                }
                eng_step s = {.num_tokens = T, .num_seqs = n_seq, .token_ids = toks, .positions = pos,
                              .slot_mapping = slots, .query_start_loc = qsl, .seq_lens = seq_lens,
                              .block_tables = tables, .block_table_stride = S, .num_logits = n_seq,
                              .logits_rows = rows};
                terr e = {{0}};
                ck_assert_msg(engine_forward(&engs[g], &s, &e) == 0, "%s len %d: %s", model, lens[k], e.msg);
                if (step >= 0) ck_assert_msg(engine_logits(&engs[g], g == 0 ? lr : lp, &e) == 0, "%s", e.msg);
                if (step < 0 || g == 0) continue;
                char what[256];
                snprintf(what, sizeof what, "%s: persistent decode of %d (%s) vs five kernels, len %d, step %d",
                         model, n_seq, g == 1 ? "graph" : "no graph", lens[k], step);
                expect_close(what, lp, lr, (int64_t)n_seq * V, 1e-2, 5e-2);
                for (int32_t b = 0; b < n_seq; b++) { /* same greedy token, or a near-tie in lr */
                    const float *p = lp + (int64_t)b * V, *q = lr + (int64_t)b * V;
                    int32_t ax = sample_argmax(p, V), ay = sample_argmax(q, V);
                    ck_assert_msg(ax == ay || q[ay] - q[ax] < 2e-2f * fabsf(q[ay]) + 1e-3f,
                                  "%s, sequence %d: picks %d (%g) instead of %d (%g)", what, b, ax, q[ax], ay, q[ay]);
                }
            }
        }
    }
    for (int g = 0; g < 3; g++) engine_close(&engs[g]);
    free(lr), free(lp), free(toks);
    gsl_rng_free(r);
}

START_TEST(persistent_decode_matches_fused)
{
    for (int pair = 0; pair < 2; pair++) {
        check_persistent("synthetic:small-llama3", pair); /* hd 128, GQA 4:1 */
        check_persistent("synthetic:small-llama2", pair); /* hd 64, MHA */
    }
}
END_TEST

START_TEST(cli_generate_cuda_matches_cpu)
{
    char *dir = make_temp_dir("gpu-cli"), dg[4096], dc[4096];
    snprintf(dg, sizeof dg, "%s/gpu.bin", dir);
    snprintf(dc, sizeof dc, "%s/cpu.bin", dir);
    cli_result g = run_cli("generate", "--model", "synthetic:tiny-llama3", "--backend", "cuda",
                           "--prompt-ids", "1,2,3,4,5,6,7,8,9,10", "--max-tokens", "24", "--ignore-eos",
                           "--dump-logits", dg, NULL);
    cli_result c = run_cli("generate", "--model", "synthetic:tiny-llama3", "--backend", "cpu",
                           "--cpu-bf16", "--prompt-ids", "1,2,3,4,5,6,7,8,9,10", "--max-tokens", "24",
                           "--ignore-eos", "--dump-logits", dc, NULL);
    ck_assert_msg(g.exit_code == 0, "cuda exit %d: %s", g.exit_code, g.err);
    ck_assert_msg(c.exit_code == 0, "cpu exit %d: %s", c.exit_code, c.err);
    printf("  generate cuda: %s  generate cpu: %s", g.out, c.out);
    size_t ng, nc;
    char *bg = slurp(dg, &ng), *bc = slurp(dc, &nc);
    ck_assert_msg(ng == nc && ng == 24 * 384 * 4, "dump sizes %zu, %zu", ng, nc);
    /* Compare the rows up to the first token where the two runs diverge (after that they see
     * different inputs). */
    int32_t same = 0;
    const char *pg = g.out, *pc = c.out;
    while (same < 24 && strtol(pg, NULL, 10) == strtol(pc, NULL, 10)) {
        same++;
        pg = strchr(pg, ','), pc = strchr(pc, ',');
        if (!pg || !pc) break;
        pg++, pc++;
    }
    int32_t rows = same < 24 ? same + 1 : 24;
    expect_close("generate --dump-logits cuda vs cpu --cpu-bf16", (float *)bg, (float *)bc,
                 (int64_t)rows * 384, 2e-2, 8e-2);
    printf("  greedy tokens agree for %d of 24 steps\n", same);
    if (same < 24) { /* a divergence must be a near-tie in the CPU's logits */
        const float *row = (const float *)bc + (int64_t)same * 384;
        int32_t tg = (int32_t)strtol(pg, NULL, 10), tc = (int32_t)strtol(pc, NULL, 10);
        double ss = 0;
        for (int i = 0; i < 384; i++) ss += (double)row[i] * row[i];
        double gap = row[tc] - row[tg], rms = sqrt(ss / 384);
        printf("  step %d: gpu %d, cpu %d, cpu logit gap %.3g (row rms %.3g)\n", same, tg, tc, gap, rms);
        ck_assert_msg(gap <= 2e-2 * rms, "tokens diverge at step %d without a near-tie", same);
    }
    cli_result_free(&g), cli_result_free(&c);
    free(bg), free(bc), free(dir);
}
END_TEST

/* Greedy tokens of `tandem run` on the CUDA engine over dir/t.csv, with a flag or two (NULL:
 * none), sorted by request. */
static char *cuda_run_tokens(const char *dir, const char *name, const char *flag, const char *flag2)
{
    char trace[4200], out[4200], cmd[8600];
    snprintf(trace, sizeof trace, "%s/t.csv", dir);
    snprintf(out, sizeof out, "%s/%s", dir, name);
    cli_result r = run_cli("run", "--trace", trace, "--model", "synthetic:tiny-llama3", "--backend", "cuda",
                           "--max-num-seqs", "8", "--max-model-len", "256", "--max-num-batched-tokens", "96",
                           "--num-gpu-blocks-override", "24", "--tokens", "--quiet", "--out", out, flag, flag2, NULL);
    ck_assert_msg(r.exit_code == 0, "run %s: %s", name, r.err);
    cli_result_free(&r);
    snprintf(cmd, sizeof cmd, "sort %s/tokens.csv > %s/tokens.sorted", out, out);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/tokens.sorted", out);
    return slurp(cmd, NULL);
}

/* Scheduling ahead on the GPU: each decode's last token goes from the sampler to the next step's
 * embedding on the device (in CUDA graphs and without), and the greedy tokens are those of the
 * loop that waits for every step; chunked prefills and preemptions included. */
START_TEST(async_scheduling_keeps_cuda_tokens)
{
    char *dir = make_temp_dir("gpu-async"), trace[4200];
    snprintf(trace, sizeof trace, "%s/t.csv", dir);
    cli_result r = run_cli("trace", "gen", "--num-requests", "16", "--rate", "inf", "--length-dist", "uniform",
                           "--input-len", "60", "--output-len", "40", "--range-ratio", "0.5", "--seed", "5", "--out",
                           trace, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    char *sync = cuda_run_tokens(dir, "sync", NULL, NULL);
    const char *variants[][3] = {{"async", "--async-scheduling", NULL},
                                 {"async-eager", "--async-scheduling", "--no-cuda-graphs"}};
    for (size_t i = 0; i < 2; i++) {
        char *t = cuda_run_tokens(dir, variants[i][0], variants[i][1], variants[i][2]);
        ck_assert_msg(strcmp(t, sync) == 0, "%s: greedy tokens differ from the waiting loop's:\n%s\nwaiting:\n%s",
                      variants[i][0], t, sync);
        free(t);
    }
    free(sync);
    rm_tree(dir);
}
END_TEST

/* One sequence of 40 tokens (drawn by `salt`) in blocks `bt`: prefill (when asked), then the
 * decode of token 40; its logits into out. */
static void decode_40(engine *eng, const int32_t *bt, int salt, bool prefill, float *out)
{
    int32_t V = eng->mc.vocab_size, toks[41], pos[41], slots[41], bs = 16;
    for (int32_t p = 0; p <= 40; p++)
        toks[p] = (p * 31 + 3 + salt * 17) % V, pos[p] = p, slots[p] = bt[p / bs] * bs + p % bs;
    terr e = {{0}};
    int32_t qsl[2] = {0, 40}, len = 40, row = 39;
    eng_step s = {.num_tokens = 40, .num_seqs = 1, .token_ids = toks, .positions = pos, .slot_mapping = slots,
                  .query_start_loc = qsl, .seq_lens = &len, .block_tables = bt, .block_table_stride = 3,
                  .num_logits = 1, .logits_rows = &row};
    if (prefill) ck_assert_msg(engine_forward(eng, &s, &e) == 0, "%s", e.msg);
    qsl[1] = 1, len = 41, row = 0;
    s.num_tokens = 1, s.token_ids = toks + 40, s.positions = pos + 40, s.slot_mapping = slots + 40;
    ck_assert_msg(engine_forward(eng, &s, &e) == 0, "%s", e.msg);
    ck_assert_msg(engine_logits(eng, out, &e) == 0, "%s", e.msg);
    (void)V;
}

/* A sequence swapped out to the host pool and back into other blocks decodes to the very same
 * logits: the copies move every layer's K and V, in order, before the step that reads them. */
START_TEST(swap_round_trip_keeps_logits)
{
    engine eng;
    open_engine_opts(&eng, "synthetic:tiny-llama2", "cuda", true, 8, false);
    int32_t V = eng.mc.vocab_size;
    float *before = malloc(sizeof(float) * (size_t)V), *after = malloc(sizeof(float) * (size_t)V);
    int32_t a[3] = {3, 7, 11}, host[3] = {5, 0, 2}, b[3] = {20, 21, 9};
    decode_40(&eng, a, 0, true, before);
    terr e = {{0}};
    /* out; then another sequence overwrites the freed blocks at once (its forward pass must wait
     * for the copy out); then in, to blocks never written */
    ck_assert_msg(engine_swap(&eng, true, 3, a, host, &e) == 0, "%s", e.msg);
    decode_40(&eng, a, 1, true, after);
    ck_assert_msg(memcmp(before, after, sizeof(float) * (size_t)V) != 0, "another sequence, the same logits?");
    ck_assert_msg(engine_swap(&eng, false, 3, b, host, &e) == 0, "%s", e.msg);
    decode_40(&eng, b, 0, false, after);
    ck_assert_msg(memcmp(before, after, sizeof(float) * (size_t)V) == 0, "logits changed across a swap");
    free(before), free(after);
    engine_close(&eng);
}
END_TEST

/* The kernel trace behind `tandem run`'s kernel_us and kernel_busy: every step has its own
 * kernels (attributed by time to the step's window), none lost or outside every step; busy time
 * (their union) is within the kernels summed and, over the run, within the wall time; every
 * kernel's name tells its kind (none is "other"), and the kinds sum to the kernels; and kernels
 * that CUDA graphs replay are traced: the script reports as many kernels with graphs (steps 3-7
 * replayed) as without (within 10%: a graph's padding rows may change a launch or two). */
START_TEST(kernel_trace_times_every_step_graphs_included)
{
    gsl_rng *r = rng_for("kernel_trace");
    int32_t perm[64];
    shuffle_ids(r, perm, 64);
    float *logits = xmalloc(4 * (size_t)128 * 32000);
    int64_t kernels[2] = {0, 0};
    for (int graphs = 0; graphs < 2; graphs++) {
        engine eng;
        open_engine_opts(&eng, "synthetic:tiny-llama2", "cuda", graphs, 0, true);
        ck_assert_msg(engine_traces_kernels(&eng), "opened with kernel_trace, the engine does not trace");
        ktrace_step st[SCRIPT_STEPS];
        int64_t t0 = clock_mono_ns();
        run_script(&eng, perm, logits, st);
        int64_t wall = clock_mono_ns() - t0, busy = 0, by_kind[KERNEL_NUM_KINDS] = {0};
        engine_close(&eng);
        for (int i = 0; i < SCRIPT_STEPS; i++) {
            printf("  kernel trace, graphs %s, step %d: %d kernels, %.1f us summed, %.1f us busy\n",
                   graphs ? "on" : "off", i, st[i].kernels, st[i].kernel_ns / 1e3, st[i].busy_ns / 1e3);
            ck_assert_msg(st[i].step == i && st[i].kernels > 0, "step %d (settled as %lld): %d kernels", i,
                          (long long)st[i].step, st[i].kernels);
            ck_assert_msg(st[i].busy_ns > 0 && st[i].busy_ns <= st[i].kernel_ns, "step %d: busy %lld ns, summed %lld",
                          i, (long long)st[i].busy_ns, (long long)st[i].kernel_ns);
            busy += st[i].busy_ns, kernels[graphs] += st[i].kernels;
            int64_t kinds = 0;
            for (int k = 0; k < KERNEL_NUM_KINDS; k++) kinds += st[i].kind_ns[k], by_kind[k] += st[i].kind_ns[k];
            ck_assert_msg(kinds == st[i].kernel_ns, "step %d: kinds sum to %lld ns, the kernels to %lld", i,
                          (long long)kinds, (long long)st[i].kernel_ns);
        }
        printf("  kernel trace, graphs %s, by kind (us):", graphs ? "on" : "off");
        for (int k = 0; k < KERNEL_NUM_KINDS; k++) printf(" %s %.1f", kernel_kind_names[k], by_kind[k] / 1e3);
        printf("\n");
        ck_assert_msg(by_kind[KERNEL_GEMM] > 0 && by_kind[KERNEL_ATTENTION] > 0 && by_kind[KERNEL_ELEMENTWISE] > 0 &&
                          by_kind[KERNEL_SAMPLING] > 0,
                      "no GEMM, attention, element-wise or sampling time: kernel names not recognised");
        ck_assert_msg(by_kind[KERNEL_OTHER] == 0,
                      "%.1f us of kernels of no known kind: engine/kernel_trace.c's rules miss a name "
                      "(`bench_engine_gpu profile` lists the kernels by name)", by_kind[KERNEL_OTHER] / 1e3);
        ck_assert_msg(busy <= wall, "kernels busy %lld ns in a script of %lld ns", (long long)busy, (long long)wall);
    }
    ck_assert_msg(kernels[1] * 10 >= kernels[0] * 9 && kernels[1] * 10 <= kernels[0] * 11,
                  "%lld kernels traced with graphs, %lld without: are replayed kernels missing?",
                  (long long)kernels[1], (long long)kernels[0]);
    free(logits);
    gsl_rng_free(r);
}
END_TEST

/* `tandem profile --kernel-trace` writes the kernel table beside the profile: a row a point, the
 * kinds summing to the kernel time (one timed step, so its figures are that step's) and none of
 * it of no known kind; and the heat probe's line after the grid, its steps beside. */
START_TEST(profile_kernel_table_splits_each_point_by_kind)
{
    char *dir = make_temp_dir("gpu-profile"), prof[4200], table[4200];
    snprintf(prof, sizeof prof, "%s/p.csv", dir);
    snprintf(table, sizeof table, "%s/p.kernels.csv", dir);
    cli_result r = run_cli("profile", "--model", "synthetic:tiny-llama2", "--backend", "cuda", "--kernel-trace",
                           "--max-num-seqs", "4", "--max-model-len", "256", "--max-num-batched-tokens", "256",
                           "--num-gpu-blocks-override", "256", /* a cache any GPU holds */
                           "--repeats", "1", "--warmup", "1", "--settle-ms", "0", "--out", prof, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "profile --kernel-trace: exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    char *p = slurp(prof, NULL), *t = slurp(table, NULL);
    ck_assert_msg(p && strstr(p, "# kernel_trace: on\n"), "the profile does not say the trace was on");
    ck_assert_msg(strstr(p, "\n# heat: alpha ") && strstr(p, " prefills of "),
                  "no heat probe after the grid:\n%.3000s", p);
    ck_assert_msg(t, "no %s", table);
    char heat_table[4200];
    snprintf(heat_table, sizeof heat_table, "%s/p.heat.csv", dir);
    char *h = slurp(heat_table, NULL);
    ck_assert_msg(h && strstr(h, "\nphase,start_ms,ms,heat,load\nprefill,") && strstr(h, "\ndecode,"),
                  "the heat probe's steps are not in %s:\n%.500s", heat_table, h ? h : "");
    free(h);
    int points = 0, rows = 0;
    for (char *c = strstr(p, "\nkind,"); c && (c = strchr(c + 1, '\n'));) points += c[1] && c[1] != '#';
    for (char *line = strstr(t, "\nkind,") + 1; (line = strchr(line, '\n')) && line[1]; rows++) {
        line++;
        /* kind,num_prefill_seqs,num_decode_seqs,prefill_tokens,decode_tokens,padding_tokens,decode_keys,
         * max_keys,median_ms,kernel_ms,kernel_busy,gemm,attention,fused,elementwise,sampling,other,gap */
        double v[10];
        int n = sscanf(line, "%*[^,],%*d,%*d,%*d,%*d,%*d,%*d,%*d,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &v[0], &v[1],
                       &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
        ck_assert_msg(n == 10, "a kernel table row that does not parse: %.200s", line);
        double kinds = v[3] + v[4] + v[5] + v[6] + v[7] + v[8];
        ck_assert_msg(fabs(kinds - v[1]) <= 1e-3 + 1e-3 * v[1], "kinds sum to %.4f ms, the kernels to %.4f: %.200s",
                      kinds, v[1], line);
        ck_assert_msg(v[8] == 0, "%.4f ms of kernels of no known kind: %.200s", v[8], line);
        ck_assert_msg(v[1] > 0 && v[1] <= v[0] * 1.5 && v[2] > 0 && v[2] <= 1, "kernel %.4f ms, busy %.4f, step %.4f",
                      v[1], v[2], v[0]);
    }
    ck_assert_msg(rows == points && rows > 10, "%d kernel table rows for %d profile points", rows, points);
    free(p), free(t);
    rm_tree(dir);
}
END_TEST

static TCase *engine_tests(void)
{
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, model_gpu_matches_cpu_tiny);
    tcase_add_test(tc, model_gpu_matches_cpu_small);
    tcase_add_test(tc, persistent_decode_matches_fused);
    tcase_add_test(tc, cli_generate_cuda_matches_cpu);
    tcase_add_test(tc, async_scheduling_keeps_cuda_tokens);
    tcase_add_test(tc, swap_round_trip_keeps_logits);
    tcase_add_test(tc, kernel_trace_times_every_step_graphs_included);
    tcase_add_test(tc, profile_kernel_table_splits_each_point_by_kind);
    return tc;
}

int main(void) { return gpu_run_tests("test_engine_gpu", engine_tests); }

#else /* built without CUDA */
int main(void) { return gpu_run_tests("test_engine_gpu", NULL); }
#endif
