/*
 * trace_gen_cmd.c: `tandem trace gen`, the command-line face of traces/tracegen.h.
 *
 * The flags are an option table like every command's; their defaults are the library's
 * (tracegen_options_default), written into the table's help at start-up so there is one source.
 * Values are checked here, each error naming its flag, before tracegen_open checks the
 * combination.
 *
 * Exit codes: 0 ok, 1 the output could not be written (it is then absent), 2 bad flags or bad
 * input files.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"
#include "core/options.h"
#include "traces/trace.h"
#include "traces/tracegen.h"

typedef struct gen_flags {
    int64_t num_requests, input_len, output_len, max_len, seed;
    double burstiness, range_ratio, lognormal_sigma;
    char *rate, *length_dist, *lengths_file, *priority_classes, *num_clients, *out;
} gen_flags;

#define O(f) offsetof(gen_flags, f)
/* def NULL: the library's default, filled in by gen_specs() */
static opt_spec gen_table[] = {
    {"num-requests", OPT_I64, O(num_requests), NULL, "requests to generate"},
    {"rate", OPT_STR, O(rate), NULL, "mean arrivals per second; inf = all at t=0"},
    {"burstiness", OPT_F64, O(burstiness), NULL, "Gamma shape of the gaps: 1 = Poisson, <1 burstier, gap CV = 1/sqrt(B); 0.001 to 1000"},
    {"input-len", OPT_I64, O(input_len), NULL, "prompt tokens: fixed value, uniform centre or lognormal mean"},
    {"output-len", OPT_I64, O(output_len), NULL, "output tokens, likewise"},
    {"length-dist", OPT_STR, O(length_dist), NULL, "fixed|uniform|lognormal|file"},
    {"range-ratio", OPT_F64, O(range_ratio), NULL, "uniform: lengths in [len*(1-F), len*(1+F)], 0<=F<1"},
    {"lognormal-sigma", OPT_F64, O(lognormal_sigma), NULL, "lognormal: sigma of ln(length); the mean stays len"},
    {"lengths-file", OPT_STR, O(lengths_file), "", "file: draw (num_prefill_tokens, num_decode_tokens) rows uniformly with replacement"},
    {"max-len", OPT_I64, O(max_len), NULL, "clamp every prompt and output length to <= N"},
    {"priority-classes", OPT_STR, O(priority_classes), "", "F0,F1,...: class i with probability Fi (sum 1); adds a priority column; 0 is the most important"},
    {"num-clients", OPT_STR, O(num_clients), "", "adds a client column, ids uniform in [0, N)"},
    {"seed", OPT_I64, O(seed), NULL, "seed of the mt19937 generator"},
    {"out", OPT_STR, O(out), "", "output file (none: stdout)"},
    OPT_END,
};
#undef O

static const opt_spec *gen_specs(void)
{
    static char defs[16][32];
    if (gen_table[0].def) return gen_table;
    tracegen_options d = tracegen_options_default();
    int k = 0;
#define DEF(name, fmt, value) \
    (snprintf(defs[k], sizeof defs[k], fmt, value), ((opt_spec *)opts_find(gen_table, name))->def = defs[k++])
    DEF("num-requests", "%lld", (long long)d.num_requests);
    DEF("rate", "%g", d.rate_per_s);
    DEF("burstiness", "%g", d.burstiness);
    DEF("input-len", "%d", d.input_len);
    DEF("output-len", "%d", d.output_len);
    DEF("length-dist", "%s", tracegen_length_dist_name(d.length_dist));
    DEF("range-ratio", "%g", d.range_ratio);
    DEF("lognormal-sigma", "%g", d.lognormal_sigma);
    DEF("max-len", "%d", d.max_len);
    DEF("seed", "%llu", (unsigned long long)d.seed);
#undef DEF
    return gen_table;
}

static const char *usage =
    "usage: tandem trace gen [OPTIONS]\n\n"
    "Writes a synthetic trace as tandem CSV: arrival_s,prompt_tokens,output_tokens\n"
    "[,priority][,client]. Arrivals as in vLLM's benchmark: the first at t=0, then gaps\n"
    "~ Gamma(shape=B, scale=1/(rate*B)). Same options and seed: byte-identical output.";

static int bad_value(terr *e, const char *flag, const char *arg, const char *want)
{
    return terr_set(e, "--%s: \"%s\" is not %s", flag, arg, want);
}

static int int_in(terr *e, const char *flag, int64_t v, int64_t lo, int64_t hi)
{
    if (v >= lo && v <= hi) return 0;
    char arg[32], want[96];
    snprintf(arg, sizeof arg, "%lld", (long long)v);
    snprintf(want, sizeof want, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    return bad_value(e, flag, arg, want);
}

/* "F0,F1,...": empty entries ("0.5,,0.5") are errors, so split by hand instead of strtok. */
static int parse_fractions(const char *arg, tracegen_options *o, terr *e)
{
    char buf[512];
    if (strlen(arg) >= sizeof buf) return bad_value(e, "priority-classes", arg, "a short list");
    strcpy(buf, arg);
    o->num_priority_classes = 0;
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        double f;
        if (o->num_priority_classes == TRACEGEN_MAX_PRIORITY_CLASSES)
            return bad_value(e, "priority-classes", arg, "a list of at most 16 fractions");
        if (parse_f64(p, &f)) return bad_value(e, "priority-classes", arg, "a list of fractions");
        o->priority_fraction[o->num_priority_classes++] = f;
        if (!comma) return 0;
        p = comma + 1;
    }
}

/* The flags as generator options; -1 with e naming the flag. */
static int to_options(const gen_flags *f, tracegen_options *o, terr *e)
{
    *o = tracegen_options_default();
    if (int_in(e, "num-requests", f->num_requests, 1, INT64_MAX / 2) ||
        int_in(e, "input-len", f->input_len, 1, TRACE_MAX_TOKENS) ||
        int_in(e, "output-len", f->output_len, 1, TRACE_MAX_TOKENS) ||
        int_in(e, "max-len", f->max_len, 1, TRACE_MAX_TOKENS) || int_in(e, "seed", f->seed, 0, INT64_MAX))
        return -1;
    o->num_requests = f->num_requests;
    o->input_len = (int32_t)f->input_len;
    o->output_len = (int32_t)f->output_len;
    o->max_len = (int32_t)f->max_len;
    o->seed = (uint64_t)f->seed;
    if (!strcasecmp(f->rate, "inf") || !strcasecmp(f->rate, "infinity")) o->rate_per_s = INFINITY;
    else if (parse_f64(f->rate, &o->rate_per_s) || !(o->rate_per_s > 0))
        return bad_value(e, "rate", f->rate, "a positive number or inf");
    char num[32];
    snprintf(num, sizeof num, "%g", f->burstiness);
    if (!(f->burstiness >= 1e-3 && f->burstiness <= 1e3)) return bad_value(e, "burstiness", num, "a number in [0.001, 1000]");
    o->burstiness = f->burstiness;
    if (tracegen_length_dist_parse(f->length_dist, &o->length_dist))
        return bad_value(e, "length-dist", f->length_dist, "one of fixed|uniform|lognormal|file");
    snprintf(num, sizeof num, "%g", f->range_ratio);
    if (!(f->range_ratio >= 0 && f->range_ratio < 1)) return bad_value(e, "range-ratio", num, "a number in [0, 1)");
    o->range_ratio = f->range_ratio;
    snprintf(num, sizeof num, "%g", f->lognormal_sigma);
    if (!(f->lognormal_sigma >= 0 && f->lognormal_sigma <= 10)) return bad_value(e, "lognormal-sigma", num, "a number in [0, 10]");
    o->lognormal_sigma = f->lognormal_sigma;
    o->lengths_file = f->lengths_file;
    if (f->priority_classes && parse_fractions(f->priority_classes, o, e)) return -1;
    if (f->num_clients) {
        int64_t n;
        if (parse_i64(f->num_clients, &n) || n < 1 || n > INT32_MAX)
            return bad_value(e, "num-clients", f->num_clients, "an integer in [1, 2147483647]");
        o->num_clients = (int32_t)n;
    }
    return 0;
}

int trace_gen_main(int argc, char **argv)
{
    const opt_spec *specs = gen_specs();
    gen_flags f = {0};
    opts_defaults(specs, &f);
    terr e = {{0}};
    int status = 2, rc = opts_parse(specs, &f, argc, argv, NULL, usage, &e);
    tracegen_options o;
    tracegen *g = NULL;
    if (rc == 1) {
        status = 0;
        goto done;
    }
    if (rc || to_options(&f, &o, &e) || tracegen_open(&g, &o, &e)) {
        fprintf(stderr, "tandem trace gen: %s\n", e.msg);
        goto done;
    }
    /* --out FILE is complete or absent (core/util.h: out_atomic): a full disk or a kill
     * leaves no cut row that sim would accept */
    out_atomic out = {.f = stdout};
    if (f.out && out_atomic_open(&out, f.out, "w", &e)) {
        fprintf(stderr, "--out: %s\n", e.msg);
        status = 1;
        goto done;
    }
    status = 0;
    if (tracegen_write_csv(g, out.f, &e)) {
        fprintf(stderr, "%s: %s\n", f.out ? f.out : "stdout", e.msg);
        status = 1;
    }
    if (f.out && out_atomic_close(&out, status == 0, &e) && status == 0) {
        fprintf(stderr, "--out: %s\n", e.msg);
        status = 1;
    }
done:
    if (g) tracegen_close(g);
    opts_free(specs, &f);
    return status;
}
