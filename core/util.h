/*
 * util.h: the few helpers every module uses: an error buffer that carries "where: what" to the
 * CLI, checked allocation, and integer helpers.
 *
 * Convention: a function that can fail on outside input (a trace, a config, a flag, a weights
 * file) returns 0 on success and -1 on error, after writing a one-line message into a `terr`
 * that names the file, line or flag. The CLI prints it and exits with 2. Internal impossibilities
 * are asserts, not errors.
 */
#ifndef TANDEM_UTIL_H
#define TANDEM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct terr {
    char msg[2048];
} terr;

/* Writes a printf-style message into e (if e is not NULL); returns -1 so callers can
 * `return terr_set(e, ...)`. */
int terr_set(terr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The error for a name that is not in a registry: `--FLAG: unknown WHAT "NAME"; valid:` and the
 * registry's own listing (list prints "  name  summary" lines). Returns -1. */
int terr_unknown(terr *e, const char *flag, const char *what, const char *name, void (*list)(FILE *f));

/* Allocation that cannot fail silently: on exhaustion prints file:line and aborts. Memory
 * exhaustion is not an input error a caller could recover from. */
#define xmalloc(n) tandem_xmalloc((n), __FILE__, __LINE__)
#define xcalloc(n, sz) tandem_xcalloc((n), (sz), __FILE__, __LINE__)
#define xrealloc(p, n) tandem_xrealloc((p), (n), __FILE__, __LINE__)
void *tandem_xmalloc(size_t n, const char *file, int line);
void *tandem_xcalloc(size_t n, size_t sz, const char *file, int line);
void *tandem_xrealloc(void *p, size_t n, const char *file, int line);
char *xstrdup(const char *s);

/* Grows *p (an array of elem_size items with capacity *cap) so it holds at least `need` items. */
void grow_array(void **p, size_t elem_size, size_t *cap, size_t need);

static inline int64_t div_ceil_i64(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int32_t min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

#define NS_PER_S 1000000000LL
#define NS_PER_MS 1000000LL
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Parses a whole string as a number; 0 on success, -1 if s is empty, has trailing garbage,
 * or is out of range. */
int parse_i64(const char *s, int64_t *out);
int parse_f64(const char *s, double *out);

/* Reads a whole text file into a NUL-terminated buffer (caller frees); *len gets its size when
 * len is not NULL. NULL with e = "PATH: cannot open" / "PATH: contains a NUL byte". */
char *read_text_file(const char *path, size_t *len, terr *e);

/* Creates a directory and its parents (like mkdir -p); 0 or -1 with errno set. */
int mkdir_p(const char *path);
/* Removes path and everything under it (rm -rf, no shell); 0 if it is gone. */
int remove_tree(const char *path);
/* Puts the complete directory tmp in place of dir (which may exist: it is replaced, and only
 * once tmp is in place is the old one removed). Returns 0, or -1 with e set; on failure dir is
 * as it was and tmp is removed. */
int publish_dir(const char *tmp, const char *dir, terr *e);

/* An output file that is complete or absent: written as PATH.tmp-PID and renamed to PATH when
 * closed with every write done (PATH itself is written when it exists and is not a regular
 * file, such as /dev/stdout, a pipe or a symbolic link, which a rename would replace). */
typedef struct out_atomic {
    FILE *f;
    char tmp[4200];
    const char *path;
} out_atomic;
/* 0, or -1 with e = "PATH: cannot create: why". */
int out_atomic_open(out_atomic *o, const char *path, const char *mode, terr *e);
/* Closes o. With ok and no write error (ferror or fclose), puts the file in place and returns
 * 0; otherwise removes the temporary file and returns -1 (with e = "PATH: cannot write: why"
 * when ok, as the failure is then a write's). */
int out_atomic_close(out_atomic *o, bool ok, terr *e);

#endif
