/* csv_rows.c: see csv_rows.h. */
#include "cli/csv_rows.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void on_field(void *s, size_t len, void *ud)
{
    csv_rows *t = ud;
    grow_array((void **)&t->arena, 1, &t->arena_cap, t->used + len + 1);
    grow_array((void **)&t->cell, sizeof *t->cell, &t->cell_cap, (size_t)t->fields + 1);
    t->cell[t->fields++] = t->used;
    if (len) memcpy(t->arena + t->used, s, len);
    t->arena[t->used + len] = 0;
    t->used += len + 1;
}

/* Splits the next non-blank line into the arena: 1, 0 at the end, -1 with e set. */
static int split_next(csv_rows *t, terr *e)
{
    for (;;) {
        errno = 0;
        ssize_t n = getline(&t->line, &t->line_cap, t->f);
        if (n < 0) return errno ? terr_set(e, "%s: read failed: %s", t->path, strerror(errno)) : 0;
        t->line_no++;
        if (n && t->line[n - 1] == '\n') n--;
        if (n && t->line[n - 1] == '\r') n--;
        if (!n) continue;
        t->used = 0;
        t->fields = 0;
        if (csv_parse(&t->parser, t->line, (size_t)n, on_field, NULL, t) != (size_t)n ||
            csv_fini(&t->parser, on_field, NULL, t))
            return terr_set(e, "%s:%lld: malformed quoting", t->path, (long long)t->line_no);
        return 1;
    }
}

int csv_rows_open(csv_rows *t, const char *path, terr *e)
{
    memset(t, 0, sizeof *t);
    t->f = fopen(path, "rb");
    if (!t->f) return terr_set(e, "%s: cannot open: %s", path, strerror(errno));
    t->path = xstrdup(path);
    csv_init(&t->parser, CSV_STRICT | CSV_STRICT_FINI);
    int rc = split_next(t, e);
    if (rc == 0) rc = terr_set(e, "%s: empty file (a CSV with a header was expected)", path);
    if (rc < 0) {
        csv_rows_close(t);
        return -1;
    }
    /* the header moves out of the row buffers */
    t->num_cols = t->fields;
    t->head = xmalloc(t->used);
    memcpy(t->head, t->arena, t->used);
    t->head_at = xmalloc((size_t)t->num_cols * sizeof *t->head_at);
    memcpy(t->head_at, t->cell, (size_t)t->num_cols * sizeof *t->head_at);
    return 0;
}

int csv_rows_next(csv_rows *t, terr *e)
{
    int rc = split_next(t, e);
    if (rc == 1 && t->fields != t->num_cols)
        return terr_set(e, "%s:%lld: %d fields, the header has %d", t->path, (long long)t->line_no, t->fields,
                        t->num_cols);
    return rc;
}

int csv_rows_col(const csv_rows *t, const char *name)
{
    for (int c = 0; c < t->num_cols; c++)
        if (!strcmp(t->head + t->head_at[c], name)) return c;
    return -1;
}

int csv_rows_need(const csv_rows *t, const char *name, terr *e)
{
    int c = csv_rows_col(t, name);
    if (c < 0) terr_set(e, "%s has no column \"%s\"", t->path, name);
    return c;
}

const char *csv_rows_name(const csv_rows *t, int col) { return t->head + t->head_at[col]; }

const char *csv_rows_at(const csv_rows *t, int col) { return t->arena + t->cell[col]; }

void csv_rows_close(csv_rows *t)
{
    if (t->f) fclose(t->f);
    if (t->path) csv_free(&t->parser);
    free(t->path);
    free(t->line);
    free(t->head);
    free(t->head_at);
    free(t->arena);
    free(t->cell);
    memset(t, 0, sizeof *t);
}
