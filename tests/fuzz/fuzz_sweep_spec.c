/*
 * fuzz_sweep_spec.c: the sweep spec parser (cli/sweep_spec.c) on any text: lines, quotes,
 * ranges, comments and every sim option's value parser behind it. A parsed spec's points
 * must all have values, and its point count must be what its options' value counts give.
 */
#include "cli/sweep.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0; /* a spec is text: an embedded NUL ends it, as reading the file would not */
    sweep_spec s;
    terr e;
    if (sweep_spec_parse(&s, text, "spec", &e) == 0) {
        int64_t points = 1;
        for (int i = 0; i < s.num_params; i++) points *= s.params[i].num_values;
        if (points != s.num_points) abort();
        const char **vals = malloc((size_t)s.num_params * sizeof *vals);
        sweep_point_values(&s, s.num_points - 1, vals);
        for (int i = 0; i < s.num_params; i++)
            if (!vals[i]) abort();
        free(vals);
        sweep_spec_free(&s);
    }
    free(text);
    return 0;
}
