/*
 * profile_cmd.c: `tandem profile`: the engine's step time measured over a grid of step shapes
 * that covers what a scheduler produces, written as a profile file that the simulator's
 * `profile` cost model (sim/profile_model.h) learns from.
 *
 * The grid, within the run's budgets (--max-num-seqs, --max-num-batched-tokens, --max-model-len)
 * and the KV cache the engine gets (sized exactly as `tandem run` sizes it):
 *   prefill   one prompt of 16 .. max_num_batched_tokens tokens from scratch; chunks of 512 and
 *             2048 after 1024 and 4096 cached tokens; 2, 4 and 8 prompts of 256 tokens, 4 and 16
 *             of 512;
 *   decode    1 .. max_num_seqs sequences (1, 2, 3, 4, 6, 8, 12, 16, ... 1.5x apart) at contexts
 *             128 .. 8192 (doubling, and max_model_len - 1 where that is less), every sequence at
 *             the same context; 8, 32 and 128 sequences of which half are at 128 tokens and
 *             half at 4096 (uneven contexts); 8, 32, 128 and 256 sequences at 1024 tokens but
 *             one at 4096 (skewed, as a server's batches are);
 *   mixed     1, 8, 32, 128 or 256 decodes at 1024 tokens beside one prefill chunk of 16 .. 2048
 *             tokens, and beside as many prompts of 512 as the token budget holds (an offline
 *             batch's steps);
 *   padded    static batching's: 1 prompt of 16 padded to 256 or 2048 rows; 2 of 32 padded to
 *             128 each, 4 of 128, 8 of 64 and 16 of 256 to 512 each; 1 of 256 padded to 4093, 2
 *             of 256 and 2 of 1024 to 4094 each (a chat batch's: a long member's length, rarely
 *             a round one, sets the rows); 1 and 4 decodes at 1024 beside padding rows to 8;
 *             1, 4, 16 and 32 to 64; 8 to 256.
 * (Contexts shrink to fit a short max_model_len.) On the GPU, a heat probe follows the grid
 * (heat_probe below); its steps go to FILE less .csv plus .heat.csv (phase, start_ms since the
 * probe began, ms, the heat before the step at the fitted memory, and the step's load).
 * Each point is a batch of made-up requests whose block tables come from a block manager over
 * the engine's own KV cache, handed to the same executor `tandem run` uses (CUDA graphs and
 * all; the free blocks shuffled first, as a running server's are), `--warmup` times untimed and
 * `--repeats` times timed, in each of `--passes` passes over the whole grid; the file keeps the
 * median, the 10th and 90th percentiles, min and max of all of a point's timed steps (`repeats`
 * = passes x repeats). On a busy CPU a burst of another process's work slows whatever runs
 * during it: in one pass, a run of neighbouring points, all their steps; over passes, one
 * pass of each, which the median leaves out. A GPU point runs untimed for --settle-ms first, so that
 * it is timed at the clocks a stream of such steps runs at. The context's KV is whatever the cache
 * holds: values, since the CUDA engine opens with its cache filled (reading zeros draws less
 * power, and ran large decodes 1.5-3.5% and mixed steps up to 8% faster).
 *
 * Output (--out FILE, complete or absent: core/util.h out_atomic): `#` lines of provenance
 * (model, GPU row, device and driver as nvidia-smi reports them, backend, options, tandem's
 * version, date, the command), then CSV, one row per point:
 *   kind,num_prefill_seqs,num_decode_seqs,num_emitting,prefill_tokens,decode_tokens,
 *   padding_tokens,prefill_pairs2,prefill_keys,decode_keys,decode_keys_sq,max_keys,repeats,
 *   median_ms,p10_ms,p90_ms,min_ms,max_ms
 * The shape columns are core/batch.h's step_shape, as steps.csv writes them.
 *
 * With --kernel-trace (cuda), FILE less .csv plus .kernels.csv gets each point's kernel time by
 * kind (core/executor.h's kernel_kind), the busy fraction and the gap, medians over the timed
 * steps: where a step's time goes. The trace slows the steps it times (decode ~16%), so the
 * header says it was on, and the profile the cost model learns from is measured without it.
 *
 * `--from-runs DIR,...` is another mode, with flags of its own: the profile made from measured
 * serving runs' steps instead of a grid measured now (cli/profile_runs.h).
 */
#include <assert.h>
#include <errno.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/profile_runs.h"
#include "cli/serving.h"
#include "cli/version.h"
#include "core/heat.h"
#include "core/kv.h"
#include "core/stats.h"
#include "engine/engine_executor.h"
#include "sim/profile_model.h"

/* How long a GPU point runs untimed before it is timed. The board's clocks follow its power
 * draw with a lag of a few hundred ms, and a serving engine runs steps back to back: a point
 * timed from a cold start runs at clocks a server does not see (an H200's SM clock moves between
 * 1410 and 1980 MHz at its 700 W cap). Against the fidelity workloads served on the same H200
 * (experiments/fidelity.sh), a profile settled 300 ms re-predicts the offline workload's steps
 * with a bias of -2.8% (-4.5% unsettled) and Azure code's mixed steps with -5% (-12%). */
#define GPU_SETTLE_MS 300

typedef struct profile_options {
    serving_options serving;
    engine_flags engine;
    int64_t repeats, warmup, settle_ms, passes;
    bool force_gpu;
    char *profile_out;
} profile_options;

#define O(f) offsetof(profile_options, f)
static const opt_spec profile_own_specs[] = {
    {"out", OPT_STR, O(profile_out), "", "profile file to write (required)"},
    {"repeats", OPT_I64, O(repeats), "5", "timed steps per grid point"},
    {"warmup", OPT_I64, O(warmup), "2", "untimed steps per grid point before them"},
    {"passes", OPT_I64, O(passes), "1",
     "times the whole grid is measured, each point's warmup and repeats in every pass; its row is over all "
     "passes' timed steps (a busy CPU's burst then spoils one pass of a point, not all its steps)"},
    {"settle-ms", OPT_I64, O(settle_ms), "-1",
     "and untimed steps until this much step time has passed (-1: 300 on the cuda backend, 0 on cpu)"},
    {"force-gpu", OPT_BOOL, O(force_gpu), "false",
     "cuda: write the profile even when the device is not the GPU that --gpu names (the header records both)"},
    OPT_END,
};
#undef O

static const opt_spec *profile_option_specs(void)
{
    static opt_spec *table;
    static size_t n;
    static const char *const serving_keep[] = {"model", "block-size", "max-num-seqs", "max-num-batched-tokens",
                                               "max-model-len", "gpu-memory-utilization", "num-gpu-blocks-override",
                                               "quiet", NULL};
    static const char *const engine_keep[] = {"backend", "weight-seed", "cuda-graphs", "kernel-trace", NULL};
    if (!table) {
        opts_pick(&table, &n, serving_option_specs(), offsetof(profile_options, serving), serving_keep);
        opts_join(&table, &n, engine_gpu_specs, offsetof(profile_options, serving), NULL);
        opts_pick(&table, &n, engine_flag_specs, offsetof(profile_options, engine), engine_keep);
        opts_join(&table, &n, profile_own_specs, 0, NULL);
    }
    return table;
}

/* One grid point: n_prefill prompt chunks of `chunk` tokens after `chunk_ctx` cached ones, and
 * decodes: n_short at ctx_short and n_long at ctx_long cached tokens. */
typedef struct grid_point {
    const char *kind;
    int32_t n_prefill, chunk, chunk_ctx;
    int32_t n_short, ctx_short, n_long, ctx_long;
    int32_t pad; /* padding rows (static batching) */
} grid_point;

typedef struct grid {
    grid_point *p;
    size_t n, cap;
    int32_t max_seqs, max_tokens, max_len, block_size;
    int64_t num_blocks;
} grid;

static int64_t blocks_for(const grid *g, int64_t tokens) { return (tokens + g->block_size - 1) / g->block_size; }

/* Adds p if it fits the budgets and the KV cache. */
static void grid_add(grid *g, grid_point p)
{
    /* a static batch's members: beside decodes, the padding rows are its finished members */
    int32_t seqs = p.n_prefill + p.n_short + p.n_long + (p.n_prefill ? 0 : p.pad);
    int64_t tokens = (int64_t)p.n_prefill * p.chunk + p.n_short + p.n_long + p.pad;
    int64_t blocks = p.n_prefill * blocks_for(g, (int64_t)p.chunk_ctx + p.chunk) +
                     p.n_short * blocks_for(g, (int64_t)p.ctx_short + 1) + p.n_long * blocks_for(g, (int64_t)p.ctx_long + 1);
    int32_t longest = max_i32(p.n_prefill ? p.chunk_ctx + p.chunk : 0, max_i32(p.n_short ? p.ctx_short + 1 : 0,
                                                                              p.n_long ? p.ctx_long + 1 : 0));
    /* a padded prompt's length is its batch's longest prompt, which the model's length bounds */
    int32_t padded_len = p.n_prefill && p.pad ? p.chunk + p.pad / p.n_prefill : 0;
    if (seqs < 1 || seqs > g->max_seqs || tokens > g->max_tokens || longest > g->max_len || padded_len > g->max_len ||
        blocks > g->num_blocks)
        return;
    grow_array((void **)&g->p, sizeof *g->p, &g->cap, g->n + 1);
    g->p[g->n++] = p;
}

static void grid_build(grid *g)
{
    static const int32_t chunks[] = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
    for (size_t i = 0; i < ARRAY_LEN(chunks); i++)
        grid_add(g, (grid_point){.kind = "prefill", .n_prefill = 1, .chunk = chunks[i]});
    static const int32_t later[][2] = {{512, 1024}, {2048, 1024}, {512, 4096}, {2048, 4096}};
    for (size_t i = 0; i < ARRAY_LEN(later); i++)
        grid_add(g, (grid_point){.kind = "prefill", .n_prefill = 1, .chunk = later[i][0], .chunk_ctx = later[i][1]});
    for (int32_t k = 2; k <= 8; k *= 2) grid_add(g, (grid_point){.kind = "prefill", .n_prefill = k, .chunk = 256});
    for (int32_t k = 4; k <= 16; k *= 4) grid_add(g, (grid_point){.kind = "prefill", .n_prefill = k, .chunk = 512});

    static const int32_t seqs[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
    /* contexts 128, 256, ... below max_model_len, and the longest a decode can have */
    int32_t longest = g->max_len - 1;
    for (int32_t ctx = 128, last = 0; last < longest; ctx *= 2) {
        last = min_i32(ctx, longest);
        for (size_t i = 0; i < ARRAY_LEN(seqs) && seqs[i] < g->max_seqs; i++)
            grid_add(g, (grid_point){.kind = "decode", .n_short = seqs[i], .ctx_short = last});
        grid_add(g, (grid_point){.kind = "decode", .n_short = g->max_seqs, .ctx_short = last});
        if (ctx >= 8192) break;
    }
    int32_t short_ctx = min_i32(128, g->max_len / 4), long_ctx = min_i32(4096, longest);
    int32_t mixed_ctx = min_i32(1024, g->max_len / 2);
    static const int32_t uneven[] = {8, 32, 128};
    for (size_t i = 0; i < ARRAY_LEN(uneven); i++)
        grid_add(g, (grid_point){.kind = "decode", .n_short = uneven[i] / 2, .ctx_short = short_ctx,
                                 .n_long = uneven[i] / 2, .ctx_long = long_ctx});
    /* A serving batch's shape: one long context beside many typical ones (Azure chat's decode
     * steps of 33+ sequences: a mean context near 1,150, the longest near 4,100). The engine
     * sizes the attention grid by the longest, so most of its blocks find nothing to read; in
     * the even points the grid is at most twice the keys, and no fit can tell its cost from
     * theirs (Llama-3-8B's grid alone put chat's steps of 129+ decodes 12% short). */
    static const int32_t skewed[] = {8, 32, 128, 256};
    for (size_t i = 0; i < ARRAY_LEN(skewed); i++)
        grid_add(g, (grid_point){.kind = "decode", .n_short = skewed[i] - 1, .ctx_short = mixed_ctx, .n_long = 1,
                                 .ctx_long = long_ctx});

    static const int32_t mixed_dec[] = {1, 8, 32, 128, 256}, mixed_chunk[] = {16, 128, 512, 2048};
    for (size_t i = 0; i < ARRAY_LEN(mixed_dec); i++) {
        for (size_t j = 0; j < ARRAY_LEN(mixed_chunk); j++)
            grid_add(g, (grid_point){.kind = "mixed", .n_prefill = 1, .chunk = mixed_chunk[j], .n_short = mixed_dec[i],
                                     .ctx_short = mixed_ctx});
        /* an offline batch's step: prompts of 512 filling the token budget beside the decodes */
        int32_t prompts = (g->max_tokens - mixed_dec[i]) / 512;
        if (prompts >= 2)
            grid_add(g, (grid_point){.kind = "mixed", .n_prefill = prompts, .chunk = 512, .n_short = mixed_dec[i],
                                     .ctx_short = mixed_ctx});
    }
    /* Static batching's steps (policies/static.c): k prompts of n tokens padded to the batch's
     * longest, L; and B decodes beside the rows of the batch's finished members. Padding rows
     * are sequences of their own to the engine, and identical rows draw less power than real
     * ones: a static run's padded prefills take the time of a real prompt that size run cold
     * (docs/costmodel.md). A serving batch's L is its longest prompt, so its padded steps'
     * rows are rarely a round number, and there the GEMMs take another pace: two prompts padded
     * to 4,094 rows each ran 10% faster than to 4,096 on an H100, as static's own padded
     * prefills do, while sixteen real prompts of 511 (8,176 rows) gained 2% on sixteen of 512.
     * Hence the last three. */
    static const int32_t padded_prompts[][3] = {{1, 16, 256},  {2, 32, 128},   {1, 16, 2048},
                                                {4, 128, 512}, {8, 64, 512},   {16, 256, 512},
                                                {1, 256, 4093}, {2, 256, 4094}, {2, 1024, 4094}};
    for (size_t i = 0; i < ARRAY_LEN(padded_prompts); i++) {
        int32_t k = padded_prompts[i][0], n = padded_prompts[i][1], L = padded_prompts[i][2];
        grid_add(g, (grid_point){.kind = "prefill", .n_prefill = k, .chunk = n, .pad = k * (L - n)});
    }
    static const int32_t padded_decodes[][2] = {{1, 8}, {4, 8}, {1, 64}, {4, 64}, {16, 64}, {32, 64}, {8, 256}};
    for (size_t i = 0; i < ARRAY_LEN(padded_decodes); i++)
        grid_add(g, (grid_point){.kind = "decode", .n_short = padded_decodes[i][0], .ctx_short = mixed_ctx,
                                 .pad = padded_decodes[i][1] - padded_decodes[i][0]});
}

/* Puts the free blocks in a seeded random order, so the points' block tables are scattered over
 * the cache as a serving engine's become once requests have come and gone (a fresh manager hands
 * out consecutive ids, whose pages read faster than a server's ever do). */
static void scatter_free_blocks(kv_manager *kv, unsigned long seed)
{
    kv_block_table all = {0};
    bool ok = kv_allocate_table(kv, &all, kv->num_blocks);
    assert(ok);
    (void)ok;
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, seed);
    gsl_ran_shuffle(rng, all.ids, (size_t)all.len, sizeof *all.ids);
    gsl_rng_free(rng);
    kv_free_table(kv, &all);
    free(all.ids);
}

/* Sets r up as a request whose next `n` tokens after `ctx` cached ones are this step's: a
 * prompt chunk (decode false) or a decode (one token after a prompt of ctx). */
static int make_item(kv_manager *kv, request *r, int64_t id, int32_t ctx, int32_t n, bool decode, batch *b)
{
    request_reset(r);
    r->id = id;
    r->prompt_tokens = decode ? ctx : ctx + n;
    r->num_output_tokens = decode ? 1 : 0;
    r->max_output_tokens = 1 << 20;
    r->num_computed_tokens = ctx;
    if (!kv_allocate_slots(kv, r, (int64_t)ctx + n)) return -1;
    batch_add(b, r, n);
    return 0;
}

typedef struct measured {
    double median, p10, p90, min, max; /* ms */
    /* with the kernel trace: medians over the timed steps, in ms (busy: a fraction) */
    double kernel_ms, busy, kind_ms[KERNEL_NUM_KINDS], gap_ms;
} measured;

/* A point's steps, in order: each one's wall time, and the kernel times the executor reports for
 * them (some during the steps, the rest when settled). */
typedef struct kernel_log {
    int64_t *duration_ns;  /* (cap) */
    step_kernel_time *k;   /* (cap) */
    size_t n_dur, n, cap;
} kernel_log;

static void kernel_log_room(kernel_log *l, size_t need)
{
    if (need <= l->cap) return;
    while (l->cap < need) l->cap = l->cap ? 2 * l->cap : 64;
    l->duration_ns = xrealloc(l->duration_ns, l->cap * sizeof *l->duration_ns);
    l->k = xrealloc(l->k, l->cap * sizeof *l->k);
}

static void kernel_log_add(kernel_log *l, const step_kernel_time *k, int32_t n)
{
    kernel_log_room(l, l->n + (size_t)n);
    for (int32_t i = 0; i < n; i++) l->k[l->n++] = k[i];
}

/* One step through the executor, logged. */
static int run_step(executor ex, const batch *b, kernel_log *l, step_result *out, terr *e)
{
    if (ex.ops->execute(ex.self, b, out, e)) return -1;
    kernel_log_room(l, l->n_dur + 1);
    l->duration_ns[l->n_dur++] = out->duration_ns;
    kernel_log_add(l, out->kernel_times, out->num_kernel_times);
    return 0;
}

/* The medians of the last `repeats` steps' kernel figures into m (the executor settled every
 * step of the point first). */
static void kernel_medians(const kernel_log *l, int64_t repeats, measured *m)
{
    samples s[KERNEL_NUM_KINDS + 3] = {0};
    for (size_t i = l->n - (size_t)repeats; i < l->n; i++) {
        const step_kernel_time *k = &l->k[i];
        double dur = (double)l->duration_ns[i];
        samples_add(&s[0], (double)k->kernel_ns / 1e6);
        samples_add(&s[1], dur > 0 ? (double)k->busy_ns / dur : 0);
        samples_add(&s[2], fmax(0, dur - (double)k->busy_ns) / 1e6);
        for (int j = 0; j < KERNEL_NUM_KINDS; j++) samples_add(&s[3 + j], (double)k->kind_ns[j] / 1e6);
    }
    m->kernel_ms = samples_percentile(&s[0], 50), m->busy = samples_percentile(&s[1], 50);
    m->gap_ms = samples_percentile(&s[2], 50);
    for (int j = 0; j < KERNEL_NUM_KINDS; j++) m->kind_ms[j] = samples_percentile(&s[3 + j], 50);
    for (int j = 0; j < KERNEL_NUM_KINDS + 3; j++) samples_free(&s[j]);
}

/* p's batch into b, its requests reqs[0 .. *k - 1] holding their blocks of kv. */
static int point_build(kv_manager *kv, request *reqs, batch *b, const grid_point *p, int32_t *k, terr *e)
{
    batch_clear(b);
    int rc = 0;
    *k = 0;
    for (int32_t i = 0; i < p->n_short && !rc; i++, (*k)++) rc = make_item(kv, &reqs[*k], *k, p->ctx_short, 1, true, b);
    for (int32_t i = 0; i < p->n_long && !rc; i++, (*k)++) rc = make_item(kv, &reqs[*k], *k, p->ctx_long, 1, true, b);
    for (int32_t i = 0; i < p->n_prefill && !rc; i++, (*k)++)
        rc = make_item(kv, &reqs[*k], *k, p->chunk_ctx, p->chunk, false, b);
    b->num_padding_tokens = p->pad;
    return rc ? terr_set(e, "profile: the KV cache ran out building a %s point (a grid bug)", p->kind) : 0;
}

static void point_release(executor ex, kv_manager *kv, request *reqs, int32_t k)
{
    for (int32_t i = 0; i < k; i++) {
        if (ex.ops->release) ex.ops->release(ex.self, &reqs[i]);
        kv_free_request(kv, &reqs[i]);
    }
}

/* Builds p's batch, runs it warmup + repeats times, adds the timed steps' ms to s and their
 * statistics so far to m, and frees its blocks. With the kernel trace on, settles the point's
 * steps at its end (a forced flush, outside every timed step) and takes the timed steps' kernel
 * figures. */
static int measure(executor ex, kv_manager *kv, request *reqs, batch *b, const grid_point *p, int64_t warmup,
                   int64_t settle_ms, int64_t repeats, step_shape *shape, samples *sp, measured *m, terr *e)
{
    kernel_log log = {0};
    bool traced = ex.ops->measures_kernels && ex.ops->measures_kernels(ex.self);
    int32_t k;
    int rc = point_build(kv, reqs, b, p, &k, e);
    if (!rc) {
        *shape = batch_shape(b);
        samples *s = sp;
        int64_t settled_ns = 0;
        for (int64_t i = 0; (i < warmup || settled_ns < settle_ms * 1000000) && !rc; i++) {
            step_result out = {0};
            rc = run_step(ex, b, &log, &out, e);
            if (!rc) settled_ns += out.duration_ns;
        }
        for (int64_t i = 0; i < repeats && !rc; i++) {
            step_result out = {0};
            rc = run_step(ex, b, &log, &out, e);
            if (!rc) samples_add(s, (double)out.duration_ns / 1e6);
        }
        if (!rc) {
            *m = (measured){.median = samples_percentile(s, 50), .p10 = samples_percentile(s, 10),
                            .p90 = samples_percentile(s, 90), .min = samples_percentile(s, 0),
                            .max = samples_percentile(s, 100)};
        }
        if (!rc && traced) {
            const step_kernel_time *late;
            int32_t n;
            rc = ex.ops->settle(ex.self, &late, &n, e);
            if (!rc) kernel_log_add(&log, late, n);
            if (!rc && log.n != log.n_dur)
                rc = terr_set(e, "profile: %zu steps but %zu kernel times (the kernel trace lost steps)", log.n_dur,
                              log.n);
            if (!rc) kernel_medians(&log, repeats, m);
        }
    }
    point_release(ex, kv, reqs, k);
    free(log.k), free(log.duration_ns);
    return rc;
}

/* The heat probe (core/heat.h): how the engine's step time follows the GPU's recent load, which
 * the settled grid cannot show (each point is timed near the heat of its own load). After
 * HEAT_PROBE_COOL_MS idle, a long prefill runs back to back for HEAT_PROBE_RUN_MS, from cold to
 * hot, then a batch of decodes as long, from hot towards cold. The GPU's clocks answer within
 * tens of ms (an H100's decodes recover from 8.98 to 8.51 ms in their first seven steps, then
 * stay), so the slope of log(time) over heat - load (an intercept each: heat_slope) is fitted at
 * the memory of heat_probe_memories_ms that the probe's steps follow best. That slope is
 * heat_alpha: at the serving loop's 0.5 s memory, serving's rhythm of heavy steps among light
 * ones shows nearly all of it, while the probe's long phases spread the decodes' quick recovery
 * over seconds of heat and show a third (docs/costmodel.md, "The GPU's heat"). */
#define HEAT_PROBE_COOL_MS 2000
#define HEAT_PROBE_RUN_MS 1500
static const int64_t heat_probe_memories_ms[] = {10, 20, 30, 50, 100, 200, 500};

typedef struct heat_probe_result {
    grid_point p[2];    /* the heavy point, the light one */
    int64_t steps[2];
    double first_ms[2], last_ms[2];
    double alpha, spread, explained; /* at the memory that fits best */
    int64_t tau_ns;
    double alpha_serving;            /* the slope at HEAT_TAU_NS */
} heat_probe_result;

static int heat_probe(executor ex, kv_manager *kv, request *reqs, batch *b, const grid *g, const model_config *mc,
                      double peak_flops, FILE *steps_csv, heat_probe_result *res, terr *e)
{
    /* of the grid's points (warm, and within the budgets): the longest prompt alone, and the most
     * decodes up to 32 at the longest even context up to 1024 */
    *res = (heat_probe_result){0};
    for (size_t i = 0; i < g->n; i++) {
        const grid_point *p = &g->p[i], *h = &res->p[0], *l = &res->p[1];
        if (!strcmp(p->kind, "prefill") && p->n_prefill == 1 && !p->chunk_ctx && p->chunk > h->chunk) res->p[0] = *p;
        if (!strcmp(p->kind, "decode") && !p->n_long && p->n_short <= 32 && p->ctx_short <= 1024 &&
            (p->n_short > l->n_short || (p->n_short == l->n_short && p->ctx_short > l->ctx_short)))
            res->p[1] = *p;
    }
    if (!res->p[0].kind || !res->p[1].kind) return 0; /* no such points: nothing probed */
    size_t n = 0, cap = 0;
    heat_step *steps = NULL;
    struct timespec cool = {HEAT_PROBE_COOL_MS / 1000, (HEAT_PROBE_COOL_MS % 1000) * 1000000L};
    while (nanosleep(&cool, &cool) && errno == EINTR) {}
    int64_t origin = clock_mono_ns();
    int rc = 0;
    for (int32_t which = 0; which < 2 && !rc; which++) {
        int32_t k;
        if ((rc = point_build(kv, reqs, b, &res->p[which], &k, e))) break;
        step_shape shape = batch_shape(b);
        double flops = heat_flops(mc, &shape);
        int64_t begin = clock_mono_ns() - origin;
        for (int64_t now = begin; now - begin < HEAT_PROBE_RUN_MS * 1000000LL && !rc; now = clock_mono_ns() - origin) {
            step_result out = {0};
            if ((rc = ex.ops->execute(ex.self, b, &out, e))) break;
            double ms = (double)out.duration_ns / 1e6;
            grow_array((void **)&steps, sizeof *steps, &cap, n + 1);
            steps[n++] = (heat_step){.start_ns = now, .ns = out.duration_ns, .group = which, .log_ms = log(ms),
                                     .load = heat_load(flops, out.duration_ns, peak_flops)};
            if (!res->steps[which]++) res->first_ms[which] = ms;
            res->last_ms[which] = ms;
        }
        point_release(ex, kv, reqs, k);
    }
    if (!rc) {
        int64_t taus[ARRAY_LEN(heat_probe_memories_ms)], serving = HEAT_TAU_NS, tau;
        for (size_t i = 0; i < ARRAY_LEN(taus); i++) taus[i] = heat_probe_memories_ms[i] * 1000000;
        double spread, explained;
        res->alpha_serving = heat_fit_memory(steps, n, &serving, 1, &tau, &spread, &explained);
        res->alpha = heat_fit_memory(steps, n, taus, ARRAY_LEN(taus), &res->tau_ns, &res->spread, &res->explained);
        heat t = {0};
        for (size_t i = 0; i < n; i++) { /* written after the timing, which printing would disturb */
            const heat_step *s = &steps[i];
            fprintf(steps_csv, "%s,%.3f,%.4f,%.4f,%.4f\n", s->group ? "decode" : "prefill", (double)s->start_ns / 1e6,
                    exp(s->log_ms), heat_at_memory(&t, s->start_ns, res->tau_ns), s->load);
            heat_add_memory(&t, s->start_ns, s->ns, s->load, res->tau_ns);
        }
    }
    free(steps);
    return rc;
}

/* A table beside profile FILE: FILE less ".csv", then SUFFIX (".kernels.csv", ".heat.csv": names
 * the build does not take for a profile to embed). */
static void side_path(const char *profile, const char *suffix, char *buf, size_t size)
{
    size_t n = strlen(profile);
    if (n > 4 && !strcmp(profile + n - 4, ".csv")) n -= 4;
    snprintf(buf, size, "%.*s%s", (int)n, profile, suffix);
}

/* On the cuda backend, refuses (unless --force-gpu) a device that is not the --gpu row's chip: the
 * profile is labelled with that row, and `--cost-model auto` would predict that GPU with it. A
 * device nvidia-smi cannot name is let through (the header says "unknown"). device: engine_flags_device's. */
static int check_device(const profile_options *o, const serving_setup *su, const char *device_info, terr *e)
{
    char device[256];
    snprintf(device, sizeof device, "%.*s", (int)strcspn(device_info, ","), device_info); /* the name */
    if (strcmp(o->engine.backend, "cuda") || !strcmp(device, "unknown") || o->force_gpu ||
        gpu_names_device(su->gpu, device))
        return 0;
    return terr_set(e, "--gpu %s is an %s, but the CUDA device is an %s: name its row with --gpu (the rows are "
                       "listed under `tandem profile --help`), since `--cost-model auto` predicts the --gpu "
                       "row's GPU with this profile; or pass --force-gpu",
                    su->gpu->name, su->gpu->description, device);
}

static void write_header(FILE *f, const profile_options *o, const serving_setup *su, const char *device,
                         const engine *eng, const grid *g, int argc, char **argv)
{
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "# tandem profile 2\n");
    fprintf(f, "# model: %s\n", su->model.name);
    fprintf(f, "# model_spec: %s\n", o->serving.model);
    fprintf(f, "# gpu: %s\n", su->gpu->name);
    fprintf(f, "# device: %s\n", device);
    fprintf(f, "# backend: %s\n", eng->ops->name);
    fprintf(f, "# cuda_graphs: %s\n", o->engine.cuda_graphs ? "on" : "off");
    fprintf(f, "# kernel_trace: %s\n", engine_traces_kernels(eng) ? "on" : "off");
    fprintf(f, "# block_size: %d\n", su->sched.block_size);
    fprintf(f, "# num_gpu_blocks: %lld\n", (long long)g->num_blocks);
    fprintf(f, "# max_num_seqs: %d\n", g->max_seqs);
    fprintf(f, "# max_num_batched_tokens: %d\n", g->max_tokens);
    fprintf(f, "# max_model_len: %d\n", g->max_len);
    fprintf(f, "# weight_seed: %lld\n", (long long)o->engine.weight_seed);
    fprintf(f, "# repeats: %lld\n# warmup: %lld\n# settle_ms: %lld\n# passes: %lld\n", (long long)o->repeats,
            (long long)o->warmup, (long long)o->settle_ms, (long long)o->passes);
    fprintf(f, "# tandem: %s\n", tandem_version);
    fprintf(f, "# date: %s\n", date);
    fprintf(f, "# command: tandem");
    for (int i = 0; i < argc; i++) fprintf(f, " %s", argv[i]);
    fprintf(f, "\n%s\n", profile_columns_header);
}

static const char *usage_head =
    "usage: tandem profile --model DIR|synthetic:NAME --out FILE [--backend cuda|cpu] [options]\n\n"
    "Measures the engine's step time over a grid of prefill, decode and mixed steps within the\n"
    "budgets, exactly as `tandem run` takes steps, and writes a profile that\n"
    "`tandem sim --cost-model profile:FILE` predicts step times from.\n\n"
    "   or: tandem profile --from-runs DIR[,DIR...] [--base PROFILE] --out FILE\n\n"
    "calibrates one on measured serving runs instead (`tandem profile --from-runs --help`).";

/* The head and the GPU rows that --gpu names (a new string). */
static char *profile_usage(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) abort();
    fprintf(f, "%s\n\nGPUs (--gpu):\n", usage_head);
    gpu_list(f);
    fclose(f);
    if (len && text[len - 1] == '\n') text[len - 1] = 0; /* the options' list adds its own */
    return text;
}

int profile_main(int argc, char **argv)
{
    /* calibrated on measured runs instead of measured now: another mode, with flags of its own */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--from-runs") || !strncmp(argv[i], "--from-runs=", 12))
            return profile_from_runs_main(argc, argv);
    const opt_spec *specs = profile_option_specs();
    profile_options o = {0};
    serving_options_defaults(&o.serving);
    opts_defaults(specs, &o);
    terr e = {{0}};
    char *usage = profile_usage();
    int code = 2, rc = opts_parse(specs, &o, argc, argv, NULL, usage, &e);
    free(usage);
    engine eng = {0};
    bool opened = false;
    executor ex = {0};
    grid g = {0};
    kv_manager kv = {0};
    bool kv_ready = false;
    request *reqs = NULL;
    batch b = {0};
    samples *timed = NULL; /* (g.n): each point's timed steps over the passes, in ms */
    FILE *f = NULL, *kf = NULL, *hf = NULL;
    out_atomic out = {0}, kout = {0}, hout = {0};
    char kpath[4200] = "", hpath[4200] = "";
    if (rc == 1) {
        code = 0;
        goto done;
    }
    serving_setup su;
    char device[256];
    if (!rc) engine_flags_device(o.engine.backend, device, sizeof device);
    if (rc || engine_flags_pick_gpu(&o.engine, device, &o.serving, &e) ||
        serving_resolve_capacity(&o.serving, &su, &e))
        goto fail;
    if (!o.profile_out) {
        terr_set(&e, "--out FILE is required (see --help)");
        goto fail;
    }
    if (o.repeats < 1 || o.repeats > 1000) {
        terr_set(&e, "--repeats %lld: must be in [1, 1000]", (long long)o.repeats);
        goto fail;
    }
    if (o.warmup < 0 || o.warmup > 1000) {
        terr_set(&e, "--warmup %lld: must be in [0, 1000]", (long long)o.warmup);
        goto fail;
    }
    if (o.passes < 1 || o.passes > 100) {
        terr_set(&e, "--passes %lld: must be in [1, 100]", (long long)o.passes);
        goto fail;
    }
    if (o.passes > 1 && o.engine.kernel_trace) {
        terr_set(&e, "--passes %lld: the kernel trace takes one pass (its medians are of one point's steps in a row)",
                 (long long)o.passes);
        goto fail;
    }
    if (o.settle_ms < -1 || o.settle_ms > 60000) {
        terr_set(&e, "--settle-ms %lld: must be in [0, 60000], or -1 for the backend's default", (long long)o.settle_ms);
        goto fail;
    }
    if (check_device(&o, &su, device, &e)) goto fail;
    su.sched.max_num_seqs = (int32_t)o.serving.max_num_seqs;
    su.sched.max_num_batched_tokens = (int32_t)o.serving.max_num_batched_tokens;
    o.engine.padded_steps = true; /* the grid's padded points */
    if ((code = engine_flags_open(&o.engine, &o.serving, &su, &eng, &e))) goto fail;
    if (o.settle_ms < 0) o.settle_ms = strcmp(eng.ops->name, "cuda") ? 0 : GPU_SETTLE_MS;
    opened = true;
    code = 2;
    if (engine_executor_create(&ex, &eng, 0, 1, 0, &e)) goto fail;
    g = (grid){.max_seqs = su.sched.max_num_seqs, .max_tokens = su.sched.max_num_batched_tokens,
               .max_len = su.sched.max_model_len, .block_size = su.sched.block_size, .num_blocks = su.kv.num_blocks};
    grid_build(&g);
    if (g.n == 0) {
        terr_set(&e, "no grid point fits these budgets and %lld KV blocks", (long long)g.num_blocks);
        goto fail;
    }
    kv_init(&kv, (int32_t)su.kv.num_blocks, su.sched.block_size, false);
    kv_ready = true;
    scatter_free_blocks(&kv, 1);
    reqs = xcalloc((size_t)g.max_seqs + 1, sizeof *reqs);
    batch_init(&b, g.max_seqs + 1);
    if (out_atomic_open(&out, o.profile_out, "w", &e)) {
        code = 1;
        goto fail;
    }
    f = out.f;
    write_header(f, &o, &su, device, &eng, &g, argc, argv);
    if (ex.ops->measures_kernels && ex.ops->measures_kernels(ex.self)) {
        side_path(o.profile_out, ".kernels.csv", kpath, sizeof kpath);
        if (out_atomic_open(&kout, kpath, "w", &e)) {
            code = 1;
            goto fail;
        }
        kf = kout.f;
        fprintf(kf, "# tandem profile kernels 1\n# profile: %s\n# model: %s\n# gpu: %s\n", o.profile_out,
                su.model.name, su.gpu->name);
        fprintf(kf, "kind,num_prefill_seqs,num_decode_seqs,prefill_tokens,decode_tokens,padding_tokens,decode_keys,max_keys,"
                    "median_ms,kernel_ms,kernel_busy");
        for (int j = 0; j < KERNEL_NUM_KINDS; j++) fprintf(kf, ",%s_ms", kernel_kind_names[j]);
        fprintf(kf, ",gap_ms\n");
    }
    /* every pass over the whole grid, in the same order; a point's row is written after the last */
    timed = xcalloc(g.n ? g.n : 1, sizeof *timed);
    for (int64_t pass = 0; pass < o.passes; pass++)
        for (size_t i = 0; i < g.n; i++) {
            step_shape s = {0};
            measured m = {0};
            if (measure(ex, &kv, reqs, &b, &g.p[i], o.warmup, o.settle_ms, o.repeats, &s, &timed[i], &m, &e)) {
                code = 1;
                goto fail;
            }
            if (!o.serving.quiet && isatty(fileno(stderr)))
                fprintf(stderr, "\rprofile: pass %lld of %lld, %zu/%zu points", (long long)pass + 1,
                        (long long)o.passes, i + 1, g.n);
            if (pass < o.passes - 1) continue;
            fprintf(f, "%s,%d,%d,%d,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%d,%lld,%.4f,%.4f,%.4f,%.4f,%.4f\n",
                    g.p[i].kind, s.num_prefill_seqs, s.num_decode_seqs, s.num_emitting, (long long)s.prefill_tokens,
                    (long long)s.decode_tokens, (long long)s.padding_tokens, (long long)s.prefill_pairs2,
                    (long long)s.prefill_keys, (long long)s.decode_keys, (long long)s.decode_keys_sq, s.max_keys,
                    (long long)(o.passes * o.repeats), m.median, m.p10, m.p90, m.min, m.max);
            if (kf) {
                fprintf(kf, "%s,%d,%d,%lld,%lld,%lld,%lld,%d,%.4f,%.4f,%.4f", g.p[i].kind, s.num_prefill_seqs,
                        s.num_decode_seqs, (long long)s.prefill_tokens, (long long)s.decode_tokens,
                        (long long)s.padding_tokens, (long long)s.decode_keys, s.max_keys, m.median, m.kernel_ms,
                        m.busy);
                for (int j = 0; j < KERNEL_NUM_KINDS; j++) fprintf(kf, ",%.4f", m.kind_ms[j]);
                fprintf(kf, ",%.4f\n", m.gap_ms);
            }
        }
    if (!o.serving.quiet && isatty(fileno(stderr))) fprintf(stderr, "\n");
    if (!strcmp(eng.ops->name, "cuda")) {
        heat_probe_result hp;
        side_path(o.profile_out, ".heat.csv", hpath, sizeof hpath);
        if (out_atomic_open(&hout, hpath, "w", &e)) {
            code = 1;
            goto fail;
        }
        hf = hout.f;
        fprintf(hf, "# tandem profile heat 1\n# profile: %s\n# model: %s\n# gpu: %s\nphase,start_ms,ms,heat,load\n",
                o.profile_out, su.model.name, su.gpu->name);
        if (heat_probe(ex, &kv, reqs, &b, &g, &su.model, su.gpu->peak_bf16_flops, hf, &hp, &e)) {
            code = 1;
            goto fail;
        }
        if (hp.steps[0] && hp.steps[1]) {
            bool fits = hp.spread >= HEAT_MIN_SPREAD && fabs(hp.alpha) <= 1; /* else no clock's: unused */
            if (fits) fprintf(f, "# heat_alpha: %.4f\n", hp.alpha);
            fprintf(f, "# heat: alpha %.4f%s, the slope at a memory of %lld ms, which explains %.0f%% of the probe's "
                       "step times (%.4f at the model's %lld ms); probed after the grid: %d ms idle, then %lld prefills "
                       "of %d tokens (%.2f ms first, %.2f last), then %lld steps of %d decodes at %d tokens (%.2f ms "
                       "first, %.2f last); heat - load spreads %.3f\n",
                    hp.alpha, fits ? "" : " (not used: too little spread, or past [-1, 1])",
                    (long long)(hp.tau_ns / 1000000), 100 * hp.explained, hp.alpha_serving,
                    (long long)(HEAT_TAU_NS / 1000000), HEAT_PROBE_COOL_MS, (long long)hp.steps[0], hp.p[0].chunk,
                    hp.first_ms[0], hp.last_ms[0], (long long)hp.steps[1], hp.p[1].n_short, hp.p[1].ctx_short,
                    hp.first_ms[1], hp.last_ms[1], hp.spread);
        }
    }
    f = NULL;
    if (out_atomic_close(&out, true, &e)) {
        code = 1;
        goto fail;
    }
    kf = NULL;
    if (kpath[0] && out_atomic_close(&kout, true, &e)) {
        code = 1;
        goto fail;
    }
    hf = NULL;
    if (hpath[0] && out_atomic_close(&hout, true, &e)) {
        code = 1;
        goto fail;
    }
    if (!o.serving.quiet)
        printf("profile: %zu points of %s on the %s engine (%lld KV blocks) -> %s%s%s%s%s\n", g.n, su.model.name,
               eng.ops->name, (long long)g.num_blocks, o.profile_out, kpath[0] ? ", kernel time by kind -> " : "",
               kpath, hpath[0] ? ", the heat probe's steps -> " : "", hpath);
    code = 0;
    goto done;
fail:
    fprintf(stderr, "tandem profile: %s\n", e.msg);
    if (kf) out_atomic_close(&kout, false, NULL);
    if (hf) out_atomic_close(&hout, false, NULL);
    if (f) out_atomic_close(&out, false, NULL);
done:
    batch_free(&b);
    if (reqs)
        for (int32_t i = 0; i <= g.max_seqs; i++) request_free_buffers(&reqs[i]);
    free(reqs);
    if (kv_ready) kv_destroy(&kv);
    for (size_t i = 0; timed && i < g.n; i++) samples_free(&timed[i]);
    free(timed);
    free(g.p);
    if (ex.ops) ex.ops->destroy(ex.self);
    if (opened) engine_close(&eng);
    opts_free(specs, &o);
    serving_options_free(&o.serving);
    return code;
}
