/*
 * search_cmd.c: `tandem search`, capacity search: the highest request rate at which a goodput
 * SLO still holds, found by bisection over `sim` runs (what `vllm bench sweep` and Vidur's
 * capacity search do).
 *
 * The trace is re-timed at each probed rate (--request-rate R, Gamma gaps of --burstiness, the
 * same seed at every rate, so rates differ only in spacing). A rate meets the SLO when the share
 * of requests meeting every --goodput bound (DistServe's SLO attainment; vLLM's request_goodput
 * is that count per second) is at least --target. The search doubles the rate from --start-rate
 * until it fails (or starts from [0, --max-rate]), then bisects until the bracket is within
 * --tolerance of its top. It assumes attainment falls as the rate rises; search.csv shows every
 * probe, so a non-monotone curve is visible.
 *
 * Outputs in --out DIR: search.csv (one row per probed rate, sorted), search.json (the answer and
 * how it was found, with the provenance block summary.json has), search.gp and, with gnuplot,
 * search.png: attainment against rate with the target and the answer. Given a SPEC (sweep's
 * format, cli/sweep.h), each point of its cross product is searched in turn, its options the
 * command line's with the point's over them: DIR/capacity.csv has a row per point and
 * DIR/points/ID/ each point's files. Every point is checked before the first search runs.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/provenance.h"
#include "cli/serving.h"
#include "cli/sweep.h"

typedef struct search_options {
    serving_options serving;
    double target, start_rate, max_rate, tolerance;
    int64_t max_probes;
} search_options;

#define O(f) offsetof(search_options, f)
static const opt_spec search_own_specs[] = {
    {"target", OPT_F64, O(target), "0.9", "share of requests that must meet every --goodput SLO"},
    {"start-rate", OPT_F64, O(start_rate), "1", "first rate probed (req/s); doubled until the SLO fails"},
    {"max-rate", OPT_F64, O(max_rate), "0", "search [0, R] instead of doubling (0: no bound)"},
    {"tolerance", OPT_F64, O(tolerance), "0.01", "stop when the bracket is within this fraction of its top"},
    {"max-probes", OPT_I64, O(max_probes), "40", "sim runs at most"},
    OPT_END,
};
#undef O

static const opt_spec *search_option_specs(void)
{
    static opt_spec *table;
    static size_t n;
    static const char *const skip[] = {"request-rate", "requests", "steps", "tokens", "max-steps", NULL};
    if (!table) {
        opts_join(&table, &n, serving_option_specs(), offsetof(search_options, serving), skip);
        opts_join(&table, &n, search_own_specs, 0, NULL);
    }
    return table;
}

typedef struct probe {
    double rate, attainment;
    metrics_summary s;
} probe;

static int cmp_rate(const void *a, const void *b)
{
    double x = ((const probe *)a)->rate, y = ((const probe *)b)->rate;
    return (x > y) - (x < y);
}

/* One sim run at `rate`; fills p. Returns serving_simulate's code. */
static int run_at(search_options *o, const serving_setup *su, double rate, probe *p, terr *e)
{
    o->serving.request_rate = rate;
    *p = (probe){.rate = rate};
    int code = serving_simulate(&o->serving, su, &p->s, e);
    if (code) return code;
    p->attainment = p->s.num_requests ? (double)p->s.num_good / (double)p->s.num_requests : 0;
    if (!o->serving.quiet)
        printf("  %10.4g req/s: %5.1f%% meet the SLO, goodput %.3g req/s, p99 TTFT %.4g ms, p99 TPOT %.4g ms  %s\n",
               rate, 100 * p->attainment, p->s.request_goodput, p->s.ttft.p99, p->s.tpot.p99,
               p->attainment >= o->target ? "ok" : "fails");
    fflush(stdout);
    return 0;
}

/* js (consumed) into path, complete or absent. 0, or -1 with e naming path. */
static int write_json(json_t *js, const char *path, terr *e)
{
    out_atomic out;
    if (out_atomic_open(&out, path, "wb", e)) return json_decref(js), -1;
    int dumped = json_dumpf(js, out.f, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(js);
    return out_atomic_close(&out, dumped == 0, e);
}

static int write_outputs(const char *dir, const search_options *o, probe *ps, int n, double answer, const char *slo,
                         terr *e)
{
    if (mkdir_p(dir)) return terr_set(e, "--out %s: cannot create it: %s", dir, strerror(errno));
    qsort(ps, (size_t)n, sizeof *ps, cmp_rate);
    char path[4300];
    out_atomic out; /* each file complete or absent (core/util.h) */
    snprintf(path, sizeof path, "%s/search.csv", dir);
    if (out_atomic_open(&out, path, "wb", e)) return -1;
    fprintf(out.f, "request_rate,attainment,meets_target,completed,num_rejected,request_throughput,request_goodput,"
                   "median_ttft_ms,p99_ttft_ms,median_tpot_ms,p99_tpot_ms,p99_e2el_ms\n");
    for (int i = 0; i < n; i++) {
        const metrics_summary *s = &ps[i].s;
        fprintf(out.f, "%.9g,%.6f,%d,%lld,%lld,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n", ps[i].rate, ps[i].attainment,
                ps[i].attainment >= o->target, (long long)s->completed, (long long)s->num_rejected,
                s->request_throughput, s->request_goodput, s->ttft.median, s->ttft.p99, s->tpot.median, s->tpot.p99,
                s->e2el.p99);
    }
    if (out_atomic_close(&out, true, e)) return -1;

    json_t *js = json_object();
    json_object_set_new(js, "capacity_request_rate", json_real(answer));
    json_object_set_new(js, "target", json_real(o->target));
    json_object_set_new(js, "slo", json_string(slo));
    json_object_set_new(js, "tolerance", json_real(o->tolerance));
    json_object_set_new(js, "probes", json_integer(n));
    json_object_set_new(js, "config", opts_to_json(serving_option_specs(), &o->serving));
    json_object_set_new(js, "tandem", provenance_json());
    snprintf(path, sizeof path, "%s/search.json", dir);
    if (write_json(js, path, e)) return -1;

    snprintf(path, sizeof path, "%s/search.gp", dir);
    if (out_atomic_open(&out, path, "wb", e)) return -1;
    fprintf(out.f,
            "# tandem search: SLO attainment against request rate (gnuplot search.gp, in this folder)\n"
            "set terminal pngcairo size 800,500 font ',11'\n"
            "set output 'search.png'\n"
            "set datafile separator ','\n"
            "set key bottom left box opaque\n"
            "set xlabel 'request rate (req/s)'\n"
            "set ylabel 'requests meeting the SLO (%%)'\n"
            "set yrange [0:105]\n"
            "set grid\n"
            "set title 'capacity %.4g req/s at %.0f%% of requests meeting %s'\n"
            "set arrow from %.9g, graph 0 to %.9g, graph 1 nohead dashtype 2 lc rgb '#666666'\n"
            "plot 'search.csv' skip 1 using 1:($2*100) with linespoints pt 7 lw 2 title 'probed rates', \\\n"
            "     %.6f with lines dashtype 3 lc rgb '#cc0000' title 'target'\n",
            answer, 100 * o->target, slo, answer, answer, 100 * o->target);
    return out_atomic_close(&out, true, e);
}

/* gnuplot search.gp in dir, when gnuplot is installed; quietly nothing otherwise. */
static bool draw(const char *dir)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(dir)) _exit(127);
        if (!freopen("/dev/null", "w", stderr)) _exit(127);
        execlp("gnuplot", "gnuplot", "search.gp", (char *)NULL);
        _exit(127);
    }
    int status;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Checks the search's own flags and resolves the serving setup (the probes' rate set, so a
 * lengths file opens). 0, or -1 with e naming the flag. */
static int search_resolve(search_options *o, serving_setup *su, terr *e)
{
    if (!(o->start_rate > 0 && isfinite(o->start_rate))) return terr_set(e, "--start-rate: %g must be > 0", o->start_rate);
    o->serving.request_rate = o->start_rate;
    if (serving_resolve(&o->serving, su, e)) return -1;
    if (!(su->goodput_ttft_ms > 0 || su->goodput_tpot_ms > 0 || su->goodput_e2el_ms > 0))
        return terr_set(e, "--goodput is required: the SLO the rate must meet, e.g. --goodput ttft:500 tpot:50");
    if (!(o->target > 0 && o->target <= 1)) return terr_set(e, "--target: %g is not in (0, 1]", o->target);
    if (!(o->max_rate >= 0 && isfinite(o->max_rate))) return terr_set(e, "--max-rate: %g must be >= 0 (0: no bound)", o->max_rate);
    if (!(o->tolerance > 0 && o->tolerance < 1)) return terr_set(e, "--tolerance: %g is not in (0, 1)", o->tolerance);
    if (o->max_probes < 2 || o->max_probes > 1000)
        return terr_set(e, "--max-probes: %lld is not in [2, 1000]", (long long)o->max_probes);
    return 0;
}

static void describe_slo(const serving_setup *su, char *slo, size_t size)
{
    size_t k = 0;
    slo[0] = 0;
    if (su->goodput_ttft_ms > 0) k += (size_t)snprintf(slo + k, size - k, "%sTTFT <= %g ms", k ? ", " : "", su->goodput_ttft_ms);
    if (su->goodput_tpot_ms > 0) k += (size_t)snprintf(slo + k, size - k, "%sTPOT <= %g ms", k ? ", " : "", su->goodput_tpot_ms);
    if (su->goodput_e2el_ms > 0) snprintf(slo + k, size - k, "%sE2EL <= %g ms", k ? ", " : "", su->goodput_e2el_ms);
}

/* One capacity search: probes into ps (o->max_probes of room), their count into *n, the answer
 * (0: no rate meets the SLO) into *answer, and the outputs into `out` when not NULL. Returns 0, 2
 * on bad input, 1 when an output could not be written. */
static int search_one(search_options *o, const serving_setup *su, const char *out, probe *ps, int *n, double *answer,
                      terr *e)
{
    char slo[160];
    describe_slo(su, slo, sizeof slo);
    *n = 0;
    int code;
    double lo = 0, hi = 0; /* lo meets the target (0: nothing known to), hi fails (0: none found yet) */
    if (o->max_rate > 0) hi = o->max_rate * (1 + 1e-9);
    /* phase 1: find a failing rate by doubling (unless --max-rate bounds the search) */
    for (double r = o->start_rate; hi == 0 && *n < o->max_probes; r *= 2) {
        if (r > 1e7)
            return terr_set(e, "the SLO holds even at %g req/s: the trace is too short to load the server (more "
                               "requests, or --max-rate)", r / 2), 2;
        if ((code = run_at(o, su, r, &ps[*n], e))) return code;
        if (ps[(*n)++].attainment >= o->target) lo = r;
        else hi = r;
    }
    if (hi == 0)
        return terr_set(e, "the SLO still holds at %g req/s after %d probes: raise --max-probes or --start-rate", lo, *n), 2;
    if (o->max_rate > 0 && *n < o->max_probes) { /* the bound itself */
        if ((code = run_at(o, su, o->max_rate, &ps[*n], e))) return code;
        if (ps[(*n)++].attainment >= o->target) lo = hi = o->max_rate;
    }
    /* phase 2: bisect [lo, hi] */
    while (hi > lo && (hi - lo) > o->tolerance * hi && *n < o->max_probes) {
        double mid = lo > 0 ? (lo + hi) / 2 : hi / 2;
        if (lo == 0 && mid < o->start_rate * 1e-6) break; /* even a trickle fails */
        if ((code = run_at(o, su, mid, &ps[*n], e))) return code;
        if (ps[(*n)++].attainment >= o->target) lo = mid;
        else hi = mid;
    }
    *answer = lo;
    if (o->serving.quiet) {
    } else if (lo == 0) printf("no rate meets the SLO: even %.4g req/s fails (%s)\n", hi, slo);
    else
        printf("capacity: %.4g req/s (%.0f%% of requests meet %s; the next %s %.4g req/s; %d sim runs)\n", lo,
               100 * o->target, slo, hi > lo ? "probe up fails at" : "bound is", hi, *n);
    if (!out) return 0;
    if (write_outputs(out, o, ps, *n, lo, slo, e)) return 1;
    bool drawn = draw(out);
    if (!o->serving.quiet)
        printf("outputs: %s/search.csv, search.json, search.gp%s\n", out,
               drawn ? ", search.png" : " (gnuplot not found: no search.png)");
    return 0;
}

/* The positional arguments: goodput values after --goodput, and one SPEC file. */
static char *spec_arg;
static int search_positional(void *dst, const char *arg, terr *e)
{
    if (!strncmp(arg, "ttft:", 5) || !strncmp(arg, "tpot:", 5) || !strncmp(arg, "e2el:", 5))
        return serving_positional(dst, arg, e);
    if (spec_arg) return terr_set(e, "unexpected argument \"%s\": one SPEC file only", arg);
    spec_arg = xstrdup(arg);
    return 0;
}

/* The options of point `index` of spec: the command line's, then the point's values over them. */
static int point_options(const sweep_spec *spec, int64_t index, int argc, char **argv, search_options *o, terr *e)
{
    const opt_spec *specs = search_option_specs();
    *o = (search_options){0};
    serving_options_defaults(&o->serving);
    opts_defaults(specs, o);
    char *saved = spec_arg;
    spec_arg = NULL;
    int rc = opts_parse(specs, o, argc, argv, search_positional, "", e);
    free(spec_arg);
    spec_arg = saved;
    const char **vals = xmalloc((size_t)spec->num_params * sizeof *vals);
    sweep_point_values(spec, index, vals);
    for (int p = 0; p < spec->num_params && rc == 0; p++) {
        if (!strcmp(spec->params[p].name, "request-rate")) {
            rc = terr_set(e, "%s:%d: request-rate is what the search varies", spec->origin, spec->params[p].line);
            break;
        }
        rc = opts_set(serving_option_specs(), &o->serving, spec->params[p].name, vals[p], e);
    }
    free(vals);
    return rc;
}

static void free_options(search_options *o)
{
    opts_free(search_option_specs(), o);
    serving_options_free(&o->serving);
}

/* `tandem search SPEC ...`: a search per point; DIR/capacity.csv and DIR/points/ID/. */
static int search_spec(int argc, char **argv, const char *out, terr *e)
{
    sweep_spec spec = {0};
    if (sweep_spec_load(&spec, spec_arg, e)) return 2;
    int code = 0;
    search_options o;
    serving_setup su;
    /* every point is checked before any runs, as sweep does; each distinct warning said once */
    char **seen = NULL;
    int num_seen = 0;
    for (int64_t i = 0; i < spec.num_points && code == 0; i++) {
        terr pe;
        serving_warnings w = {0};
        if (point_options(&spec, i, argc, argv, &o, &pe) || search_resolve(&o, &su, &pe) ||
            serving_collect_warnings(&o.serving, &su, false, &w, &pe)) {
            terr_set(e, "%s: point %lld: %s", spec.origin, (long long)i, pe.msg);
            code = 2;
        }
        for (int k = 0; k < w.n; k++) {
            int j = 0;
            while (j < num_seen && strcmp(seen[j], w.msg[k])) j++;
            if (j < num_seen) continue;
            seen = xrealloc(seen, (size_t)(num_seen + 1) * sizeof *seen);
            seen[num_seen++] = xstrdup(w.msg[k]);
            if (!o.serving.quiet) fprintf(stderr, "tandem search: warning: %s\n", w.msg[k]);
        }
        free_options(&o);
    }
    for (int j = 0; j < num_seen; j++) free(seen[j]);
    free(seen);
    FILE *f = NULL;
    char path[4300], tmp[4400];
    if (code == 0 && out) {
        if (mkdir_p(out)) code = (terr_set(e, "--out %s: cannot create it: %s", out, strerror(errno)), 1);
        snprintf(path, sizeof path, "%s/capacity.csv", out);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        if (code == 0 && !(f = fopen(tmp, "wb"))) code = (terr_set(e, "%s: cannot write: %s", tmp, strerror(errno)), 1);
        if (f) {
            fputs("point,id,", f);
            for (int p = 0; p < spec.num_params; p++) fprintf(f, "%s,", spec.params[p].name);
            fputs("capacity_request_rate,probes\n", f);
        }
    }
    probe *ps = NULL;
    const char **vals = xmalloc((size_t)spec.num_params * sizeof *vals);
    for (int64_t i = 0; i < spec.num_points && code == 0; i++) {
        point_options(&spec, i, argc, argv, &o, e);
        search_resolve(&o, &su, e);
        free(o.serving.out);
        o.serving.out = NULL;
        char id[17], dir[4400] = "";
        sweep_point_id(&spec, i, id);
        sweep_point_values(&spec, i, vals);
        if (out) snprintf(dir, sizeof dir, "%s/points/%s", out, id);
        if (!o.serving.quiet) {
            printf("point %lld:", (long long)i);
            for (int p = 0; p < spec.num_params; p++)
                if (spec.params[p].num_values > 1) printf(" %s=%s", spec.params[p].name, vals[p]);
            printf("\n");
        }
        ps = xrealloc(ps, (size_t)o.max_probes * sizeof *ps);
        int n;
        double answer;
        code = search_one(&o, &su, out ? dir : NULL, ps, &n, &answer, e);
        if (code == 0 && f) {
            fprintf(f, "%lld,%s,", (long long)i, id);
            for (int p = 0; p < spec.num_params; p++) {
                bool quote = strpbrk(vals[p], ",\"\n") != NULL;
                fprintf(f, quote ? "\"%s\"," : "%s,", vals[p]); /* spec values hold no double quotes */
            }
            fprintf(f, "%.9g,%d\n", answer, n);
        }
        free_options(&o);
    }
    free(vals);
    free(ps);
    if (f) {
        if (fclose(f) && code == 0) code = (terr_set(e, "%s: write failed", tmp), 1);
        if (code == 0 && rename(tmp, path)) code = (terr_set(e, "%s: cannot write", path), 1);
        if (code == 0 && !o.serving.quiet) printf("capacities: %s\n", path);
    }
    sweep_spec_free(&spec);
    return code;
}

int search_main(int argc, char **argv)
{
    const opt_spec *specs = search_option_specs();
    search_options o = {0};
    serving_options_defaults(&o.serving);
    opts_defaults(specs, &o);
    terr e = {{0}};
    char *usage = serving_usage(
        "usage: tandem search [SPEC] --trace FILE --goodput ttft:MS [tpot:MS e2el:MS] [--target 0.9] [--out DIR] [sim options]\n\n"
        "Capacity search: the highest request rate (the trace re-timed, as --request-rate) at which\n"
        "at least --target of the requests meet every --goodput SLO, by bisection over sim runs.\n"
        "Writes search.csv, search.json and a curve (search.png, with gnuplot) into --out. With a\n"
        "SPEC (tandem sweep's format), a search per point of its cross product: DIR/capacity.csv.");
    spec_arg = NULL;
    int rc = opts_parse(specs, &o, argc, argv, search_positional, usage, &e);
    free(usage);
    char *out = o.serving.out ? xstrdup(o.serving.out) : NULL;
    probe *ps = NULL;
    int code = 2, n = 0;
    double answer;
    serving_setup su;
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (rc) goto fail;
    if (spec_arg) {
        if ((code = search_spec(argc, argv, out, &e))) goto fail;
        goto done;
    }
    if (search_resolve(&o, &su, &e)) goto fail;
    free(o.serving.out);
    o.serving.out = NULL; /* the probes write no files */
    serving_warnings warn;
    if (serving_collect_warnings(&o.serving, &su, false, &warn, &e)) goto fail;
    if (!o.serving.quiet) serving_print_warnings(&warn, "search");
    if (!o.serving.quiet) {
        char slo[160];
        describe_slo(&su, slo, sizeof slo);
        o.serving.request_rate = 0;
        serving_print_header(&o.serving, &su, NULL, stdout);
        printf("searching for the highest rate at which %.0f%% of requests meet %s:\n", 100 * o.target, slo);
    }
    ps = xcalloc((size_t)o.max_probes, sizeof *ps);
    if ((code = search_one(&o, &su, out, ps, &n, &answer, &e))) goto fail;
    goto done;
fail:
    fprintf(stderr, "tandem search: %s\n", e.msg);
done:
    free(ps);
    free(out);
    free(spec_arg);
    spec_arg = NULL;
    opts_free(specs, &o);
    serving_options_free(&o.serving);
    return code;
}
