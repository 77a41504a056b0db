/* util.c: see util.h. */
#include "util.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

int terr_unknown(terr *e, const char *flag, const char *what, const char *name, void (*list)(FILE *f))
{
    char *names = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&names, &len);
    if (!f) abort();
    list(f);
    fclose(f);
    terr_set(e, "--%s: unknown %s \"%s\"; valid:\n%s", flag, what, name, names);
    free(names);
    return -1;
}

int terr_set(terr *e, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void oom(size_t n, const char *file, int line)
{
    fprintf(stderr, "%s:%d: out of memory allocating %zu bytes\n", file, line, n);
    abort();
}

void *tandem_xmalloc(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n, file, line);
    return p;
}

void *tandem_xcalloc(size_t n, size_t sz, const char *file, int line)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) oom(n * sz, file, line);
    return p;
}

void *tandem_xrealloc(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n, file, line);
    return q;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

void grow_array(void **p, size_t elem_size, size_t *cap, size_t need)
{
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    *p = xrealloc(*p, c * elem_size);
    *cap = c;
}

int parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int parse_f64(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

char *read_text_file(const char *path, size_t *len, terr *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        terr_set(e, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 14, n = 0, got;
    char *buf = xmalloc(cap);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) buf = xrealloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = 0;
    if (strlen(buf) != n) {
        free(buf);
        terr_set(e, "%s: contains a NUL byte: not a text file", path);
        return NULL;
    }
    if (len) *len = n;
    return buf;
}

int mkdir_p(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    return remove(path);
}

int remove_tree(const char *path)
{
    if (access(path, F_OK)) return 0;
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int publish_dir(const char *tmp, const char *dir, terr *e)
{
    char old[4200];
    snprintf(old, sizeof old, "%s.old-%d", dir, (int)getpid());
    bool had = access(dir, F_OK) == 0;
    if (had && rename(dir, old)) {
        terr_set(e, "%s: cannot replace it: %s", dir, strerror(errno));
        remove_tree(tmp);
        return -1;
    }
    if (rename(tmp, dir)) {
        terr_set(e, "%s: cannot move the new outputs into place: %s", dir, strerror(errno));
        if (had) rename(old, dir);
        remove_tree(tmp);
        return -1;
    }
    if (had) remove_tree(old);
    return 0;
}

int out_atomic_open(out_atomic *o, const char *path, const char *mode, terr *e)
{
    struct stat st;
    o->path = path;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) snprintf(o->tmp, sizeof o->tmp, "%s", path);
    else snprintf(o->tmp, sizeof o->tmp, "%s.tmp-%d", path, (int)getpid());
    if (!(o->f = fopen(o->tmp, mode))) return terr_set(e, "%s: cannot create: %s", o->tmp, strerror(errno));
    return 0;
}

int out_atomic_close(out_atomic *o, bool ok, terr *e)
{
    if (!o->f) return -1;
    bool in_place = strcmp(o->tmp, o->path) == 0;
    bool written = !ferror(o->f); /* a write that failed earlier (a full disk) */
    errno = 0;
    written = fclose(o->f) == 0 && written;
    o->f = NULL;
    if (ok && written && (in_place || rename(o->tmp, o->path) == 0)) return 0;
    if (ok) terr_set(e, "%s: cannot write: %s", o->path, errno ? strerror(errno) : "a write failed");
    if (!in_place) unlink(o->tmp);
    return -1;
}
