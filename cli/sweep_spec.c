/* sweep_spec.c: the sweep spec format (see sweep.h). */
#include "cli/sweep.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cli/serving.h"

/* Options the sweep itself sets for every point. */
static const char *const reserved[] = {"out", "quiet"};

/* Hard cap on points: a typo like 0..1000000 should be an error, not a month of work. */
#define SWEEP_MAX_POINTS 10000000
/* Values a spec may list, all its options' ranges together: checked before a range is
 * expanded, so a spec cannot allocate its way to the points cap, one range or many. */
#define SWEEP_MAX_VALUES 100000

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) *--end = 0;
    return s;
}

static void add_value(sweep_param *p, const char *v)
{
    int n = p->num_values; /* capacity: the next power of two, so a 100,000-value range is not
                              100,000 reallocations */
    if ((n & (n - 1)) == 0) p->values = xrealloc(p->values, (size_t)(n ? 2 * n : 1) * sizeof *p->values);
    p->values[p->num_values++] = xstrdup(v);
}

/* Values listed so far by the whole spec, the option being parsed included. */
static uint64_t spec_values(const sweep_spec *s)
{
    uint64_t listed = 0;
    for (int i = 0; i < s->num_params; i++) listed += (uint64_t)s->params[i].num_values;
    return listed;
}

/* "A..B" or "A..B:S" (integers, inclusive). Returns 1 if v is a range (expanded into p), 0 if
 * not a range, -1 on a malformed one. */
static int expand_range(const sweep_spec *s, sweep_param *p, const char *v, const char *origin, int line, terr *e)
{
    const char *dots = strstr(v, "..");
    if (!dots) return 0;
    char lo_s[64], hi_s[64], step_s[64] = "1";
    size_t lo_len = (size_t)(dots - v);
    const char *rest = dots + 2, *colon = strchr(rest, ':');
    size_t hi_len = colon ? (size_t)(colon - rest) : strlen(rest);
    if (lo_len >= sizeof lo_s || hi_len >= sizeof hi_s) return 0;
    memcpy(lo_s, v, lo_len);
    lo_s[lo_len] = 0;
    memcpy(hi_s, rest, hi_len);
    hi_s[hi_len] = 0;
    if (colon) snprintf(step_s, sizeof step_s, "%s", colon + 1);
    int64_t lo, hi, step;
    if (parse_i64(trim(lo_s), &lo) || parse_i64(trim(hi_s), &hi) || parse_i64(trim(step_s), &step))
        return 0; /* not an integer range: maybe a path with ".." in it */
    if (step <= 0 || hi < lo)
        return terr_set(e, "%s:%d: range \"%s\" must have lo <= hi and a step > 0", origin, line, v);
    /* counted in unsigned arithmetic: INT64_MIN..INT64_MAX must not overflow */
    uint64_t steps = ((uint64_t)hi - (uint64_t)lo) / (uint64_t)step; /* values - 1 */
    if (steps >= SWEEP_MAX_VALUES || spec_values(s) + steps + 1 > SWEEP_MAX_VALUES)
        return terr_set(e, "%s:%d: range \"%s\" gives %.4g values; a spec lists at most %d in all (split the sweep)",
                        origin, line, v, (double)steps + 1, SWEEP_MAX_VALUES);
    uint64_t count = steps + 1;
    for (uint64_t i = 0; i < count; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)((uint64_t)lo + i * (uint64_t)step));
        add_value(p, buf);
    }
    return 1;
}

/* Splits the right-hand side on commas outside double quotes. */
static int parse_values(const sweep_spec *s, sweep_param *p, char *rhs, const char *origin, int line, terr *e)
{
    char *cur = rhs;
    for (;;) {
        char buf[4096];
        size_t n = 0;
        bool quoted = false, was_quoted = false;
        while (isspace((unsigned char)*cur)) cur++;
        while (*cur && (quoted || *cur != ',')) {
            if (*cur == '"') {
                quoted = !quoted;
                was_quoted = true;
            } else if (n + 1 < sizeof buf && (quoted || !was_quoted || !isspace((unsigned char)*cur))) {
                buf[n++] = *cur; /* spaces after a closing quote are dropped */
            }
            cur++;
        }
        if (quoted) return terr_set(e, "%s:%d: unterminated quote", origin, line);
        buf[n] = 0;
        char *v = was_quoted ? buf : trim(buf);
        if (!*v && !was_quoted) return terr_set(e, "%s:%d: empty value for \"%s\"", origin, line, p->name);
        int r = was_quoted ? 0 : expand_range(s, p, v, origin, line, e);
        if (r < 0) return -1;
        if (r == 0 && spec_values(s) + 1 > SWEEP_MAX_VALUES)
            return terr_set(e, "%s:%d: more than %d values in the spec (split the sweep)", origin, line, SWEEP_MAX_VALUES);
        if (r == 0) add_value(p, v);
        if (!*cur) break;
        cur++; /* the comma */
    }
    return 0;
}

int sweep_spec_parse(sweep_spec *s, const char *text, const char *origin, terr *e)
{
    *s = (sweep_spec){.origin = xstrdup(origin)};
    serving_options scratch = {0};
    serving_options_defaults(&scratch);
    int rc = -1, line = 0;
    const char *p = text;
    while (*p) {
        line++;
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char *raw = xmalloc(len + 1);
        memcpy(raw, p, len);
        raw[len] = 0;
        p = nl ? nl + 1 : p + len;
        if (len && raw[len - 1] == '\r') {
            terr_set(e, "%s:%d: CRLF line end (save the spec with LF line ends)", origin, line);
            free(raw);
            goto out;
        }
        /* a # starts a comment unless inside quotes */
        bool q = false;
        for (char *c = raw; *c; c++) {
            if (*c == '"') q = !q;
            else if (*c == '#' && !q) {
                *c = 0;
                break;
            }
        }
        char *body = trim(raw);
        if (!*body) {
            free(raw);
            continue;
        }
        char *eq = strchr(body, '=');
        if (!eq) {
            terr_set(e, "%s:%d: expected \"option = value, value, ...\", got \"%s\"", origin, line, body);
            free(raw);
            goto out;
        }
        *eq = 0;
        char *key = trim(body);
        while (*key == '-') key++; /* tolerate --max-num-seqs */
        const opt_spec *spec = opts_find(serving_option_specs(), key);
        if (!spec) {
            terr_set(e, "%s:%d: unknown option \"%s\" (keys are `tandem sim` flags without dashes; see tandem sim --help)",
                     origin, line, key);
            free(raw);
            goto out;
        }
        for (size_t i = 0; i < ARRAY_LEN(reserved); i++) {
            if (strcmp(key, reserved[i]) == 0) {
                terr_set(e, "%s:%d: \"%s\" is set by the sweep (tandem sweep --out DIR)", origin, line, key);
                free(raw);
                goto out;
            }
        }
        for (int i = 0; i < s->num_params; i++) {
            if (strcmp(s->params[i].name, key) == 0) {
                terr_set(e, "%s:%d: \"%s\" is already set at line %d", origin, line, key, s->params[i].line);
                free(raw);
                goto out;
            }
        }
        s->params = xrealloc(s->params, (size_t)(s->num_params + 1) * sizeof *s->params);
        sweep_param *prm = &s->params[s->num_params++];
        *prm = (sweep_param){.name = xstrdup(key), .line = line};
        if (parse_values(s, prm, eq + 1, origin, line, e)) {
            free(raw);
            goto out;
        }
        for (int i = 0; i < prm->num_values; i++) {
            terr te;
            if (opts_set(serving_option_specs(), &scratch, key, prm->values[i], &te)) {
                terr_set(e, "%s:%d: %s", origin, line, te.msg);
                free(raw);
                goto out;
            }
        }
        free(raw);
    }
    if (s->num_params == 0) {
        terr_set(e, "%s: no options: a spec needs at least `trace = FILE`", origin);
        goto out;
    }
    bool has_trace = false;
    s->num_points = 1;
    for (int i = 0; i < s->num_params; i++) {
        has_trace |= strcmp(s->params[i].name, "trace") == 0;
        s->num_points *= s->params[i].num_values;
        if (s->num_points > SWEEP_MAX_POINTS) {
            terr_set(e, "%s: more than %d points; split the sweep", origin, SWEEP_MAX_POINTS);
            goto out;
        }
    }
    if (!has_trace) {
        terr_set(e, "%s: no `trace = FILE` line", origin);
        goto out;
    }
    rc = 0;
out:
    serving_options_free(&scratch);
    if (rc) sweep_spec_free(s);
    return rc;
}

int sweep_spec_load(sweep_spec *s, const char *path, terr *e)
{
    char *text = read_text_file(path, NULL, e);
    if (!text) return -1;
    int rc = sweep_spec_parse(s, text, path, e);
    free(text);
    return rc;
}

void sweep_spec_free(sweep_spec *s)
{
    for (int i = 0; i < s->num_params; i++) {
        for (int j = 0; j < s->params[i].num_values; j++) free(s->params[i].values[j]);
        free(s->params[i].values);
        free(s->params[i].name);
    }
    free(s->params);
    free(s->origin);
    *s = (sweep_spec){0};
}

void sweep_point_values(const sweep_spec *s, int64_t index, const char **vals)
{
    for (int p = s->num_params - 1; p >= 0; p--) {
        int n = s->params[p].num_values;
        vals[p] = s->params[p].values[index % n];
        index /= n;
    }
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void sweep_point_id(const sweep_spec *s, int64_t index, char id[17])
{
    const char **vals = xmalloc((size_t)s->num_params * sizeof *vals);
    char **pairs = xmalloc((size_t)s->num_params * sizeof *pairs);
    sweep_point_values(s, index, vals);
    for (int p = 0; p < s->num_params; p++) {
        pairs[p] = xmalloc(strlen(s->params[p].name) + strlen(vals[p]) + 2);
        sprintf(pairs[p], "%s=%s", s->params[p].name, vals[p]);
    }
    qsort(pairs, (size_t)s->num_params, sizeof *pairs, cmp_str);
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    for (int p = 0; p < s->num_params; p++) {
        XXH3_64bits_update(st, pairs[p], strlen(pairs[p]) + 1); /* the NUL separates pairs */
        free(pairs[p]);
    }
    snprintf(id, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
    XXH3_freeState(st);
    free(pairs);
    free(vals);
}
