/*
 * search_cmd.c: `tandem search`, two searches over `sim` runs under a goodput SLO (what `vllm
 * bench sweep` and Vidur's capacity and configuration searches do):
 *
 * Capacity: the highest request rate at which the SLO still holds, found by bisection. The
 * trace is re-timed at each probed rate (--request-rate R, Gamma gaps of --burstiness, the same
 * seed at every rate, so rates differ only in spacing). A rate meets the SLO when the share of
 * requests meeting every --goodput bound (DistServe's SLO attainment; vLLM's request_goodput is
 * that count per second) is at least --target. The search doubles the rate from --start-rate
 * until it fails (or starts from [0, --max-rate]), then bisects until the bracket is within
 * --tolerance of its top. It assumes attainment falls as the rate rises; search.csv shows every
 * probe, so a non-monotone curve is visible. Outputs in --out DIR: search.csv (one row per probed
 * rate, sorted), search.json (the answer and how it was found, with the provenance block
 * summary.json has), search.gp and, with gnuplot, search.png. Given a SPEC (sweep's format,
 * cli/sweep.h), each point of its cross product is searched in turn, its options the command
 * line's with the point's over them, and priced (cli/gpu_price.h): DIR/capacity.csv has a row
 * per point, with its cost per hour, its cost per million requests at capacity and whether it
 * is on the Pareto front of cost against capacity; DIR/points/ID/ has each point's files.
 *
 * Cost: with a SPEC and --request-rate R, the cheapest point at which the SLO holds at R, a
 * point costing its GPUs (replicas x tensor-parallel size) x the price of its GPU's hour. Points
 * run once each, cheapest first; once one meets the SLO, every point that costs more is pruned:
 * none could be the answer whatever its latencies, so the pruning assumes nothing about the
 * simulator. (Monotonicity in replicas, "fewer replicas of a kind fail where more do", would
 * prune nothing more: fewer replicas cost less and have run already. It is not a theorem of the
 * simulator either, as routing and batching can break it, so no pruning relies on it.) Points
 * at the answer's price all run; among those meeting the SLO the answer is the one with the
 * most requests meeting it, then the first in the spec. DIR/cost.csv has every point, in spec
 * order, DIR/cost.json the answer and its full configuration.
 *
 * Every point of a SPEC is checked before the first run; every output file is written complete
 * or not at all (core/util.h: out_atomic).
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
#include "cli/gpu_price.h"
#include "cli/provenance.h"
#include "cli/serving.h"
#include "cli/sweep.h"

typedef struct search_options {
    serving_options serving;
    double target, start_rate, max_rate, tolerance;
    int64_t max_probes;
    double cost_rate;  /* req/s: > 0 asks for the cheapest point of a SPEC at this rate */
    char *gpu_cost;    /* --gpu-cost GPU=USD,...: USD per GPU-hour over the defaults */
    bool prune;        /* the cost search skips points costing more than one found to meet the SLO */
} search_options;

#define O(f) offsetof(search_options, f)
static const opt_spec search_own_specs[] = {
    {"target", OPT_F64, O(target), "0.9", "share of requests that must meet every --goodput SLO"},
    {"start-rate", OPT_F64, O(start_rate), "1", "first rate probed (req/s); doubled until the SLO fails"},
    {"max-rate", OPT_F64, O(max_rate), "0", "search [0, R] instead of doubling (0: no bound)"},
    {"tolerance", OPT_F64, O(tolerance), "0.01", "stop when the bracket is within this fraction of its top"},
    {"max-probes", OPT_I64, O(max_probes), "40", "sim runs at most"},
    {"request-rate", OPT_F64, O(cost_rate), "0",
     "with a SPEC: the cheapest point meeting the SLO at this rate (req/s), not each point's capacity"},
    {"gpu-cost", OPT_STR, O(gpu_cost), "", "USD per GPU-hour, GPU=USD[,GPU=USD], over the default prices (above)"},
    {"prune", OPT_BOOL, O(prune), "true",
     "with --request-rate: skip the points that cost more than one that meets the SLO"},
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
            rc = terr_set(e, "%s:%d: request-rate is what the search varies (a cost search takes it as --request-rate)",
                          spec->origin, spec->params[p].line);
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

/* What one point of a SPEC costs and what its search found. */
typedef enum point_status { POINT_PENDING, POINT_MEETS, POINT_FAILS, POINT_PRUNED } point_status;
static const char *const status_names[] = {"pending", "meets", "fails", "pruned"};

typedef struct point_result {
    char id[17];
    const char *gpu;         /* a sim/gpu.h name (static storage) */
    int64_t num_gpus;        /* replicas x tensor-parallel size */
    double usd_per_gpu_hour; /* the GPU's price (gpu_price.h) */
    double usd_per_hour;     /* num_gpus x usd_per_gpu_hour */
    /* capacity search */
    double capacity;         /* req/s (0: no rate meets the SLO) */
    int probes;
    bool pareto;             /* no other point is as cheap and as capable, and better at one */
    /* cost search */
    point_status status;
    probe p;                 /* the run at --request-rate (status meets or fails) */
} point_result;

/* Prices point o (resolved into su): GPU, count and USD per hour into r. 0, or -1 naming --gpu-cost. */
static int point_cost(const search_options *o, const serving_setup *su, const gpu_prices *prices, point_result *r,
                      terr *e)
{
    r->gpu = su->gpu->name;
    r->num_gpus = o->serving.num_replicas * su->tensor_parallel;
    if (gpu_price(prices, r->gpu, &r->usd_per_gpu_hour, NULL, e)) return -1;
    r->usd_per_hour = (double)r->num_gpus * r->usd_per_gpu_hour;
    return 0;
}

/* The spec's values of a point as CSV fields, each followed by a comma. */
static void put_values(FILE *f, const sweep_spec *spec, const char **vals)
{
    for (int p = 0; p < spec->num_params; p++) {
        bool quote = strpbrk(vals[p], ",\"\n") != NULL;
        fprintf(f, quote ? "\"%s\"," : "%s,", vals[p]); /* spec values hold no double quotes */
    }
}

/* "key=value key=value" for each key of the spec that takes more than one value (what tells
 * points apart) into buf; "the only point" when none does. */
static const char *point_label(const sweep_spec *spec, const char **vals, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = 0;
    for (int p = 0; p < spec->num_params && k < size; p++)
        if (spec->params[p].num_values > 1)
            k += (size_t)snprintf(buf + k, size - k, "%s%s=%s", k ? " " : "", spec->params[p].name, vals[p]);
    if (!buf[0]) snprintf(buf, size, "the only point");
    return buf;
}

/* Checks every point before any runs, as sweep does (each distinct warning said once), and
 * prices each into rs (spec.num_points). 0, or 2 with e naming the point. */
static int check_points(const sweep_spec *spec, int argc, char **argv, const gpu_prices *prices, point_result *rs,
                        terr *e)
{
    int code = 0;
    char **seen = NULL;
    int num_seen = 0;
    const cost_model_ops *first_model = NULL;
    bool quiet = false, mixed = false;
    for (int64_t i = 0; i < spec->num_points && code == 0; i++) {
        search_options o;
        serving_setup su;
        terr pe;
        serving_warnings w = {0};
        if (point_options(spec, i, argc, argv, &o, &pe) || search_resolve(&o, &su, &pe) ||
            serving_collect_warnings(&o.serving, &su, false, &w, &pe) || point_cost(&o, &su, prices, &rs[i], &pe)) {
            terr_set(e, "%s: point %lld: %s", spec->origin, (long long)i, pe.msg);
            code = 2;
        }
        sweep_point_id(spec, i, rs[i].id);
        quiet = o.serving.quiet;
        if (code == 0 && !first_model) first_model = su.cost_model;
        if (code == 0 && su.cost_model != first_model) mixed = true;
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
    if (code == 0 && mixed && !quiet)
        fprintf(stderr, "tandem search: warning: the points are timed by different cost models (--cost-model auto "
                        "takes a measured profile where one is shipped, the roofline elsewhere), so their costs "
                        "compare two models as well as two configurations; --cost-model roofline times them all alike\n");
    return code;
}

/* Marks the points on the Pareto front of cost (USD per hour, lower is better) against capacity
 * (higher is better): those no other point matches on both and beats on one. A point with no
 * capacity is on no front. */
static void mark_pareto(point_result *rs, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        rs[i].pareto = rs[i].capacity > 0;
        for (int64_t j = 0; j < n && rs[i].pareto; j++)
            if (rs[j].usd_per_hour <= rs[i].usd_per_hour && rs[j].capacity >= rs[i].capacity &&
                (rs[j].usd_per_hour < rs[i].usd_per_hour || rs[j].capacity > rs[i].capacity))
                rs[i].pareto = false;
    }
}

/* USD per million requests served at `rate` req/s by a deployment costing usd_per_hour. */
static double usd_per_million(double usd_per_hour, double rate)
{
    return rate > 0 ? usd_per_hour / (rate * 3600) * 1e6 : 0;
}

/* `tandem search SPEC ...`: a capacity search per point; DIR/capacity.csv (with each point's
 * cost and whether it is on the cost-capacity Pareto front) and DIR/points/ID/. */
static int search_spec(const sweep_spec *spec, int argc, char **argv, const search_options *base,
                       const gpu_prices *prices, const char *out, terr *e)
{
    point_result *rs = xcalloc((size_t)spec->num_points, sizeof *rs);
    int code = check_points(spec, argc, argv, prices, rs, e);
    bool quiet = base->serving.quiet;
    search_options o;
    serving_setup su;
    probe *ps = NULL;
    const char **vals = xmalloc((size_t)spec->num_params * sizeof *vals);
    char label[1024];
    for (int64_t i = 0; i < spec->num_points && code == 0; i++) {
        point_options(spec, i, argc, argv, &o, e);
        search_resolve(&o, &su, e);
        free(o.serving.out);
        o.serving.out = NULL;
        char dir[4400] = "";
        sweep_point_values(spec, i, vals);
        if (out) snprintf(dir, sizeof dir, "%s/points/%s", out, rs[i].id);
        if (!quiet) {
            printf("point %lld: %s (%lld x %s, $%.4g/h)\n", (long long)i, point_label(spec, vals, label, sizeof label),
                   (long long)rs[i].num_gpus, rs[i].gpu, rs[i].usd_per_hour);
        }
        ps = xrealloc(ps, (size_t)o.max_probes * sizeof *ps);
        code = search_one(&o, &su, out ? dir : NULL, ps, &rs[i].probes, &rs[i].capacity, e);
        free_options(&o);
    }
    free(ps);
    if (code == 0) mark_pareto(rs, spec->num_points);
    if (code == 0 && !quiet) {
        printf("cost against capacity, the Pareto front (no other point is both as cheap and as capable):\n");
        for (int64_t i = 0; i < spec->num_points; i++) {
            if (!rs[i].pareto) continue;
            sweep_point_values(spec, i, vals);
            printf("  point %lld (%s): %lld x %s, $%.4g/h, %.4g req/s, $%.4g per 1M requests at capacity\n",
                   (long long)i, point_label(spec, vals, label, sizeof label), (long long)rs[i].num_gpus,
                   rs[i].gpu, rs[i].usd_per_hour, rs[i].capacity, usd_per_million(rs[i].usd_per_hour, rs[i].capacity));
        }
    }
    if (code == 0 && out) {
        char path[4300];
        out_atomic f;
        snprintf(path, sizeof path, "%s/capacity.csv", out);
        if (mkdir_p(out)) code = (terr_set(e, "--out %s: cannot create it: %s", out, strerror(errno)), 1);
        else if (out_atomic_open(&f, path, "wb", e)) code = 1;
        if (code == 0) {
            fputs("point,id,", f.f);
            for (int p = 0; p < spec->num_params; p++) fprintf(f.f, "%s,", spec->params[p].name);
            fputs("capacity_request_rate,probes,gpu_kind,num_gpus,usd_per_hour,usd_per_million_requests,pareto\n", f.f);
            for (int64_t i = 0; i < spec->num_points; i++) {
                sweep_point_values(spec, i, vals);
                fprintf(f.f, "%lld,%s,", (long long)i, rs[i].id);
                put_values(f.f, spec, vals);
                fprintf(f.f, "%.9g,%d,%s,%lld,%.9g,%.9g,%d\n", rs[i].capacity, rs[i].probes, rs[i].gpu,
                        (long long)rs[i].num_gpus, rs[i].usd_per_hour,
                        usd_per_million(rs[i].usd_per_hour, rs[i].capacity), rs[i].pareto);
            }
            if (out_atomic_close(&f, true, e)) code = 1;
        }
        if (code == 0 && !quiet) printf("capacities: %s\n", path);
    }
    free(vals);
    free(rs);
    return code;
}

/* Whether point a is a better answer to the cost search than point b (both meet the SLO):
 * cheaper; at the same price, more of its requests meeting the SLO; then first in the spec. */
static bool cheaper_answer(const point_result *rs, int64_t a, int64_t b)
{
    double ca = rs[a].usd_per_hour, cb = rs[b].usd_per_hour;
    if (fabs(ca - cb) > 1e-9 * fmax(ca, cb)) return ca < cb;
    if (rs[a].p.attainment != rs[b].p.attainment) return rs[a].p.attainment > rs[b].p.attainment;
    return a < b;
}

static int cmp_cost(const void *a, const void *b, void *arg)
{
    const point_result *rs = arg;
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    double ci = rs[i].usd_per_hour, cj = rs[j].usd_per_hour;
    if (ci != cj) return ci < cj ? -1 : 1;
    return (i > j) - (i < j);
}

/* The cost search's files: cost.csv (every point, spec order) and cost.json (the answer). */
static int write_cost(const char *out, const sweep_spec *spec, const point_result *rs, int64_t best,
                      const search_options *o, const gpu_prices *prices, const char *slo, int runs, int pruned,
                      json_t *best_config, terr *e)
{
    if (mkdir_p(out)) return terr_set(e, "--out %s: cannot create it: %s", out, strerror(errno));
    char path[4300];
    out_atomic f;
    const char **vals = xmalloc((size_t)spec->num_params * sizeof *vals);
    snprintf(path, sizeof path, "%s/cost.csv", out);
    if (out_atomic_open(&f, path, "wb", e)) return free(vals), -1;
    fputs("point,id,", f.f);
    for (int p = 0; p < spec->num_params; p++) fprintf(f.f, "%s,", spec->params[p].name);
    fputs("gpu_kind,num_gpus,usd_per_gpu_hour,usd_per_hour,status,attainment,completed,num_rejected,request_throughput,"
          "request_goodput,median_ttft_ms,p99_ttft_ms,median_tpot_ms,p99_tpot_ms,p99_e2el_ms,cheapest\n", f.f);
    for (int64_t i = 0; i < spec->num_points; i++) {
        const point_result *r = &rs[i];
        const metrics_summary *s = &r->p.s;
        sweep_point_values(spec, i, vals);
        fprintf(f.f, "%lld,%s,", (long long)i, r->id);
        put_values(f.f, spec, vals);
        fprintf(f.f, "%s,%lld,%.9g,%.9g,%s,", r->gpu, (long long)r->num_gpus, r->usd_per_gpu_hour, r->usd_per_hour,
                status_names[r->status]);
        if (r->status == POINT_MEETS || r->status == POINT_FAILS)
            fprintf(f.f, "%.6f,%lld,%lld,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,", r->p.attainment, (long long)s->completed,
                    (long long)s->num_rejected, s->request_throughput, s->request_goodput, s->ttft.median, s->ttft.p99,
                    s->tpot.median, s->tpot.p99, s->e2el.p99);
        else fputs(",,,,,,,,,,", f.f); /* pruned: never run */
        fprintf(f.f, "%d\n", i == best);
    }
    if (out_atomic_close(&f, true, e)) return free(vals), -1;

    json_t *js = json_object();
    json_object_set_new(js, "request_rate", json_real(o->cost_rate));
    json_object_set_new(js, "target", json_real(o->target));
    json_object_set_new(js, "slo", json_string(slo));
    json_object_set_new(js, "prune", json_boolean(o->prune));
    json_t *price_js = json_object();
    for (int64_t i = 0; i < spec->num_points; i++) {
        const char *source;
        double usd;
        if (json_object_get(price_js, rs[i].gpu) || gpu_price(prices, rs[i].gpu, &usd, &source, NULL)) continue;
        json_object_set_new(price_js, rs[i].gpu, json_pack("{s:f, s:s}", "usd_per_gpu_hour", usd, "source", source));
    }
    json_object_set_new(js, "gpu_prices", price_js);
    json_object_set_new(js, "configurations", json_integer(spec->num_points));
    json_object_set_new(js, "sim_runs", json_integer(runs));
    json_object_set_new(js, "pruned", json_integer(pruned));
    if (best < 0) json_object_set_new(js, "cheapest", json_null());
    else {
        const point_result *r = &rs[best];
        json_t *params = json_object();
        sweep_point_values(spec, best, vals);
        for (int p = 0; p < spec->num_params; p++) json_object_set_new(params, spec->params[p].name, json_string(vals[p]));
        json_t *b = json_object();
        json_object_set_new(b, "point", json_integer(best));
        json_object_set_new(b, "id", json_string(r->id));
        json_object_set_new(b, "params", params);
        json_object_set_new(b, "gpu", json_string(r->gpu));
        json_object_set_new(b, "num_gpus", json_integer(r->num_gpus));
        json_object_set_new(b, "usd_per_hour", json_real(r->usd_per_hour));
        json_object_set_new(b, "usd_per_million_requests", json_real(usd_per_million(r->usd_per_hour, o->cost_rate)));
        json_object_set_new(b, "attainment", json_real(r->p.attainment));
        json_object_set_new(b, "request_goodput", json_real(r->p.s.request_goodput));
        json_object_set_new(b, "p99_ttft_ms", json_real(r->p.s.ttft.p99));
        json_object_set_new(b, "p99_tpot_ms", json_real(r->p.s.tpot.p99));
        json_object_set_new(b, "config", best_config);
        best_config = NULL;
        json_object_set_new(js, "cheapest", b);
    }
    json_decref(best_config);
    json_object_set_new(js, "tandem", provenance_json());
    free(vals);
    snprintf(path, sizeof path, "%s/cost.json", out);
    return write_json(js, path, e);
}

/* `tandem search SPEC --request-rate R ...`: the cheapest point of SPEC meeting the SLO at R.
 * Points run cheapest first; once one meets the SLO, those that cost more cannot be the answer
 * and are pruned (unless --no-prune); those at the same price still run, for the tie-break. */
static int search_cost(const sweep_spec *spec, int argc, char **argv, const search_options *base,
                       const gpu_prices *prices, const char *out, terr *e)
{
    point_result *rs = xcalloc((size_t)spec->num_points, sizeof *rs);
    int code = check_points(spec, argc, argv, prices, rs, e);
    int64_t *order = xmalloc((size_t)spec->num_points * sizeof *order);
    const char **vals = xmalloc((size_t)spec->num_params * sizeof *vals);
    char label[1024];
    for (int64_t i = 0; i < spec->num_points; i++) order[i] = i;
    qsort_r(order, (size_t)spec->num_points, sizeof *order, cmp_cost, rs);
    search_options o;
    serving_setup su;
    char slo[160] = "";
    int64_t best = -1;
    int runs = 0, pruned = 0;
    for (int64_t k = 0; k < spec->num_points && code == 0; k++) {
        int64_t i = order[k];
        point_result *r = &rs[i];
        if (best >= 0 && base->prune && r->usd_per_hour > rs[best].usd_per_hour * (1 + 1e-9)) {
            r->status = POINT_PRUNED;
            pruned++;
            continue;
        }
        point_options(spec, i, argc, argv, &o, e);
        search_resolve(&o, &su, e);
        free(o.serving.out);
        o.serving.out = NULL;
        if (k == 0) {
            describe_slo(&su, slo, sizeof slo);
            if (!o.serving.quiet)
                printf("the cheapest of %lld configurations at which %.0f%% of requests meet %s at %.4g req/s, "
                       "cheapest first:\n", (long long)spec->num_points, 100 * o.target, slo, o.cost_rate);
        }
        if (!o.serving.quiet) {
            sweep_point_values(spec, i, vals);
            printf("point %lld: %s (%lld x %s, $%.4g/h)\n", (long long)i, point_label(spec, vals, label, sizeof label),
                   (long long)r->num_gpus, r->gpu, r->usd_per_hour);
        }
        code = run_at(&o, &su, o.cost_rate, &r->p, e);
        runs++;
        r->status = r->p.attainment >= o.target ? POINT_MEETS : POINT_FAILS;
        if (r->status == POINT_MEETS && (best < 0 || cheaper_answer(rs, i, best))) best = i;
        free_options(&o);
    }
    bool quiet = base->serving.quiet;
    double rate = base->cost_rate;
    if (code == 0) {
        if (quiet) {
        } else if (best < 0) printf("no configuration meets the SLO at %.4g req/s (%d sim runs)\n", rate, runs);
        else {
            sweep_point_values(spec, best, vals);
            printf("cheapest: point %lld (%s): %lld x %s, $%.4g/h ($%.4g per 1M requests at %.4g req/s), %.1f%% of requests meet the SLO; "
                   "%d sim run%s", (long long)best, point_label(spec, vals, label, sizeof label), (long long)rs[best].num_gpus, rs[best].gpu, rs[best].usd_per_hour,
                   usd_per_million(rs[best].usd_per_hour, rate), rate, 100 * rs[best].p.attainment, runs, runs == 1 ? "" : "s");
            if (pruned) printf(", %d point%s pruned (costing more)", pruned, pruned == 1 ? "" : "s");
            printf("\n");
        }
        json_t *best_config = NULL;
        if (best >= 0) {
            search_options bo;
            point_options(spec, best, argc, argv, &bo, e);
            bo.serving.request_rate = bo.cost_rate;
            free(bo.serving.out);
            bo.serving.out = NULL;
            best_config = opts_to_json(serving_option_specs(), &bo.serving);
            free_options(&bo);
        }
        if (out && write_cost(out, spec, rs, best, base, prices, slo, runs, pruned, best_config, e)) code = 1;
        else if (out && !quiet) printf("outputs: %s/cost.csv, cost.json\n", out);
    }
    free(vals);
    free(order);
    free(rs);
    return code;
}

int search_main(int argc, char **argv)
{
    const opt_spec *specs = search_option_specs();
    search_options o = {0};
    serving_options_defaults(&o.serving);
    opts_defaults(specs, &o);
    terr e = {{0}};
    char *head = NULL;
    size_t head_len = 0;
    FILE *hf = open_memstream(&head, &head_len);
    if (!hf) abort();
    fputs("usage: tandem search [SPEC] --trace FILE --goodput ttft:MS [tpot:MS e2el:MS] [--target 0.9] [--out DIR] [sim options]\n"
          "       tandem search SPEC --request-rate R --goodput ... [--gpu-cost GPU=USD,...] [--out DIR]\n\n"
          "Capacity search: the highest request rate (the trace re-timed, as --request-rate) at which\n"
          "at least --target of the requests meet every --goodput SLO, by bisection over sim runs.\n"
          "Writes search.csv, search.json and a curve (search.png, with gnuplot) into --out. With a\n"
          "SPEC (tandem sweep's format), a search per point of its cross product, each priced:\n"
          "DIR/capacity.csv, with the Pareto front of cost against capacity.\n\n"
          "Cost search (SPEC and --request-rate R): the cheapest point of SPEC at which the SLO holds\n"
          "at R req/s, a point costing its GPUs (replicas x tensor-parallel size) x the price of a\n"
          "GPU-hour: DIR/cost.csv (every point) and DIR/cost.json (the answer). Prices, USD per GPU-hour:\n", hf);
    gpu_price_list(hf);
    fclose(hf);
    if (head_len && head[head_len - 1] == '\n') head[head_len - 1] = 0;
    char *usage = serving_usage(head);
    free(head);
    spec_arg = NULL;
    int rc = opts_parse(specs, &o, argc, argv, search_positional, usage, &e);
    free(usage);
    char *out = o.serving.out ? xstrdup(o.serving.out) : NULL;
    probe *ps = NULL;
    int code = 2, n = 0;
    double answer;
    serving_setup su;
    gpu_prices prices;
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (rc) goto fail;
    if (gpu_prices_parse(&prices, o.gpu_cost, &e)) goto fail;
    if (!(o.cost_rate >= 0 && isfinite(o.cost_rate))) {
        terr_set(&e, "--request-rate: %g is not a finite rate > 0 (the rate the cheapest configuration must serve)", o.cost_rate);
        goto fail;
    }
    if (o.cost_rate > 0 && !spec_arg) {
        terr_set(&e, "--request-rate: a cost search needs a SPEC, the configurations to price (without one, the "
                     "search finds the rate)");
        goto fail;
    }
    /* options that cannot change this search's result, named once as sim names its own */
    if (!o.serving.quiet && !o.prune && o.cost_rate == 0)
        fprintf(stderr, "tandem search: warning: --no-prune: only a cost search (--request-rate) prunes\n");
    if (!o.serving.quiet && o.gpu_cost && *o.gpu_cost && !spec_arg)
        fprintf(stderr, "tandem search: warning: --gpu-cost: only a SPEC's points are priced\n");
    if (spec_arg) {
        sweep_spec spec = {0};
        if (sweep_spec_load(&spec, spec_arg, &e)) goto fail;
        code = o.cost_rate > 0 ? search_cost(&spec, argc, argv, &o, &prices, out, &e)
                               : search_spec(&spec, argc, argv, &o, &prices, out, &e);
        sweep_spec_free(&spec);
        if (code) goto fail;
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
