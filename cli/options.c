/* options.c: see options.h. */
#include "options.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIELD(dst, spec, T) ((T *)((char *)(dst) + (spec)->offset))

const opt_spec *opts_find(const opt_spec *specs, const char *name)
{
    for (const opt_spec *s = specs; s->name; s++)
        if (strcmp(s->name, name) == 0) return s;
    return NULL;
}

static int set_value(const opt_spec *s, void *dst, const char *v, terr *e)
{
    switch (s->type) {
    case OPT_STR: {
        char **f = FIELD(dst, s, char *);
        free(*f);
        *f = xstrdup(v);
        return 0;
    }
    case OPT_I64: {
        int64_t x;
        if (parse_i64(v, &x)) return terr_set(e, "--%s: \"%s\" is not an integer", s->name, v);
        *FIELD(dst, s, int64_t) = x;
        return 0;
    }
    case OPT_F64: {
        double x;
        if (parse_f64(v, &x)) return terr_set(e, "--%s: \"%s\" is not a number", s->name, v);
        *FIELD(dst, s, double) = x;
        return 0;
    }
    case OPT_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "yes"))
            *FIELD(dst, s, bool) = true;
        else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "no"))
            *FIELD(dst, s, bool) = false;
        else return terr_set(e, "--%s: \"%s\" is not true or false", s->name, v);
        return 0;
    }
    return -1;
}

void opts_defaults(const opt_spec *specs, void *dst)
{
    for (const opt_spec *s = specs; s->name; s++) {
        if (s->type == OPT_STR) {
            char **f = FIELD(dst, s, char *);
            free(*f);
            *f = s->def && s->def[0] ? xstrdup(s->def) : NULL;
        } else {
            terr e;
            int rc = set_value(s, dst, s->def && s->def[0] ? s->def : "0", &e);
            (void)rc;
        }
    }
}

int opts_set(const opt_spec *specs, void *dst, const char *name, const char *value, terr *e)
{
    const opt_spec *s = opts_find(specs, name);
    if (!s && strncmp(name, "no-", 3) == 0 && (s = opts_find(specs, name + 3)) && s->type == OPT_BOOL)
        return set_value(s, dst, "false", e);
    if (!s) return terr_set(e, "unknown option \"%s\"", name);
    return set_value(s, dst, value, e);
}

void opts_free(const opt_spec *specs, void *dst)
{
    for (const opt_spec *s = specs; s->name; s++)
        if (s->type == OPT_STR) {
            free(*FIELD(dst, s, char *));
            *FIELD(dst, s, char *) = NULL;
        }
}

void opts_help(const opt_spec *specs, const char *usage, FILE *f)
{
    fprintf(f, "%s\noptions (default in brackets):\n", usage);
    for (const opt_spec *s = specs; s->name; s++) {
        char flag[96];
        if (s->type == OPT_BOOL) snprintf(flag, sizeof flag, "--[no-]%s", s->name);
        else snprintf(flag, sizeof flag, "--%s %s", s->name,
                      s->type == OPT_STR ? "S" : s->type == OPT_I64 ? "N" : "X");
        const char *def = s->def && s->def[0] ? s->def : "none";
        if (s->type == OPT_BOOL) def = s->def && !strcmp(s->def, "true") ? "on" : "off";
        fprintf(f, "  %-36s %s [%s]\n", flag, s->help, def);
    }
    fprintf(f, "  %-36s %s\n", "-h, --help", "show this help");
}

int opts_parse(const opt_spec *specs, void *dst, int argc, char **argv,
               int (*positional)(void *dst, const char *arg, terr *e), const char *usage, terr *e)
{
    size_t n = 0;
    for (const opt_spec *s = specs; s->name; s++) n++;
    /* every option, plus a no- twin for each boolean, plus --help */
    struct option *lo = xcalloc(2 * n + 2, sizeof *lo);
    char **names = xcalloc(n, sizeof *names);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const opt_spec *s = &specs[i];
        lo[k++] = (struct option){s->name, s->type == OPT_BOOL ? optional_argument : required_argument,
                                  NULL, (int)(1000 + i)};
        if (s->type == OPT_BOOL) {
            names[i] = xmalloc(strlen(s->name) + 4);
            sprintf(names[i], "no-%s", s->name);
            lo[k++] = (struct option){names[i], no_argument, NULL, (int)(3000 + i)};
        }
    }
    lo[k++] = (struct option){"help", no_argument, NULL, 'h'};
    int rc = 0;
    optind = 1;
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":h", lo, NULL);
        if (c == -1) break;
        if (c == 'h') {
            opts_help(specs, usage, stdout);
            rc = 1;
            break;
        }
        if (c == '?' || c == ':') {
            const char *bad = argv[optind - 1];
            if (c == ':') rc = terr_set(e, "%s: needs a value", bad);
            else rc = terr_set(e, "%s: unknown option (see --help)", bad);
            break;
        }
        if (c >= 3000) {
            *FIELD(dst, &specs[c - 3000], bool) = false;
            continue;
        }
        const opt_spec *s = &specs[c - 1000];
        if (s->type == OPT_BOOL && !optarg) {
            *FIELD(dst, s, bool) = true;
            continue;
        }
        if ((rc = set_value(s, dst, optarg, e))) break;
    }
    for (int i = optind; rc == 0 && i < argc; i++) {
        if (!positional) rc = terr_set(e, "unexpected argument \"%s\" (see --help)", argv[i]);
        else rc = positional(dst, argv[i], e);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(lo);
    return rc;
}

json_t *opts_to_json(const opt_spec *specs, const void *src)
{
    json_t *o = json_object();
    for (const opt_spec *s = specs; s->name; s++) {
        const void *f = (const char *)src + s->offset;
        json_t *v = NULL;
        switch (s->type) {
        case OPT_STR: v = *(char *const *)f ? json_string(*(char *const *)f) : json_null(); break;
        case OPT_I64: v = json_integer(*(const int64_t *)f); break;
        case OPT_F64: v = json_real(*(const double *)f); break;
        case OPT_BOOL: v = json_boolean(*(const bool *)f); break;
        }
        json_object_set_new(o, s->name, v);
    }
    return o;
}
