/* options.c: see options.h. */
#include "options.h"

#include <assert.h>
#include <math.h>
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

size_t opts_count(const opt_spec *specs)
{
    size_t n = 0;
    while (specs[n].name) n++;
    return n;
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
    case OPT_F64:
    case OPT_RATE: {
        double x;
        if (s->type == OPT_RATE && (!strcmp(v, "inf") || !strcmp(v, "infinity"))) x = INFINITY;
        else if (parse_f64(v, &x))
            return terr_set(e, "--%s: \"%s\" is not a number%s", s->name, v, s->type == OPT_RATE ? " or inf" : "");
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
            int rc = set_value(s, dst, s->def && s->def[0] ? s->def : "0", NULL);
            assert(rc == 0 && "an option's default parses");
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
                      s->type == OPT_STR ? "S" : s->type == OPT_I64 ? "N" : s->type == OPT_RATE ? "X|inf" : "X");
        const char *def = s->def && s->def[0] ? s->def : "none";
        if (s->type == OPT_BOOL) def = s->def && !strcmp(s->def, "true") ? "on" : "off";
        fprintf(f, "  %-36s %s [%s]\n", flag, s->help, def);
    }
    fprintf(f, "  %-36s %s\n", "-h, --help", "show this help");
}

/* One "--name[=value]" argument: finds its spec (a `no-` prefix negates a boolean) and sets it,
 * taking the value from the next argument when it has none of its own. *i indexes argv and is
 * advanced past what was consumed. */
static int parse_one(const opt_spec *specs, void *dst, int argc, char **argv, int *i, terr *e)
{
    const char *arg = argv[*i], *name = arg + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    char key[128];
    if (len == 0 || len >= sizeof key) return terr_set(e, "%s: unknown option (see --help)", arg);
    memcpy(key, name, len);
    key[len] = 0;
    const opt_spec *s = opts_find(specs, key);
    if (!s && strncmp(key, "no-", 3) == 0 && (s = opts_find(specs, key + 3)) && s->type == OPT_BOOL) {
        if (eq) return terr_set(e, "%.*s: takes no value", (int)(eq - arg), arg);
        *FIELD(dst, s, bool) = false;
        return 0;
    }
    if (!s) return terr_set(e, "--%s: unknown option (see --help)", key);
    if (eq) return set_value(s, dst, eq + 1, e);
    if (s->type == OPT_BOOL) {
        *FIELD(dst, s, bool) = true;
        return 0;
    }
    if (*i + 1 >= argc) return terr_set(e, "%s: needs a value", arg);
    return set_value(s, dst, argv[++*i], e);
}

int opts_parse(const opt_spec *specs, void *dst, int argc, char **argv,
               int (*positional)(void *dst, const char *arg, terr *e), const char *usage, terr *e)
{
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        if (!options_done && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            opts_help(specs, usage, stdout);
            return 1;
        }
        if (!options_done && !strcmp(a, "--")) {
            options_done = true;
            continue;
        }
        if (!options_done && a[0] == '-' && a[1] == '-') rc = parse_one(specs, dst, argc, argv, &i, e);
        else if (!options_done && a[0] == '-' && a[1]) rc = terr_set(e, "%s: unknown option (see --help)", a);
        else if (!positional) rc = terr_set(e, "unexpected argument \"%s\" (see --help)", a);
        else rc = positional(dst, a, e);
        if (rc) return -1;
    }
    return 0;
}

void opts_join(opt_spec **dst, size_t *n, const opt_spec *src, size_t base, const char *const *skip)
{
    for (const opt_spec *s = src; s->name; s++) {
        bool drop = *dst && opts_find(*dst, s->name);
        for (const char *const *k = skip; k && *k && !drop; k++) drop = !strcmp(*k, s->name);
        if (drop) continue;
        *dst = xrealloc(*dst, (*n + 2) * sizeof **dst);
        (*dst)[*n] = *s;
        (*dst)[*n].offset += base;
        (*dst)[++*n] = (opt_spec)OPT_END;
    }
}

void opts_pick(opt_spec **dst, size_t *n, const opt_spec *src, size_t base, const char *const *keep)
{
    for (const char *const *k = keep; *k; k++) {
        const opt_spec *s = opts_find(src, *k);
        assert(s && "opts_pick: no such option");
        opt_spec one[2] = {*s, OPT_END};
        opts_join(dst, n, one, base, NULL);
    }
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
        case OPT_RATE: {
            double x = *(const double *)f;
            v = isinf(x) ? json_string(x > 0 ? "inf" : "-inf") : json_real(x);
            break;
        }
        case OPT_BOOL: v = json_boolean(*(const bool *)f); break;
        }
        json_object_set_new(o, s->name, v);
    }
    return o;
}
