/*
 * reduce.h: the statistics the figures need, from a run's or a sweep's CSV files, as small text
 * files gnuplot reads (`tandem reduce`, `tandem plot`, the experiments' reduce phases).
 *
 *   cdf     empirical CDFs of a column, one gnuplot block per series, cut to about POINTS levels
 *           plus 50 over the top 1% so the tail is exact; optionally weighted by a column
 *   quantile  the values at given levels of those CDFs (p99.9, max), one row per series
 *   group   count, mean, p50, p90, p99, max of columns per group of rows (core/stats.h, numpy's
 *           percentiles: the same numbers as summary.json)
 *   bin     a steps.csv cut into fixed time bins (busy fraction, KV usage, batch size, queue)
 *   itl     every inter-token latency of a run rebuilt from its steps.csv
 *   select  rows and columns of a CSV (a sweep's results.csv), with derived columns
 *   pivot   a long table turned wide: one row per value of a column, one column per value of
 *           another
 *   cross   where a metric crosses targets against a swept value, per group (capacity knees)
 *   best    per group, a metric's largest or smallest value, where it is reached, and the first
 *           swept value within a factor of it (saturation knees)
 *   blocks  some blocks of a gnuplot data file (a CDF's), by label
 *   trace   a trace's requests, span and mean arrival rate
 *
 * Key decision: one small expression language over a row's columns serves every command, so the
 * experiment scripts keep only orchestration. An expression (a derived column, a group, a
 * metric) is text in which `{...}` is replaced by:
 *   {COL}                  the row's value of column COL
 *   {A/B*C+D - E}          arithmetic on numbers and columns (* and / before + and -), as a
 *                          number (%.6g); empty when a column of it is empty (the TPOT of a
 *                          one-token output). A '-' is subtraction only with a space on each
 *                          side: inside a word it belongs to a column's name (time-scale).
 *   {COND?THEN:ELSE}       THEN or ELSE (each itself an expression) by a condition:
 * A condition (also what --where takes, several joined by '&') is COL OP VALUE with OP one of
 *   =  !=   equal / not equal (VALUE may list alternatives: vllm|priority; numbers compare as
 *           numbers, so 1 = 1.0)
 *   ~       COL's value contains VALUE
 *   < <= > >=  numeric comparison
 * e.g. rate={5.53/time-scale}, system={scheduling-policy} + {preemption-mode},
 * len={prompt_tokens>=4096?long:short}, lengths={trace~fixed?fixed:lognormal}.
 * Output fields that hold a comma have it written as ';' (gnuplot splits at every comma).
 *
 * Every function writes to `out` and returns 0, or -1 with e naming the file, line, column or
 * expression at fault.
 */
#ifndef TANDEM_REDUCE_H
#define TANDEM_REDUCE_H

#include <stdbool.h>
#include <stdio.h>

#include "cli/csv_rows.h"
#include "core/util.h"

/* Evaluates expr on the current row of t into buf. */
int reduce_eval(const char *expr, const csv_rows *t, char *buf, size_t n, terr *e);
/* Whether the current row meets every '&'-joined condition of where (NULL or "": every row). */
int reduce_where(const char *where, const csv_rows *t, bool *match, terr *e);
/* Checks, from the header alone, that every column where names exists. */
int reduce_check_where(const char *where, const csv_rows *t, terr *e);

/* A column of a table (`ttft_ms`) or a derived one (`NAME=EXPR`). */
typedef struct reduce_field {
    char name[128];
    const char *expr; /* NULL: the column `col` itself */
    int col;
} reduce_field;
/* Sets f from spec; every column it names (in every branch of an expression) must be in t's
 * header, else -1 with e naming it. */
int reduce_field_init(reduce_field *f, const char *spec, const csv_rows *t, terr *e);
/* The field's value as a number; *empty when it is empty (then *v is NAN). */
int reduce_field_number(const reduce_field *f, const csv_rows *t, double *v, bool *empty, terr *e);

typedef struct reduce_cdf_options {
    const char *where;  /* only rows meeting these conditions (NULL: all) */
    const char *weight; /* a column weighting each row (rows of weight 0 left out); NULL: 1 each */
    double scale;       /* every value multiplied by this */
    int points;         /* levels of the CDF below its top 1% */
} reduce_cdf_options;
/* One block per series (labels[i], files[i]): "# LABEL: WHAT of N rows", `"LABEL" "F"`, then
 * `value F` rows. A requests.csv counts only its finished requests; rows with an empty value
 * are left out. */
int reduce_cdf(FILE *out, const char *metric, const char *const *labels, const char *const *files, int n,
               const reduce_cdf_options *o, terr *e);
/* One such block of values already in memory (compare and plot use it): v (n) and w (n) or NULL
 * (the weights, named `weight` in the comment). */
void reduce_cdf_block(FILE *out, const char *label, const char *what, double *v, double *w, const char *weight,
                      size_t n, int points);

typedef struct reduce_group_options {
    const char *prefix, *prefix_header; /* put before every data row / the header's names */
    bool no_header;
} reduce_group_options;
/* Per group (GROUP: a column, "-" for one group "all", or NAME=EXPR) of the finished rows:
 * GROUP,count,mean_M,p50_M,p90_M,p99_M,max_M for each metric M, groups in sorted order. */
int reduce_group(FILE *out, const char *file, const char *group, const char *const *metrics, int num_metrics,
                 const reduce_group_options *o, terr *e);

/* A steps.csv in bins of bin_s seconds from from_s (to to_s; < 0: the end): CSV
 * t_s,busy,kv_usage,kv_usage_max,batch_size,num_running,num_waiting,num_waiting_max,
 * tokens_per_step,preemptions (time-weighted means; an empty bin has busy 0, the rest empty). */
int reduce_bin(FILE *out, const char *steps, double bin_s, double from_s, double to_s, terr *e);

/* Every inter-token latency of a run from its steps.csv: CSV itl_ms,tokens. v0: vllm-v0's
 * prefill-only and decode-only steps (see reduce.c). */
int reduce_itl(FILE *out, const char *steps, bool v0, terr *e);

/* The rows of file meeting where, with the derived columns adds (NAME=EXPR) appended, written
 * as the columns keep (comma-separated; NULL: all, then the derived ones). */
int reduce_select(FILE *out, const char *file, const char *const *adds, int num_adds, const char *where,
                  const char *keep, terr *e);
/* The same, leaving out every row equal (as written) to one written before it. */
int reduce_select_distinct(FILE *out, const char *file, const char *const *adds, int num_adds, const char *where,
                           const char *keep, terr *e);

/* For each series (labels[i], files[i]) the values of metric (as reduce_cdf reads them) at the
 * percentiles at (comma-separated, in (0, 100]): the smallest value at which the weighted
 * fraction of values at or below it reaches the level, the level the CDF of reduce_cdf_block
 * shows it at (not interpolated; 100: the largest). CSV: series,pP_M... (max_M for 100). */
int reduce_quantile(FILE *out, const char *metric, const char *const *labels, const char *const *files, int n,
                    const char *at, const reduce_cdf_options *o, terr *e);

/* A long table made wide: one output row per distinct value of column row (in file order; "-":
 * a single row, and no such column), then per distinct value C of column col (in file order)
 * the columns values, named C (one value) or C_VALUE. A cell no row fills is empty; two rows
 * filling the same cell are an error. */
int reduce_pivot(FILE *out, const char *file, const char *row, const char *col, const char *const *values, int num_values,
                 terr *e);

/* Per group of rows (the values of the comma-separated columns by; NULL: one group), the x at
 * which y first rises above each target of at (comma-separated numbers), linear between the last
 * row at or below it and the first above, rows taken in file order: a knee, such as the highest
 * request rate whose latency meets an SLO. "<X" when the first row is already above, ">X" when no
 * row is. CSV: BY...,knee_X_at_T[suffix] for each target T. */
int reduce_cross(FILE *out, const char *file, const char *x, const char *y, const char *at, const char *by,
                 const char *suffix, terr *e);

/* Per group of rows (the values of the comma-separated columns by; NULL: one group, groups in
 * file order), one output column per spec NAME=FN(...):
 *   max(Y), min(Y)        the group's largest / smallest Y (%.6g)
 *   at_max(Y), at_min(Y)  x of the first row holding it
 *   first(Y OP F*max)     x of the first row (file order) with Y OP F times the group's largest
 *                         Y (F*min: smallest; OP one of >= <= > <; F* may be left out)
 * Rows with an empty Y are left out of that spec; empty when none is left or no row qualifies.
 * CSV: BY...,NAME.... */
int reduce_best(FILE *out, const char *file, const char *x, const char *by, const char *const *specs, int num_specs,
                terr *e);

/* The blocks of a gnuplot data file (a reduce_cdf output) labelled strip + labels[i], in the
 * order of labels, written labelled labels[i] (strip NULL: ""); each block's comment lines
 * and rows are kept as they are. A label no block has is an error. */
int reduce_blocks(FILE *out, const char *file, const char *const *labels, int n, const char *strip, terr *e);

/* CSV trace,format,requests,span_s,mean_rate_per_s: one row per trace (any format tandem reads),
 * the span from the first arrival to the last and requests / span (empty when the span is 0),
 * as `tandem trace stats` computes them. */
int reduce_trace(FILE *out, const char *const *files, int n, terr *e);

#endif
