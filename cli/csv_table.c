/* csv_table.c: see csv_table.h. */
#include "cli/csv_table.h"

#include <csv.h>
#include <stdlib.h>
#include <string.h>

typedef struct loader {
    char *arena;
    size_t used, cap;
    size_t *cell;
    size_t num_cells, cap_cells;
    int fields; /* in the line being split */
} loader;

static void on_field(void *s, size_t len, void *ud)
{
    loader *l = ud;
    grow_array((void **)&l->arena, 1, &l->cap, l->used + len + 1);
    grow_array((void **)&l->cell, sizeof *l->cell, &l->cap_cells, l->num_cells + 1);
    l->cell[l->num_cells++] = l->used;
    if (len) memcpy(l->arena + l->used, s, len);
    l->arena[l->used + len] = 0;
    l->used += len + 1;
    l->fields++;
}

int csv_table_load(csv_table *t, const char *path, terr *e)
{
    memset(t, 0, sizeof *t);
    size_t len;
    char *text = read_text_file(path, &len, e);
    if (!text) return -1;
    loader l = {0};
    struct csv_parser p;
    csv_init(&p, CSV_STRICT | CSV_STRICT_FINI);
    int rc = 0;
    int64_t line = 0;
    for (size_t at = 0; at < len && !rc;) {
        char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, n = end - at;
        line++;
        if (n && text[at + n - 1] == '\r') n--;
        if (n == 0 && !nl && line > 1) break; /* no final newline after an empty last line */
        size_t mark = l.num_cells;
        l.fields = 0;
        if (csv_parse(&p, text + at, n, on_field, NULL, &l) != n || csv_fini(&p, on_field, NULL, &l)) {
            rc = terr_set(e, "%s:%lld: malformed quoting", path, (long long)line);
        } else if (n == 0) {
            l.num_cells = mark; /* a blank line (the end of the file): skipped */
            if (line == 1) rc = terr_set(e, "%s: empty file (a CSV with a header was expected)", path);
        } else if (line == 1) {
            t->num_cols = l.fields;
        } else if (l.fields != t->num_cols) {
            rc = terr_set(e, "%s:%lld: %d fields, the header has %d", path, (long long)line, l.fields, t->num_cols);
        }
        at = end + 1;
    }
    csv_free(&p);
    free(text);
    if (!rc && !t->num_cols) rc = terr_set(e, "%s: empty file (a CSV with a header was expected)", path);
    if (rc) {
        free(l.arena);
        free(l.cell);
        return -1;
    }
    t->path = xstrdup(path);
    t->arena = l.arena;
    t->cell = l.cell;
    t->num_rows = (int64_t)(l.num_cells / (size_t)t->num_cols) - 1;
    return 0;
}

void csv_table_free(csv_table *t)
{
    free(t->path);
    free(t->arena);
    free(t->cell);
    memset(t, 0, sizeof *t);
}

int csv_table_col(const csv_table *t, const char *name)
{
    for (int c = 0; c < t->num_cols; c++)
        if (!strcmp(t->arena + t->cell[c], name)) return c;
    return -1;
}

int csv_table_need(const csv_table *t, const char *name, terr *e)
{
    int c = csv_table_col(t, name);
    if (c < 0) terr_set(e, "%s has no column \"%s\"", t->path, name);
    return c;
}

const char *csv_table_name(const csv_table *t, int col) { return t->arena + t->cell[col]; }

const char *csv_table_at(const csv_table *t, int64_t r, int col)
{
    return t->arena + t->cell[(size_t)(r + 1) * (size_t)t->num_cols + (size_t)col];
}
