/*
 * lines.h: the two pieces every text reader in traces/ shares (internal to traces/):
 *
 *   trace_lines  reads a file in fixed chunks and hands out one line at a time, with its 1-based
 *                number, so memory stays at one chunk (plus the longest line) whatever the length
 *                of the file. The last line may lack its '\n' (the Azure files end that way).
 *   trace_csv    splits one line into fields with libcsv (quotes, spaces around fields).
 *
 * Key decision: lines are found here (memchr '\n') and libcsv sees one line at a time, then
 * csv_fini(). That gives exact line numbers for messages, lets the line-end policy (CR, below)
 * be decided per format, and means a row can never swallow the next line: a quoted field with a
 * newline inside is reported as an unterminated quote instead of silently joining two rows.
 *
 * Line ends: '\n' ends a line. A '\r' is accepted only as the last byte of a line of a file
 * whose first line ends in "\r\n" and whose format allows it (Azure ships CRLF files); the
 * caller sets `crlf` after reading line 1. Any other '\r' is an error naming the line.
 */
#ifndef TANDEM_TRACE_LINES_H
#define TANDEM_TRACE_LINES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <csv.h>

#include "core/util.h"

#define TRACE_CHUNK_BYTES (64 * 1024)
/* A line longer than this is an input error, not a reason to keep growing the buffer. */
#define TRACE_MAX_LINE_BYTES (16 * 1024 * 1024)

typedef struct trace_lines {
    char *path;        /* owned copy, for messages */
    FILE *f;
    char *buf;         /* (cap) bytes; unconsumed input is buf[start, end) */
    size_t cap;        /* TRACE_CHUNK_BYTES, doubled only while one line does not fit */
    size_t start, end;
    bool eof;          /* fread has reported end of file */
    int64_t line;      /* number of the line returned last (1-based); 0 before the first */
    bool crlf;         /* lines end in "\r\n" (set by the caller from line 1) */
} trace_lines;

/* Opens path; 0, or -1 with e = "PATH: cannot open: REASON". */
int trace_lines_open(trace_lines *l, const char *path, terr *e);
/* Next line without its '\n' (and without the '\r' of a CRLF file). Returns 1 with *line and *len
 * valid until the next call, 0 at the end of the file, or -1 on a read error or an over-long
 * line. *terminated tells whether the line ended with '\n' (false only for the last line). The
 * raw line may still contain '\r'; trace_lines_check_cr() judges it. */
int trace_lines_next(trace_lines *l, const char **line, size_t *len, bool *terminated, terr *e);
/* Applies the line-end policy above to a line just returned by trace_lines_next: strips the
 * '\r' of a CRLF file, and returns -1 with "PATH:LINE: ..." for any CR that does not belong. */
int trace_lines_check_cr(trace_lines *l, const char **line, size_t *len, bool terminated, terr *e);
/* True when no byte is left to read (reads ahead one chunk if the buffer is empty); -1 on a
 * read error. */
int trace_lines_at_end(trace_lines *l, terr *e);
void trace_lines_close(trace_lines *l);

/* One field as copied out of libcsv. Values in trace files are short (numbers, timestamps,
 * column names); a longer field is kept truncated and flagged so the caller can say so. */
#define TRACE_FIELD_BYTES 64
typedef struct trace_field {
    char text[TRACE_FIELD_BYTES]; /* NUL-terminated (truncated when too_long) */
    size_t len;                   /* length of the field in the file */
    bool too_long;                /* len >= TRACE_FIELD_BYTES */
} trace_field;

typedef struct trace_csv {
    struct csv_parser parser;
    /* Where field i of a row goes: slot_of_col[i] (-1: not stored) for i < num_mapped; fields
     * past num_mapped are counted only. NULL: field i goes to slot i, for i < num_slots. */
    const int8_t *slot_of_col;
    int num_mapped;
    trace_field *slots; /* (num_slots) */
    int num_slots;
    int num_fields;     /* fields in the last line split */
    bool *seen;         /* (num_slots) whether the slot was filled by the last line; may be NULL */
} trace_csv;

int trace_csv_init(trace_csv *c);
/* Splits one line (no line terminator). Returns the number of fields, or -1 when libcsv
 * rejects the line (a stray or unterminated quote). */
int trace_csv_split(trace_csv *c, const char *line, size_t len);
/* Bytes libcsv holds for the longest field so far. */
size_t trace_csv_buffer_bytes(trace_csv *c);
void trace_csv_free(trace_csv *c);

#endif
