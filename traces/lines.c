/*
 * lines.c: chunked line reader and one-line CSV splitter (see lines.h).
 *
 * Invariant: buf[start, end) holds bytes read but not yet returned; a returned line always lies
 * inside buf, so it stays valid until the next call compacts or refills the buffer.
 */
#include "traces/lines.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int trace_lines_open(trace_lines *l, const char *path, terr *e)
{
    memset(l, 0, sizeof *l);
    l->f = fopen(path, "rb");
    if (!l->f) return terr_set(e, "%s: cannot open: %s", path, strerror(errno));
    l->path = xstrdup(path);
    l->cap = TRACE_CHUNK_BYTES;
    l->buf = xmalloc(l->cap);
    return 0;
}

void trace_lines_close(trace_lines *l)
{
    if (l->f) fclose(l->f);
    free(l->buf);
    free(l->path);
    memset(l, 0, sizeof *l);
}

/* Moves the unconsumed bytes to the front and reads more after them; grows the buffer only
 * when it is full of one unfinished line. Returns 0, or -1 on a read error / over-long line. */
static int fill(trace_lines *l, terr *e)
{
    if (l->start > 0) {
        memmove(l->buf, l->buf + l->start, l->end - l->start);
        l->end -= l->start;
        l->start = 0;
    }
    if (l->end == l->cap) {
        if (l->cap >= TRACE_MAX_LINE_BYTES)
            return terr_set(e, "%s:%lld: line longer than %d bytes", l->path,
                            (long long)l->line + 1, TRACE_MAX_LINE_BYTES);
        l->cap *= 2;
        l->buf = xrealloc(l->buf, l->cap);
    }
    size_t got = fread(l->buf + l->end, 1, l->cap - l->end, l->f);
    l->end += got;
    if (got == 0) {
        if (ferror(l->f)) return terr_set(e, "%s: read error: %s", l->path, strerror(errno));
        l->eof = true;
    }
    return 0;
}

int trace_lines_next(trace_lines *l, const char **line, size_t *len, bool *terminated, terr *e)
{
    size_t scanned = 0; /* bytes after start already known to hold no '\n' */
    for (;;) {
        char *p = l->buf + l->start;
        size_t avail = l->end - l->start;
        char *nl = memchr(p + scanned, '\n', avail - scanned);
        if (nl) {
            *line = p;
            *len = (size_t)(nl - p);
            *terminated = true;
            l->start += *len + 1;
            l->line++;
            return 1;
        }
        if (l->eof) {
            if (avail == 0) return 0;
            *line = p; /* the last line, without a final newline */
            *len = avail;
            *terminated = false;
            l->start = l->end;
            l->line++;
            return 1;
        }
        scanned = avail;
        if (fill(l, e)) return -1;
    }
}

int trace_lines_check_cr(trace_lines *l, const char **line, size_t *len, bool terminated, terr *e)
{
    const char *s = *line;
    size_t n = *len;
    if (l->crlf) {
        if (n > 0 && s[n - 1] == '\r')
            n--;
        else if (terminated)
            return terr_set(e, "%s:%lld: line ends in LF but line 1 ends in CRLF (mixed line ends)",
                            l->path, (long long)l->line);
    }
    if (memchr(s, '\r', n))
        return terr_set(e, "%s:%lld: carriage return (CR) in line; %s", l->path,
                        (long long)l->line,
                        l->crlf ? "only CRLF line ends are allowed"
                                : "this format needs LF line ends (convert with dos2unix)");
    *len = n;
    return 0;
}

int trace_lines_at_end(trace_lines *l, terr *e)
{
    if (l->start == l->end && !l->eof && fill(l, e)) return -1;
    return l->start == l->end && l->eof;
}

/* ---- CSV ------------------------------------------------------------------------------------ */

static void on_field(void *data, size_t n, void *ctx)
{
    trace_csv *c = ctx;
    int col = c->num_fields++;
    int slot;
    if (c->slot_of_col)
        slot = col < c->num_mapped ? c->slot_of_col[col] : -1;
    else
        slot = col < c->num_slots ? col : -1;
    if (slot < 0) return;
    trace_field *f = &c->slots[slot];
    f->len = n;
    f->too_long = n >= TRACE_FIELD_BYTES;
    size_t k = f->too_long ? TRACE_FIELD_BYTES - 1 : n;
    memcpy(f->text, data, k);
    f->text[k] = 0;
    if (c->seen) c->seen[slot] = true;
}

int trace_csv_init(trace_csv *c)
{
    memset(c, 0, sizeof *c);
    /* STRICT: a stray quote is an error, not data; STRICT_FINI: so is an unterminated one. */
    return csv_init(&c->parser, CSV_STRICT | CSV_STRICT_FINI);
}

int trace_csv_split(trace_csv *c, const char *line, size_t len)
{
    c->num_fields = 0;
    if (c->seen) memset(c->seen, 0, (size_t)c->num_slots * sizeof *c->seen);
    size_t used = csv_parse(&c->parser, line, len, on_field, NULL, c);
    if (used != len || csv_fini(&c->parser, on_field, NULL, c) != 0) {
        /* After an error libcsv keeps its error state: start it afresh (errors are rare). */
        unsigned char opts = (unsigned char)csv_get_opts(&c->parser);
        csv_free(&c->parser);
        csv_init(&c->parser, opts);
        return -1;
    }
    return c->num_fields;
}

size_t trace_csv_buffer_bytes(trace_csv *c) { return csv_get_buffer_size(&c->parser); }

void trace_csv_free(trace_csv *c) { csv_free(&c->parser); }
