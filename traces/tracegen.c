/*
 * tracegen.c: synthetic arrivals and lengths (see tracegen.h for the model and the draw order).
 *
 * Invariants: every random draw comes from g->rng, in the documented order; now_ns never
 * decreases; every length is in [1, max_len]. The lengths file is the only thing held in memory
 * in proportion to an input (it is a distribution, tens of thousands of rows, not a trace).
 */
#include "traces/tracegen.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/csv_reader.h"
#include "traces/trace.h"

typedef struct len_pair {
    int32_t prompt_tokens, output_tokens;
} len_pair;

struct tracegen {
    tracegen_options opt;
    gsl_rng *rng;
    len_pair *lengths;     /* (num_lengths) rows of the lengths file */
    size_t num_lengths;
    double lognormal_mu_in, lognormal_mu_out; /* ln-space means giving the requested means */
    double priority_cdf[TRACEGEN_MAX_PRIORITY_CLASSES];
    int64_t emitted;       /* requests generated so far */
    int64_t now_ns;        /* exact (unrounded) arrival time of the last request */
};

static const char *const dist_names[] = {
    [TRACEGEN_LEN_FIXED] = "fixed",
    [TRACEGEN_LEN_UNIFORM] = "uniform",
    [TRACEGEN_LEN_LOGNORMAL] = "lognormal",
    [TRACEGEN_LEN_FILE] = "file",
};

const char *tracegen_length_dist_name(tracegen_length_dist d)
{
    return (size_t)d < ARRAY_LEN(dist_names) ? dist_names[d] : "unknown";
}

int tracegen_length_dist_parse(const char *name, tracegen_length_dist *out)
{
    for (size_t i = 0; i < ARRAY_LEN(dist_names); i++)
        if (!strcmp(name, dist_names[i])) {
            *out = (tracegen_length_dist)i;
            return 0;
        }
    return -1;
}

tracegen_options tracegen_options_default(void)
{
    return (tracegen_options){
        .num_requests = 1000,
        .rate_per_s = 1.0,
        .burstiness = 1.0,
        .input_len = 1024,
        .output_len = 128,
        .length_dist = TRACEGEN_LEN_FIXED,
        .range_ratio = 0.0,
        .lognormal_sigma = 1.0,
        .lengths_file = NULL,
        .max_len = TRACE_MAX_TOKENS,
        .num_priority_classes = 0,
        .num_clients = 0,
        .seed = 0,
    };
}

/* ---- lengths file --------------------------------------------------------------------------- */

/* Reads the num_prefill_tokens and num_decode_tokens columns (found by name; other columns are
 * ignored) of a ShareGPT/arXiv-style CSV. */
static int load_lengths(tracegen *g, const char *path, terr *e)
{
    enum { PREFILL, DECODE, NUM_COLS };
    static const char *const want[NUM_COLS] = {"num_prefill_tokens", "num_decode_tokens"};
    csv_reader rd;
    if (csv_reader_open(&rd, path, want, NUM_COLS, e)) {
        if (strstr(e->msg, "missing column"))
            snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                     " (a lengths file needs num_prefill_tokens,num_decode_tokens)");
        return -1;
    }
    size_t cap = 0;
    int r, rc = -1;
    while ((r = csv_reader_next(&rd, e)) == 1) {
        int32_t v[NUM_COLS];
        for (int k = 0; k < NUM_COLS; k++) {
            int64_t x;
            if (csv_reader_i64(&rd, k, &x, NULL) || x < 1 || x > TRACE_MAX_TOKENS) {
                terr_set(e, "%s:%lld: %s \"%s\" is not an integer in [1, %d]", path, (long long)csv_reader_line(&rd),
                         want[k], csv_reader_text(&rd, k), TRACE_MAX_TOKENS);
                goto done;
            }
            v[k] = (int32_t)x;
        }
        grow_array((void **)&g->lengths, sizeof *g->lengths, &cap, g->num_lengths + 1);
        g->lengths[g->num_lengths++] = (len_pair){v[PREFILL], v[DECODE]};
    }
    if (r < 0) goto done;
    if (g->num_lengths == 0) {
        terr_set(e, "%s:1: header only, no rows", path);
        goto done;
    }
    rc = 0;
done:
    csv_reader_close(&rd);
    return rc;
}

/* ---- setup ---------------------------------------------------------------------------------- */

static int check_options(const tracegen_options *o, terr *e)
{
    if (o->num_requests < 1) return terr_set(e, "--num-requests must be >= 1");
    if (!(o->rate_per_s > 0)) return terr_set(e, "--rate must be > 0 (or inf)");
    /* Keeps the int64 ns clock far from overflow whatever the Gamma tail does. */
    if (isfinite(o->rate_per_s) && (double)o->num_requests / o->rate_per_s > 1e8)
        return terr_set(e, "--rate %g is too low for %lld requests (the trace would last over "
                           "1e8 s)", o->rate_per_s, (long long)o->num_requests);
    /* Outside this range the Gamma draws degenerate (all gaps ~0, or one gap holding the
     * whole trace) and GSL's sampler slows down; CV = 1/sqrt(B) spans 0.03 to 32 already. */
    if (!(o->burstiness >= 1e-3 && o->burstiness <= 1e3))
        return terr_set(e, "--burstiness must be in [0.001, 1000]");
    if (o->input_len < 1 || o->input_len > TRACE_MAX_TOKENS)
        return terr_set(e, "--input-len must be in [1, %d]", TRACE_MAX_TOKENS);
    if (o->output_len < 1 || o->output_len > TRACE_MAX_TOKENS)
        return terr_set(e, "--output-len must be in [1, %d]", TRACE_MAX_TOKENS);
    if (o->max_len < 1 || o->max_len > TRACE_MAX_TOKENS)
        return terr_set(e, "--max-len must be in [1, %d]", TRACE_MAX_TOKENS);
    if ((size_t)o->length_dist >= ARRAY_LEN(dist_names))
        return terr_set(e, "--length-dist is not one of fixed|uniform|lognormal|file");
    if (!(o->range_ratio >= 0 && o->range_ratio < 1))
        return terr_set(e, "--range-ratio must be in [0, 1)");
    if (!(o->lognormal_sigma >= 0) || o->lognormal_sigma > 10)
        return terr_set(e, "--lognormal-sigma must be in [0, 10]");
    if ((o->length_dist == TRACEGEN_LEN_FILE) != (o->lengths_file != NULL))
        return terr_set(e, o->lengths_file ? "--lengths-file needs --length-dist file"
                                           : "--length-dist file needs --lengths-file");
    if (o->num_priority_classes < 0 || o->num_priority_classes > TRACEGEN_MAX_PRIORITY_CLASSES)
        return terr_set(e, "--priority-classes: 1 to %d classes", TRACEGEN_MAX_PRIORITY_CLASSES);
    double sum = 0;
    for (int i = 0; i < o->num_priority_classes; i++) {
        double f = o->priority_fraction[i];
        if (!(f >= 0 && f <= 1))
            return terr_set(e, "--priority-classes: fraction %d (%g) is not in [0, 1]", i, f);
        sum += f;
    }
    if (o->num_priority_classes > 0 && fabs(sum - 1) > 1e-6)
        return terr_set(e, "--priority-classes: fractions sum to %.9g, not 1", sum);
    if (o->num_clients < 0) return terr_set(e, "--num-clients must be >= 0");
    return 0;
}

int tracegen_open(tracegen **out, const tracegen_options *o, terr *e)
{
    *out = NULL;
    if (check_options(o, e)) return -1;
    tracegen *g = xcalloc(1, sizeof *g);
    g->opt = *o;
    g->opt.lengths_file = NULL; /* not owned; only needed while loading */
    if (o->length_dist == TRACEGEN_LEN_FILE && load_lengths(g, o->lengths_file, e)) {
        tracegen_close(g);
        return -1;
    }
    /* E[lognormal(mu, s)] = exp(mu + s^2/2): pick mu so the mean is the requested length. */
    double s2 = o->lognormal_sigma * o->lognormal_sigma;
    g->lognormal_mu_in = log((double)o->input_len) - s2 / 2;
    g->lognormal_mu_out = log((double)o->output_len) - s2 / 2;
    double c = 0;
    for (int i = 0; i < o->num_priority_classes; i++) g->priority_cdf[i] = c += o->priority_fraction[i];
    g->rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(g->rng, (unsigned long)o->seed);
    *out = g;
    return 0;
}

void tracegen_close(tracegen *g)
{
    if (!g) return;
    if (g->rng) gsl_rng_free(g->rng);
    free(g->lengths);
    free(g);
}

size_t tracegen_num_lengths(const tracegen *g) { return g->num_lengths; }

/* ---- drawing -------------------------------------------------------------------------------- */

static int32_t clamp_len(const tracegen *g, double x)
{
    /* Clamp in double first: a lognormal tail can exceed any integer type. */
    if (!(x >= 1)) return 1;
    if (x > g->opt.max_len) return g->opt.max_len;
    return (int32_t)llround(x);
}

static int32_t draw_len(tracegen *g, int32_t len, double lognormal_mu)
{
    switch (g->opt.length_dist) {
    case TRACEGEN_LEN_UNIFORM: {
        /* vLLM's random dataset: randint(max(int(len*(1-F)), 1), int(len*(1+F)) + 1). */
        int64_t lo = (int64_t)floor(len * (1 - g->opt.range_ratio));
        int64_t hi = (int64_t)floor(len * (1 + g->opt.range_ratio));
        if (lo < 1) lo = 1;
        if (hi < lo) hi = lo;
        return clamp_len(g, (double)(lo + (int64_t)gsl_rng_uniform_int(g->rng,
                                                                      (unsigned long)(hi - lo + 1))));
    }
    case TRACEGEN_LEN_LOGNORMAL:
        return clamp_len(g, gsl_ran_lognormal(g->rng, lognormal_mu, g->opt.lognormal_sigma));
    case TRACEGEN_LEN_FIXED:
    case TRACEGEN_LEN_FILE:
        break;
    }
    return clamp_len(g, len);
}

static int gen_next(void *self, arrival *out, terr *e)
{
    tracegen *g = self;
    const tracegen_options *o = &g->opt;
    if (g->emitted >= o->num_requests) return 0;
    if (g->emitted > 0 && !isinf(o->rate_per_s)) {
        double gap_s = gsl_ran_gamma(g->rng, o->burstiness, 1.0 / (o->rate_per_s * o->burstiness));
        double next_ns = (double)g->now_ns + gap_s * 1e9;
        if (!(gap_s >= 0) || next_ns > 4e18)
            return terr_set(e, "--rate %g is too low: arrival times overflow", o->rate_per_s);
        g->now_ns += llround(gap_s * 1e9);
    }
    if (o->length_dist == TRACEGEN_LEN_FILE) {
        size_t i = gsl_rng_uniform_int(g->rng, g->num_lengths);
        out->prompt_tokens = clamp_len(g, g->lengths[i].prompt_tokens);
        out->output_tokens = clamp_len(g, g->lengths[i].output_tokens);
    } else {
        out->prompt_tokens = draw_len(g, o->input_len, g->lognormal_mu_in);
        out->output_tokens = draw_len(g, o->output_len, g->lognormal_mu_out);
    }
    out->priority = 0;
    if (o->num_priority_classes > 0) {
        double u = gsl_rng_uniform(g->rng);
        int cls = o->num_priority_classes - 1;
        while (cls > 0 && o->priority_fraction[cls] == 0) cls--; /* if rounding leaves u >= sum */
        for (int i = 0; i < o->num_priority_classes; i++)
            if (u < g->priority_cdf[i]) {
                cls = i;
                break;
            }
        out->priority = cls;
    }
    out->client_id =
        o->num_clients > 0 ? (int32_t)gsl_rng_uniform_int(g->rng, (unsigned long)o->num_clients) : 0;
    out->arrival_ns = (g->now_ns + 500) / 1000 * 1000; /* the CSV's microsecond resolution */
    out->num_hashes = 0;
    out->hashes = NULL;
    out->line = 0;
    g->emitted++;
    return 1;
}

arrival_source tracegen_source(tracegen *g) { return (arrival_source){gen_next, g}; }

int tracegen_write_csv(tracegen *g, FILE *f, terr *e)
{
    const tracegen_options *o = &g->opt;
    fprintf(f, "arrival_s,prompt_tokens,output_tokens%s%s\n",
            o->num_priority_classes > 0 ? ",priority" : "", o->num_clients > 0 ? ",client" : "");
    arrival a;
    int r;
    while ((r = gen_next(g, &a, e)) == 1) {
        int64_t us = a.arrival_ns / 1000;
        fprintf(f, "%lld.%06lld,%d,%d", (long long)(us / 1000000), (long long)(us % 1000000),
                a.prompt_tokens, a.output_tokens);
        if (o->num_priority_classes > 0) fprintf(f, ",%d", a.priority);
        if (o->num_clients > 0) fprintf(f, ",%d", a.client_id);
        fputc('\n', f);
    }
    if (r < 0) return -1;
    if (fflush(f) || ferror(f)) return terr_set(e, "write error");
    return 0;
}
