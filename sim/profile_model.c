/* profile_model.c: see profile_model.h. */
#include "sim/profile_model.h"

#include <errno.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_blas.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_multifit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/heat.h"
#include "core/util.h"
#include "kernels/decode_layout.h"

/* The linear terms after G's knots, in this order. */
enum {
    F_DECODE_KEYS, F_DECODE_SEQS, F_DECODE_GRID, F_DECODE_PARTITION, F_PREFILL_PAIRS2, F_PREFILL_KEYS, F_EMITTING,
    F_DECODE_ONLY, F_MIXED, F_PADDING_PREFILL, F_PADDING_DECODE, NUM_LINEAR
};
_Static_assert(PROFILE_MIN_POINTS == NUM_LINEAR + 2, "the fewest points: the linear terms and two knots");
static const char *const linear_names[NUM_LINEAR] = {
    "decode_keys", "decode_seqs", "decode_grid", "decode_partition", "prefill_pairs2",  "prefill_keys",
    "emitting",    "decode_only", "mixed",       "padding_prefill",  "padding_decode"};

/* Columns of a profile row, by name: the shape (core/batch.h's step_shape), repeats, then the
 * time's statistics. A file without padding_tokens is read with none. */
static const char *const columns[] = {"kind",           "num_prefill_seqs", "num_decode_seqs", "num_emitting",
                                      "prefill_tokens", "decode_tokens",    "padding_tokens",  "prefill_pairs2",
                                      "prefill_keys",   "decode_keys",      "decode_keys_sq",  "max_keys",
                                      "repeats",        "median_ms",        "p10_ms",          "p90_ms",
                                      "min_ms",         "max_ms"};
#define NUM_COLUMNS ((int)ARRAY_LEN(columns))
enum { C_PADDING = 6, C_REPEATS = 12, C_MEDIAN = 13 };
const char profile_columns_header[] = "kind,num_prefill_seqs,num_decode_seqs,num_emitting,prefill_tokens,decode_tokens,"
                                      "padding_tokens,prefill_pairs2,prefill_keys,decode_keys,decode_keys_sq,max_keys,"
                                      "repeats,median_ms,p10_ms,p90_ms,min_ms,max_ms";
const char profile_columns_header_unpadded[] = "kind,num_prefill_seqs,num_decode_seqs,num_emitting,prefill_tokens,"
                                               "decode_tokens,prefill_pairs2,prefill_keys,decode_keys,decode_keys_sq,"
                                               "max_keys,repeats,median_ms,p10_ms,p90_ms,min_ms,max_ms";
#define MAX_KNOTS 256
/* Steps a token count's rows must stand for to be a knot of G, in a profile of more counts than
 * MAX_KNOTS (serving steps; the smallest and largest counts always are): at a serving count that
 * one or two steps hold, those steps would set G alone, an odd one included (fit_text). */
#define KNOT_MIN_STEPS 3

typedef struct point {
    step_shape s;
    double ms;      /* the median */
    double repeats; /* how many measured steps the median is of */
} point;

typedef struct profile_model {
    char path[1024];
    char model[128], gpu[64], device[256], tandem[64];
    int32_t block_size;
    int32_t num_heads, num_kv_heads, num_sms; /* the run's model and GPU: the decode partition */
    double swap_ms_per_block; /* the engine cannot swap, so the profile cannot measure it: the
                                 GPU row's host link carries all layers' K and V of a block */
    double heat_alpha;        /* a step at heat h with load u takes its rows' time x
                                 exp(heat_alpha (h - u)) (core/heat.h); 0: heat not measured */
    model_config mc;          /* the run's model and GPU peak: a step's load */
    double peak_flops;
    bool forced;
    char mismatch[512];       /* what differs, when forced */
    int32_t num_knots;
    double knot[MAX_KNOTS];   /* token counts, ascending */
    double coef[MAX_KNOTS + NUM_LINEAR]; /* ms: G at each knot, then the linear terms */
    double max_decode_keys, max_prefill_pairs2, max_prefill_keys;
    int32_t num_points, outliers; /* rows read; rows the refit left out (fit_text) */
    double fit_median_abs_error, fit_max_abs_error; /* relative, over the points fitted */
    int64_t steps, extrapolated;
} profile_model;

/* Rows the GEMMs compute: padding rows (static batching) go through them like tokens. */
static double tokens_of(const step_shape *s)
{
    return (double)(s->prefill_tokens + s->decode_tokens + s->padding_tokens);
}

/* The row of the design matrix for s: G's hat functions (linear extrapolation past the end
 * knots), then the linear terms. *outside says whether T lies outside the knots. */
/* Where T falls on G's knots: the segment [knot j, knot j+1] it is in (or the end one it is
 * past: G extends linearly) and its position a along it; one knot is a constant. Binary search:
 * this runs once a simulated step. */
static void segment(const profile_model *pm, double T, int32_t *j, double *a)
{
    int32_t K = pm->num_knots;
    if (K == 1) {
        *j = 0, *a = 0;
        return;
    }
    int32_t lo = 0, hi = K - 2; /* the last segment whose left knot is below T, at least 0 */
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (T > pm->knot[mid]) lo = mid;
        else hi = mid - 1;
    }
    *j = lo;
    *a = (T - pm->knot[lo]) / (pm->knot[lo + 1] - pm->knot[lo]);
}

/* The decode attention grid a step launches, as the engine lays it out (kernels/decode_layout.h):
 * its rows (a pure-decode step replays its CUDA graph: rows padded, contexts up to the graph's
 * bucket; a mixed step launches its decodes over the longest context), and the partition each
 * row's context is split into, one thread block a partition and head group. */
typedef struct decode_grid {
    int32_t rows, len, partition;
} decode_grid;

static decode_grid decode_grid_of(const profile_model *pm, const step_shape *s)
{
    bool graph = s->num_prefill_seqs == 0;
    decode_grid g = {
        .rows = graph ? k_decode_graph_rows(s->num_decode_seqs, INT32_MAX) : s->num_decode_seqs,
        .len = graph ? (int32_t)min_i64(k_decode_bucket(s->max_keys), INT32_MAX) : s->max_keys,
    };
    g.partition = k_decode_partition(pm->num_heads, pm->num_kv_heads, g.rows, g.len, pm->num_sms, INT64_MAX);
    return g;
}

static void linear_features(const profile_model *pm, const step_shape *s, double *l)
{
    l[F_DECODE_KEYS] = (double)s->decode_keys;
    l[F_DECODE_SEQS] = s->num_decode_seqs;
    l[F_DECODE_GRID] = l[F_DECODE_PARTITION] = 0;
    if (s->num_decode_seqs) {
        decode_grid g = decode_grid_of(pm, s);
        /* the blocks launched (a head group's): each pays its launch and its chain of latencies,
         * those past a sequence's end (padding rows, short contexts under the bucket) included,
         * so a skewed batch costs more than its keys say, and a short partition more blocks */
        l[F_DECODE_GRID] = (double)g.rows * (double)((g.len + g.partition - 1) / g.partition);
        /* the tokens of the longest context that one block reads in turn (the partition, or the
         * context when shorter): a small batch's attention is a single wave of blocks, so its
         * time follows the partition, not the keys. Llama-3-8B's two decodes at context 4097
         * take 0.6 ms more than at 2049 on an H200, where the bucket doubles the partition, and
         * 0.2 ms less than at 8192, with twice the keys. */
        l[F_DECODE_PARTITION] = (double)min_i64(g.partition, s->max_keys);
    }
    l[F_PREFILL_PAIRS2] = (double)s->prefill_pairs2;
    l[F_PREFILL_KEYS] = (double)s->prefill_keys;
    l[F_EMITTING] = s->num_emitting;
    l[F_DECODE_ONLY] = s->num_decode_seqs > 0 && s->num_prefill_seqs == 0;
    l[F_MIXED] = s->num_decode_seqs > 0 && s->num_prefill_seqs > 0;
    /* padding rows (static batching) beyond G's price of a token: the engine runs them as
     * sequences of their own, prompts of up to a block from scratch beside a prefill, one-key
     * decodes in a step of decodes, and identical rows draw less power than real ones */
    l[F_PADDING_PREFILL] = s->prefill_tokens > 0 ? (double)s->padding_tokens : 0;
    l[F_PADDING_DECODE] = s->prefill_tokens > 0 ? 0 : (double)s->padding_tokens;
}

/* The row of the design matrix for s (the fit): G's hat functions, then the linear terms. The
 * columns that may be nonzero go to cols (*ncols of them): the two hats of T's segment, then
 * the linear terms. */
static void features(const profile_model *pm, const step_shape *s, double *x, int32_t *cols, int32_t *ncols)
{
    int32_t K = pm->num_knots, j, n = 0;
    double a;
    for (int32_t k = 0; k < K; k++) x[k] = 0;
    segment(pm, tokens_of(s), &j, &a);
    x[j] = 1 - a, cols[n++] = j;
    if (K > 1) x[j + 1] = a, cols[n++] = j + 1;
    linear_features(pm, s, x + K);
    for (int32_t k = 0; k < NUM_LINEAR; k++) cols[n++] = K + k;
    *ncols = n;
}

/* The prediction: the two hats T touches and the linear terms, no design row. *outside says
 * whether T lies outside the knots. */
static double predict_ms(const profile_model *pm, const step_shape *s, bool *outside)
{
    int32_t K = pm->num_knots, j;
    double a, T = tokens_of(s), l[NUM_LINEAR];
    segment(pm, T, &j, &a);
    if (outside) *outside = T < pm->knot[0] || T > pm->knot[K - 1];
    double ms = pm->coef[j] * (1 - a);
    if (K > 1) ms += pm->coef[j + 1] * a;
    linear_features(pm, s, l);
    for (int32_t i = 0; i < NUM_LINEAR; i++) ms += pm->coef[K + i] * l[i];
    return ms;
}

/* "# key: value" provenance lines. */
static void header_line(profile_model *pm, const char *line)
{
    static const struct {
        const char *key;
        size_t off, size;
    } keys[] = {
        {"model", offsetof(profile_model, model), sizeof(((profile_model *)0)->model)},
        {"gpu", offsetof(profile_model, gpu), sizeof(((profile_model *)0)->gpu)},
        {"device", offsetof(profile_model, device), sizeof(((profile_model *)0)->device)},
        {"tandem", offsetof(profile_model, tandem), sizeof(((profile_model *)0)->tandem)},
    };
    const char *p = line + 1;
    while (*p == ' ') p++;
    const char *colon = strchr(p, ':');
    if (!colon) return;
    size_t klen = (size_t)(colon - p);
    const char *v = colon + 1;
    while (*v == ' ') v++;
    for (size_t i = 0; i < ARRAY_LEN(keys); i++)
        if (strlen(keys[i].key) == klen && !strncmp(p, keys[i].key, klen))
            snprintf((char *)pm + keys[i].off, keys[i].size, "%s", v);
    if (klen == 10 && !strncmp(p, "block_size", 10)) pm->block_size = atoi(v);
}

static const struct profile_file *shipped(const char *name)
{
    for (const struct profile_file *f = shipped_profiles; f->name; f++)
        if (!strcmp(f->name, name)) return f;
    return NULL;
}

const char *profile_shipped_for(const model_config *mc, const gpu_spec *gpu, int32_t block_size)
{
    static char spec[256];
    char name[200];
    snprintf(name, sizeof name, "%s_%s", mc->name, gpu->name);
    const struct profile_file *f = shipped(name);
    if (!f) return NULL;
    const char *bs = strstr(f->text, "\n# block_size: ");
    if (!bs || atoi(bs + 15) != block_size) return NULL;
    snprintf(spec, sizeof spec, "shipped:%s", name);
    return spec;
}

/* Reads the points; -1 with e = "FILE:LINE: ..." on a malformed file. */
/* The profile's text: a shipped one's in place (*owned NULL), a file's read into *owned; NULL
 * with e set. */
static const char *profile_text(const char *path, char **owned, terr *e)
{
    *owned = NULL;
    if (!strncmp(path, "shipped:", 8)) {
        const struct profile_file *f = shipped(path + 8);
        if (!f) return terr_set(e, "--cost-model profile:%s: no such shipped profile", path), NULL;
        return f->text;
    }
    if (!(*owned = read_text_file(path, NULL, e)))
        return terr_set(e, "--cost-model profile:%s: cannot read the profile", path), NULL;
    return *owned;
}

/* Parses text (which it cuts into lines) into the provenance and the points. */
static int read_profile(profile_model *pm, const char *path, char *text, point **out, int32_t *n, terr *e)
{
    int rc = 0, line_no = 0;
    bool have_header = false, padded = true;
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    for (char *line = text, *next; line && *line && !rc; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r') line[--l] = 0;
        if (line[0] == '#') {
            if (!strncmp(line, "# heat_alpha:", 13)) {
                const char *alpha = line + 13 + strspn(line + 13, " ");
                if (parse_f64(alpha, &pm->heat_alpha) || fabs(pm->heat_alpha) > 1) {
                    rc = terr_set(e, "%s:%d: heat_alpha \"%s\" is not a number between -1 and 1", path, line_no, alpha);
                    break;
                }
            }
            header_line(pm, line);
            continue;
        }
        if (!l) continue;
        char *field[NUM_COLUMNS + 1];
        int nf = 0;
        for (char *f = line; f && nf <= NUM_COLUMNS; nf++) {
            field[nf] = f;
            char *comma = strchr(f, ',');
            if (comma) *comma++ = 0;
            f = comma;
        }
        if (!have_header) { /* with padding_tokens, or without */
            padded = nf == NUM_COLUMNS;
            if (nf != NUM_COLUMNS && nf != NUM_COLUMNS - 1) {
                rc = terr_set(e, "%s:%d: %d fields, a profile row has %d", path, line_no, nf, NUM_COLUMNS);
                break;
            }
            for (int i = 0; i < nf && !rc; i++) {
                const char *want = columns[!padded && i >= C_PADDING ? i + 1 : i];
                if (strcmp(field[i], want))
                    rc = terr_set(e, "%s:%d: column %d is \"%s\", expected \"%s\" (not a tandem profile?)", path,
                                  line_no, i + 1, field[i], want);
            }
            have_header = true;
            continue;
        }
        if (nf != NUM_COLUMNS - !padded) {
            rc = terr_set(e, "%s:%d: %d fields, a profile row has %d", path, line_no, nf, NUM_COLUMNS - !padded);
            break;
        }
        int64_t v[NUM_COLUMNS] = {0};
        double ms = 0;
        for (int f = 1; f < nf && !rc; f++) {
            int i = !padded && f >= C_PADDING ? f + 1 : f; /* the column */
            if (i >= C_MEDIAN) {
                double d;
                if (parse_f64(field[f], &d) || !(d > 0))
                    rc = terr_set(e, "%s:%d: %s \"%s\" is not a positive number", path, line_no, columns[i], field[f]);
                if (i == C_MEDIAN) ms = d;
            } else if (parse_i64(field[f], &v[i]) || v[i] < (i == C_REPEATS) || v[i] > ((int64_t)1 << 50)) {
                rc = terr_set(e, "%s:%d: %s \"%s\" is not a count%s", path, line_no, columns[i], field[f],
                              i == C_REPEATS ? " of at least 1" : "");
            }
        }
        if (rc) break;
        step_shape s = {
            .num_prefill_seqs = (int32_t)v[1], .num_decode_seqs = (int32_t)v[2], .num_emitting = (int32_t)v[3],
            .prefill_tokens = v[4], .decode_tokens = v[5], .padding_tokens = v[C_PADDING], .prefill_pairs2 = v[7],
            .prefill_keys = v[8], .decode_keys = v[9], .decode_keys_sq = v[10], .max_keys = (int32_t)v[11],
        };
        s.num_items = s.num_prefill_seqs + s.num_decode_seqs;
        if (s.num_items == 0 || s.prefill_tokens + s.decode_tokens == 0) {
            rc = terr_set(e, "%s:%d: a step with no tokens", path, line_no);
            break;
        }
        if (*n == PROFILE_MAX_POINTS) {
            rc = terr_set(e, "%s:%d: more than %d points", path, line_no, PROFILE_MAX_POINTS);
            break;
        }
        grow_array((void **)out, sizeof **out, &cap, (size_t)*n + 1);
        (*out)[(*n)++] = (point){s, ms, (double)v[C_REPEATS]};
    }
    if (!rc && !have_header) rc = terr_set(e, "%s: no header row (not a tandem profile?)", path);
    if (!rc && *n < PROFILE_MIN_POINTS) rc = terr_set(e, "%s: %d points are too few to fit a profile", path, *n);
    if (!rc && (!pm->model[0] || !pm->gpu[0] || pm->block_size <= 0))
        rc = terr_set(e, "%s: the provenance lines (# model:, # gpu:, # block_size:) are missing", path);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Knots kept from the distinct token counts d[0..m-1] (ascending) when a count is kept if it is at
 * least (1 + rho) times the last one kept; the largest is always kept. Into knot when not NULL. */
static int32_t thin_knots(const double *d, int32_t m, double rho, double *knot)
{
    int32_t k = 0;
    double last = 0;
    for (int32_t i = 0; i < m; i++)
        if (k == 0 || d[i] >= last * (1 + rho) || i == m - 1) {
            if (knot) knot[k] = d[i];
            last = d[i];
            k++;
        }
    return k;
}

typedef struct token_count {
    double t, steps; /* a token count; the measured steps its rows stand for */
} token_count;
static int cmp_token_count(const void *a, const void *b)
{
    return cmp_double(&((const token_count *)a)->t, &((const token_count *)b)->t);
}

/* Knots at the distinct token counts. A grid profile has fewer than MAX_KNOTS and gets one at
 * each. A profile of serving steps has nearly every count from 1 to the token budget: its knots
 * are the counts whose rows stand for at least KNOT_MIN_STEPS measured steps, spaced evenly in
 * log T (the smallest rho that keeps at most MAX_KNOTS, found by bisection), so the small counts,
 * where the engine changes kernel path (the weight-streaming GEMM up to 8 rows), stay knots one by
 * one, and above them there is a knot every few percent of T. Every knot is a measured count, so
 * every hat has a point at its peak. */
static void place_knots(profile_model *pm, const point *pts, int32_t n)
{
    token_count *c = xmalloc((size_t)n * sizeof *c);
    for (int32_t i = 0; i < n; i++) c[i] = (token_count){tokens_of(&pts[i].s), pts[i].repeats};
    qsort(c, (size_t)n, sizeof *c, cmp_token_count);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m && c[i].t == c[m - 1].t) c[m - 1].steps += c[i].steps;
        else c[m++] = c[i];
    }
    double *t = xmalloc((size_t)m * sizeof *t);
    int32_t k = 0;
    for (int32_t i = 0; i < m; i++)
        if (m <= MAX_KNOTS || c[i].steps >= KNOT_MIN_STEPS || i == 0 || i == m - 1) t[k++] = c[i].t;
    m = k;
    free(c);
    double rho = 0;
    if (m > MAX_KNOTS) {
        double lo = 0, hi = t[m - 1] / t[0]; /* hi keeps the two ends only */
        for (int it = 0; it < 100; it++) {
            double mid = (lo + hi) / 2;
            if (thin_knots(t, m, mid, NULL) <= MAX_KNOTS) hi = mid;
            else lo = mid;
        }
        rho = hi;
    }
    pm->num_knots = thin_knots(t, m, rho, pm->knot);
    free(t);
}

/* Above this many rows per unknown, the rows are first reduced to a triangular system (see fit). */
#define REDUCE_ROWS_PER_UNKNOWN 4

/* Folds the row xr (p unknowns, then the right-hand side; destroyed) into the upper triangular
 * R (p x (p + 1)) by Givens rotations. G's hat columns (the first K) keep R banded: a row has
 * at most two adjacent hats, so R's row c < K is nonzero only at c, c + 1 and the linear and
 * right-hand-side columns, and a rotation touches only those. */
static void givens_fold(gsl_matrix *R, double *xr, size_t K, size_t p, size_t first)
{
    for (size_t c = first; c < p; c++) {
        if (xr[c] == 0) continue;
        double *rc = gsl_matrix_ptr(R, c, 0);
        size_t band_end = c < K ? (c + 1 < K ? c + 2 : K) : p + 1; /* columns (c, band_end), then K..p */
        if (rc[c] == 0) {
            rc[c] = xr[c];
            for (size_t k = c + 1; k < band_end; k++) rc[k] = xr[k];
            if (c < K)
                for (size_t k = K; k <= p; k++) rc[k] = xr[k];
            return;
        }
        double r = hypot(rc[c], xr[c]), cs = rc[c] / r, sn = xr[c] / r;
        rc[c] = r;
        xr[c] = 0;
        for (size_t k = c + 1; k < band_end; k++) {
            double a = rc[k], b = xr[k];
            rc[k] = cs * a + sn * b, xr[k] = cs * b - sn * a;
        }
        if (c < K)
            for (size_t k = K; k <= p; k++) {
                double a = rc[k], b = xr[k];
                rc[k] = cs * a + sn * b, xr[k] = cs * b - sn * a;
            }
    }
}

/* order: pts' indices by the segment of G their token count falls in (a counting sort), file
 * order within one. */
static void fold_order(const profile_model *pm, const point *pts, int32_t n, int32_t *order)
{
    int32_t start[MAX_KNOTS + 1] = {0}, *seg = xmalloc((size_t)n * sizeof *seg);
    double a;
    for (int32_t i = 0; i < n; i++) {
        segment(pm, tokens_of(&pts[i].s), &seg[i], &a);
        start[seg[i] + 1]++;
    }
    for (int32_t j = 0; j < pm->num_knots; j++) start[j + 1] += start[j];
    for (int32_t i = 0; i < n; i++) order[start[seg[i]]++] = i;
    free(seg);
}

/* Singular values below this fraction of the largest are truncated from the fit. */
#define TSVD_TOL 1e-10

/* The weighted least-squares fit. A row's weight is 1/t^2 (relative error is what is
 * minimised) times its repeats relative to the fewest any row has: a row stands for that many
 * measured steps, so a shape that a serving run took 500 times pulls as 500 steps do, and a
 * profile whose rows all have the same repeats (a grid) is fitted exactly as unweighted rows.
 * Columns are scaled to [-1, 1] so that the truncation of small singular values is fair to each
 * term; a term no point exercises (a zero column) stays out of the fit.
 * Up to REDUCE_ROWS_PER_UNKNOWN rows per unknown (a grid profile) GSL's truncated SVD runs on
 * the rows themselves. Beyond (a profile of serving steps: tens of thousands of rows, where
 * that SVD takes minutes) the weighted rows are first folded into a triangular system R c = z
 * by Givens rotations (givens_fold: the same least-squares problem, the same singular values
 * and column norms), and the truncated SVD runs on R, or back substitution where R is well
 * conditioned (below). The rows are folded in the order of G's segment they fall in: a row's
 * rotations then fill in at most the next hat row of R, where in file order they would cascade
 * down the band to the last knot (O(rows x knots): 0.1 s of a 60,000-row profile's 0.3 s). */
static int fit(profile_model *pm, const point *pts, int32_t n, terr *e)
{
    size_t K = (size_t)pm->num_knots, p = K + NUM_LINEAR;
    double x[MAX_KNOTS + NUM_LINEAR + 1], scale[MAX_KNOTS + NUM_LINEAR] = {0}, chisq, fewest = pts[0].repeats;
    int32_t cols[2 + NUM_LINEAR], ncols;
    for (int32_t i = 0; i < n; i++) {
        features(pm, &pts[i].s, x, cols, &ncols);
        for (int32_t k = 0; k < ncols; k++) scale[cols[k]] = fmax(scale[cols[k]], fabs(x[cols[k]]));
        fewest = fmin(fewest, pts[i].repeats);
    }
    int32_t terms = 0; /* a term no point exercises (a zero column) is no unknown: the fit leaves it out */
    for (size_t j = K; j < p; j++) terms += scale[j] > 0;
    if (n < (int32_t)K + terms)
        return terr_set(e, "%s: %d points for %d unknowns (G at %d token counts and %d terms): the fit is not "
                           "determined; measure more shapes at the same token counts",
                        pm->path, n, (int32_t)K + terms, (int32_t)K, terms);
    bool reduce = (size_t)n > REDUCE_ROWS_PER_UNKNOWN * p;
    size_t rows = reduce ? p : (size_t)n;
    gsl_matrix *X = gsl_matrix_calloc(rows, reduce ? p + 1 : p), *cov = gsl_matrix_alloc(p, p);
    gsl_vector *y = gsl_vector_alloc(rows), *w = gsl_vector_alloc(rows), *c = gsl_vector_alloc(p);
    gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc(rows, p);
    int32_t *order = reduce ? xmalloc((size_t)n * sizeof *order) : NULL;
    if (reduce) fold_order(pm, pts, n, order);
    for (int32_t r = 0; r < n; r++) {
        int32_t i = reduce ? order[r] : r;
        features(pm, &pts[i].s, x, cols, &ncols);
        double wi = 1.0 / (pts[i].ms * pts[i].ms);
        wi *= pts[i].repeats / fewest;
        for (int32_t k = 0; k < ncols; k++) {
            int32_t j = cols[k];
            x[j] = scale[j] > 0 ? x[j] / scale[j] : 0;
        }
        if (!reduce) {
            for (int32_t k = 0; k < ncols; k++) gsl_matrix_set(X, (size_t)i, (size_t)cols[k], x[cols[k]]);
            gsl_vector_set(y, (size_t)i, pts[i].ms);
            gsl_vector_set(w, (size_t)i, wi);
            continue;
        }
        double sw = sqrt(wi);
        for (int32_t k = 0; k < ncols; k++) x[cols[k]] *= sw;
        x[p] = pts[i].ms * sw;
        givens_fold(X, x, K, p, (size_t)cols[0]); /* zeros before the first column are skipped */
    }
    size_t rank;
    int rc;
    if (reduce) {
        gsl_matrix_view R = gsl_matrix_submatrix(X, 0, 0, p, p);
        gsl_vector_view z = gsl_matrix_column(X, p);
        /* R well conditioned: the truncation would keep every singular value (the 1-norm
         * estimate is within a factor p of the 2-norm ratio it truncates at), and back
         * substitution gives the same solution in O(p^2) instead of the SVD's O(p^3) */
        double rcond = 0;
        gsl_vector *work = gsl_vector_alloc(3 * p);
        if (!gsl_linalg_tri_upper_rcond(&R.matrix, &rcond, work) && rcond > 10 * TSVD_TOL * (double)p) {
            gsl_vector_memcpy(c, &z.vector);
            rc = gsl_blas_dtrsv(CblasUpper, CblasNoTrans, CblasNonUnit, &R.matrix, c);
        } else {
            rc = gsl_multifit_linear_tsvd(&R.matrix, &z.vector, TSVD_TOL, c, cov, &chisq, &rank, ws);
        }
        gsl_vector_free(work);
    } else {
        rc = gsl_multifit_wlinear_tsvd(X, w, y, TSVD_TOL, c, cov, &chisq, &rank, ws);
    }
    if (rc) rc = terr_set(e, "%s: the fit failed (%s)", pm->path, gsl_strerror(rc));
    for (size_t j = 0; j < p && !rc; j++) pm->coef[j] = scale[j] > 0 ? gsl_vector_get(c, j) / scale[j] : 0;
    gsl_multifit_linear_free(ws);
    free(order);
    gsl_matrix_free(X), gsl_matrix_free(cov);
    gsl_vector_free(y), gsl_vector_free(w), gsl_vector_free(c);
    return rc;
}

/* A row is an outlier of the first fit when it is a single measured step (a median of several
 * is not an odd one) and its relative error exceeds both OUTLIER_MIN and OUTLIER_MEDIANS times
 * the median row's. */
#define OUTLIER_MIN 0.25
#define OUTLIER_MEDIANS 10

/* The median of a[0..n-1] (sorted in place), n > 0. */
static double median_of(double *a, int32_t n)
{
    qsort(a, (size_t)n, sizeof *a, cmp_double);
    return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}

/* Places the knots and fits pts (GSL's errors come back as codes). */
static int fit_points(profile_model *pm, const point *pts, int32_t n, terr *e)
{
    place_knots(pm, pts, n);
    gsl_error_handler_t *handler = gsl_set_error_handler_off();
    int rc = fit(pm, pts, n, e);
    gsl_set_error_handler(handler);
    return rc;
}

/* Parses text (into lines) and fits it into pm, whose path names it in errors; then fits once
 * more without the first fit's outliers. A serving run holds the odd step that took far longer
 * than its shape says (on an H100, 16 of Llama-2-7B's 16,023 steps at --max-num-seqs 16 took
 * 17-23 ms where the grid puts their shapes at 7-14): rare, and a knot needs several steps
 * (KNOT_MIN_STEPS), but where a count has many rows such a step still pulls G there. */
static int fit_text(profile_model *pm, char *text, terr *e)
{
    point *pts = NULL;
    int32_t n = 0;
    int rc = read_profile(pm, pm->path, text, &pts, &n, e);
    if (!rc) rc = fit_points(pm, pts, n, e);
    double *err = rc ? NULL : xmalloc((size_t)n * sizeof *err);
    int32_t kept = n;
    if (!rc) {
        for (int32_t i = 0; i < n; i++) err[i] = fabs(predict_ms(pm, &pts[i].s, NULL) / pts[i].ms - 1);
        double *sorted = xmalloc((size_t)n * sizeof *sorted);
        memcpy(sorted, err, (size_t)n * sizeof *err);
        double cut = fmax(OUTLIER_MIN, OUTLIER_MEDIANS * median_of(sorted, n));
        free(sorted);
        point *keep = xmalloc((size_t)n * sizeof *keep);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++) /* in file order */
            if (err[i] <= cut || pts[i].repeats > 1) keep[k++] = pts[i];
        if (k < n && k >= PROFILE_MIN_POINTS) {
            profile_model first = *pm;
            terr refit = {{0}};
            if (!fit_points(pm, keep, k, &refit)) {
                point *t = pts;
                pts = keep, keep = t, kept = k;
            } else {
                *pm = first; /* the rest does not determine a fit: the first one stands */
            }
        }
        free(keep);
    }
    if (!rc) {
        pm->num_points = n, pm->outliers = n - kept;
        for (int32_t i = 0; i < kept; i++) {
            const step_shape *s = &pts[i].s;
            err[i] = fabs(predict_ms(pm, s, NULL) / pts[i].ms - 1);
            pm->max_decode_keys = fmax(pm->max_decode_keys, (double)s->decode_keys);
            pm->max_prefill_pairs2 = fmax(pm->max_prefill_pairs2, (double)s->prefill_pairs2);
            pm->max_prefill_keys = fmax(pm->max_prefill_keys, (double)s->prefill_keys);
            pm->fit_max_abs_error = fmax(pm->fit_max_abs_error, err[i]);
        }
        pm->fit_median_abs_error = median_of(err, kept);
    }
    free(err);
    free(pts);
    return rc;
}

/* Profiles fitted so far, by their text and the decode partition's inputs: a sweep, a cluster's
 * replicas and `search` create the cost model again and again, and a profile calibrated on
 * serving runs has tens of thousands of rows (0.16 s to parse and fit, the fit twice). */
enum { MEMO_SLOTS = 8 };
static struct fitted {
    uint64_t hash;
    size_t len;
    profile_model pm; /* as fitted: no run's mismatch or counts */
} memo[MEMO_SLOTS];
static int memo_used;

static void *profile_create(const model_config *mc, const gpu_spec *gpu, const cost_model_opts *opts, terr *e)
{
    cost_model_opts o = opts ? *opts : cost_model_opts_default();
    if (!o.arg || !o.arg[0]) return terr_set(e, "--cost-model profile:FILE needs the profile's FILE"), NULL;
    char *owned;
    const char *text = profile_text(o.arg, &owned, e);
    if (!text) return NULL;
    size_t len = strlen(text);
    uint64_t hash = XXH3_64bits(text, len);
    profile_model *pm = xcalloc(1, sizeof *pm);
    /* the decode partition of the run's model on the run's GPU (a profile of another is refused
     * unless forced, and then flagged) */
    int32_t nh = mc->num_heads, nkv = mc->num_kv_heads, sms = gpu->num_sms;
    int slot = 0;
    while (slot < memo_used && !(memo[slot].hash == hash && memo[slot].len == len && memo[slot].pm.num_heads == nh &&
                                 memo[slot].pm.num_kv_heads == nkv && memo[slot].pm.num_sms == sms))
        slot++;
    if (slot < memo_used) {
        *pm = memo[slot].pm;
    } else {
        pm->num_heads = nh, pm->num_kv_heads = nkv, pm->num_sms = sms;
        snprintf(pm->path, sizeof pm->path, "%s", o.arg);
        char *lines = owned ? owned : xstrdup(text); /* parsing cuts it into lines */
        int rc = fit_text(pm, lines, e);
        if (lines != owned) free(lines);
        if (rc) {
            free(owned);
            free(pm);
            return NULL;
        }
        if (memo_used < MEMO_SLOTS) memo[memo_used++] = (struct fitted){hash, len, *pm};
    }
    free(owned);
    snprintf(pm->path, sizeof pm->path, "%s", o.arg);
    if (strcmp(pm->model, mc->name))
        snprintf(pm->mismatch, sizeof pm->mismatch, "model %s, the run's is %s", pm->model, mc->name);
    else if (strcmp(pm->gpu, gpu->name))
        snprintf(pm->mismatch, sizeof pm->mismatch, "GPU %s, the run's is %s", pm->gpu, gpu->name);
    else if (pm->block_size != o.block_size)
        snprintf(pm->mismatch, sizeof pm->mismatch, "block size %d, the run's is %d", pm->block_size, o.block_size);
    if (pm->mismatch[0] && !o.force) {
        terr_set(e, "%s: a profile of %s (--force-profile uses it anyway)", o.arg, pm->mismatch);
        free(pm);
        return NULL;
    }
    pm->forced = pm->mismatch[0] != 0;
    pm->swap_ms_per_block = (double)model_kv_bytes_per_token(mc, o.kv_dtype_bytes) * o.block_size /
                            gpu->host_link_bytes_s * 1e3;
    pm->mc = *mc;
    pm->peak_flops = gpu->peak_bf16_flops;
    return pm;
}

static int64_t profile_step_ns(void *self, const step_shape *s)
{
    profile_model *pm = self;
    if (s->num_items == 0 && s->swap_blocks == 0) return 0;
    bool outside = false;
    double ms = s->num_items ? predict_ms(pm, s, &outside) : 0;
    if (pm->heat_alpha != 0 && ms > 0) /* the heat against the load the rows were timed at */
        ms *= exp(pm->heat_alpha * (s->heat - heat_load(heat_flops(&pm->mc, s), llround(ms * 1e6), pm->peak_flops)));
    ms += s->swap_blocks * pm->swap_ms_per_block;
    outside |= (double)s->decode_keys > pm->max_decode_keys || (double)s->prefill_pairs2 > pm->max_prefill_pairs2 ||
               (double)s->prefill_keys > pm->max_prefill_keys;
    pm->steps++;
    pm->extrapolated += outside;
    int64_t ns = llround(ms * 1e6);
    return ns > 0 ? ns : 1;
}

static json_t *profile_report(void *self)
{
    const profile_model *pm = self;
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:b, s:i, s:f, s:f, s:I, s:I}", "cost_model", "profile",
                          "profile", pm->path, "model", pm->model, "gpu", pm->gpu, "device", pm->device, "block_size",
                          pm->block_size, "forced", pm->forced, "points", pm->num_points, "fit_median_abs_error",
                          pm->fit_median_abs_error, "fit_max_abs_error", pm->fit_max_abs_error, "steps",
                          (json_int_t)pm->steps, "extrapolated_steps", (json_int_t)pm->extrapolated);
    json_object_set_new(o, "outlier_points", json_integer(pm->outliers));
    json_object_set_new(o, "heat_alpha", json_real(pm->heat_alpha));
    if (pm->forced) json_object_set_new(o, "mismatch", json_string(pm->mismatch));
    json_t *c = json_object();
    for (int i = 0; i < NUM_LINEAR; i++) json_object_set_new(c, linear_names[i], json_real(pm->coef[pm->num_knots + i]));
    json_object_set_new(o, "coefficients_ms", c);
    return o;
}

static void profile_destroy(void *self) { free(self); }

const cost_model_ops profile_cost_model = {
    .name = "profile",
    .summary = "step times learned from `tandem profile` measurements of the engine (sim/profile_model.h)",
    .create = profile_create,
    .step_ns = profile_step_ns,
    .destroy = profile_destroy,
    .report = profile_report,
    .takes_arg = true,
};
