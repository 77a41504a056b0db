/*
 * csv_reader.h: a CSV file with a header line, read one row at a time, its columns found by
 * name. For tandem's own tables (requests.csv, steps.csv, a lengths file): the caller names the
 * columns it wants, in its own order, and gets field k of each row as text; other columns are
 * skipped, and their order in the file does not matter.
 *
 * Built on traces/lines.h, so memory stays at one chunk of the file whatever its length, every
 * message names the file and line, and the line-end rules are the traces' own: LF only, no
 * byte order mark, a quote inside a field is an error rather than a joined row.
 */
#ifndef TANDEM_CSV_READER_H
#define TANDEM_CSV_READER_H

#include <stdbool.h>
#include <stdint.h>

#include "traces/lines.h"

#define CSV_READER_MAX_COLUMNS 64 /* in the header; a wider file is an error */
#define CSV_READER_MAX_WANTED 32  /* columns a caller may ask for */

typedef struct csv_reader {
    trace_lines lines;
    trace_csv csv;
    const char *const *want;                     /* (num_want) the caller's column names */
    int num_want;
    int num_columns;                             /* in the header */
    int8_t slot_of_col[CSV_READER_MAX_COLUMNS];  /* file column -> index into want, or -1 */
    trace_field fields[CSV_READER_MAX_WANTED];   /* (num_want) the current row's wanted fields */
} csv_reader;

/* Opens path and reads its header. Every name in want (which must outlive the reader) must be a
 * column: "PATH:1: missing column \"NAME\"" otherwise, as for an empty file or a bad header. */
int csv_reader_open(csv_reader *r, const char *path, const char *const *want, int num_want, terr *e);
/* Reads the next row: 1, 0 at the end of the file, or -1 with "PATH:LINE: ..." (a row whose
 * field count differs from the header's, a malformed row). */
int csv_reader_next(csv_reader *r, terr *e);
/* Field k (an index into want) of the current row, NUL-terminated (empty when the field is). */
const char *csv_reader_text(const csv_reader *r, int k);
/* Field k as a number: 0, or -1 with "PATH:LINE: NAME \"TEXT\" is not a number" (an integer for
 * _i64). An empty field is not a number. */
int csv_reader_i64(const csv_reader *r, int k, int64_t *v, terr *e);
int csv_reader_f64(const csv_reader *r, int k, double *v, terr *e);
/* The 1-based number of the current row's line, for messages. */
int64_t csv_reader_line(const csv_reader *r);
const char *csv_reader_path(const csv_reader *r);
void csv_reader_close(csv_reader *r);

#endif
