/*
 * options.h: command-line options described as data, and the one parser every command uses.
 *
 * A module lists its options once, as a table of {name, type, offset into its options struct,
 * default, help}. The same table parses argv, prints --help with every default, sets an option
 * by name (what `tandem sweep` does with a spec line), and dumps the resolved values into
 * summary.json. Tables are owned by whoever the options belong to: a command, the serving setup,
 * the engine, or a scheduling policy (its knobs, core/policy.h); a command joins them with
 * opts_join.
 *
 * Names match exactly: `--max-num-seq` is an unknown option, never an abbreviation of
 * `--max-num-seqs`. Values come as `--name V` or `--name=V`; booleans take `--name`,
 * `--no-name` and `--name=true|false`; `--` ends the options.
 */
#ifndef TANDEM_OPTIONS_H
#define TANDEM_OPTIONS_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "util.h"

/* OPT_RATE: a double that may also be "inf" (written to JSON as the string "inf"). */
typedef enum opt_type { OPT_STR, OPT_I64, OPT_F64, OPT_RATE, OPT_BOOL } opt_type;

typedef struct opt_spec {
    const char *name;   /* long option, without dashes */
    opt_type type;
    size_t offset;      /* of a char * / int64_t / double / bool field in the options struct */
    const char *def;    /* default, as text ("" for none) */
    const char *help;
} opt_spec;

#define OPT_END {0, 0, 0, 0, 0}

/* Sets every option to its default. String fields hold heap copies (NULL when unset), which
 * opts_free releases; the struct must start zeroed. */
void opts_defaults(const opt_spec *specs, void *dst);
/* Sets one option by name from text; errors name the flag. */
int opts_set(const opt_spec *specs, void *dst, const char *name, const char *value, terr *e);
/* Parses argv (argv[0] is the command). Positional arguments are handed to `positional`
 * (which returns -1 with e set to refuse them); NULL refuses all. Returns 0, 1 if --help was
 * printed, or -1 with e set. */
int opts_parse(const opt_spec *specs, void *dst, int argc, char **argv,
               int (*positional)(void *dst, const char *arg, terr *e), const char *usage, terr *e);
void opts_help(const opt_spec *specs, const char *usage, FILE *f);
json_t *opts_to_json(const opt_spec *specs, const void *src);
const opt_spec *opts_find(const opt_spec *specs, const char *name);
void opts_free(const opt_spec *specs, void *dst);
size_t opts_count(const opt_spec *specs);

/* Appends src's options to the table *dst (of *n entries, kept OPT_END-terminated, grown with
 * xrealloc), their offsets shifted by `base` (where src's struct sits inside dst's), leaving out
 * the names in `skip` (NULL-terminated; NULL skips none) and names already in *dst. */
void opts_join(opt_spec **dst, size_t *n, const opt_spec *src, size_t base, const char *const *skip);
/* The same, taking only the names in `keep` (NULL-terminated), in keep's order. */
void opts_pick(opt_spec **dst, size_t *n, const opt_spec *src, size_t base, const char *const *keep);

#endif
