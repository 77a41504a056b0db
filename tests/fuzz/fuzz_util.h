/*
 * fuzz_util.h: what the harnesses share. Every parser of outside input reads a file (a trace,
 * a spec, config.json, a checkpoint), so a harness writes its input to a file in a temporary
 * folder of its own, made once per process, and hands the parser the path.
 */
#ifndef TANDEM_FUZZ_UTIL_H
#define TANDEM_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The harness's folder ($TMPDIR/tandem-fuzz-XXXXXX), made on first use and removed at exit. */
static const char *fuzz_dir(void);

static char fuzz_dir_path[256];

static void fuzz_dir_remove(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_path);
    if (system(cmd)) { /* nothing more to do at exit */
    }
}

static const char *fuzz_dir(void)
{
    if (!fuzz_dir_path[0]) {
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/tandem-fuzz-XXXXXX", tmp);
        if (!mkdtemp(fuzz_dir_path)) abort();
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

/* Writes prefix (may be NULL) then data to the harness's folder as `name`; returns the path
 * (a static buffer, valid until the next call). */
static const char *fuzz_write(const char *name, const char *prefix, const uint8_t *data, size_t size)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (prefix) fputs(prefix, f);
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f)) abort();
    return path;
}

#endif
