/*
 * csv_rows.h: a CSV file with a header, read one row at a time with every column kept as text:
 * what `tandem reduce`, `tandem plot` and `tandem timeline` read (a requests.csv, a steps.csv, a
 * sweep's results.csv, a preemptions.csv).
 *
 * Unlike traces/csv_reader.h (which keeps a few short fields of each row of a trace), this keeps
 * every column, of any length: results.csv has one column per swept key and per metric, and its
 * trace paths are long. Memory is one row (its line and its fields, in buffers reused from row
 * to row), whatever the length of the file: a steps.csv of millions of steps streams through.
 * Quoted fields (`"0.2,0.8"`, what `tandem sweep` writes for a value holding a comma) are
 * unquoted by libcsv; a row is one line.
 */
#ifndef TANDEM_CSV_ROWS_H
#define TANDEM_CSV_ROWS_H

#include <csv.h>
#include <stdint.h>
#include <stdio.h>

#include "core/util.h"

typedef struct csv_rows {
    char *path;          /* owned copy, for messages */
    FILE *f;
    char *line;          /* (line_cap) the current line, from getline */
    size_t line_cap;
    int64_t line_no;     /* 1-based number of the current line */
    struct csv_parser parser;
    int num_cols;
    char *head;          /* the header's names, NUL-terminated one after the other */
    size_t *head_at;     /* (num_cols) offsets into head */
    char *arena;         /* (arena_cap) the current row's fields, NUL-terminated */
    size_t arena_cap, used;
    size_t *cell;        /* (cell_cap) offsets into arena of the current row's fields */
    size_t cell_cap;
    int fields;          /* fields of the line being split */
} csv_rows;

/* Opens path and reads its header. Errors: "PATH: cannot open: REASON", "PATH: empty file (a CSV
 * with a header was expected)", "PATH:1: malformed quoting". */
int csv_rows_open(csv_rows *t, const char *path, terr *e);
/* Reads the next row: 1, 0 at the end of the file, or -1 with e = "PATH:LINE: N fields, the
 * header has M" or "PATH:LINE: malformed quoting". Blank lines are skipped. */
int csv_rows_next(csv_rows *t, terr *e);
/* The column named name, or -1. */
int csv_rows_col(const csv_rows *t, const char *name);
/* Like csv_rows_col, but -1 with e = "PATH has no column \"NAME\"". */
int csv_rows_need(const csv_rows *t, const char *name, terr *e);
const char *csv_rows_name(const csv_rows *t, int col);
/* Column col of the current row, NUL-terminated (empty when the field is). */
const char *csv_rows_at(const csv_rows *t, int col);
/* The current row's line, for messages. */
static inline int64_t csv_rows_line(const csv_rows *t) { return t->line_no; }
void csv_rows_close(csv_rows *t);

#endif
