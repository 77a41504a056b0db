/*
 * reduce_cmd.c: `tandem reduce cdf|quantile|group|bin|itl|select|pivot|cross|best|blocks|trace`:
 * the statistics behind the figures (cli/reduce.h), as small CSV or gnuplot data files on stdout
 * (or --out FILE). The experiment scripts call these and gnuplot; they compute nothing themselves.
 *
 * Exit codes: 0 ok, 1 the output could not be written, 2 bad flags or bad input (the message
 * names the file, line, column or expression).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/reduce.h"
#include "core/options.h"

#define MAX_POSITIONALS 256

typedef struct reduce_options {
    char *out, *where, *weight, *mode, *keep, *prefix, *prefix_header, *at, *by, *suffix, *strip;
    double scale, bin, from, to;
    int64_t points;
    bool no_header, distinct;
    const char *pos[MAX_POSITIONALS]; /* the positionals; point into argv */
    int npos;
} reduce_options;

#define O(f) offsetof(reduce_options, f)
#define OUT_OPT {"out", OPT_STR, O(out), "", "write here instead of stdout"}
static const opt_spec cdf_specs[] = {
    {"where", OPT_STR, O(where), "", "only rows meeting these conditions, e.g. priority=0 (several joined by &)"},
    {"weight", OPT_STR, O(weight), "", "weight each row by this column (rows of weight 0 are left out)"},
    {"scale", OPT_F64, O(scale), "1", "multiply every value (0.001: ms to s)"},
    {"points", OPT_I64, O(points), "200", "levels of the CDF below its top 1% (the top 1% gets 50 more)"},
    OUT_OPT,
    OPT_END,
};
static const opt_spec quantile_specs[] = {
    {"at", OPT_STR, O(at), "", "the percentiles, comma-separated, in (0, 100] (e.g. 50,99.9,100; 100: the largest)"},
    {"where", OPT_STR, O(where), "", "only rows meeting these conditions, e.g. priority=0 (several joined by &)"},
    {"weight", OPT_STR, O(weight), "", "weight each row by this column (rows of weight 0 are left out)"},
    {"scale", OPT_F64, O(scale), "1", "multiply every value (0.001: ms to s)"},
    OUT_OPT,
    OPT_END,
};
static const opt_spec group_specs[] = {
    {"prefix", OPT_STR, O(prefix), "", "text put before every data row (e.g. \"vllm,swap,\")"},
    {"prefix-header", OPT_STR, O(prefix_header), "", "text put before the header's names (e.g. \"policy,mode,\")"},
    {"no-header", OPT_BOOL, O(no_header), "false", "leave out the header line (to append to a file)"},
    OUT_OPT,
    OPT_END,
};
static const opt_spec bin_specs[] = {
    {"bin", OPT_F64, O(bin), "10", "bin width (s)"},
    {"from", OPT_F64, O(from), "0", "first bin starts here (s since the first arrival)"},
    {"to", OPT_F64, O(to), "-1", "steps starting at or after this are left out (s; < 0: none)"},
    OUT_OPT,
    OPT_END,
};
static const opt_spec itl_specs[] = {
    {"mode", OPT_STR, O(mode), "v1", "v1 (every running request in every step) or v0 (vllm-v0's prefill/decode steps)"},
    OUT_OPT,
    OPT_END,
};
static const opt_spec select_specs[] = {
    {"where", OPT_STR, O(where), "", "only rows meeting these conditions, e.g. scheduling-policy=vllm|priority&time-scale=1"},
    {"keep", OPT_STR, O(keep), "", "write only these columns, in this order (comma-separated)"},
    {"distinct", OPT_BOOL, O(distinct), "false", "leave out a row equal (as written) to one written before it"},
    OUT_OPT,
    OPT_END,
};
static const opt_spec out_specs[] = {
    OUT_OPT,
    OPT_END,
};
static const opt_spec best_specs[] = {
    {"by", OPT_STR, O(by), "", "one result per distinct value of these columns (comma-separated)"},
    OUT_OPT,
    OPT_END,
};
static const opt_spec blocks_specs[] = {
    {"strip", OPT_STR, O(strip), "", "the blocks' labels are this text followed by LABEL, and are written as LABEL"},
    OUT_OPT,
    OPT_END,
};
static const opt_spec cross_specs[] = {
    {"at", OPT_STR, O(at), "", "the target values of Y, comma-separated (e.g. 0.1,0.2,0.5)"},
    {"by", OPT_STR, O(by), "", "one result per distinct value of these columns (comma-separated)"},
    {"suffix", OPT_STR, O(suffix), "", "text appended to each output column's name (e.g. a unit)"},
    OUT_OPT,
    OPT_END,
};
#undef O

static int take_positional(void *dst, const char *arg, terr *e)
{
    reduce_options *o = dst;
    if (o->npos == MAX_POSITIONALS) return terr_set(e, "more than %d arguments", MAX_POSITIONALS);
    o->pos[o->npos++] = arg;
    return 0;
}

static const char *opt_or_null(const char *s) { return s && *s ? s : NULL; }

typedef int (*reduce_fn)(FILE *out, reduce_options *o, terr *e);

/* Parses, checks the positional count, runs fn into stdout or --out (written under a temporary
 * name and renamed when complete). */
static int reduce_run(const char *name, const opt_spec *specs, const char *usage, int min_pos, int argc, char **argv,
                      reduce_fn fn)
{
    reduce_options o = {0};
    terr e = {{0}};
    int code = 2;
    opts_defaults(specs, &o);
    int rc = opts_parse(specs, &o, argc, argv, take_positional, usage, &e);
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (!rc && o.npos < min_pos) rc = terr_set(&e, "missing arguments\n%s", usage);
    if (rc) {
        fprintf(stderr, "tandem reduce %s: %s\n", name, e.msg);
        goto done;
    }
    const char *out = opt_or_null(o.out);
    char tmp[4200];
    FILE *f = stdout;
    if (out) {
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        if (!(f = fopen(tmp, "w"))) {
            fprintf(stderr, "tandem reduce %s: %s: cannot write\n", name, tmp);
            code = 1;
            goto done;
        }
    }
    rc = fn(f, &o, &e);
    if (rc) fprintf(stderr, "tandem reduce %s: %s\n", name, e.msg);
    code = rc ? 2 : 0;
    if (out) {
        bool written = !ferror(f);
        written = !fclose(f) && written;
        if (!rc && (!written || rename(tmp, out))) {
            fprintf(stderr, "tandem reduce %s: %s: cannot write\n", name, out);
            code = 1;
        }
        if (code) unlink(tmp);
    }
done:
    opts_free(specs, &o);
    return code;
}

static int do_cdf(FILE *out, reduce_options *o, terr *e)
{
    if (o->npos % 2 != 1) return terr_set(e, "series come as LABEL FILE pairs after the column; \"%s\" has no file",
                                          o->pos[o->npos - 1]);
    if (o->points < 1) return terr_set(e, "--points: must be at least 1");
    const char *labels[MAX_POSITIONALS], *files[MAX_POSITIONALS];
    int n = 0;
    for (int i = 1; i + 1 < o->npos; i += 2, n++) {
        labels[n] = o->pos[i];
        files[n] = o->pos[i + 1];
    }
    reduce_cdf_options co = {opt_or_null(o->where), opt_or_null(o->weight), o->scale, (int)o->points};
    return reduce_cdf(out, o->pos[0], labels, files, n, &co, e);
}

int reduce_cdf_main(int argc, char **argv)
{
    return reduce_run("cdf", cdf_specs,
                      "usage: tandem reduce cdf COLUMN LABEL FILE [LABEL FILE...] [--where COND] [--weight COL]\n"
                      "       [--scale S] [--points N] [--out FILE]\n\n"
                      "Empirical CDFs of COLUMN (or NAME=EXPR), one gnuplot block per series, for plots/cdf.gp. A\n"
                      "requests.csv counts only its finished requests. Each block: a comment with the count,\n"
                      "`\"LABEL\" \"F\"`, then `value F` rows (F the fraction at or below value), about POINTS\n"
                      "evenly spaced levels plus 50 over the top 1%; the smallest and largest values are kept.\n",
                      3, argc, argv, do_cdf);
}

static int do_quantile(FILE *out, reduce_options *o, terr *e)
{
    if (o->npos % 2 != 1) return terr_set(e, "series come as LABEL FILE pairs after the column; \"%s\" has no file",
                                          o->pos[o->npos - 1]);
    const char *labels[MAX_POSITIONALS], *files[MAX_POSITIONALS];
    int n = 0;
    for (int i = 1; i + 1 < o->npos; i += 2, n++) {
        labels[n] = o->pos[i];
        files[n] = o->pos[i + 1];
    }
    reduce_cdf_options co = {opt_or_null(o->where), opt_or_null(o->weight), o->scale, 0};
    return reduce_quantile(out, o->pos[0], labels, files, n, o->at, &co, e);
}

int reduce_quantile_main(int argc, char **argv)
{
    return reduce_run("quantile", quantile_specs,
                      "usage: tandem reduce quantile COLUMN LABEL FILE [LABEL FILE...] --at P[,P...] [--where COND]\n"
                      "       [--weight COL] [--scale S] [--out FILE]\n\n"
                      "The values of COLUMN (or NAME=EXPR) at percentiles P of its CDF, one row per series, read\n"
                      "as `reduce cdf` reads them (a requests.csv's finished requests, --where, --weight):\n"
                      "the smallest value at which the fraction of rows (of weight) at or below it reaches P%,\n"
                      "not interpolated, so P=100 is the largest. The tail of a weighted CDF, e.g. p99.9 and the\n"
                      "maximum of the ITLs of `reduce itl`. CSV: series,pP_COLUMN,... (max_COLUMN for 100).\n",
                      3, argc, argv, do_quantile);
}

static int do_group(FILE *out, reduce_options *o, terr *e)
{
    reduce_group_options go = {opt_or_null(o->prefix), opt_or_null(o->prefix_header), o->no_header};
    return reduce_group(out, o->pos[0], o->pos[1], o->pos + 2, o->npos - 2, &go, e);
}

int reduce_group_main(int argc, char **argv)
{
    return reduce_run("group", group_specs,
                      "usage: tandem reduce group FILE GROUP METRIC [METRIC...] [--prefix TEXT --prefix-header TEXT]\n"
                      "       [--no-header] [--out FILE]\n\n"
                      "Statistics of a requests.csv (its finished requests) or any CSV per group of rows: CSV\n"
                      "GROUP,count,mean_M,p50_M,p90_M,p99_M,max_M for each METRIC M, groups in sorted order.\n"
                      "Percentiles as summary.json's (numpy's linear interpolation). GROUP: a column, - (one\n"
                      "group, \"all\"), or NAME=EXPR, e.g. 'len={prompt_tokens>=4096?long:short}'. METRIC: a\n"
                      "column or NAME=EXPR, e.g. 'norm_latency_s={e2el_ms/1000/output_tokens}'. A row with an\n"
                      "empty METRIC is left out of that METRIC only.\n",
                      3, argc, argv, do_group);
}

static int do_bin(FILE *out, reduce_options *o, terr *e)
{
    if (o->npos != 1) return terr_set(e, "one STEPS.csv, not %d files", o->npos);
    return reduce_bin(out, o->pos[0], o->bin, o->from, o->to, e);
}

int reduce_bin_main(int argc, char **argv)
{
    return reduce_run("bin", bin_specs,
                      "usage: tandem reduce bin STEPS.csv [--bin S] [--from S] [--to S] [--out FILE]\n\n"
                      "A steps.csv cut into time bins (a step belongs to the bin its start falls in), for\n"
                      "plots/timeseries.gp: CSV t_s (the bin's middle), busy (fraction of the bin with a step\n"
                      "running), kv_usage (duration-weighted mean), kv_usage_max, batch_size, num_running,\n"
                      "num_waiting (duration-weighted means), num_waiting_max, tokens_per_step, preemptions.\n"
                      "A bin without a step has busy 0 and the other columns empty (a gap in the plot).\n",
                      1, argc, argv, do_bin);
}

static int do_itl(FILE *out, reduce_options *o, terr *e)
{
    if (o->npos != 1) return terr_set(e, "one STEPS.csv, not %d files", o->npos);
    bool v0 = !strcmp(o->mode, "v0");
    if (!v0 && strcmp(o->mode, "v1")) return terr_set(e, "--mode: v1 or v0, not \"%s\"", o->mode);
    return reduce_itl(out, o->pos[0], v0, e);
}

int reduce_itl_main(int argc, char **argv)
{
    return reduce_run("itl", itl_specs,
                      "usage: tandem reduce itl STEPS.csv [--mode v1|v0] [--out FILE]\n\n"
                      "Every inter-token latency (ITL) of a run, from its steps.csv, as CSV itl_ms,tokens (tokens:\n"
                      "how many decode tokens waited that long), for `tandem reduce cdf --weight tokens itl_ms`.\n"
                      "summary.json stops at p99.9; this gives the whole tail. Exact when nothing is preempted.\n",
                      1, argc, argv, do_itl);
}

static int do_select(FILE *out, reduce_options *o, terr *e)
{
    return (o->distinct ? reduce_select_distinct : reduce_select)(out, o->pos[o->npos - 1], o->pos, o->npos - 1,
                                                                  opt_or_null(o->where), opt_or_null(o->keep), e);
}

int reduce_select_main(int argc, char **argv)
{
    return reduce_run("select", select_specs,
                      "usage: tandem reduce select [NAME=EXPR...] FILE [--where COND] [--keep COL,COL,...] [--distinct]\n"
                      "       [--out FILE]\n\n"
                      "Rows and columns of a CSV with a header (a sweep's results.csv), with derived columns\n"
                      "NAME=EXPR appended, e.g. 'rate={5.53/time-scale}', 'system={scheduling-policy} +\n"
                      "{preemption-mode}'. EXPR: text where {COL} is a column's value, {A/B*C+D - E} a number\n"
                      "from numbers and columns (a '-' subtracts only with spaces around it: time-scale is a\n"
                      "name), {COND?THEN:ELSE} a choice. COND: COL=V (V may be A|B), COL!=V, COL~TEXT\n"
                      "(contains), COL<V, COL>=V, ...; --where joins several with &. --distinct writes a row\n"
                      "only the first time. Commas inside fields are written as ';'. FILE may be /dev/stdin.\n",
                      1, argc, argv, do_select);
}

static int do_cross(FILE *out, reduce_options *o, terr *e)
{
    if (o->npos != 3) return terr_set(e, "FILE X Y, not %d arguments", o->npos);
    return reduce_cross(out, o->pos[0], o->pos[1], o->pos[2], o->at, opt_or_null(o->by), opt_or_null(o->suffix), e);
}

int reduce_cross_main(int argc, char **argv)
{
    return reduce_run("cross", cross_specs,
                      "usage: tandem reduce cross FILE X Y --at T[,T...] [--by COL,COL] [--suffix TEXT] [--out FILE]\n\n"
                      "Knees: per group of rows (--by), the X at which Y first rises above each target T,\n"
                      "linear between the last row at or below T and the first above it, rows in file order\n"
                      "(sorted by X, as a sweep's rows over a rate). \"<X\" when the first row is above T already,\n"
                      "\">X\" when no row is: the capacity under an SLO, read off a sweep. CSV:\n"
                      "BY...,knee_X_at_T[SUFFIX] for each T.\n",
                      3, argc, argv, do_cross);
}

static int do_pivot(FILE *out, reduce_options *o, terr *e)
{
    return reduce_pivot(out, o->pos[0], o->pos[1], o->pos[2], o->pos + 3, o->npos - 3, e);
}

int reduce_pivot_main(int argc, char **argv)
{
    return reduce_run("pivot", out_specs,
                      "usage: tandem reduce pivot FILE ROW COL VALUE [VALUE...] [--out FILE]\n\n"
                      "A long table made wide: one row per distinct value of column ROW (file order; - for one\n"
                      "row and no ROW column), then, per distinct value C of column COL (file order), the\n"
                      "VALUE columns, named C (one VALUE) or C_VALUE. E.g. the per-group rows of `reduce group`\n"
                      "as one row: `pivot FILE - len p50_ttft_ms` gives long,short. A cell no row fills is empty;\n"
                      "two rows for one cell are an error. Reorder or drop columns with `select --keep`.\n",
                      4, argc, argv, do_pivot);
}

static int do_best(FILE *out, reduce_options *o, terr *e)
{
    return reduce_best(out, o->pos[0], o->pos[1], opt_or_null(o->by), o->pos + 2, o->npos - 2, e);
}

int reduce_best_main(int argc, char **argv)
{
    return reduce_run("best", best_specs,
                      "usage: tandem reduce best FILE X NAME=FN(...) [NAME=FN(...)...] [--by COL,COL] [--out FILE]\n\n"
                      "Per group of rows (--by; groups in file order), one column NAME per FN:\n"
                      "  max(Y), min(Y)        the group's largest / smallest Y\n"
                      "  at_max(Y), at_min(Y)  X of the first row holding it\n"
                      "  first(Y>=F*max)       X of the first row, in file order, whose Y is at least F times\n"
                      "                        the group's largest (also <=, >, <, and F*min)\n"
                      "The saturation knees of a sweep over X: 'n95=first(output_throughput>=0.95*max)' is the\n"
                      "smallest X within 5% of the best throughput (rows sorted by X, as a sweep writes them).\n"
                      "Rows whose Y is empty are left out of that column. CSV: BY...,NAME...\n",
                      3, argc, argv, do_best);
}

static int do_blocks(FILE *out, reduce_options *o, terr *e)
{
    return reduce_blocks(out, o->pos[0], o->pos + 1, o->npos - 1, opt_or_null(o->strip), e);
}

int reduce_blocks_main(int argc, char **argv)
{
    return reduce_run("blocks", blocks_specs,
                      "usage: tandem reduce blocks FILE LABEL [LABEL...] [--strip PREFIX] [--out FILE]\n\n"
                      "Some blocks of a gnuplot data file that `reduce cdf` wrote (a block: comment lines, a\n"
                      "line `\"LABEL\" \"F\"`, rows), in the order given, for a figure of a few of its series.\n"
                      "With --strip, a block's label is PREFIX followed by LABEL, and it is written as LABEL.\n",
                      2, argc, argv, do_blocks);
}

static int do_trace(FILE *out, reduce_options *o, terr *e) { return reduce_trace(out, o->pos, o->npos, e); }

int reduce_trace_main(int argc, char **argv)
{
    return reduce_run("trace", out_specs,
                      "usage: tandem reduce trace TRACE [TRACE...] [--out FILE]\n\n"
                      "CSV trace,format,requests,span_s,mean_rate_per_s, one row per trace (any format tandem\n"
                      "reads): the span from the first arrival to the last, and requests / span (empty when the\n"
                      "span is 0), as `tandem trace stats` computes them; for a rate column of a sweep over\n"
                      "--time-scale: `select 'rate={RATE/time-scale}'`.\n",
                      1, argc, argv, do_trace);
}
