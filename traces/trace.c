/*
 * trace.c: the streaming trace readers behind trace_open() (formats documented in trace.h).
 *
 * One reader type serves every format. The CSV formats differ only in a layout row of a
 * static table (which header names mean arrival time, prompt, output, priority, client; how the
 * time column is parsed; whether unknown columns are allowed), so adding a CSV format is one
 * table entry. Mooncake JSONL is parsed per line with jansson.
 *
 * Invariants:
 *   - memory is one chunk buffer (plus the longest line), libcsv's field buffer and the hash
 *     array of the longest Mooncake row: nothing grows with the number of rows;
 *   - times are integer ns from the file on (Azure stamps are converted with integer arithmetic);
 *     the first accepted row is the origin, and every accepted row is >= the one before;
 *   - no input byte sequence reaches an assert: every problem is a terr "FILE:LINE: ...".
 */
#include "traces/trace.h"

#include <assert.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/request.h"
#include "traces/lines.h"

/* Largest arrival offset a trace may state, in seconds: ~31 years keeps every ns value far
 * inside int64 (9.2e9 s); a time_scale above ~9 can still overflow a late row, which is then a
 * FILE:LINE error (place_in_time). */
#define TRACE_MAX_ARRIVAL_S 1e9
/* More header columns than this is not a trace we know. */
#define TRACE_MAX_COLUMNS 64
/* Distinct client names one trace may use (each is kept, to give it the same id every time). */
#define TRACE_MAX_CLIENT_NAMES (1 << 20)

/* The roles a CSV column can play. */
enum { COL_TIME, COL_PROMPT, COL_OUTPUT, COL_PRIORITY, COL_CLIENT, COL_COUNT };

/* Parses the time column into ns (absolute for Azure, seconds-based otherwise); 0 or -1. */
typedef int (*time_parser)(const trace_field *f, int64_t *ns);

typedef struct csv_layout {
    const char *name;                /* the format's name (trace_format_name) */
    const char *col_name[COL_COUNT]; /* header name per role; NULL: the format has no such column */
    bool col_optional[COL_COUNT];
    bool extra_columns_ok;           /* unknown header names are ignored (else an error) */
    bool crlf_ok;                    /* CRLF line ends are accepted (on every line) */
    time_parser parse_time;
    const char *time_what;           /* for messages: what the time column must look like */
} csv_layout;

static int azure_time(const trace_field *f, int64_t *ns);
static int seconds_time(const trace_field *f, int64_t *ns);

/* Azure and Vidur files come from other tools that add columns of their own (Vidur's processed
 * traces carry num_total_tokens and pd_ratio; pandas may add an unnamed index): those are
 * ignored. tandem's own format is strict, so a misspelt "prioirty" is an error instead of a
 * silently dropped column. */
static const csv_layout layouts[] = {
    {"azure", {"TIMESTAMP", "ContextTokens", "GeneratedTokens", NULL, NULL},
     {false, false, false, true, true}, true, true, azure_time, "a time YYYY-MM-DD HH:MM:SS[.fffffff]"},
    {"vidur", {"arrived_at", "num_prefill_tokens", "num_decode_tokens", NULL, NULL},
     {false, false, false, true, true}, true, false, seconds_time, "a number of seconds in [0, 1e9]"},
    {"tandem", {"arrival_s", "prompt_tokens", "output_tokens", "priority", "client"},
     {false, false, false, true, true}, false, false, seconds_time, "a number of seconds in [0, 1e9]"},
    /* Vidur's length files (ShareGPT, arXiv): no time column, so found by the prompt column
     * after vidur; they replay only when re-timed (request_rate). */
    {"lengths", {NULL, "num_prefill_tokens", "num_decode_tokens", NULL, NULL},
     {true, false, false, true, true}, true, false, NULL, NULL},
};

struct trace_reader {
    trace_lines lines;
    trace_options opt;

    /* CSV formats */
    const csv_layout *layout;              /* NULL for Mooncake */
    trace_csv csv;
    int num_columns;                       /* fields every row must have */
    int8_t slot_of_col[TRACE_MAX_COLUMNS]; /* role of each column, -1: ignored */
    bool has_role[COL_COUNT];
    trace_field field[COL_COUNT];          /* the current row's value per role */

    /* Mooncake */
    uint64_t *hashes;                      /* (hashes_cap) the current row's hash_ids */
    size_t hashes_cap;

    /* time order */
    bool have_origin;
    int64_t origin_ns;                     /* raw time of the first accepted row */
    int64_t last_ns;                       /* raw time of the last accepted row */
    int64_t last_line;

    /* client names ("tenant-a"): ids 0, 1, ... in order of first appearance */
    bool client_names;                     /* decided by the first row: names, or integers */
    char **client_name;                    /* (client_cap) open addressing by xxh3; NULL: empty */
    int32_t *client_id_of;                 /* (client_cap) */
    size_t client_cap, num_clients;
    const char **client_by_id;             /* (num_clients) the names, by id (owned by client_name) */

    /* re-timing (opt.request_rate > 0) */
    gsl_rng *rng;                          /* NULL when the rate is infinite or times are kept */
    int64_t retime_ns;                     /* the next request's arrival */

    int64_t rows, bad;
    bool done;
    bool failed;
    terr error;                            /* the error that stopped the reader (sticky) */
};

const char *trace_format_name(const trace_reader *t) { return t->layout ? t->layout->name : "mooncake"; }

trace_options trace_options_default(void)
{
    return (trace_options){.time_scale = 1.0, .max_requests = 0, .skip_bad_rows = false};
}

/* ---- numbers and times ---------------------------------------------------------------------- */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil): exact
 * integer arithmetic, no time zone, no libc. */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/* n decimal digits at s into *v; false if any is not a digit. */
static bool digits(const char *s, int n, int64_t *v)
{
    int64_t x = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return true;
}

int trace_azure_timestamp_ns(const char *s, size_t len, int64_t *ns)
{
    /* "YYYY-MM-DD HH:MM:SS" is 19 bytes, then optionally '.' and 1..9 fraction digits. */
    int64_t y, mo, d, h, mi, sec, frac = 0;
    if (len < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
        s[13] != ':' || s[16] != ':')
        return -1;
    if (!digits(s, 4, &y) || !digits(s + 5, 2, &mo) || !digits(s + 8, 2, &d) ||
        !digits(s + 11, 2, &h) || !digits(s + 14, 2, &mi) || !digits(s + 17, 2, &sec))
        return -1;
    if (len > 19) {
        int nfrac = (int)(len - 20);
        if (s[19] != '.' || nfrac < 1 || nfrac > 9 || !digits(s + 20, nfrac, &frac)) return -1;
        for (int i = nfrac; i < 9; i++) frac *= 10;
    }
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    /* 1900..2200 keeps every instant inside int64 ns (which spans 1678..2262). */
    if (y < 1900 || y > 2200 || mo < 1 || mo > 12 || d < 1 ||
        d > mdays[mo - 1] + (mo == 2 && is_leap(y)) || h > 23 || mi > 59 || sec > 59)
        return -1;
    int64_t s_total = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
    *ns = s_total * NS_PER_S + frac;
    return 0;
}

/* The field is whole in text[] and has no NUL byte, so a C-string parser sees all of it. */
static bool field_is_text(const trace_field *f) { return !f->too_long && strlen(f->text) == f->len; }

static int azure_time(const trace_field *f, int64_t *ns)
{
    return f->too_long ? -1 : trace_azure_timestamp_ns(f->text, f->len, ns);
}

static int seconds_time(const trace_field *f, int64_t *ns)
{
    double v;
    if (!field_is_text(f) || parse_f64(f->text, &v) || v < 0 || v > TRACE_MAX_ARRIVAL_S) return -1;
    *ns = llround(v * 1e9);
    return 0;
}

/* ---- errors --------------------------------------------------------------------------------- */

/* "FILE:LINE: what", for the line just read. */
static int row_error(trace_reader *t, terr *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int row_error(trace_reader *t, terr *e, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return terr_set(e, "%s:%lld: %s", t->lines.path, (long long)t->lines.line, what);
}

/* A copy of bytes from the file that is safe to print in a message: short, printable. */
static const char *printable(const char *s, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < cap; i++)
        out[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (n > 0 && k < n && k + 4 >= cap) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = 0;
    return out;
}

/* A field's text for a message, into buf (TRACE_FIELD_BYTES + 4 bytes): bytes that do not
 * print become '?'. */
#define SHOWN(f, buf) printable((f)->text, strnlen((f)->text, TRACE_FIELD_BYTES), buf, sizeof buf)

/* Token count in [1, TRACE_MAX_TOKENS]. */
static int parse_tokens(trace_reader *t, const trace_field *f, const char *col, int32_t *out,
                        terr *e)
{
    int64_t v;
    char buf[TRACE_FIELD_BYTES + 4];
    if (f->len == 0) return row_error(t, e, "%s is empty", col);
    if (!field_is_text(f) || parse_i64(f->text, &v))
        return row_error(t, e, "%s \"%s\" is not an integer", col, SHOWN(f, buf));
    if (v < 0) return row_error(t, e, "%s is negative (%lld)", col, (long long)v);
    if (v == 0) return row_error(t, e, "%s is 0 (a request needs at least 1 token)", col);
    if (v > TRACE_MAX_TOKENS)
        return row_error(t, e, "%s %lld is absurd (more than %d tokens)", col, (long long)v,
                         TRACE_MAX_TOKENS);
    *out = (int32_t)v;
    return 0;
}

/* A non-negative int32 (priority, client id). */
static int parse_small(trace_reader *t, const trace_field *f, const char *col, int32_t *out,
                       terr *e)
{
    int64_t v;
    char buf[TRACE_FIELD_BYTES + 4];
    if (f->len == 0) return row_error(t, e, "%s is empty", col);
    if (!field_is_text(f) || parse_i64(f->text, &v))
        return row_error(t, e, "%s \"%s\" is not an integer", col, SHOWN(f, buf));
    if (v < 0 || v > INT32_MAX)
        return row_error(t, e, "%s %lld is out of range [0, %d]", col, (long long)v, INT32_MAX);
    *out = (int32_t)v;
    return 0;
}

/* The client column: integers, or names mapped to 0, 1, ... in order of first appearance. The
 * first row decides which; an integer among names is a name ("3"), a name among integers an
 * error (its id could collide with a stated one). */
static int parse_client(trace_reader *t, const trace_field *f, const char *col, int32_t *out, terr *e)
{
    int64_t v;
    char buf[TRACE_FIELD_BYTES + 4];
    if (f->len == 0) return row_error(t, e, "%s is empty", col);
    if (!field_is_text(f)) return row_error(t, e, "%s \"%s\" is not a name or an integer", col, SHOWN(f, buf));
    bool is_int = parse_i64(f->text, &v) == 0;
    if (t->rows == 0 && t->bad == 0 && t->num_clients == 0) t->client_names = !is_int;
    if (!t->client_names) {
        if (!is_int)
            return row_error(t, e, "%s \"%s\" is a name, but earlier rows gave integer ids (use names or integers, not both)",
                             col, SHOWN(f, buf));
        return parse_small(t, f, col, out, e);
    }
    if (t->num_clients * 2 >= t->client_cap) { /* grow: rehash into twice the slots */
        size_t cap = t->client_cap ? t->client_cap * 2 : 64;
        char **names = xcalloc(cap, sizeof *names);
        int32_t *ids = xcalloc(cap, sizeof *ids);
        for (size_t i = 0; i < t->client_cap; i++) {
            if (!t->client_name[i]) continue;
            size_t h = (size_t)XXH3_64bits(t->client_name[i], strlen(t->client_name[i])) & (cap - 1);
            while (names[h]) h = (h + 1) & (cap - 1);
            names[h] = t->client_name[i], ids[h] = t->client_id_of[i];
        }
        free(t->client_name);
        free(t->client_id_of);
        t->client_name = names, t->client_id_of = ids, t->client_cap = cap;
    }
    size_t h = (size_t)XXH3_64bits(f->text, f->len) & (t->client_cap - 1);
    while (t->client_name[h] && strcmp(t->client_name[h], f->text)) h = (h + 1) & (t->client_cap - 1);
    if (!t->client_name[h]) {
        if (t->num_clients >= TRACE_MAX_CLIENT_NAMES)
            return row_error(t, e, "more than %d distinct %s names", TRACE_MAX_CLIENT_NAMES, col);
        t->client_name[h] = xstrdup(f->text);
        t->client_by_id = xrealloc(t->client_by_id, (t->num_clients + 1) * sizeof *t->client_by_id);
        t->client_by_id[t->num_clients] = t->client_name[h];
        t->client_id_of[h] = (int32_t)t->num_clients++;
    }
    *out = t->client_id_of[h];
    return 0;
}

/* ---- rows ----------------------------------------------------------------------------------- */

/* Sets arrival_ns from a row's raw time, enforcing order; 0 or -1 (a row error). */
static int place_in_time(trace_reader *t, int64_t raw_ns, arrival *out, terr *e)
{
    if (t->opt.request_rate > 0) { /* re-timed: the rows' own times (if any) are not used */
        out->arrival_ns = t->retime_ns;
        if (t->rng) {
            double b = t->opt.burstiness > 0 ? t->opt.burstiness : 1.0;
            double gap_s = gsl_ran_gamma(t->rng, b, 1.0 / (t->opt.request_rate * b));
            if ((double)t->retime_ns + gap_s * 1e9 > TRACE_MAX_ARRIVAL_S * 1e9)
                return row_error(t, e, "re-timed arrival is more than %.0f s after the first", TRACE_MAX_ARRIVAL_S);
            t->retime_ns += llround(gap_s * 1e9);
        }
        t->last_line = t->lines.line;
        return 0;
    }
    if (t->have_origin && raw_ns < t->last_ns)
        return row_error(t, e,
                         "arrival time goes backwards: %.6f s after the first row, but line %lld "
                         "was at %.6f s (rows must be in nondecreasing arrival order)",
                         ((double)raw_ns - (double)t->origin_ns) / 1e9, (long long)t->last_line,
                         ((double)t->last_ns - (double)t->origin_ns) / 1e9); /* far-apart stamps: no int64 difference */
    int64_t origin = t->have_origin ? t->origin_ns : raw_ns;
    /* Absolute stamps (Azure's) far apart would overflow the difference: bound it first, as
     * offsets stated in seconds are bounded where they are parsed. */
    if ((double)raw_ns - (double)origin > TRACE_MAX_ARRIVAL_S * 1e9)
        return row_error(t, e, "arrival time is more than %.0f s after the first row's", TRACE_MAX_ARRIVAL_S);
    int64_t offset = raw_ns - origin;
    if (t->opt.time_scale != 1.0) {
        double scaled = (double)offset * t->opt.time_scale;
        if (scaled > 4e18)
            return row_error(t, e, "arrival time overflows after time_scale %g", t->opt.time_scale);
        offset = llround(scaled);
    }
    /* Commit only now that the row is accepted. */
    if (!t->have_origin) t->origin_ns = raw_ns;
    t->have_origin = true;
    t->last_ns = raw_ns;
    t->last_line = t->lines.line;
    out->arrival_ns = offset;
    return 0;
}

static int parse_csv_row(trace_reader *t, const char *line, size_t len, arrival *out, terr *e)
{
    const csv_layout *L = t->layout;
    if (len == 0) return row_error(t, e, "empty line");
    int n = trace_csv_split(&t->csv, line, len);
    if (n < 0) return row_error(t, e, "malformed CSV (a stray or unterminated quote)");
    if (n != t->num_columns)
        return row_error(t, e, "expected %d fields as in the header, found %d", t->num_columns, n);

    int64_t raw_ns = 0;
    char buf[TRACE_FIELD_BYTES + 4];
    const trace_field *tf = &t->field[COL_TIME];
    if (L->parse_time && tf->len == 0) return row_error(t, e, "%s is empty", L->col_name[COL_TIME]);
    if (L->parse_time && L->parse_time(tf, &raw_ns))
        return row_error(t, e, "%s \"%s\" is not %s", L->col_name[COL_TIME], SHOWN(tf, buf),
                         L->time_what);
    if (parse_tokens(t, &t->field[COL_PROMPT], L->col_name[COL_PROMPT], &out->prompt_tokens, e) ||
        parse_tokens(t, &t->field[COL_OUTPUT], L->col_name[COL_OUTPUT], &out->output_tokens, e))
        return -1;
    out->priority = out->client_id = 0;
    if (t->has_role[COL_PRIORITY] &&
        parse_small(t, &t->field[COL_PRIORITY], L->col_name[COL_PRIORITY], &out->priority, e))
        return -1;
    if (t->has_role[COL_CLIENT] && parse_client(t, &t->field[COL_CLIENT], L->col_name[COL_CLIENT], &out->client_id, e))
        return -1;
    out->num_hashes = 0;
    out->hashes = NULL;
    return place_in_time(t, raw_ns, out, e);
}

/* A JSON integer in [lo, hi] under `key`; 0 or -1 (a row error). */
static int json_int_field(trace_reader *t, json_t *obj, const char *key, int64_t lo, int64_t hi,
                          int64_t *out, terr *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return row_error(t, e, "missing field \"%s\"", key);
    if (!json_is_integer(v)) return row_error(t, e, "\"%s\" is not an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return row_error(t, e, "\"%s\" is %lld, outside [%lld, %lld]", key, (long long)x,
                         (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int parse_mooncake_row(trace_reader *t, const char *line, size_t len, arrival *out, terr *e)
{
    if (len == 0) return row_error(t, e, "empty line");
    json_error_t jerr;
    json_t *obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj) return row_error(t, e, "bad JSON at column %d: %s", jerr.column, jerr.text);
    int rc = -1;
    int64_t prompt, output, ms = 0;
    if (!json_is_object(obj)) {
        row_error(t, e, "expected a JSON object");
        goto done;
    }
    /* Timestamp in ms, integer (as Mooncake writes it) or real. */
    json_t *ts = json_object_get(obj, "timestamp");
    double ms_real = 0;
    if (!ts) {
        row_error(t, e, "missing field \"timestamp\"");
        goto done;
    }
    if (json_is_integer(ts))
        ms = json_integer_value(ts), ms_real = (double)ms;
    else if (json_is_real(ts))
        ms_real = json_real_value(ts);
    else {
        row_error(t, e, "\"timestamp\" is not a number");
        goto done;
    }
    if (!(ms_real >= 0 && ms_real <= TRACE_MAX_ARRIVAL_S * 1e3)) {
        row_error(t, e, "\"timestamp\" %g ms is negative or absurd", ms_real);
        goto done;
    }
    int64_t raw_ns = json_is_integer(ts) ? ms * NS_PER_MS : llround(ms_real * 1e6);

    if (json_int_field(t, obj, "input_length", 1, TRACE_MAX_TOKENS, &prompt, e) ||
        json_int_field(t, obj, "output_length", 1, TRACE_MAX_TOKENS, &output, e))
        goto done;
    json_t *ids = json_object_get(obj, "hash_ids");
    if (!ids) {
        row_error(t, e, "missing field \"hash_ids\"");
        goto done;
    }
    if (!json_is_array(ids)) {
        row_error(t, e, "\"hash_ids\" is not an array");
        goto done;
    }
    size_t n = json_array_size(ids);
    int64_t want = div_ceil_i64(prompt, PREFIX_HASH_BLOCK_TOKENS);
    if ((int64_t)n != want) {
        row_error(t, e, "\"hash_ids\" has %zu entries, expected ceil(input_length/%d) = %lld", n,
                  PREFIX_HASH_BLOCK_TOKENS, (long long)want);
        goto done;
    }
    grow_array((void **)&t->hashes, sizeof *t->hashes, &t->hashes_cap, n);
    for (size_t i = 0; i < n; i++) {
        json_t *h = json_array_get(ids, i);
        if (!json_is_integer(h) || json_integer_value(h) < 0) {
            row_error(t, e, "hash_ids[%zu] is not a non-negative integer", i);
            goto done;
        }
        t->hashes[i] = (uint64_t)json_integer_value(h);
    }
    out->prompt_tokens = (int32_t)prompt;
    out->output_tokens = (int32_t)output;
    out->priority = out->client_id = 0;
    out->num_hashes = (int32_t)n;
    out->hashes = t->hashes;
    rc = place_in_time(t, raw_ns, out, e);
done:
    json_decref(obj);
    return rc;
}

/* ---- the arrival source --------------------------------------------------------------------- */

static int fail(trace_reader *t, terr *e)
{
    t->failed = true;
    if (e) t->error = *e;
    return -1;
}

static int reader_next(void *self, arrival *out, terr *e)
{
    trace_reader *t = self;
    if (t->failed) {
        if (e) *e = t->error;
        return -1;
    }
    if (t->done) return 0;
    if (t->opt.max_requests > 0 && t->rows >= t->opt.max_requests) {
        t->done = true;
        return 0;
    }
    for (;;) {
        const char *line;
        size_t len;
        bool terminated;
        int r = trace_lines_next(&t->lines, &line, &len, &terminated, e);
        if (r < 0) return fail(t, e);
        if (r == 0) {
            t->done = true;
            if (t->rows == 0) {
                terr_set(e, "%s:%lld: no requests in the trace (%lld bad rows skipped)",
                         t->lines.path, (long long)t->lines.line, (long long)t->bad);
                return fail(t, e);
            }
            return 0;
        }
        int rc = trace_lines_check_cr(&t->lines, &line, &len, terminated, e);
        if (rc == 0)
            rc = t->layout ? parse_csv_row(t, line, len, out, e)
                           : parse_mooncake_row(t, line, len, out, e);
        if (rc == 0) {
            out->line = t->lines.line;
            t->rows++;
            return 1;
        }
        if (!t->opt.skip_bad_rows) return fail(t, e);
        t->bad++;
    }
}

/* ---- opening -------------------------------------------------------------------------------- */

/* The headers trace_open knows, from the layout table: `azure "TIMESTAMP,...", ...`. */
static void known_headers(char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (size_t k = 0; k < ARRAY_LEN(layouts); k++) {
        const csv_layout *L = &layouts[k];
        if (n < size) n += (size_t)snprintf(buf + n, size - n, "%s \"", L->name);
        bool first = true;
        for (int c = 0; c < COL_COUNT && n < size; c++)
            if (L->col_name[c]) {
                n += (size_t)snprintf(buf + n, size - n, L->col_optional[c] ? "[%s%s]" : "%s%s", first ? "" : ",",
                                      L->col_name[c]);
                first = false;
            }
        if (n < size) n += (size_t)snprintf(buf + n, size - n, "\", ");
    }
    if (n < size) snprintf(buf + n, size - n, "or Mooncake JSONL lines starting with '{'");
}

/* Reads line 1 as a CSV header: picks the layout and maps columns to roles. */
static int open_csv(trace_reader *t, terr *e)
{
    const char *line;
    size_t len;
    bool terminated;
    int r = trace_lines_next(&t->lines, &line, &len, &terminated, e);
    if (r < 0) return -1;
    assert(r == 1); /* the caller saw bytes left */
    const char *path = t->lines.path;
    char shown[120];
    trace_csv_init(&t->csv);

    /* A CRLF header is accepted only for Azure (its files are published that way): decide
     * after the format is known. */
    bool header_crlf = len > 0 && line[len - 1] == '\r';
    if (header_crlf) len--;
    if (memchr(line, '\r', len))
        return terr_set(e, "%s:1: carriage return (CR) inside the header line", path);

    trace_field names[TRACE_MAX_COLUMNS];
    trace_csv hdr;
    trace_csv_init(&hdr);
    hdr.slots = names;
    hdr.num_slots = TRACE_MAX_COLUMNS;
    int ncols = trace_csv_split(&hdr, line, len);
    trace_csv_free(&hdr);
    if (ncols < 0)
        return terr_set(e, "%s:1: malformed CSV header (a stray or unterminated quote)", path);
    if (ncols > TRACE_MAX_COLUMNS)
        return terr_set(e, "%s:1: %d columns in the header (at most %d)", path, ncols,
                        TRACE_MAX_COLUMNS);

    for (size_t k = 0; k < ARRAY_LEN(layouts) && !t->layout; k++) {
        /* a layout is known by its time column, or by its prompt column when it has no times */
        const char *key = layouts[k].col_name[COL_TIME] ? layouts[k].col_name[COL_TIME] : layouts[k].col_name[COL_PROMPT];
        for (int i = 0; i < ncols; i++)
            if (!strcmp(names[i].text, key)) t->layout = &layouts[k];
    }
    if (!t->layout) {
        char known[512];
        known_headers(known, sizeof known);
        return terr_set(e, "%s:1: unknown trace header \"%s\"; expected %s", path,
                        printable(line, len, shown, sizeof shown), known);
    }
    const csv_layout *L = t->layout;
    if (header_crlf && !L->crlf_ok)
        return terr_set(e, "%s:1: CRLF (Windows) line ends; %s traces need LF line ends "
                           "(convert with dos2unix)", path, L->name);
    t->lines.crlf = header_crlf;

    for (int i = 0; i < ncols; i++) {
        t->slot_of_col[i] = -1;
        for (int role = 0; role < COL_COUNT; role++)
            if (L->col_name[role] && !strcmp(names[i].text, L->col_name[role])) {
                if (t->has_role[role])
                    return terr_set(e, "%s:1: column \"%s\" appears twice", path, names[i].text);
                t->has_role[role] = true;
                t->slot_of_col[i] = (int8_t)role;
            }
        if (t->slot_of_col[i] < 0 && !L->extra_columns_ok)
            return terr_set(e, "%s:1: unknown column \"%s\" (%s columns: %s,%s,%s[,%s][,%s])", path,
                            names[i].text, L->name, L->col_name[0],
                            L->col_name[1], L->col_name[2], L->col_name[3], L->col_name[4]);
    }
    for (int role = 0; role < COL_COUNT; role++)
        if (L->col_name[role] && !L->col_optional[role] && !t->has_role[role])
            return terr_set(e, "%s:1: missing column \"%s\" (a %s trace needs %s%s%s,%s)", path,
                            L->col_name[role], L->name, L->col_name[0] ? L->col_name[0] : "",
                            L->col_name[0] ? "," : "", L->col_name[1], L->col_name[2]);
    if (!L->parse_time && !(t->opt.request_rate > 0))
        return terr_set(e, "%s:1: a lengths-only trace (%s,%s): it has no arrival times, so it replays only "
                           "re-timed: give --request-rate R (Poisson; inf: all at once)", path,
                        L->col_name[COL_PROMPT], L->col_name[COL_OUTPUT]);
    t->num_columns = ncols;
    t->csv.slot_of_col = t->slot_of_col;
    t->csv.num_mapped = ncols;
    t->csv.slots = t->field;
    t->csv.num_slots = COL_COUNT;
    return 0;
}

int trace_open(trace_reader **out, const char *path, const trace_options *opt, terr *e)
{
    *out = NULL;
    trace_options o = opt ? *opt : trace_options_default();
    if (!(o.time_scale > 0 && o.time_scale <= TRACE_MAX_TIME_SCALE))
        return terr_set(e, "%s: time scale %g is not in (0, %g]", path, o.time_scale, TRACE_MAX_TIME_SCALE);
    if (isnan(o.request_rate) || o.request_rate < 0)
        return terr_set(e, "%s: request rate %g must be >= 0", path, o.request_rate);
    if (isnan(o.burstiness) || o.burstiness < 0 || isinf(o.burstiness))
        return terr_set(e, "%s: burstiness %g must be > 0", path, o.burstiness);
    trace_reader *t = xcalloc(1, sizeof *t);
    t->opt = o;
    if (o.request_rate > 0 && isfinite(o.request_rate)) {
        t->rng = gsl_rng_alloc(gsl_rng_mt19937);
        gsl_rng_set(t->rng, (unsigned long)(o.seed ^ 0x7e71e5eedULL));
    }
    if (trace_lines_open(&t->lines, path, e)) {
        free(t);
        return -1;
    }
    int end = trace_lines_at_end(&t->lines, e);
    if (end < 0) goto fail;
    if (end) {
        terr_set(e, "%s:1: empty file", path);
        goto fail;
    }
    const unsigned char *b = (const unsigned char *)t->lines.buf + t->lines.start;
    size_t avail = t->lines.end - t->lines.start;
    if (avail >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF) {
        terr_set(e, "%s:1: file starts with a UTF-8 byte order mark (BOM); save it without one",
                 path);
        goto fail;
    }
    if (b[0] == '{') {
        /* JSONL has no header: line 1 is the first request. Judge its line end here, so a
         * CRLF file is one file-level error instead of every row being bad. */
        const char *nl = memchr(b, '\n', avail);
        if (nl && nl > (const char *)b && nl[-1] == '\r') {
            terr_set(e, "%s:1: CRLF (Windows) line ends; mooncake traces need LF line ends "
                        "(convert with dos2unix)", path);
            goto fail;
        }
    } else {
        if (open_csv(t, e)) goto fail;
        end = trace_lines_at_end(&t->lines, e);
        if (end < 0) goto fail;
        if (end) {
            terr_set(e, "%s:1: header only, no requests", path);
            goto fail;
        }
    }
    *out = t;
    return 0;
fail:
    trace_close(t);
    return -1;
}

arrival_source trace_source(trace_reader *t) { return (arrival_source){reader_next, t}; }
int64_t trace_rows_read(const trace_reader *t) { return t->rows; }
int64_t trace_bad_rows(const trace_reader *t) { return t->bad; }
bool trace_has_priority(const trace_reader *t) { return t->layout && t->has_role[COL_PRIORITY]; }
bool trace_has_client(const trace_reader *t) { return t->layout && t->has_role[COL_CLIENT]; }
int64_t trace_num_client_names(const trace_reader *t) { return t->client_names ? (int64_t)t->num_clients : 0; }
const char *trace_client_name(const trace_reader *t, int64_t id)
{
    return t->client_names && id >= 0 && (size_t)id < t->num_clients ? t->client_by_id[id] : NULL;
}

size_t trace_buffer_bytes(const trace_reader *t)
{
    size_t csv = t->layout ? trace_csv_buffer_bytes((trace_csv *)&t->csv) : 0;
    return t->lines.cap + csv + t->hashes_cap * sizeof *t->hashes;
}

void trace_close(trace_reader *t)
{
    if (!t) return;
    trace_lines_close(&t->lines);
    if (t->layout) trace_csv_free(&t->csv);
    free(t->hashes);
    for (size_t i = 0; i < t->client_cap; i++) free(t->client_name[i]);
    free(t->client_name);
    free(t->client_id_of);
    free(t->client_by_id);
    if (t->rng) gsl_rng_free(t->rng);
    free(t);
}
