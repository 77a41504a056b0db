/*
 * csv_table.h: a whole CSV file with a header, in memory, every field as text: what `tandem
 * reduce` and `tandem plot` read (a sweep's results.csv, a requests.csv, a steps.csv).
 *
 * Unlike traces/csv_reader.h (which streams a trace and keeps a few short fields of each row),
 * this keeps every column of every row, of any length: results.csv has one column per swept key
 * and per metric, and its trace paths are long. Fields are stored NUL-terminated in one arena,
 * so a million-row requests.csv is a few allocations. Quoted fields (`"0.2,0.8"`, what `tandem
 * sweep` writes for a value holding a comma) are unquoted by libcsv.
 */
#ifndef TANDEM_CSV_TABLE_H
#define TANDEM_CSV_TABLE_H

#include <stdint.h>

#include "core/util.h"

typedef struct csv_table {
    char *path;        /* owned copy, for messages */
    int num_cols;
    int64_t num_rows;  /* not counting the header */
    char *arena;       /* every field, NUL-terminated, one after the other */
    size_t *cell;      /* (num_rows + 1, num_cols) offsets into arena; row 0 is the header */
} csv_table;

/* Reads path. Errors: "PATH: cannot open", "PATH: empty file", "PATH:LINE: N fields, the header
 * has M", "PATH:LINE: malformed quoting". */
int csv_table_load(csv_table *t, const char *path, terr *e);
void csv_table_free(csv_table *t);
/* The column named name, or -1. */
int csv_table_col(const csv_table *t, const char *name);
/* Like csv_table_col, but -1 with e = "PATH has no column \"NAME\"". */
int csv_table_need(const csv_table *t, const char *name, terr *e);
const char *csv_table_name(const csv_table *t, int col);
/* Row r (0-based, not counting the header), column col. */
const char *csv_table_at(const csv_table *t, int64_t r, int col);
/* The file line of row r, for messages (rows are one line each). */
static inline int64_t csv_table_line(int64_t r) { return r + 2; }

#endif
