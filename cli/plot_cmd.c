/*
 * plot_cmd.c: `tandem plot DIR [DIR...] [--out DIR]`: the figures a researcher looks at first,
 * of one or several runs (overlaid, labelled by their folders' names) and of sweeps.
 *
 * For run directories (tandem sim|run --out):
 *   latency_cdf.{png,svg}   CDFs of TTFT, TPOT and E2E latency, one line per run; a panel whose
 *                           latencies pass 100 s is drawn in seconds
 *   itl_ccdf.{png,svg}      the inter-token latencies (rebuilt from steps.csv, tandem reduce itl)
 *                           as the fraction of decode tokens above x: the tail of stalls
 *   over_time.{png,svg}     batch size, KV cache usage and waiting requests over time (steps.csv
 *                           in about 200 time bins)
 * For sweep folders (tandem sweep --out, with results.csv):
 *   sweep_NAME.{png,svg}    median and p99 TTFT and TPOT against the swept load key (request
 *                           rate, concurrency or time scale; else the first numeric swept key),
 *                           one line per combination of the other swept keys
 * The data files each figure is drawn from (`tandem reduce` output) are written beside it, so a
 * figure can be redrawn or restyled with the scripts in plots/ alone.
 *
 * Exit codes: 0 ok, 1 a file could not be written or gnuplot failed, 2 bad flags or a folder
 * that is neither a run nor a sweep.
 */
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/csv_rows.h"
#include "cli/gnuplot.h"
#include "cli/reduce.h"
#include "core/options.h"
#include "traces/trace.h"

#define MAX_DIRS 12 /* the palette has 12 line styles */

typedef struct plot_options {
    char *out;
    bool quiet;
    const char *dirs[MAX_DIRS]; /* the positionals; point into argv */
    int ndirs;
} plot_options;

#define O(f) offsetof(plot_options, f)
static const opt_spec plot_specs[] = {
    {"out", OPT_STR, O(out), "", "folder for the figures and their data (default DIR/figures with one DIR, else ./figures)"},
    {"quiet", OPT_BOOL, O(quiet), "false", "print nothing on success"},
    OPT_END,
};
#undef O

static const char *usage =
    "usage: tandem plot DIR [DIR...] [--out DIR] [--quiet]\n\n"
    "Figures (PNG and SVG, with gnuplot) of run directories (tandem sim|run --out) and sweep\n"
    "folders (tandem sweep --out). Runs are overlaid, one line each, labelled by their folder\n"
    "names: latency_cdf (TTFT, TPOT, E2E), itl_ccdf (the inter-token latency tail) and over_time\n"
    "(batch size, KV usage, queue over time). A\n"
    "sweep gives sweep_NAME: median and p99 TTFT and TPOT against its load key (request rate,\n"
    "concurrency, time scale). The data each figure is drawn from is written beside it.\n";

static int take_positional(void *dst, const char *arg, terr *e)
{
    plot_options *o = dst;
    if (o->ndirs == MAX_DIRS) return terr_set(e, "at most %d folders in one figure", MAX_DIRS);
    o->dirs[o->ndirs++] = arg;
    return 0;
}

static bool file_in(const char *dir, const char *name)
{
    char p[4300];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return !stat(p, &st) && S_ISREG(st.st_mode);
}

/* The folder's name without a trailing slash ("runs/vllm/" -> "vllm"). */
static void folder_name(const char *dir, char *buf, size_t n)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    size_t len = strlen(tmp);
    while (len > 1 && tmp[len - 1] == '/') tmp[--len] = 0;
    snprintf(buf, n, "%s", basename(tmp));
}

typedef struct figure_set {
    const char *plots, *out;
    bool have_gnuplot, quiet;
    bool io_error; /* the failure was writing a file or running gnuplot (exit 1), not the input */
} figure_set;

/* Opens OUT/NAME for writing; NULL with e set. */
static FILE *create(figure_set *fs, const char *name, char *path, size_t n, terr *e)
{
    snprintf(path, n, "%s/%s", fs->out, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fs->io_error = true;
        terr_set(e, "%s: cannot write: %s", path, strerror(errno));
    }
    return f;
}

static int close_checked(figure_set *fs, FILE *f, const char *path, terr *e)
{
    bool ok = !ferror(f);
    if (fclose(f) || !ok) {
        fs->io_error = true;
        return terr_set(e, "%s: write failed", path);
    }
    return 0;
}

/* The largest value of column col over the finished rows of file; 0 when none. */
static double column_max(const char *file, const char *col)
{
    csv_rows t;
    terr e;
    if (csv_rows_open(&t, file, &e)) return 0;
    int c = csv_rows_col(&t, col), state = csv_rows_col(&t, "state");
    double m = 0, x;
    while (c >= 0 && csv_rows_next(&t, &e) == 1)
        if ((state < 0 || !strcmp(csv_rows_at(&t, state), "finished")) && !parse_f64(csv_rows_at(&t, c), &x))
            m = fmax(m, x);
    csv_rows_close(&t);
    return m;
}

/* config["scheduling-policy"] of DIR/summary.json, or "" */
static void run_policy(const char *dir, char *buf, size_t n)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    json_t *j = json_load_file(p, 0, NULL);
    const char *s = json_string_value(json_object_get(json_object_get(j, "config"), "scheduling-policy"));
    snprintf(buf, n, "%s", s ? s : "");
    json_decref(j);
}


static int draw(figure_set *fs, const char *script, const char *name, const char *const *sets, int nsets,
                const char *const *args, int nargs, terr *e)
{
    if (!fs->have_gnuplot) return 0;
    int rc = gnuplot_draw(fs->plots, script, fs->out, name, sets, nsets, args, nargs, e);
    if (rc < 0) {
        fs->io_error = true;
        return -1;
    }
    if (rc == 1) {
        fs->have_gnuplot = false;
        return 0;
    }
    if (!fs->quiet) printf("  %s/%s.png (and .svg)\n", fs->out, name);
    return 0;
}

/* The smallest width of 1, 2 or 5 x 10^k seconds (from 1 ms) that cuts span into at most 200
 * bins. */
static double nice_bin(double span)
{
    static const double mult[] = {1, 2, 5};
    for (double p = 1e-3; p < 1e12; p *= 10)
        for (int i = 0; i < 3; i++)
            if (span / (mult[i] * p) <= 200) return mult[i] * p;
    return 1e12;
}

/* ---- runs ------------------------------------------------------------------------------------ */

static int plot_runs(figure_set *fs, const char *const *dirs, const char *const *labels, int n, terr *e)
{
    char req[MAX_DIRS][4300], steps[MAX_DIRS][4300], itl[MAX_DIRS][4300];
    const char *reqp[MAX_DIRS], *itlp[MAX_DIRS];
    bool all_steps = true;
    for (int i = 0; i < n; i++) {
        snprintf(req[i], sizeof req[i], "%s/requests.csv", dirs[i]);
        snprintf(steps[i], sizeof steps[i], "%s/steps.csv", dirs[i]);
        reqp[i] = req[i];
        all_steps &= file_in(dirs[i], "steps.csv");
    }
    /* the CDFs: one data file per metric, in seconds when the largest value passes 100 s; the
     * request latencies in one figure, the ITLs (a population of tokens) in another */
    static const char *const metrics[] = {"ttft_ms", "tpot_ms", "e2el_ms", "itl_ms"};
    static const char *const names[] = {"TTFT", "TPOT", "end-to-end latency", "inter-token latency"};
    static const char *const files_of[] = {"cdf_ttft.dat", "cdf_tpot.dat", "cdf_e2el.dat", "cdf_itl.dat"};
    const char *cdf_args[2 + 2 * 3];
    char data[4][4300], xlabel[4][128];
    int nargs = 0;
    char title[512];
    snprintf(title, sizeof title, "latency of the finished requests%s", n > 1 ? ", per run" : "");
    cdf_args[nargs++] = title;
    for (int m = 0; m < 4; m++) {
        const char *const *files = reqp;
        reduce_cdf_options co = {NULL, NULL, 1, 200};
        if (m == 3) {
            if (!all_steps) break;
            for (int i = 0; i < n; i++) {
                char policy[64], name[64];
                run_policy(dirs[i], policy, sizeof policy);
                snprintf(name, sizeof name, "itl_%d.csv", i + 1);
                FILE *f = create(fs, name, itl[i], sizeof itl[i], e);
                if (!f) return -1;
                int rc = reduce_itl(f, steps[i], !strcmp(policy, "vllm-v0"), e);
                if (close_checked(fs, f, itl[i], e) || rc) return -1;
                itlp[i] = itl[i];
            }
            files = itlp;
            co.weight = "tokens";
        }
        double max = 0;
        for (int i = 0; i < n; i++) max = fmax(max, column_max(files[i], metrics[m]));
        bool seconds = max > 1e5;
        co.scale = seconds ? 1e-3 : 1;
        FILE *f = create(fs, files_of[m], data[m], sizeof data[m], e);
        if (!f) return -1;
        int rc = reduce_cdf(f, metrics[m], labels, files, n, &co, e);
        if (close_checked(fs, f, data[m], e) || rc) return -1;
        snprintf(xlabel[m], sizeof xlabel[m], "%s (%s)", names[m], seconds ? "s" : "ms");
        if (m < 3) {
            cdf_args[nargs++] = data[m];
            cdf_args[nargs++] = xlabel[m];
        }
    }
    if (draw(fs, "cdf.gp", "latency_cdf", NULL, 0, cdf_args, nargs, e)) return -1;
    if (!all_steps) {
        if (!fs->quiet) printf("  (a run without steps.csv: no itl_ccdf or over_time figure)\n");
        return 0;
    }
    /* the ITL tail: the fraction of decode tokens that waited longer than x, on a log scale */
    const char *itl_args[] = {"inter-token latency: the tail (stalls behind prefills, preemptions)", data[3],
                              xlabel[3]};
    const char *ccdf_sets[] = {"ccdf=1", "ymin=1e-4", "what=\"decode tokens\"", "key=\"below\""};
    if (draw(fs, "cdf.gp", "itl_ccdf", ccdf_sets, 4, itl_args, 3, e)) return -1;

    /* over time: bins of a round width, about 200 over the longest run */
    double span = 0;
    for (int i = 0; i < n; i++) span = fmax(span, column_max(steps[i], "start_s"));
    double bin = nice_bin(span);
    char bins[MAX_DIRS][4300], ts_title[256], runs[MAX_DIRS * 4600] = "runs=\"";
    snprintf(ts_title, sizeof ts_title, "over time (means over %g s bins)", bin);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "over_time_%d.csv", i + 1);
        FILE *f = create(fs, name, bins[i], sizeof bins[i], e);
        if (!f) return -1;
        int rc = reduce_bin(f, steps[i], bin, 0, -1, e);
        if (close_checked(fs, f, bins[i], e) || rc) return -1;
        /* the runs as gnuplot words: "\"LABEL\" 'FILE' ..." (at most nine arguments otherwise) */
        size_t len = strlen(runs);
        snprintf(runs + len, sizeof runs - len, "%s\\\"%s\\\" '%s'", i ? " " : "", labels[i], bins[i]);
    }
    strcat(runs, "\"");
    const char *sets[] = {"ycols=\"batch_size kv_usage num_waiting\"", runs};
    const char *ts_args[] = {ts_title};
    return draw(fs, "timeseries.gp", "over_time", sets, 2, ts_args, 1, e);
}

/* ---- sweeps ---------------------------------------------------------------------------------- */

/* The load key of a sweep's results.csv and the other swept keys ("k={k} ..."), from the
 * parameter columns (between id and status) that take more than one value. */
static int sweep_keys(const char *file, char *x, size_t xn, char *series, size_t sn, terr *e)
{
    csv_rows t;
    if (csv_rows_open(&t, file, e)) return -1;
    int id = csv_rows_need(&t, "id", e), status = id < 0 ? -1 : csv_rows_need(&t, "status", e);
    if (id < 0 || status < 0) {
        csv_rows_close(&t);
        return terr_set(e, "%s: not a sweep's results.csv (no id and status columns)", file);
    }
    /* per parameter column: its first value, whether it varies, whether every value is a number */
    int np = status - id - 1;
    char **first = xcalloc((size_t)np + 1, sizeof *first);
    bool *varies = xcalloc((size_t)np + 1, sizeof *varies), *numeric = xcalloc((size_t)np + 1, sizeof *numeric);
    int more;
    for (int64_t r = 0; (more = csv_rows_next(&t, e)) > 0; r++)
        for (int k = 0; k < np; k++) {
            const char *v = csv_rows_at(&t, id + 1 + k);
            double d;
            if (!r) {
                first[k] = xstrdup(v);
                numeric[k] = true;
            }
            varies[k] |= strcmp(v, first[k]) != 0;
            numeric[k] &= !parse_f64(v, &d);
        }
    static const char *const load_keys[] = {"request-rate", "max-concurrency", "time-scale"};
    int best = -1, rank = 99;
    for (int k = 0; more == 0 && k < np; k++) {
        if (!varies[k] || !numeric[k]) continue;
        int j = 3;
        while (j > 0 && strcmp(load_keys[j - 1], csv_rows_name(&t, id + 1 + k))) j--;
        int my_rank = j ? j - 1 : 3;
        if (my_rank < rank) {
            rank = my_rank;
            best = k;
        }
    }
    x[0] = series[0] = 0;
    size_t used = 0;
    for (int k = 0; more == 0 && k < np; k++) {
        if (!varies[k] || k == best) continue;
        const char *name = csv_rows_name(&t, id + 1 + k);
        used += (size_t)snprintf(series + used, sn > used ? sn - used : 0, "%s%s={%s}", used ? " " : "", name, name);
    }
    if (best >= 0) snprintf(x, xn, "%s", csv_rows_name(&t, id + 1 + best));
    for (int k = 0; k < np; k++) free(first[k]);
    free(first);
    free(varies);
    free(numeric);
    csv_rows_close(&t);
    if (more < 0) return -1;
    if (best < 0)
        return terr_set(e, "%s: no swept key with numeric values to plot against (a sweep over a rate, a "
                           "concurrency or a time scale)", file);
    return 0;
}

/* The mean arrival rate (requests/s) of the sweep's trace as replayed at time scale 1, when
 * every point replays the same trace (and the same max-requests): rows / (last - first
 * arrival). 0 when that cannot be known (several traces, an unreadable one). */
static double trace_rate(const char *results)
{
    csv_rows t;
    terr e;
    if (csv_rows_open(&t, results, &e)) return 0;
    int tc = csv_rows_col(&t, "trace"), mc = csv_rows_col(&t, "max-requests");
    char trace[4096] = "", max_text[64] = "";
    bool same = tc >= 0, any = false;
    while (same && csv_rows_next(&t, &e) == 1) {
        const char *m = mc >= 0 ? csv_rows_at(&t, mc) : "";
        if (!any) {
            snprintf(trace, sizeof trace, "%s", csv_rows_at(&t, tc));
            snprintf(max_text, sizeof max_text, "%s", m);
            any = true;
        }
        same = !strcmp(csv_rows_at(&t, tc), trace) && !strcmp(m, max_text);
    }
    csv_rows_close(&t);
    int64_t max = 0;
    if (*max_text) parse_i64(max_text, &max);
    trace_options to = {.time_scale = 1, .max_requests = max, .skip_bad_rows = true};
    trace_reader *tr;
    double rate = 0;
    if (same && any && !trace_open(&tr, trace, &to, &e)) {
        arrival_source src = trace_source(tr);
        arrival a;
        int64_t n = 0, first = 0, last = 0;
        while (src.next(src.self, &a, &e) == 1) {
            if (!n++) first = a.arrival_ns;
            last = a.arrival_ns;
        }
        if (n > 1 && last > first) rate = (double)n / ((double)(last - first) / 1e9);
        trace_close(tr);
    }
    return rate;
}

static int plot_sweep(figure_set *fs, const char *dir, const char *label, int index, terr *e)
{
    char results[4300], x[128], series[1024], data[4300], name[160];
    snprintf(results, sizeof results, "%s/results.csv", dir);
    if (sweep_keys(results, x, sizeof x, series, sizeof series, e)) return -1;
    snprintf(name, sizeof name, "sweep_%d.csv", index);
    FILE *f = create(fs, name, data, sizeof data, e);
    if (!f) return -1;
    /* a time-scale sweep is drawn against the offered rate it makes, when the trace says it */
    char add[1100], keep[512], rate[128];
    double base = !strcmp(x, "time-scale") ? trace_rate(results) : 0;
    snprintf(rate, sizeof rate, "rate={%.9g/time-scale}", base);
    if (base > 0) snprintf(x, sizeof x, "rate");
    snprintf(add, sizeof add, "series=%s", *series ? series : "all");
    snprintf(keep, sizeof keep, "%s,series,median_ttft_ms,p99_ttft_ms,median_tpot_ms,p99_tpot_ms", x);
    const char *adds[] = {add, rate};
    int rc = reduce_select(f, results, adds, base > 0 ? 2 : 1, "status=ok", keep, e);
    if (close_checked(fs, f, data, e) || rc) return -1;
    char title[512], fig[300];
    if (base > 0) snprintf(title, sizeof title, "%s: latency against the offered rate (%.3g req/s / time-scale)", label, base);
    else snprintf(title, sizeof title, "%s: latency against %s", label, x);
    snprintf(fig, sizeof fig, "sweep_%s", label);
    for (char *p = fig; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", *p)) *p = '_';
    const char *args[] = {data, GNUPLOT_OUT, title, x, "median_ttft_ms p99_ttft_ms median_tpot_ms p99_tpot_ms",
                          "series"};
    const char *sets[] = {"ncols=2", "logy=\"median_ttft_ms p99_ttft_ms\"", !strcmp(x, "time-scale") ? "logx=1" : "logx=0"};
    return draw(fs, "vs_x.gp", fig, sets, 3, args, 6, e);
}

int plot_main(int argc, char **argv)
{
    plot_options o = {0};
    terr e = {{0}};
    int code = 2;
    opts_defaults(plot_specs, &o);
    int rc = opts_parse(plot_specs, &o, argc, argv, take_positional, usage, &e);
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (!rc && !o.ndirs) rc = terr_set(&e, "missing the run or sweep folders\n%s", usage);
    const char *runs[MAX_DIRS], *sweeps[MAX_DIRS];
    int nruns = 0, nsweeps = 0;
    for (int i = 0; !rc && i < o.ndirs; i++) {
        const char *d = o.dirs[i];
        struct stat st;
        if (stat(d, &st) || !S_ISDIR(st.st_mode)) rc = terr_set(&e, "%s: no such folder", d);
        else if (file_in(d, "requests.csv")) runs[nruns++] = d;
        else if (file_in(d, "results.csv")) sweeps[nsweeps++] = d;
        else
            rc = terr_set(&e, "%s: neither a run (no requests.csv: tandem sim|run --out DIR writes one) nor a sweep "
                              "(no results.csv: tandem sweep --out DIR)", d);
    }
    if (rc) {
        fprintf(stderr, "tandem plot: %s\n", e.msg);
        goto done;
    }
    /* labels: the folders' names, with the parent's when two are alike */
    char labels[MAX_DIRS][256];
    const char *run_labels[MAX_DIRS];
    for (int i = 0; i < nruns; i++) {
        folder_name(runs[i], labels[i], sizeof labels[i]);
        run_labels[i] = labels[i];
    }
    bool alike[MAX_DIRS] = {0};
    for (int i = 0; i < nruns; i++)
        for (int j = 0; j < nruns; j++) alike[i] |= i != j && !strcmp(labels[i], labels[j]);
    for (int i = 0; i < nruns; i++)
        if (alike[i]) {
                char parent[4096], pn[128], own[128];
                snprintf(parent, sizeof parent, "%s", runs[i]);
                folder_name(dirname(parent), pn, sizeof pn);
                folder_name(runs[i], own, sizeof own);
                snprintf(labels[i], sizeof labels[i], "%s/%s", pn, own);
            }
    char out[4200], plots[4200];
    if (o.out && *o.out) snprintf(out, sizeof out, "%s", o.out);
    else if (o.ndirs == 1) snprintf(out, sizeof out, "%s/figures", o.dirs[0]);
    else snprintf(out, sizeof out, "figures");
    if (mkdir_p(out)) {
        fprintf(stderr, "tandem plot: --out %s: cannot create: %s\n", out, strerror(errno));
        code = 1;
        goto done;
    }
    figure_set fs = {plots, out, gnuplot_find_scripts(plots, sizeof plots), o.quiet, false};
    if (!o.quiet) printf("plot: %d run%s, %d sweep%s -> %s\n", nruns, nruns == 1 ? "" : "s", nsweeps,
                         nsweeps == 1 ? "" : "s", out);
    rc = nruns ? plot_runs(&fs, runs, run_labels, nruns, &e) : 0;
    for (int i = 0; !rc && i < nsweeps; i++) {
        char label[256];
        folder_name(sweeps[i], label, sizeof label);
        rc = plot_sweep(&fs, sweeps[i], label, i + 1, &e);
    }
    if (rc) {
        fprintf(stderr, "tandem plot: %s\n", e.msg);
        code = fs.io_error ? 1 : 2;
        goto done;
    }
    if (!fs.have_gnuplot) {
        fprintf(stderr, "tandem plot: gnuplot (and plots/*.gp) not found: the data files are in %s, the figures "
                        "are not drawn\n", out);
        code = 1;
        goto done;
    }
    code = 0;
done:
    opts_free(plot_specs, &o);
    return code;
}
