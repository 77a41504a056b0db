/* csv_reader.c: see csv_reader.h. */
#include "traces/csv_reader.h"

#include <assert.h>
#include <string.h>

/* Reads line 1 and maps the file's columns to the wanted ones. */
static int read_header(csv_reader *r, const char *path, terr *e)
{
    const char *const *want = r->want;
    int num_want = r->num_want;
    const char *line;
    size_t len;
    bool terminated;
    int at_end = trace_lines_at_end(&r->lines, e);
    if (at_end) return at_end < 0 ? -1 : terr_set(e, "%s:1: empty file", path);
    if (r->lines.end - r->lines.start >= 3 && !memcmp(r->lines.buf + r->lines.start, "\xEF\xBB\xBF", 3))
        return terr_set(e, "%s:1: file starts with a UTF-8 byte order mark (BOM)", path);
    if (trace_lines_next(&r->lines, &line, &len, &terminated, e) < 0 ||
        trace_lines_check_cr(&r->lines, &line, &len, terminated, e))
        return -1;

    trace_field names[CSV_READER_MAX_COLUMNS];
    r->csv.slots = names;
    r->csv.num_slots = CSV_READER_MAX_COLUMNS;
    int ncols = trace_csv_split(&r->csv, line, len);
    if (ncols < 0) return terr_set(e, "%s:1: malformed CSV header (a stray or unterminated quote)", path);
    if (ncols > CSV_READER_MAX_COLUMNS)
        return terr_set(e, "%s:1: %d columns in the header (at most %d)", path, ncols, CSV_READER_MAX_COLUMNS);
    bool found[CSV_READER_MAX_WANTED] = {false};
    for (int i = 0; i < ncols; i++) {
        r->slot_of_col[i] = -1;
        for (int k = 0; k < num_want; k++)
            if (!found[k] && !strcmp(names[i].text, want[k])) {
                r->slot_of_col[i] = (int8_t)k;
                found[k] = true;
                break;
            }
    }
    for (int k = 0; k < num_want; k++)
        if (!found[k]) return terr_set(e, "%s:1: missing column \"%s\"", path, want[k]);
    r->num_columns = ncols;
    r->csv.slot_of_col = r->slot_of_col;
    r->csv.num_mapped = ncols;
    r->csv.slots = r->fields;
    r->csv.num_slots = num_want;
    return 0;
}

int csv_reader_open(csv_reader *r, const char *path, const char *const *want, int num_want, terr *e)
{
    assert(num_want > 0 && num_want <= CSV_READER_MAX_WANTED);
    memset(r, 0, sizeof *r);
    r->want = want;
    r->num_want = num_want;
    trace_csv_init(&r->csv);
    if (trace_lines_open(&r->lines, path, e) == 0 && read_header(r, path, e) == 0) return 0;
    csv_reader_close(r);
    return -1;
}

int csv_reader_next(csv_reader *r, terr *e)
{
    const char *line;
    size_t len;
    bool terminated;
    int got = trace_lines_next(&r->lines, &line, &len, &terminated, e);
    if (got <= 0) return got;
    if (trace_lines_check_cr(&r->lines, &line, &len, terminated, e)) return -1;
    int n = len ? trace_csv_split(&r->csv, line, len) : 0;
    if (n != r->num_columns)
        return terr_set(e, "%s:%lld: expected %d fields as in the header, found %d%s", r->lines.path,
                        (long long)r->lines.line, r->num_columns, n < 0 ? 0 : n, n < 0 ? " (malformed CSV)" : "");
    return 1;
}

const char *csv_reader_text(const csv_reader *r, int k)
{
    assert(k >= 0 && k < r->num_want);
    return r->fields[k].text;
}

/* The field, or NULL when it holds a NUL byte or is too long to be a number. */
static const char *number_text(const csv_reader *r, int k)
{
    const trace_field *f = &r->fields[k];
    return !f->too_long && strlen(f->text) == f->len ? f->text : NULL;
}

static int not_a_number(const csv_reader *r, int k, const char *what, terr *e)
{
    return terr_set(e, "%s:%lld: %s \"%s\" is not %s", r->lines.path, (long long)r->lines.line, r->want[k],
                    r->fields[k].text, what);
}

int csv_reader_i64(const csv_reader *r, int k, int64_t *v, terr *e)
{
    const char *s = number_text(r, k);
    return s && !parse_i64(s, v) ? 0 : not_a_number(r, k, "an integer", e);
}

int csv_reader_f64(const csv_reader *r, int k, double *v, terr *e)
{
    const char *s = number_text(r, k);
    return s && !parse_f64(s, v) ? 0 : not_a_number(r, k, "a number", e);
}

int64_t csv_reader_line(const csv_reader *r) { return r->lines.line; }

const char *csv_reader_path(const csv_reader *r) { return r->lines.path; }

void csv_reader_close(csv_reader *r)
{
    trace_csv_free(&r->csv);
    trace_lines_close(&r->lines);
}
