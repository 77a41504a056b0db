/*
 * compare_cmd.c: `tandem compare MEASURED SIMULATED`: how close the simulator is to a measured
 * run of the same trace (issue 19).
 *
 * MEASURED is a tandem run directory, a directory of repeats (DIR/1, DIR/2, ...) or a `vllm
 * bench serve --save-result --save-detailed` JSON; SIMULATED a `tandem sim --out` directory
 * (cli/run_results.h). The runs are first checked to be of the same requests (cli/compare.h:
 * compare_check). Then two tables: the request-level metrics side by side with the signed
 * relative error and, with repeats, the run-to-run spread (min, max, (max - min) / mean), so
 * that an error inside the noise reads as such; and every measured step re-predicted from its
 * shape by the simulated run's cost model, per step class; and, when MEASURED ran with
 * --kernel-trace and the cost model has parts (the roofline), its kernel time by kind against
 * them (cli/compare.h: kind_errors).
 *
 * With --out DIR: compare.json (every number), step_errors.csv, the CDF data of TTFT and E2E
 * (cdf_ttft.dat, cdf_e2el.dat, in `tandem reduce cdf`'s format) and, when gnuplot is on PATH,
 * the figures compare_steps.{png,svg} (plots/compare_steps.gp) and compare_cdf.{png,svg}
 * (plots/cdf.gp). Each file is written under a temporary name and renamed when complete.
 *
 * With repeats, the measured value of a metric is its mean over the repeats; the first repeat
 * is the one joined request by request, drawn in the CDFs and re-predicted step by step.
 *
 * Exit codes: 0 ok, 1 an output could not be written, 2 bad flags, unreadable inputs or runs
 * that do not match (the message says what differs).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/compare.h"
#include "core/metrics.h"
#include "cli/gnuplot.h"
#include "cli/reduce.h"
#include "core/options.h"

typedef struct compare_options {
    char *out;
    bool figures, quiet;
    const char *measured, *simulated; /* the positionals; point into argv */
} compare_options;

#define O(f) offsetof(compare_options, f)
static const opt_spec compare_specs[] = {
    {"out", OPT_STR, O(out), "", "directory for compare.json, step_errors.csv, the CDF data and the figures"},
    {"figures", OPT_BOOL, O(figures), "true", "with --out, draw the figures with gnuplot"},
    {"quiet", OPT_BOOL, O(quiet), "false", "print nothing on success"},
    OPT_END,
};
#undef O

static const char *usage =
    "usage: tandem compare MEASURED SIMULATED [--out DIR] [--no-figures] [--quiet]\n\n"
    "How close the simulator is to a measured run of the same trace. MEASURED: a run directory\n"
    "(tandem run --out), a directory of repeats DIR/1, DIR/2, ... (each a run directory), or a\n"
    "`vllm bench serve --save-result --save-detailed` JSON whose requests are the trace's rows in\n"
    "order. SIMULATED: a `tandem sim --out` directory. Prints the request-level metrics side by\n"
    "side with the relative error (simulated - measured) / measured and, with repeats, the\n"
    "run-to-run spread; then every measured step re-predicted by the simulated run's cost model,\n"
    "per step class, and (a --kernel-trace run against the roofline) kernel time by kind.\n";

static int take_positional(void *dst, const char *arg, terr *e)
{
    compare_options *o = dst;
    if (!o->measured) o->measured = arg;
    else if (!o->simulated) o->simulated = arg;
    else return terr_set(e, "unexpected argument \"%s\" (MEASURED and SIMULATED are given already)", arg);
    return 0;
}

/* (s - m) / m; 0 when both are 0; NAN when either is unknown or only m is 0. */
static double rel_error(double m, double s)
{
    if (isnan(m) || isnan(s)) return NAN;
    if (m == 0) return s == 0 ? 0 : NAN;
    return (s - m) / m;
}

static json_t *json_num(double x) { return isnan(x) ? json_null() : json_real(x); }

/* ---- the metrics of every measured run ------------------------------------------------------- */

typedef struct metric_row {
    double measured, simulated, error;
    double min, max, spread; /* over the repeats (NAN with one run) */
    bool within_noise;       /* |error| <= spread */
} metric_row;

static void fill_rows(double (*runs)[COMPARE_NUM_METRICS], int num_runs, const double *sim, metric_row *rows)
{
    for (int i = 0; i < COMPARE_NUM_METRICS; i++) {
        metric_row *r = &rows[i];
        double sum = 0;
        int n = 0;
        r->min = INFINITY;
        r->max = -INFINITY;
        for (int k = 0; k < num_runs; k++) {
            double x = runs[k][i];
            if (isnan(x)) continue;
            sum += x;
            n++;
            r->min = fmin(r->min, x);
            r->max = fmax(r->max, x);
        }
        r->measured = n ? sum / n : NAN;
        r->simulated = sim[i];
        r->error = rel_error(r->measured, r->simulated);
        r->spread = num_runs > 1 && n ? (r->measured != 0 ? (r->max - r->min) / fabs(r->measured) : 0) : NAN;
        if (num_runs == 1 || !n) r->min = r->max = NAN;
        r->within_noise = !isnan(r->spread) && !isnan(r->error) && fabs(r->error) <= r->spread;
    }
}

/* ---- the terminal tables --------------------------------------------------------------------- */

static const char *fmt_value(double x, char *buf, size_t n)
{
    if (isnan(x)) snprintf(buf, n, "-");
    else if (fabs(x) >= 1e4) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, "%.4g", x);
    return buf;
}

/* A fraction as a percentage, signed or not. */
static const char *fmt_pct(double x, bool sign, char *buf, size_t n)
{
    if (isnan(x)) snprintf(buf, n, "-");
    else snprintf(buf, n, sign ? "%+.1f%%" : "%.1f%%", 100 * x);
    return buf;
}

static void print_metrics(const metric_row *rows, int num_runs, FILE *f)
{
    char a[32], b[32], c[32], d[32], lo[32], hi[32];
    if (num_runs > 1)
        fprintf(f, "%-18s %-6s %11s %11s %9s   %s\n", "metric", "unit", "measured", "simulated", "error",
                "spread: (max-min)/mean [min, max]");
    else fprintf(f, "%-18s %-6s %11s %11s %9s\n", "metric", "unit", "measured", "simulated", "error");
    for (int i = 0; i < COMPARE_NUM_METRICS; i++) {
        const metric_row *r = &rows[i];
        const compare_metric *m = &compare_metric_defs[i];
        fprintf(f, "%-18s %-6s %11s %11s %9s", m->label, m->unit, fmt_value(r->measured, a, sizeof a),
                fmt_value(r->simulated, b, sizeof b), fmt_pct(r->error, true, c, sizeof c));
        if (num_runs > 1 && !isnan(r->spread))
            fprintf(f, "   %6s [%s, %s]%s", fmt_pct(r->spread, false, d, sizeof d), fmt_value(r->min, lo, sizeof lo),
                    fmt_value(r->max, hi, sizeof hi), r->within_noise ? "  within the noise" : "");
        fputc('\n', f);
    }
}

static void print_steps(const step_errors *se, const char *path, FILE *f)
{
    fprintf(f, "\nstep re-prediction: %" PRId64 " steps of %s predicted from their shapes by %s (%s on %s)\n",
            se->num_steps, path, se->cost_model, se->model, se->gpu);
    fprintf(f, "%-14s %8s %13s %10s %11s %10s\n", "class", "steps", "median |err|", "p90 |err|", "median err",
            "total err");
    for (int c = 0; c < STEP_NUM_CLASSES; c++) {
        const step_class_error *x = &se->cls[c];
        if (!x->count) continue;
        char a[32], b[32], d[32], t[32];
        fprintf(f, "%-14s %8" PRId64 " %13s %10s %11s %10s\n", step_class_labels[c], x->count,
                fmt_pct(x->median_abs, false, a, sizeof a), fmt_pct(x->p90_abs, false, b, sizeof b),
                fmt_pct(x->median_signed, true, d, sizeof d), fmt_pct(x->total_bias, true, t, sizeof t));
    }
    if (se->num_zero) fprintf(f, "(%" PRId64 " steps measured at 0 us are left out)\n", se->num_zero);
    fprintf(f, "total err: total predicted time / total measured time - 1; err > 0: the model is slow\n");
    const kind_errors *k = &se->kinds;
    if (!k->have) return;
    fprintf(f, "\nkernel time by kind, %" PRId64 " steps (the run's --kernel-trace against the cost model's parts",
            k->steps);
    if (k->fused_steps) fprintf(f, "; %" PRId64 " with the fused batch-1 kernel left out", k->fused_steps);
    fprintf(f, ")\n%-14s %12s %12s %10s\n", "kind", "measured ms", "predicted ms", "err");
    for (int i = 0; i <= KERNEL_NUM_KINDS; i++) {
        if (i == KERNEL_FUSED) continue;
        char t[32];
        double m = k->measured_ms[i], p = k->predicted_ms[i];
        fprintf(f, "%-14s %12.1f %12.1f %10s\n", i < KERNEL_NUM_KINDS ? kernel_kind_names[i] : "gap (no kernel)", m,
                p, fmt_pct(m > 0 ? p / m - 1 : NAN, true, t, sizeof t));
    }
}

/* ---- compare.json ---------------------------------------------------------------------------- */

static json_t *metrics_json(const metric_row *rows, int num_runs)
{
    json_t *o = json_object();
    for (int i = 0; i < COMPARE_NUM_METRICS; i++) {
        const metric_row *r = &rows[i];
        json_t *m = json_object();
        json_object_set_new(m, "label", json_string(compare_metric_defs[i].label));
        json_object_set_new(m, "unit", json_string(compare_metric_defs[i].unit));
        json_object_set_new(m, "measured", json_num(r->measured));
        json_object_set_new(m, "simulated", json_num(r->simulated));
        json_object_set_new(m, "rel_error", json_num(r->error));
        if (num_runs > 1) {
            json_t *s = json_object();
            json_object_set_new(s, "min", json_num(r->min));
            json_object_set_new(s, "max", json_num(r->max));
            json_object_set_new(s, "rel", json_num(r->spread));
            json_object_set_new(s, "within_noise", json_boolean(r->within_noise));
            json_object_set_new(m, "spread", s);
        } else {
            json_object_set_new(m, "spread", json_null());
        }
        json_object_set_new(o, compare_metric_defs[i].key, m);
    }
    return o;
}

static json_t *steps_json(const step_errors *se)
{
    json_t *o = json_object(), *classes = json_object();
    json_object_set_new(o, "num_steps", json_integer(se->num_steps));
    json_object_set_new(o, "num_measured_zero", json_integer(se->num_zero));
    json_object_set_new(o, "cost_model", json_string(se->cost_model));
    json_object_set_new(o, "model", json_string(se->model));
    json_object_set_new(o, "gpu", json_string(se->gpu));
    for (int c = 0; c < STEP_NUM_CLASSES; c++) {
        const step_class_error *x = &se->cls[c];
        json_t *k = json_object();
        json_object_set_new(k, "count", json_integer(x->count));
        json_object_set_new(k, "median_abs_rel_error", json_num(x->median_abs));
        json_object_set_new(k, "p90_abs_rel_error", json_num(x->p90_abs));
        json_object_set_new(k, "median_rel_error", json_num(x->median_signed));
        json_object_set_new(k, "total_measured_ms", json_real(x->total_measured_ms));
        json_object_set_new(k, "total_predicted_ms", json_real(x->total_predicted_ms));
        json_object_set_new(k, "total_rel_error", json_num(x->total_bias));
        json_object_set_new(classes, step_class_names[c], k);
    }
    json_object_set_new(o, "classes", classes);
    if (se->kinds.have) {
        const kind_errors *k = &se->kinds;
        json_t *kinds = json_object();
        for (int i = 0; i <= KERNEL_NUM_KINDS; i++) {
            if (i == KERNEL_FUSED) continue;
            double m = k->measured_ms[i], p = k->predicted_ms[i];
            json_object_set_new(kinds, i < KERNEL_NUM_KINDS ? kernel_kind_names[i] : "gap",
                                json_pack("{s:f,s:f,s:o}", "measured_ms", m, "predicted_ms", p, "rel_error",
                                          json_num(m > 0 ? p / m - 1 : NAN)));
        }
        json_object_set_new(o, "kernel_kinds", json_pack("{s:I,s:I,s:o}", "steps", (json_int_t)k->steps,
                                                         "fused_steps_left_out", (json_int_t)k->fused_steps, "kinds",
                                                         kinds));
    }
    return o;
}

/* ---- files: complete or absent --------------------------------------------------------------- */

/* A file of the output directory, complete or absent (core/util.h: out_atomic). */
typedef struct out_file {
    out_atomic a;
    FILE *f;
    char path[4200];
} out_file;

static int out_open(out_file *o, const char *dir, const char *name, terr *e)
{
    snprintf(o->path, sizeof o->path, "%s/%s", dir, name);
    o->f = NULL;
    if (out_atomic_open(&o->a, o->path, "w", e)) return -1;
    o->f = o->a.f;
    return 0;
}

/* Closes and puts in place (ok), or closes and removes the temporary file. */
static int out_close(out_file *o, bool ok, terr *e)
{
    if (!o->f) return 0;
    o->f = NULL;
    int rc = out_atomic_close(&o->a, ok, e);
    return ok ? rc : 0;
}

static int write_cdf(const char *dir, const char *name, const char *what, const run_results *m,
                     const run_results *s, bool e2el, terr *e)
{
    out_file o;
    if (out_open(&o, dir, name, e)) return -1;
    const run_results *runs[] = {m, s};
    const char *labels[] = {"measured", "simulated"};
    for (int k = 0; k < 2; k++) {
        samples x = {0};
        for (int64_t i = 0; i < runs[k]->num_requests; i++) {
            const run_request *q = &runs[k]->req[i];
            if (q->finished) samples_add(&x, e2el ? q->e2el_ms : q->ttft_ms);
        }
        if (k) fprintf(o.f, "\n\n");
        reduce_cdf_block(o.f, labels[k], what, x.v, NULL, NULL, x.len, 200);
        samples_free(&x);
    }
    return out_close(&o, true, e);
}

/* ---- figures --------------------------------------------------------------------------------- */

static int figures(const char *dir, const step_errors *steps, bool quiet, terr *e)
{
    char plots[4200], errors[4300], ttft[4300], e2el[4300], title[300];
    snprintf(errors, sizeof errors, "%s/step_errors.csv", dir);
    snprintf(ttft, sizeof ttft, "%s/cdf_ttft.dat", dir);
    snprintf(e2el, sizeof e2el, "%s/cdf_e2el.dat", dir);
    const char *cm = steps ? steps->cost_model : "";
    snprintf(title, sizeof title, "step time: measured, and predicted from each step's shape by %.*s on %.60s",
             (int)strcspn(cm, ":"), cm, steps ? steps->gpu : ""); /* a profile's name, not its path */
    const char *step_args[] = {title, errors};
    const char *cdf_args[] = {"latency of the completed requests: measured and simulated", ttft, "TTFT (ms)", e2el,
                              "end-to-end latency (ms)"};
    int rc = gnuplot_find_scripts(plots, sizeof plots) ? 0 : 1;
    if (!rc && steps) rc = gnuplot_draw(plots, "compare_steps.gp", dir, "compare_steps", NULL, 0, step_args, 2, e);
    if (!rc) rc = gnuplot_draw(plots, "cdf.gp", dir, "compare_cdf", NULL, 0, cdf_args, 5, e);
    if (rc < 0) return -1;
    if (quiet) return 0;
    if (rc == 0) {
        printf("figures: %s/%scompare_cdf.png (and .svg)\n", dir, steps ? "compare_steps.png, " : "");
        return 0;
    }
    printf("figures: gnuplot or plots/ not found; from the repository root, draw them with\n");
    if (steps) printf("  gnuplot -c plots/compare_steps.gp %s/compare_steps \"%s\" %s\n", dir, step_args[0], errors);
    printf("  gnuplot -c plots/cdf.gp %s/compare_cdf \"%s\" %s \"%s\" %s \"%s\"\n", dir, cdf_args[0], ttft,
           cdf_args[2], e2el, cdf_args[4]);
    return 0;
}

/* ---- the command ----------------------------------------------------------------------------- */

typedef struct comparison {
    run_results sim, first;                /* SIMULATED, and MEASURED's first run */
    char **runs;                           /* (num_runs) MEASURED's run paths */
    int num_runs;
    bool repeats;
    metric_row rows[COMPARE_NUM_METRICS];
    bool have_steps;
    step_errors steps;
    json_t *notes;
} comparison;

/* Loads every measured run, checks it against SIMULATED and computes the metric rows.
 * Returns 0 or 2 (e set). */
static int load_and_check(comparison *c, const compare_options *o, terr *e)
{
    if (run_results_load(&c->sim, o->simulated, e) ||
        run_results_find(o->measured, &c->runs, &c->num_runs, &c->repeats, e))
        return 2;
    double(*values)[COMPARE_NUM_METRICS] = xcalloc((size_t)c->num_runs, sizeof *values);
    int rc = 2;
    for (int k = 0; k < c->num_runs; k++) {
        run_results r;
        if (run_results_load(&r, c->runs[k], e)) goto done;
        json_t *scratch = json_array();
        terr why;
        int bad = compare_check(&r, &c->sim, k ? scratch : c->notes, &why);
        json_decref(scratch);
        if (bad) {
            terr_set(e, "%s and %s are not runs of the same requests: %s", c->runs[k], o->simulated, why.msg);
            run_results_free(&r);
            goto done;
        }
        compare_metrics(&r, values[k]);
        if (k == 0) c->first = r;
        else run_results_free(&r);
    }
    double sim[COMPARE_NUM_METRICS];
    compare_metrics(&c->sim, sim);
    fill_rows(values, c->num_runs, sim, c->rows);
    rc = 0;
done:
    free(values);
    return rc;
}

static int64_t completed(const run_results *r)
{
    int64_t n = 0;
    for (int64_t i = 0; i < r->num_requests; i++) n += r->req[i].finished;
    return n;
}

static json_t *report_json(const comparison *c, const compare_options *o)
{
    json_t *j = json_object(), *m = json_object(), *s = json_object(), *runs = json_array();
    json_object_set_new(m, "path", json_string(o->measured));
    json_object_set_new(m, "source", json_string(c->first.source == RUN_VLLM ? "vllm bench serve" : "tandem"));
    for (int k = 0; k < c->num_runs; k++) json_array_append_new(runs, json_string(c->runs[k]));
    json_object_set_new(m, "runs", runs);
    json_object_set_new(m, "num_requests", json_integer(c->first.num_requests));
    json_object_set_new(m, "completed", json_integer(completed(&c->first)));
    json_object_set_new(j, "measured", m);
    json_object_set_new(s, "path", json_string(o->simulated));
    json_object_set_new(s, "num_requests", json_integer(c->sim.num_requests));
    json_object_set_new(s, "completed", json_integer(completed(&c->sim)));
    const char *keys[] = {"model", "gpu", "cost-model"};
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        char text[4096];
        run_results_config_text(&c->sim, keys[i], text, sizeof text);
        json_object_set_new(s, keys[i], json_string(text));
    }
    json_object_set_new(j, "simulated", s);
    json_object_set_new(j, "metrics", metrics_json(c->rows, c->num_runs));
    json_object_set_new(j, "steps", c->have_steps ? steps_json(&c->steps) : json_null());
    json_object_set_new(j, "notes", json_incref(c->notes));
    return j;
}

/* Re-predicts the first run's steps (writing step_errors.csv with --out), then writes the CDF
 * data and compare.json. Returns 0, 1 (an output failed) or 2 (bad input). */
/* A JSON number as CSV text ("" for null). */
static void csv_num(FILE *f, json_t *v)
{
    if (json_is_number(v)) fprintf(f, ",%.10g", json_number_value(v));
    else fputc(',', f);
}

/* compare.json's two tables as CSV, for scripts that gather many comparisons (experiments/):
 * metrics.csv (metric,measured,simulated,rel_error,spread) and, with steps, step_classes.csv
 * (class,steps,median_abs_rel_error,p90_abs_rel_error,median_rel_error,total_rel_error). */
static int write_tables(const char *dir, json_t *j, terr *e)
{
    out_file m;
    if (out_open(&m, dir, "metrics.csv", e)) return -1;
    fprintf(m.f, "metric,measured,simulated,rel_error,spread\n");
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(j, "metrics"), key, v) {
        fputs(key, m.f);
        csv_num(m.f, json_object_get(v, "measured"));
        csv_num(m.f, json_object_get(v, "simulated"));
        csv_num(m.f, json_object_get(v, "rel_error"));
        csv_num(m.f, json_object_get(json_object_get(v, "spread"), "rel")); /* empty with one run */
        fputc('\n', m.f);
    }
    if (out_close(&m, true, e)) return -1;
    json_t *classes = json_object_get(json_object_get(j, "steps"), "classes");
    if (!classes) return 0;
    out_file s;
    if (out_open(&s, dir, "step_classes.csv", e)) return -1;
    fprintf(s.f, "class,steps,median_abs_rel_error,p90_abs_rel_error,median_rel_error,total_rel_error\n");
    json_object_foreach(classes, key, v) {
        fputs(key, s.f);
        csv_num(s.f, json_object_get(v, "count"));
        csv_num(s.f, json_object_get(v, "median_abs_rel_error"));
        csv_num(s.f, json_object_get(v, "p90_abs_rel_error"));
        csv_num(s.f, json_object_get(v, "median_rel_error"));
        csv_num(s.f, json_object_get(v, "total_rel_error"));
        fputc('\n', s.f);
    }
    return out_close(&s, true, e);
}

static int analyse_and_write(comparison *c, const compare_options *o, terr *e)
{
    if (o->out && mkdir_p(o->out)) {
        terr_set(e, "--out %s: cannot create directory: %s", o->out, strerror(errno));
        return 1;
    }
    out_file errors = {0};
    if (c->first.steps_path) {
        if (o->out && out_open(&errors, o->out, "step_errors.csv", e)) return 1;
        if (compare_steps(c->first.steps_path, &c->sim, errors.f, &c->steps, e)) {
            out_close(&errors, false, NULL);
            return 2;
        }
        c->have_steps = true;
        if (out_close(&errors, true, e)) return 1;
    } else {
        json_array_append_new(c->notes, json_string("MEASURED has no steps.csv: no per-step re-prediction"));
    }
    if (!o->out) return 0;
    if (!c->have_steps) { /* what an earlier comparison into this directory left would not be ours */
        const char *stale[] = {"step_errors.csv", "compare_steps.png", "compare_steps.svg"};
        for (size_t i = 0; i < ARRAY_LEN(stale); i++) {
            char path[4300];
            snprintf(path, sizeof path, "%s/%s", o->out, stale[i]);
            unlink(path);
        }
    }
    if (write_cdf(o->out, "cdf_ttft.dat", "ttft_ms", &c->first, &c->sim, false, e) ||
        write_cdf(o->out, "cdf_e2el.dat", "e2el_ms", &c->first, &c->sim, true, e))
        return 1;
    json_t *j = report_json(c, o);
    out_file cj;
    int bad = out_open(&cj, o->out, "compare.json", e) ||
              json_dumpf(j, cj.f, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) || fputc('\n', cj.f) == EOF;
    bad = out_close(&cj, !bad, e) || bad || write_tables(o->out, j, e);
    json_decref(j);
    return bad ? 1 : 0;
}

static void print_report(const comparison *c, const compare_options *o)
{
    int64_t done_m = completed(&c->first), done_s = completed(&c->sim);
    printf("tandem compare: MEASURED %s (%s", o->measured, c->first.source == RUN_VLLM ? "vllm bench serve" : "tandem");
    if (c->repeats) printf(", %d repeats", c->num_runs);
    printf("), SIMULATED %s\n", o->simulated);
    printf("%" PRId64 " requests; completed: %" PRId64 " measured, %" PRId64 " simulated", c->sim.num_requests, done_m,
           done_s);
    if (c->num_runs > 1) printf("; measured = mean of %d repeats", c->num_runs);
    printf("\nerror = (simulated - measured) / measured\n\n");
    print_metrics(c->rows, c->num_runs, stdout);
    if (c->have_steps) print_steps(&c->steps, c->first.steps_path, stdout);
    for (size_t i = 0; i < json_array_size(c->notes); i++)
        printf("note: %s\n", json_string_value(json_array_get(c->notes, i)));
    if (o->out)
        printf("outputs: %s/compare.json, metrics.csv, %scdf_ttft.dat, cdf_e2el.dat\n", o->out,
               c->have_steps ? "step_classes.csv, step_errors.csv, " : "");
}

int compare_main(int argc, char **argv)
{
    compare_options o = {0};
    opts_defaults(compare_specs, &o);
    terr e = {{0}};
    comparison c = {.notes = json_array()};
    int code = 2, rc = opts_parse(compare_specs, &o, argc, argv, take_positional, usage, &e);
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (!rc && !o.simulated) rc = terr_set(&e, "needs MEASURED and SIMULATED (see --help)");
    if (rc || (code = load_and_check(&c, &o, &e)) || (code = analyse_and_write(&c, &o, &e))) {
        fprintf(stderr, "tandem compare: %s\n", e.msg);
        goto done;
    }
    if (!o.quiet) print_report(&c, &o);
    code = 0;
    if (o.out && o.figures && figures(o.out, c.have_steps ? &c.steps : NULL, o.quiet, &e)) {
        fprintf(stderr, "tandem compare: %s\n", e.msg);
        code = 1;
    }
done:
    run_results_free(&c.sim);
    run_results_free(&c.first);
    for (int k = 0; k < c.num_runs; k++) free(c.runs[k]);
    free(c.runs);
    json_decref(c.notes);
    opts_free(compare_specs, &o);
    return code;
}
