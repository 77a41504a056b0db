/* reduce.c: see reduce.h. */
#include "cli/reduce.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "core/stats.h"
#include "traces/trace.h"
#include "traces/trace_stats.h"

/* ---- the expression language ----------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int digits; /* significant digits of arithmetic results: 6 in text, 17 where a number is wanted */
} sbuf;

static int sb_add(sbuf *b, const char *s, size_t n, terr *e)
{
    if (b->len + n + 1 > b->cap) return terr_set(e, "expression value longer than %zu bytes", b->cap - 1);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return 0;
}

/* s[0..n) without the spaces around it */
static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ')) (*s)++, (*n)--;
    while (*n && (*s)[*n - 1] == ' ') (*n)--;
}

/* The value of the column named s[0..n) on row r, or NULL with e set. */
static const char *column_value(const csv_rows *t, const char *s, size_t n, terr *e)
{
    char name[256];
    trim(&s, &n);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, s, n);
    name[n] = 0;
    int c = csv_rows_col(t, name);
    if (c < 0) {
        terr_set(e, "%s has no column \"%s\"", t->path, name);
        return NULL;
    }
    return csv_rows_at(t, c);
}

/* The index of the first c at brace depth 0 in s[0..n), or -1. */
static long find_top(const char *s, size_t n, char c)
{
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '{') depth++;
        else if (s[i] == '}') depth--;
        else if (!depth && s[i] == c) return (long)i;
    }
    return -1;
}

static int text_equal(const char *a, const char *b, size_t bn)
{
    double x, y;
    char tmp[256];
    if (strlen(a) == bn && !memcmp(a, b, bn)) return 1;
    if (bn >= sizeof tmp) return 0;
    memcpy(tmp, b, bn);
    tmp[bn] = 0;
    return !parse_f64(a, &x) && !parse_f64(tmp, &y) && x == y;
}

/* COL OP VALUE on row r (see reduce.h). */
static int eval_cond(const char *c, size_t n, const csv_rows *t, bool *out, terr *e)
{
    size_t i = 0;
    while (i < n && !strchr("=!~<>", c[i])) i++;
    if (i == n || i == 0) return terr_set(e, "condition \"%.*s\": expected COL=VALUE, COL!=VALUE, COL~TEXT or a comparison", (int)n, c);
    char op[3] = {c[i], 0, 0};
    size_t vstart = i + 1;
    if (vstart < n && c[vstart] == '=' && c[i] != '=' && c[i] != '~') op[1] = '=', vstart++;
    if (!strcmp(op, "!")) return terr_set(e, "condition \"%.*s\": expected != after the column", (int)n, c);
    const char *val = column_value(t, c, i, e);
    if (!val) return -1;
    const char *v = c + vstart;
    size_t vn = n - vstart;
    trim(&v, &vn);
    if (op[0] == '=' || op[0] == '!') {
        bool any = false;
        for (size_t a = 0; a <= vn;) {
            const char *bar = memchr(v + a, '|', vn - a);
            size_t end = bar ? (size_t)(bar - v) : vn;
            if (text_equal(val, v + a, end - a)) any = true;
            a = end + 1;
        }
        *out = op[0] == '=' ? any : !any;
        return 0;
    }
    if (op[0] == '~') {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%.*s", (int)vn, v);
        *out = strstr(val, tmp) != NULL;
        return 0;
    }
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.*s", (int)vn, v);
    double x, y;
    if (parse_f64(val, &x)) return terr_set(e, "%s:%lld: \"%s\" is not a number (condition \"%.*s\")", t->path,
                                            (long long)csv_rows_line(t), val, (int)n, c);
    if (parse_f64(tmp, &y)) return terr_set(e, "condition \"%.*s\": \"%s\" is not a number", (int)n, c, tmp);
    *out = !strcmp(op, "<") ? x < y : !strcmp(op, "<=") ? x <= y : !strcmp(op, ">") ? x > y : x >= y;
    return 0;
}

static int eval_text(const char *s, size_t n, const csv_rows *t, sbuf *b, terr *e);

/* The operator at s[i] of an arithmetic expression, or 0: '*', '/', '+', and '-' written with a
 * space on each side (a '-' inside a word is part of a column's name: time-scale). The '+' of
 * an exponent (1e+06) is part of its number. */
static char arith_op(const char *s, size_t n, size_t i)
{
    char c = s[i];
    if (c == '*' || c == '/') return c;
    if (c == '+') {
        bool exponent = i >= 2 && (s[i - 1] == 'e' || s[i - 1] == 'E') && (isdigit((unsigned char)s[i - 2]) || s[i - 2] == '.') &&
                        i + 1 < n && isdigit((unsigned char)s[i + 1]);
        return exponent ? 0 : '+';
    }
    if (c == '-' && i > 0 && s[i - 1] == ' ' && i + 1 < n && s[i + 1] == ' ') return '-';
    return 0;
}

static bool is_arith(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (arith_op(s, n, i)) return true;
    return false;
}

/* Sums and differences of products and quotients of numbers and columns (the usual precedence,
 * left to right). */
static int eval_arith(const char *s, size_t n, const csv_rows *t, sbuf *b, terr *e)
{
    double sum = 0, prod = 1;
    char add = '+', mul = '*';
    for (size_t a = 0; a <= n;) {
        size_t end = a;
        while (end < n && !arith_op(s, n, end)) end++;
        const char *term = s + a;
        size_t tn = end - a;
        trim(&term, &tn);
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%.*s", (int)tn, term);
        double x;
        if (parse_f64(tmp, &x)) {
            const char *v = column_value(t, term, tn, e);
            if (!v) return -1;
            if (!*v) return 0; /* an empty operand: the value is empty */
            if (parse_f64(v, &x))
                return terr_set(e, "%s:%lld: %s \"%s\" is not a number", t->path, (long long)csv_rows_line(t), tmp, v);
        }
        prod = mul == '*' ? prod * x : prod / x;
        char op = end < n ? arith_op(s, n, end) : '+';
        if (op == '*' || op == '/') {
            mul = op;
        } else { /* the product ends here */
            sum = add == '+' ? sum + prod : sum - prod;
            add = op;
            prod = 1;
            mul = '*';
        }
        a = end + 1;
    }
    char num[64];
    int k = snprintf(num, sizeof num, "%.*g", b->digits, sum);
    return sb_add(b, num, (size_t)k, e);
}

/* The inside of one {...}. */
static int eval_placeholder(const char *s, size_t n, const csv_rows *t, sbuf *b, terr *e)
{
    long q = find_top(s, n, '?');
    if (q >= 0) {
        const char *rest = s + q + 1;
        size_t rn = n - (size_t)q - 1;
        long k = find_top(rest, rn, ':');
        if (k < 0) return terr_set(e, "\"{%.*s}\": a condition needs ?THEN:ELSE", (int)n, s);
        bool yes;
        if (eval_cond(s, (size_t)q, t, &yes, e)) return -1;
        return yes ? eval_text(rest, (size_t)k, t, b, e) : eval_text(rest + k + 1, rn - (size_t)k - 1, t, b, e);
    }
    if (is_arith(s, n)) return eval_arith(s, n, t, b, e);
    const char *v = column_value(t, s, n, e);
    return v ? sb_add(b, v, strlen(v), e) : -1;
}

static int eval_text(const char *s, size_t n, const csv_rows *t, sbuf *b, terr *e)
{
    for (size_t i = 0; i < n;) {
        if (s[i] == '}') return terr_set(e, "\"%.*s\": a '}' without its '{'", (int)n, s);
        if (s[i] != '{') {
            if (sb_add(b, s + i, 1, e)) return -1;
            i++;
            continue;
        }
        int depth = 0;
        size_t j = i;
        for (; j < n; j++) {
            if (s[j] == '{') depth++;
            else if (s[j] == '}' && --depth == 0) break;
        }
        if (j == n) return terr_set(e, "\"%.*s\": a '{' without its '}'", (int)n, s);
        if (eval_placeholder(s + i + 1, j - i - 1, t, b, e)) return -1;
        i = j + 1;
    }
    return 0;
}

/* Whether the column named s[0..n) exists (e set when not). */
static int check_column(const csv_rows *t, const char *s, size_t n, terr *e)
{
    char name[256];
    trim(&s, &n);
    snprintf(name, sizeof name, "%.*s", (int)n, s);
    return csv_rows_need(t, name, e) < 0 ? -1 : 0;
}

/* The column a condition names: before its operator. */
static int check_cond(const char *c, size_t n, const csv_rows *t, terr *e)
{
    size_t i = 0;
    while (i < n && !strchr("=!~<>", c[i])) i++;
    if (i == n || i == 0) return terr_set(e, "condition \"%.*s\": expected COL=VALUE, COL!=VALUE, COL~TEXT or a comparison", (int)n, c);
    return check_column(t, c, i, e);
}

/* Checks every column an expression names, in every branch, before any row is read: a typo is
 * an error even when no row would have reached it. */
static int check_text(const char *s, size_t n, const csv_rows *t, terr *e)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '}') return terr_set(e, "\"%.*s\": a '}' without its '{'", (int)n, s);
        if (s[i] != '{') continue;
        int depth = 0;
        size_t j = i;
        for (; j < n; j++) {
            if (s[j] == '{') depth++;
            else if (s[j] == '}' && --depth == 0) break;
        }
        if (j == n) return terr_set(e, "\"%.*s\": a '{' without its '}'", (int)n, s);
        const char *c = s + i + 1;
        size_t cn = j - i - 1;
        long q = find_top(c, cn, '?');
        if (q >= 0) {
            const char *rest = c + q + 1;
            size_t rn = cn - (size_t)q - 1;
            long k = find_top(rest, rn, ':');
            if (k < 0) return terr_set(e, "\"{%.*s}\": a condition needs ?THEN:ELSE", (int)cn, c);
            if (check_cond(c, (size_t)q, t, e) || check_text(rest, (size_t)k, t, e) ||
                check_text(rest + k + 1, rn - (size_t)k - 1, t, e))
                return -1;
        } else if (is_arith(c, cn)) {
            for (size_t a = 0; a <= cn;) {
                size_t end = a;
                while (end < cn && !arith_op(c, cn, end)) end++;
                char tmp[256];
                double x;
                const char *term = c + a;
                size_t tn = end - a;
                trim(&term, &tn);
                snprintf(tmp, sizeof tmp, "%.*s", (int)tn, term);
                if (parse_f64(tmp, &x) && check_column(t, term, tn, e)) return -1;
                a = end + 1;
            }
        } else if (check_column(t, c, cn, e)) {
            return -1;
        }
        i = j;
    }
    return 0;
}

int reduce_check_where(const char *where, const csv_rows *t, terr *e)
{
    if (!where) return 0;
    size_t n = strlen(where);
    for (size_t a = 0; a < n;) {
        const char *amp = memchr(where + a, '&', n - a);
        size_t end = amp ? (size_t)(amp - where) : n;
        if (check_cond(where + a, end - a, t, e)) return -1;
        a = end + 1;
    }
    return 0;
}

static int eval_digits(const char *expr, const csv_rows *t, char *buf, size_t n, int digits, terr *e)
{
    sbuf b = {buf, 0, n, digits};
    buf[0] = 0;
    return eval_text(expr, strlen(expr), t, &b, e);
}

int reduce_eval(const char *expr, const csv_rows *t, char *buf, size_t n, terr *e)
{
    return eval_digits(expr, t, buf, n, 6, e);
}

int reduce_where(const char *where, const csv_rows *t, bool *match, terr *e)
{
    *match = true;
    if (!where) return 0;
    size_t n = strlen(where);
    for (size_t a = 0; a < n;) {
        const char *amp = memchr(where + a, '&', n - a);
        size_t end = amp ? (size_t)(amp - where) : n;
        bool m;
        if (eval_cond(where + a, end - a, t, &m, e)) return -1;
        if (!m) {
            *match = false;
            return 0;
        }
        a = end + 1;
    }
    return 0;
}

int reduce_field_init(reduce_field *f, const char *spec, const csv_rows *t, terr *e)
{
    const char *eq = strchr(spec, '=');
    memset(f, 0, sizeof *f);
    f->col = -1;
    if (eq) {
        snprintf(f->name, sizeof f->name, "%.*s", (int)(eq - spec), spec);
        f->expr = eq + 1;
        if (!*f->name) return terr_set(e, "\"%s\": NAME=EXPR wants a name", spec);
        return check_text(f->expr, strlen(f->expr), t, e);
    }
    snprintf(f->name, sizeof f->name, "%s", spec);
    f->col = csv_rows_need(t, spec, e);
    return f->col < 0 ? -1 : 0;
}

int reduce_field_number(const reduce_field *f, const csv_rows *t, double *v, bool *empty, terr *e)
{
    char buf[1024];
    const char *s = buf;
    if (f->expr) {
        if (eval_digits(f->expr, t, buf, sizeof buf, 17, e)) return -1;
    } else {
        s = csv_rows_at(t, f->col);
    }
    *empty = !*s;
    *v = NAN;
    if (*empty) return 0;
    if (parse_f64(s, v))
        return terr_set(e, "%s:%lld: %s \"%s\" is not a number", t->path, (long long)csv_rows_line(t), f->name, s);
    return 0;
}

/* Whether row r counts for latencies: a requests.csv's finished requests (other files: all). */
static bool counts(const csv_rows *t, int state_col)
{
    return state_col < 0 || !strcmp(csv_rows_at(t, state_col), "finished");
}

/* s with every comma written as ';' */
static void put_field(FILE *out, const char *s)
{
    for (; *s; s++) fputc(*s == ',' ? ';' : *s, out);
}

/* ---- cdf ------------------------------------------------------------------------------------- */

typedef struct vw {
    double v, w;
} vw;

static int cmp_vw(const void *a, const void *b)
{
    double x = ((const vw *)a)->v, y = ((const vw *)b)->v;
    return (x > y) - (x < y);
}

void reduce_cdf_block(FILE *out, const char *label, const char *what, double *v, double *w, const char *weight,
                      size_t n, int points)
{
    vw *p = xmalloc((n ? n : 1) * sizeof *p);
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        p[i] = (vw){v[i], w ? w[i] : 1};
        total += p[i].w;
    }
    qsort(p, n, sizeof *p, cmp_vw);
    fprintf(out, "# %s: %s of %zu rows", label, what, n);
    if (w) fprintf(out, " (weighted by %s, total %.9g)", weight, total);
    fprintf(out, "\n\"%s\" \"F\"\n", label);
    if (!n) fprintf(out, "NaN NaN\n");
    double cum = 0;
    long last = -1;
    for (size_t r = 0; r < n; r++) {
        cum += p[r].w;
        if (r + 1 < n && p[r + 1].v == p[r].v) continue; /* equal values: only the last one */
        double F = cum / total;
        /* a level of the evenly spaced grid, or of the finer grid over the top 1% */
        long level = F < 0.99 ? (long)(F * points) : points + (long)((F - 0.99) * 100 * 50);
        if (r == 0 || r + 1 == n || level != last) {
            fprintf(out, "%.6g %.6g\n", p[r].v, F);
            last = level;
        }
    }
    free(p);
}

/* The values of metric (a column or NAME=EXPR) in file, times o->scale, of the rows that count
 * and meet o->where, and their weights (o->weight, or 1 each; rows of weight 0 are left out):
 * *v and *w (*k of each, the caller frees them); name: the metric's name. */
static int load_values(const char *file, const char *metric, const reduce_cdf_options *o, double **v, double **w,
                       size_t *k, char *name, size_t name_n, terr *e)
{
    csv_rows t;
    *v = *w = NULL;
    *k = 0;
    if (csv_rows_open(&t, file, e)) return -1;
    reduce_field f;
    int wcol = -1, rc = reduce_field_init(&f, metric, &t, e);
    if (!rc && o->weight) rc = (wcol = csv_rows_need(&t, o->weight, e)) < 0 ? -1 : 0;
    if (!rc) rc = reduce_check_where(o->where, &t, e);
    snprintf(name, name_n, "%s", f.name);
    bool m;
    int state = csv_rows_col(&t, "state");
    size_t cap_v = 0, cap_w = 0;
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        bool empty;
        double x, wt = 1;
        if (!counts(&t, state)) continue;
        if ((rc = reduce_where(o->where, &t, &m, e)) || !m) continue;
        if ((rc = reduce_field_number(&f, &t, &x, &empty, e)) || empty) continue;
        if (wcol >= 0 && parse_f64(csv_rows_at(&t, wcol), &wt))
            rc = terr_set(e, "%s:%lld: %s \"%s\" is not a number", t.path, (long long)csv_rows_line(&t), o->weight,
                          csv_rows_at(&t, wcol));
        if (rc || wt <= 0) continue;
        grow_array((void **)v, sizeof **v, &cap_v, *k + 1);
        grow_array((void **)w, sizeof **w, &cap_w, *k + 1);
        (*v)[*k] = x * o->scale;
        (*w)[(*k)++] = wt;
    }
    csv_rows_close(&t);
    return rc;
}

int reduce_cdf(FILE *out, const char *metric, const char *const *labels, const char *const *files, int n,
               const reduce_cdf_options *o, terr *e)
{
    for (int s = 0; s < n; s++) {
        double *v, *w;
        size_t k;
        char name[128];
        int rc = load_values(files[s], metric, o, &v, &w, &k, name, sizeof name, e);
        if (!rc) {
            if (s) fprintf(out, "\n\n");
            reduce_cdf_block(out, labels[s], name, v, o->weight ? w : NULL, o->weight, k, o->points);
        }
        free(v);
        free(w);
        if (rc) return -1;
    }
    return 0;
}

/* ---- quantile -------------------------------------------------------------------------------- */

int reduce_quantile(FILE *out, const char *metric, const char *const *labels, const char *const *files, int n,
                    const char *at, const reduce_cdf_options *o, terr *e)
{
    double pct[32];
    char pct_text[32][32];
    int np = 0;
    for (const char *s = at; s && *s;) {
        char *end;
        if (np == 32) return terr_set(e, "--at: at most 32 percentiles");
        pct[np] = strtod(s, &end);
        if (end == s || (*end && *end != ',') || !(pct[np] > 0 && pct[np] <= 100))
            return terr_set(e, "--at: \"%s\" is not a list of percentiles in (0, 100]", at);
        snprintf(pct_text[np], sizeof pct_text[np], "%.*s", (int)(end - s), s);
        np++;
        s = *end ? end + 1 : end;
    }
    if (!np) return terr_set(e, "--at: at least one percentile (e.g. 50,99.9,100)");
    for (int s = 0; s < n; s++) {
        double *v, *w;
        size_t k;
        char name[128];
        int rc = load_values(files[s], metric, o, &v, &w, &k, name, sizeof name, e);
        if (!rc && !s) {
            fprintf(out, "series");
            for (int j = 0; j < np; j++)
                if (pct[j] == 100) fprintf(out, ",max_%s", name);
                else fprintf(out, ",p%s_%s", pct_text[j], name);
            fputc('\n', out);
        }
        if (!rc) {
            /* the values in order, then for each level the first at which the CDF reaches it:
             * the same cum / total as reduce_cdf_block's F */
            vw *p = xmalloc((k ? k : 1) * sizeof *p);
            double total = 0;
            for (size_t i = 0; i < k; i++) {
                p[i] = (vw){v[i], w[i]};
                total += w[i];
            }
            qsort(p, k, sizeof *p, cmp_vw);
            put_field(out, labels[s]);
            for (int j = 0; j < np && !k; j++) fputc(',', out);
            for (int j = 0; j < np && k; j++) {
                double cum = 0, q = pct[j] / 100;
                size_t r = 0;
                for (; r < k; r++) {
                    cum += p[r].w;
                    if (r + 1 < k && p[r + 1].v == p[r].v) continue;
                    if (cum / total >= q) break;
                }
                if (r == k) r = k - 1; /* rounding: the last value is the top of the CDF */
                fprintf(out, ",%.6g", p[r].v);
            }
            fputc('\n', out);
            free(p);
        }
        free(v);
        free(w);
        if (rc) return -1;
    }
    return 0;
}

/* ---- group ----------------------------------------------------------------------------------- */

typedef struct group {
    char *key;
    samples *m; /* (num_metrics) */
    int64_t count;
} group;

static int cmp_group(const void *a, const void *b) { return strcmp(((const group *)a)->key, ((const group *)b)->key); }

int reduce_group(FILE *out, const char *file, const char *gspec, const char *const *metrics, int nm,
                 const reduce_group_options *o, terr *e)
{
    csv_rows t;
    if (csv_rows_open(&t, file, e)) return -1;
    int rc = 0, state = csv_rows_col(&t, "state");
    reduce_field g = {0}, *f = xcalloc((size_t)nm, sizeof *f);
    bool one = !strcmp(gspec, "-");
    if (one) snprintf(g.name, sizeof g.name, "group");
    else rc = reduce_field_init(&g, gspec, &t, e);
    for (int j = 0; !rc && j < nm; j++) rc = reduce_field_init(&f[j], metrics[j], &t, e);
    group *gs = NULL;
    size_t ng = 0, cap = 0;
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        if (!counts(&t, state)) continue;
        char key[1024];
        if (one) snprintf(key, sizeof key, "all");
        else if (g.expr) rc = reduce_eval(g.expr, &t, key, sizeof key, e);
        else snprintf(key, sizeof key, "%s", csv_rows_at(&t, g.col));
        size_t i = 0;
        while (i < ng && strcmp(gs[i].key, key)) i++;
        if (i == ng) {
            grow_array((void **)&gs, sizeof *gs, &cap, ng + 1);
            gs[ng++] = (group){xstrdup(key), xcalloc((size_t)nm, sizeof(samples)), 0};
        }
        for (int j = 0; !rc && j < nm; j++) {
            double x;
            bool empty;
            if ((rc = reduce_field_number(&f[j], &t, &x, &empty, e)) || empty) continue;
            samples_add(&gs[i].m[j], x);
        }
    }
    if (!rc) {
        qsort(gs, ng, sizeof *gs, cmp_group);
        if (!o->no_header) {
            fprintf(out, "%s%s,count", o->prefix_header ? o->prefix_header : "", g.name);
            for (int j = 0; j < nm; j++) {
                const char *n = f[j].name;
                fprintf(out, ",mean_%s,p50_%s,p90_%s,p99_%s,max_%s", n, n, n, n, n);
            }
            fputc('\n', out);
        }
        for (size_t i = 0; i < ng; i++) {
            size_t count = 0;
            for (int j = 0; j < nm; j++) count = gs[i].m[j].len > count ? gs[i].m[j].len : count;
            fprintf(out, "%s%s,%zu", o->prefix ? o->prefix : "", gs[i].key, count);
            for (int j = 0; j < nm; j++) {
                samples *s = &gs[i].m[j];
                if (!s->len) fprintf(out, ",,,,,");
                else
                    fprintf(out, ",%.6g,%.6g,%.6g,%.6g,%.6g", samples_mean(s), samples_percentile(s, 50),
                            samples_percentile(s, 90), samples_percentile(s, 99), samples_percentile(s, 100));
            }
            fputc('\n', out);
        }
    }
    for (size_t i = 0; i < ng; i++) {
        for (int j = 0; j < nm; j++) samples_free(&gs[i].m[j]);
        free(gs[i].m);
        free(gs[i].key);
    }
    free(gs);
    free(f);
    csv_rows_close(&t);
    return rc;
}

/* ---- steps.csv: bins and ITLs ---------------------------------------------------------------- */

enum { S_START, S_DUR, S_KV, S_BATCH, S_RUN, S_WAIT, S_PRE_TOK, S_DEC_TOK, S_PREEMPT, S_NUM };
static const char *const step_cols[S_NUM] = {"start_s", "duration_ms", "kv_usage", "batch_size", "num_running",
                                            "num_waiting", "prefill_tokens", "decode_tokens", "num_preemptions"};

/* The columns of a steps.csv, with a message that says so when one is missing. */
static int step_columns(const csv_rows *t, int *c, terr *e)
{
    for (int k = 0; k < S_NUM; k++)
        if ((c[k] = csv_rows_col(t, step_cols[k])) < 0)
            return terr_set(e, "%s has no column \"%s\" (not a steps.csv?)", t->path, step_cols[k]);
    return 0;
}

static int step_number(const csv_rows *t, const int *c, int k, double *v, terr *e)
{
    const char *s = csv_rows_at(t, c[k]);
    if (parse_f64(s, v))
        return terr_set(e, "%s:%lld: %s \"%s\" is not a number", t->path, (long long)csv_rows_line(t), step_cols[k], s);
    return 0;
}

typedef struct bin_acc {
    int64_t n;
    double busy, kv, kvmax, bs, run, wait, waitmax, tok, pre;
} bin_acc;

int reduce_bin(FILE *out, const char *steps, double bin_s, double from_s, double to_s, terr *e)
{
    if (!(bin_s > 0)) return terr_set(e, "--bin: the bin width must be > 0 seconds");
    csv_rows t;
    if (csv_rows_open(&t, steps, e)) return -1;
    int c[S_NUM], rc = step_columns(&t, c, e);
    bin_acc *b = NULL;
    size_t cap = 0;
    long last = -1;
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        double x[S_NUM];
        for (int k = 0; !rc && k < S_NUM; k++) rc = step_number(&t, c, k, &x[k], e);
        if (rc || x[S_START] < from_s || (to_s >= 0 && x[S_START] >= to_s)) continue;
        long i = (long)((x[S_START] - from_s) / bin_s);
        if (i > last) {
            grow_array((void **)&b, sizeof *b, &cap, (size_t)i + 1);
            memset(b + last + 1, 0, (size_t)(i - last) * sizeof *b);
            last = i;
        }
        double d = x[S_DUR] / 1000;
        bin_acc *a = &b[i];
        a->n++;
        a->busy += d;
        a->kv += d * x[S_KV];
        a->kvmax = fmax(a->kvmax, x[S_KV]);
        a->bs += d * x[S_BATCH];
        a->run += d * x[S_RUN];
        a->wait += d * x[S_WAIT];
        a->waitmax = fmax(a->waitmax, x[S_WAIT]);
        a->tok += d * (x[S_PRE_TOK] + x[S_DEC_TOK]);
        a->pre += x[S_PREEMPT];
    }
    if (!rc) {
        fprintf(out, "t_s,busy,kv_usage,kv_usage_max,batch_size,num_running,num_waiting,num_waiting_max,"
                     "tokens_per_step,preemptions\n");
        for (long i = 0; i <= last; i++) {
            double mid = from_s + ((double)i + 0.5) * bin_s;
            bin_acc *a = &b[i];
            if (!a->n) {
                fprintf(out, "%g,0,,,,,,,,\n", mid);
                continue;
            }
            double w = a->busy > 0 ? a->busy : 1;
            fprintf(out, "%g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.0f,%.4g,%.0f\n", mid, a->busy > bin_s ? 1 : a->busy / bin_s,
                    a->kv / w, a->kvmax, a->bs / w, a->run / w, a->wait / w, a->waitmax, a->tok / w, a->pre);
        }
    }
    free(b);
    csv_rows_close(&t);
    return rc;
}

/*
 * A decode token's ITL is the time from its request's previous token to it.
 *   v1: every running request is in every step (vllm, sarathi, priority, ... when the token
 *       budget covers a token per running request and nothing is preempted): the decode tokens
 *       of a step waited exactly that step's duration.
 *   v0: vllm-v0: a step is all prefills or all decodes, and a decode step decodes every running
 *       request. A decode step's tokens waited since the end of the previous decode step, except
 *       those of requests whose prefill step came in between (batch_size of each such step),
 *       which waited since that step ended.
 * Both are exact when nothing is preempted and no output is a single token.
 */
int reduce_itl(FILE *out, const char *steps, bool v0, terr *e)
{
    csv_rows t;
    if (csv_rows_open(&t, steps, e)) return -1;
    int c[S_NUM], rc = step_columns(&t, c, e);
    double *pend_end = NULL, *pend_n = NULL, last_end = 0;
    size_t np = 0, cap1 = 0, cap2 = 0;
    bool have_last = false;
    if (!rc) fprintf(out, "itl_ms,tokens\n");
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        double x[S_NUM];
        for (int k = 0; !rc && k < S_NUM; k++) rc = step_number(&t, c, k, &x[k], e);
        if (rc) break;
        double d = x[S_DUR], end = x[S_START] * 1000 + d, dec = x[S_DEC_TOK];
        if (!v0) {
            if (dec > 0) fprintf(out, "%.6g,%.0f\n", d, dec);
            continue;
        }
        if (dec == 0) { /* a prefill step: its requests emit their first token */
            grow_array((void **)&pend_end, sizeof *pend_end, &cap1, np + 1);
            grow_array((void **)&pend_n, sizeof *pend_n, &cap2, np + 1);
            pend_end[np] = end;
            pend_n[np++] = x[S_BATCH];
            continue;
        }
        double fresh = 0;
        for (size_t k = 0; k < np; k++) {
            fprintf(out, "%.6g,%.0f\n", end - pend_end[k], pend_n[k]);
            fresh += pend_n[k];
        }
        if (have_last && dec - fresh > 0) fprintf(out, "%.6g,%.0f\n", end - last_end, dec - fresh);
        np = 0;
        last_end = end;
        have_last = true;
    }
    free(pend_end);
    free(pend_n);
    csv_rows_close(&t);
    return rc;
}

/* ---- select ---------------------------------------------------------------------------------- */

static int select_rows(FILE *out, const char *file, const char *const *adds, int na, const char *where,
                       const char *keep, bool distinct, terr *e)
{
    char **seen = NULL; /* (nseen) the rows written, with --distinct */
    uint64_t *seen_hash = NULL;
    size_t nseen = 0, cap_seen = 0, cap_hash = 0;
    csv_rows t;
    if (csv_rows_open(&t, file, e)) return -1;
    int rc = 0;
    reduce_field *f = xcalloc((size_t)na + 1, sizeof *f);
    for (int j = 0; !rc && j < na; j++) {
        if (!strchr(adds[j], '=')) rc = terr_set(e, "\"%s\": a derived column is NAME=EXPR", adds[j]);
        else rc = reduce_field_init(&f[j], adds[j], &t, e);
    }
    if (!rc) rc = reduce_check_where(where, &t, e);
    bool m;
    /* the output columns: >= 0 a column of the file, < 0 derived column -1 - j */
    int *outc = NULL, no = 0;
    size_t cap = 0;
    if (!rc && keep) {
        for (const char *s = keep; !rc;) {
            const char *comma = strchr(s, ',');
            size_t n = comma ? (size_t)(comma - s) : strlen(s);
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)n, s);
            /* a derived column hides a column of the file with its name */
            int c = -1;
            bool found = false;
            for (int j = 0; !found && j < na; j++)
                if (!strcmp(f[j].name, name)) c = -1 - j, found = true;
            if (!found) found = (c = csv_rows_col(&t, name)) >= 0;
            if (!found) rc = terr_set(e, "--keep: %s has no column \"%s\"", file, name);
            grow_array((void **)&outc, sizeof *outc, &cap, (size_t)no + 1);
            outc[no++] = c;
            if (!comma) break;
            s = comma + 1;
        }
    } else if (!rc) {
        no = t.num_cols + na;
        outc = xmalloc((size_t)no * sizeof *outc);
        for (int c = 0; c < no; c++) outc[c] = c < t.num_cols ? c : -1 - (c - t.num_cols);
    }
    if (!rc) {
        for (int k = 0; k < no; k++) {
            if (k) fputc(',', out);
            put_field(out, outc[k] >= 0 ? csv_rows_name(&t, outc[k]) : f[-1 - outc[k]].name);
        }
        fputc('\n', out);
    }
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        if ((rc = reduce_where(where, &t, &m, e)) || !m) continue;
        /* --distinct: the row is written into text first, and only when it is new */
        char *text = NULL;
        size_t text_len = 0;
        FILE *row = distinct ? open_memstream(&text, &text_len) : out;
        if (!row) {
            rc = terr_set(e, "out of memory");
            break;
        }
        for (int k = 0; !rc && k < no; k++) {
            char buf[1024];
            if (k) fputc(',', row);
            if (outc[k] >= 0) put_field(row, csv_rows_at(&t, outc[k]));
            else if (!(rc = reduce_eval(f[-1 - outc[k]].expr, &t, buf, sizeof buf, e))) put_field(row, buf);
        }
        fputc('\n', row);
        if (distinct) {
            fclose(row);
            uint64_t h = XXH3_64bits(text, text_len);
            size_t i = 0;
            while (i < nseen && (seen_hash[i] != h || strcmp(seen[i], text))) i++;
            if (i < nseen) {
                free(text);
                continue;
            }
            fwrite(text, 1, text_len, out);
            grow_array((void **)&seen, sizeof *seen, &cap_seen, nseen + 1);
            grow_array((void **)&seen_hash, sizeof *seen_hash, &cap_hash, nseen + 1);
            seen_hash[nseen] = h;
            seen[nseen++] = text;
        }
    }
    for (size_t i = 0; i < nseen; i++) free(seen[i]);
    free(seen);
    free(seen_hash);
    free(outc);
    free(f);
    csv_rows_close(&t);
    return rc;
}

int reduce_select(FILE *out, const char *file, const char *const *adds, int na, const char *where, const char *keep,
                  terr *e)
{
    return select_rows(out, file, adds, na, where, keep, false, e);
}

int reduce_select_distinct(FILE *out, const char *file, const char *const *adds, int na, const char *where,
                           const char *keep, terr *e)
{
    return select_rows(out, file, adds, na, where, keep, true, e);
}

/* ---- cross ----------------------------------------------------------------------------------- */

/* The columns of a comma-separated --by list (at most 16) into cb[*nb]; -1 with e set. */
static int by_columns(csv_rows *t, const char *by, int cb[16], int *nb, terr *e)
{
    *nb = 0;
    for (const char *s = by; s && *s;) {
        const char *comma = strchr(s, ',');
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(comma ? (size_t)(comma - s) : strlen(s)), s);
        if (*nb == 16) return terr_set(e, "--by: at most 16 columns");
        if ((cb[(*nb)++] = csv_rows_need(t, name, e)) < 0) return -1;
        s = comma ? comma + 1 : s + strlen(s);
    }
    return 0;
}

/* The current row's values of the --by columns, comma-joined into key (n bytes). */
static void group_key(csv_rows *t, const int *cb, int nb, char *key, size_t n)
{
    size_t used = 0;
    key[0] = '\0';
    for (int k = 0; k < nb; k++)
        used += (size_t)snprintf(key + used, used < n ? n - used : 0, "%s%s", k ? "," : "", csv_rows_at(t, cb[k]));
}

typedef struct cross_group {
    char *key;          /* the BY columns' values, comma-joined */
    double *x, *y;      /* (n) the group's rows in file order */
    char **x_text;      /* (n) x as written, for "<X" and ">X" */
    size_t n, cap_x, cap_y, cap_t;
} cross_group;

int reduce_cross(FILE *out, const char *file, const char *xcol, const char *ycol, const char *at, const char *by,
                 const char *suffix, terr *e)
{
    double targets[32];
    int nt = 0;
    for (const char *s = at; s && *s && nt < 32;) {
        char *end;
        targets[nt] = strtod(s, &end);
        if (end == s || (*end && *end != ',')) return terr_set(e, "--at: \"%s\" is not a list of numbers", at);
        nt++;
        s = *end ? end + 1 : end;
    }
    if (!nt) return terr_set(e, "--at: at least one target value of %s", ycol);
    csv_rows t;
    if (csv_rows_open(&t, file, e)) return -1;
    int cx = csv_rows_need(&t, xcol, e), cy = cx < 0 ? -1 : csv_rows_need(&t, ycol, e), rc = cy < 0 ? -1 : 0;
    int cb[16], nb = 0;
    if (!rc) rc = by_columns(&t, by, cb, &nb, e);
    cross_group *g = NULL;
    size_t ng = 0, cap = 0;
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        char key[1024];
        group_key(&t, cb, nb, key, sizeof key);
        double x, y;
        const char *xs = csv_rows_at(&t, cx), *ys = csv_rows_at(&t, cy);
        if (parse_f64(xs, &x) || parse_f64(ys, &y)) {
            rc = terr_set(e, "%s:%lld: %s \"%s\" or %s \"%s\" is not a number", t.path, (long long)csv_rows_line(&t),
                          xcol, xs, ycol, ys);
            break;
        }
        size_t i = 0;
        while (i < ng && strcmp(g[i].key, key)) i++;
        if (i == ng) {
            grow_array((void **)&g, sizeof *g, &cap, ng + 1);
            g[ng++] = (cross_group){.key = xstrdup(key)};
        }
        cross_group *q = &g[i];
        grow_array((void **)&q->x, sizeof *q->x, &q->cap_x, q->n + 1);
        grow_array((void **)&q->y, sizeof *q->y, &q->cap_y, q->n + 1);
        grow_array((void **)&q->x_text, sizeof *q->x_text, &q->cap_t, q->n + 1);
        q->x[q->n] = x;
        q->y[q->n] = y;
        q->x_text[q->n++] = xstrdup(xs);
    }
    if (!rc) {
        for (int k = 0; k < nb; k++) fprintf(out, "%s,", csv_rows_name(&t, cb[k]));
        for (int j = 0; j < nt; j++) fprintf(out, "%sknee_%s_at_%g%s", j ? "," : "", xcol, targets[j], suffix ? suffix : "");
        fputc('\n', out);
        for (size_t i = 0; i < ng; i++) {
            cross_group *q = &g[i];
            fprintf(out, "%s%s", q->key, nb ? "," : "");
            for (int j = 0; j < nt; j++) {
                double T = targets[j];
                size_t k = 0;
                while (k < q->n && q->y[k] <= T) k++;
                if (j) fputc(',', out);
                if (k == 0) fprintf(out, "<%s", q->x_text[0]);
                else if (k == q->n) fprintf(out, ">%s", q->x_text[q->n - 1]);
                else
                    fprintf(out, "%.3g", q->x[k - 1] + (T - q->y[k - 1]) * (q->x[k] - q->x[k - 1]) / (q->y[k] - q->y[k - 1]));
            }
            fputc('\n', out);
        }
    }
    for (size_t i = 0; i < ng; i++) {
        for (size_t k = 0; k < g[i].n; k++) free(g[i].x_text[k]);
        free(g[i].x_text);
        free(g[i].x);
        free(g[i].y);
        free(g[i].key);
    }
    free(g);
    csv_rows_close(&t);
    return rc;
}

/* ---- pivot ----------------------------------------------------------------------------------- */

typedef struct pivot_cell {
    size_t row, col;
    char **v; /* (num_values) */
} pivot_cell;

/* The index of key in keys (appending it when new). */
static size_t key_index(char ***keys, size_t *n, size_t *cap, const char *key)
{
    size_t i = 0;
    while (i < *n && strcmp((*keys)[i], key)) i++;
    if (i == *n) {
        grow_array((void **)keys, sizeof **keys, cap, *n + 1);
        (*keys)[(*n)++] = xstrdup(key);
    }
    return i;
}

int reduce_pivot(FILE *out, const char *file, const char *row, const char *col, const char *const *values, int nv,
                 terr *e)
{
    csv_rows t;
    if (csv_rows_open(&t, file, e)) return -1;
    bool one = !strcmp(row, "-");
    int cr = one ? -1 : csv_rows_need(&t, row, e), cc = one || cr >= 0 ? csv_rows_need(&t, col, e) : -1;
    int rc = cc < 0 ? -1 : 0, *cv = xcalloc((size_t)nv, sizeof *cv);
    for (int j = 0; !rc && j < nv; j++)
        if ((cv[j] = csv_rows_need(&t, values[j], e)) < 0) rc = -1;
    char **rows = NULL, **cols = NULL;
    size_t nr = 0, nc = 0, cap_r = 0, cap_c = 0, ncell = 0, cap_cell = 0;
    pivot_cell *cells = NULL;
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        size_t r = key_index(&rows, &nr, &cap_r, one ? "" : csv_rows_at(&t, cr));
        size_t c = key_index(&cols, &nc, &cap_c, csv_rows_at(&t, cc));
        for (size_t i = 0; i < ncell; i++)
            if (cells[i].row == r && cells[i].col == c)
                rc = one ? terr_set(e, "%s:%lld: a second row for %s \"%s\"", t.path, (long long)csv_rows_line(&t), col, cols[c])
                         : terr_set(e, "%s:%lld: a second row for %s \"%s\", %s \"%s\"", t.path,
                                    (long long)csv_rows_line(&t), row, rows[r], col, cols[c]);
        if (rc) break;
        grow_array((void **)&cells, sizeof *cells, &cap_cell, ncell + 1);
        pivot_cell *p = &cells[ncell++];
        *p = (pivot_cell){r, c, xcalloc((size_t)nv, sizeof(char *))};
        for (int j = 0; j < nv; j++) p->v[j] = xstrdup(csv_rows_at(&t, cv[j]));
    }
    if (!rc) {
        if (!one) put_field(out, row);
        for (size_t c = 0; c < nc; c++)
            for (int j = 0; j < nv; j++) {
                if (c || j || !one) fputc(',', out);
                put_field(out, cols[c]);
                if (nv > 1) fprintf(out, "_%s", values[j]);
            }
        fputc('\n', out);
        for (size_t r = 0; r < nr; r++) {
            if (!one) put_field(out, rows[r]);
            for (size_t c = 0; c < nc; c++) {
                const pivot_cell *p = NULL;
                for (size_t i = 0; !p && i < ncell; i++)
                    if (cells[i].row == r && cells[i].col == c) p = &cells[i];
                for (int j = 0; j < nv; j++) {
                    if (c || j || !one) fputc(',', out);
                    if (p) put_field(out, p->v[j]);
                }
            }
            fputc('\n', out);
        }
    }
    for (size_t i = 0; i < ncell; i++) {
        for (int j = 0; j < nv; j++) free(cells[i].v[j]);
        free(cells[i].v);
    }
    for (size_t i = 0; i < nr; i++) free(rows[i]);
    for (size_t i = 0; i < nc; i++) free(cols[i]);
    free(cells);
    free(rows);
    free(cols);
    free(cv);
    csv_rows_close(&t);
    return rc;
}

/* ---- best ------------------------------------------------------------------------------------ */

/* One output column of `reduce best`. */
typedef struct best_spec {
    char name[128];
    enum { B_MAX, B_MIN, B_AT_MAX, B_AT_MIN, B_FIRST } kind;
    char y[256];
    int col;         /* of y */
    bool of_max;     /* B_FIRST: the factor multiplies the group's largest y (else its smallest) */
    char op[3];      /* B_FIRST: >=, <=, > or < */
    double factor;   /* B_FIRST */
} best_spec;

/* NAME=max(Y), min(Y), at_max(Y), at_min(Y), first(Y OP [F*]max|min). */
static int best_spec_init(best_spec *b, const char *spec, const csv_rows *t, terr *e)
{
    memset(b, 0, sizeof *b);
    const char *eq = strchr(spec, '='), *open = eq ? strchr(eq, '(') : NULL;
    size_t len = strlen(spec);
    if (!eq || eq == spec || !open || spec[len - 1] != ')')
        return terr_set(e, "\"%s\": expected NAME=max(Y), min(Y), at_max(Y), at_min(Y) or first(Y>=F*max)", spec);
    snprintf(b->name, sizeof b->name, "%.*s", (int)(eq - spec), spec);
    char fn[16], arg[256];
    snprintf(fn, sizeof fn, "%.*s", (int)(open - eq - 1), eq + 1);
    snprintf(arg, sizeof arg, "%.*s", (int)(spec + len - 1 - open - 1), open + 1);
    static const char *const fns[] = {"max", "min", "at_max", "at_min", "first"};
    int k = 0;
    while (k < 5 && strcmp(fn, fns[k])) k++;
    if (k == 5) return terr_set(e, "\"%s\": %s is not max, min, at_max, at_min or first", spec, fn);
    b->kind = k;
    if (b->kind != B_FIRST) {
        snprintf(b->y, sizeof b->y, "%s", arg);
        return (b->col = csv_rows_need(t, b->y, e)) < 0 ? -1 : 0;
    }
    size_t i = strcspn(arg, "<>");
    if (!arg[i]) return terr_set(e, "\"%s\": first(Y OP F*max) with OP one of >= <= > <", spec);
    snprintf(b->y, sizeof b->y, "%.*s", (int)i, arg);
    b->op[0] = arg[i++];
    if (arg[i] == '=') b->op[1] = arg[i++];
    const char *rhs = arg + i, *star = strchr(rhs, '*');
    const char *ext = star ? star + 1 : rhs;
    b->factor = 1;
    if (star) {
        char f[64];
        snprintf(f, sizeof f, "%.*s", (int)(star - rhs), rhs);
        if (parse_f64(f, &b->factor)) return terr_set(e, "\"%s\": \"%s\" is not a number", spec, f);
    }
    if (strcmp(ext, "max") && strcmp(ext, "min")) return terr_set(e, "\"%s\": the bound is F*max or F*min", spec);
    b->of_max = !strcmp(ext, "max");
    return (b->col = csv_rows_need(t, b->y, e)) < 0 ? -1 : 0;
}

typedef struct best_group {
    char *key;          /* the BY columns' values, comma-joined */
    char **x;           /* (n) X of the group's rows, in file order */
    double *y;          /* (n * num_specs) each spec's y, NAN when empty */
    size_t n, cap_x, cap_y;
} best_group;

int reduce_best(FILE *out, const char *file, const char *xcol, const char *by, const char *const *specs, int ns,
                terr *e)
{
    csv_rows t;
    if (csv_rows_open(&t, file, e)) return -1;
    int cx = csv_rows_need(&t, xcol, e), rc = cx < 0 ? -1 : 0, cb[16], nb = 0;
    if (!rc) rc = by_columns(&t, by, cb, &nb, e);
    best_spec *b = xcalloc((size_t)ns, sizeof *b);
    for (int j = 0; !rc && j < ns; j++) rc = best_spec_init(&b[j], specs[j], &t, e);
    best_group *g = NULL;
    size_t ng = 0, cap = 0;
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        char key[1024];
        group_key(&t, cb, nb, key, sizeof key);
        size_t i = 0;
        while (i < ng && strcmp(g[i].key, key)) i++;
        if (i == ng) {
            grow_array((void **)&g, sizeof *g, &cap, ng + 1);
            g[ng++] = (best_group){.key = xstrdup(key)};
        }
        best_group *q = &g[i];
        grow_array((void **)&q->x, sizeof *q->x, &q->cap_x, q->n + 1);
        grow_array((void **)&q->y, sizeof *q->y, &q->cap_y, (q->n + 1) * (size_t)ns);
        for (int j = 0; !rc && j < ns; j++) {
            const char *v = csv_rows_at(&t, b[j].col);
            double *y = &q->y[q->n * (size_t)ns + (size_t)j];
            *y = NAN;
            if (*v && parse_f64(v, y))
                rc = terr_set(e, "%s:%lld: %s \"%s\" is not a number", t.path, (long long)csv_rows_line(&t), b[j].y, v);
        }
        q->x[q->n++] = xstrdup(csv_rows_at(&t, cx));
    }
    if (!rc) {
        for (int k = 0; k < nb; k++) fprintf(out, "%s,", csv_rows_name(&t, cb[k]));
        for (int j = 0; j < ns; j++) fprintf(out, "%s%s", j ? "," : "", b[j].name);
        fputc('\n', out);
        for (size_t i = 0; i < ng; i++) {
            best_group *q = &g[i];
            fprintf(out, "%s%s", q->key, nb ? "," : "");
            for (int j = 0; j < ns; j++) {
                const best_spec *s = &b[j];
                /* the group's largest and smallest y, and the first rows holding them */
                size_t at_max = q->n, at_min = q->n;
                for (size_t r = 0; r < q->n; r++) {
                    double y = q->y[r * (size_t)ns + (size_t)j];
                    if (isnan(y)) continue;
                    if (at_max == q->n || y > q->y[at_max * (size_t)ns + (size_t)j]) at_max = r;
                    if (at_min == q->n || y < q->y[at_min * (size_t)ns + (size_t)j]) at_min = r;
                }
                if (j) fputc(',', out);
                if (at_max == q->n) continue; /* no number in the group: empty */
                double max = q->y[at_max * (size_t)ns + (size_t)j], min = q->y[at_min * (size_t)ns + (size_t)j];
                if (s->kind == B_MAX) fprintf(out, "%.6g", max);
                else if (s->kind == B_MIN) fprintf(out, "%.6g", min);
                else if (s->kind == B_AT_MAX) put_field(out, q->x[at_max]);
                else if (s->kind == B_AT_MIN) put_field(out, q->x[at_min]);
                else {
                    double bound = s->factor * (s->of_max ? max : min);
                    for (size_t r = 0; r < q->n; r++) {
                        double y = q->y[r * (size_t)ns + (size_t)j];
                        bool hit = !strcmp(s->op, ">=") ? y >= bound : !strcmp(s->op, "<=") ? y <= bound
                                   : !strcmp(s->op, ">")  ? y > bound
                                                          : y < bound;
                        if (!isnan(y) && hit) {
                            put_field(out, q->x[r]);
                            break;
                        }
                    }
                }
            }
            fputc('\n', out);
        }
    }
    for (size_t i = 0; i < ng; i++) {
        for (size_t r = 0; r < g[i].n; r++) free(g[i].x[r]);
        free(g[i].x);
        free(g[i].y);
        free(g[i].key);
    }
    free(g);
    free(b);
    csv_rows_close(&t);
    return rc;
}

/* ---- blocks ---------------------------------------------------------------------------------- */

int reduce_blocks(FILE *out, const char *file, const char *const *labels, int n, const char *strip, terr *e)
{
    size_t len;
    char *text = read_text_file(file, &len, e);
    if (!text) return -1;
    size_t pn = strip ? strlen(strip) : 0;
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        /* a block: its comment lines, the line `"LABEL" ...`, its rows up to a blank line */
        const char *block = NULL, *label_line = NULL, *after_label = NULL;
        for (const char *line = text; *line && !label_line;) {
            const char *end = strchr(line, '\n');
            size_t ln = end ? (size_t)(end - line) : strlen(line);
            if (!ln) block = NULL;
            else if (!block) block = line;
            if (ln && line[0] == '"') {
                const char *close = memchr(line + 1, '"', ln - 1);
                const char *lab = line + 1;
                size_t lab_n = close ? (size_t)(close - lab) : 0;
                if (close && lab_n >= pn && !memcmp(lab, strip ? strip : "", pn) && lab_n - pn == strlen(labels[i]) &&
                    !memcmp(lab + pn, labels[i], lab_n - pn)) {
                    label_line = line;
                    after_label = close;
                }
            }
            line = end ? end + 1 : line + ln;
        }
        if (!label_line) {
            rc = terr_set(e, "%s has no block labelled \"%s%s\"", file, strip ? strip : "", labels[i]);
            break;
        }
        if (i) fprintf(out, "\n\n");
        fwrite(block, 1, (size_t)(label_line - block), out);
        fprintf(out, "\"%s", labels[i]);
        const char *rest = after_label, *stop = strstr(rest, "\n\n");
        size_t rn = stop ? (size_t)(stop - rest) + 1 : strlen(rest);
        fwrite(rest, 1, rn, out);
        if (!stop && rn && rest[rn - 1] != '\n') fputc('\n', out);
    }
    free(text);
    return rc;
}

/* ---- trace ----------------------------------------------------------------------------------- */

int reduce_trace(FILE *out, const char *const *files, int n, terr *e)
{
    fprintf(out, "trace,format,requests,span_s,mean_rate_per_s\n");
    for (int i = 0; i < n; i++) {
        trace_reader *tr;
        if (trace_open(&tr, files[i], NULL, e)) return -1;
        trace_stats st;
        trace_stats_init(&st, 60);
        arrival_source src = trace_source(tr);
        arrival a;
        int rc;
        while ((rc = src.next(src.self, &a, e)) == 1)
            if (trace_stats_add(&st, &a, e)) {
                rc = -1;
                break;
            }
        const char *format = trace_format_name(tr);
        trace_close(tr);
        if (!rc && !st.n) rc = terr_set(e, "%s: no requests", files[i]);
        if (!rc) {
            trace_stats_finish(&st);
            put_field(out, files[i]);
            fprintf(out, ",%s,%lld,%.6g,", format, (long long)st.n, st.span_s);
            if (!isnan(st.mean_rate)) fprintf(out, "%.6g", st.mean_rate);
            fputc('\n', out);
        }
        trace_stats_free(&st);
        if (rc) return -1;
    }
    return 0;
}
