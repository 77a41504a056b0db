/*
 * costmodel.c: the registry of cost models, and the helpers every model shares.
 *
 * The registry is a static array, searched by name once at start-up (never per step). A new
 * model (e.g. a table-driven one interpolating step times measured on the GPU) adds its ops
 * table here.
 */
#include <string.h>

#include "sim/costmodel.h"
#include "sim/profile_model.h"
#include "sim/roofline.h"

static const cost_model_ops *const cost_models[] = {
    &roofline_cost_model,
    &profile_cost_model,
};

const cost_model_ops *cost_model_find(const char *spec)
{
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    for (size_t i = 0; i < ARRAY_LEN(cost_models); i++) {
        const cost_model_ops *m = cost_models[i];
        if (strlen(m->name) == len && !strncmp(m->name, spec, len) && m->takes_arg == (colon != NULL)) return m;
    }
    return NULL;
}

const char *cost_model_arg(const char *spec)
{
    const char *colon = strchr(spec, ':');
    return colon ? colon + 1 : NULL;
}

void cost_model_list(FILE *f)
{
    fprintf(f, "  %-14s %s\n", "auto", "the shipped profile of --model on --gpu (configs/profiles) if there is one, else roofline");
    for (size_t i = 0; i < ARRAY_LEN(cost_models); i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", cost_models[i]->name, cost_models[i]->takes_arg ? ":FILE" : "");
        fprintf(f, "  %-14s %s\n", name, cost_models[i]->summary);
    }
}

cost_model_opts cost_model_opts_default(void)
{
    return (cost_model_opts){.block_size = KV_DEFAULT_BLOCK_SIZE, .kv_dtype_bytes = KV_DTYPE_BYTES};
}

void cost_breakdown_print(const cost_breakdown *bd, FILE *f)
{
    fprintf(f, "  %-14s %12s %12s %12s\n", "part", "compute_us", "memory_us", "time_us");
    for (int32_t i = 0; i < bd->num_parts; i++) {
        const cost_part *p = &bd->parts[i];
        fprintf(f, "  %-14s %12.2f %12.2f %12.2f\n", p->name, p->compute_s * 1e6,
                p->memory_s * 1e6, p->time_s * 1e6);
    }
    fprintf(f, "  %-14s %12s %12s %12.2f\n", "total", "", "", bd->total_s * 1e6);
}
