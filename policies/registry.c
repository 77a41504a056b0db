/* registry.c: every policy tandem can run, by name. Add a policy by adding a line here. */
#include "policies.h"

#include <assert.h>
#include <string.h>

#include "core/util.h"

static const policy_ops *const registry[] = {
    &policy_vllm,     &policy_vllm_v0, &policy_priority, &policy_sarathi, &policy_sjf,
    &policy_srpt,     &policy_fair,    &policy_static,   &policy_orca,
};

const policy_ops *policy_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(registry); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

void policy_list(FILE *f)
{
    for (size_t i = 0; i < ARRAY_LEN(registry); i++)
        fprintf(f, "  %-10s %s\n", registry[i]->name, registry[i]->summary);
}

/* The joined knob table, built on first use: each distinct table once, at knob_base[i]. */
static opt_spec *knob_specs;
static size_t knob_count;
static size_t knob_base[ARRAY_LEN(registry)]; /* offset of registry[i]'s knobs in the block */

static void build_knob_table(void)
{
    size_t used = 0;
    for (size_t i = 0; i < ARRAY_LEN(registry); i++) {
        const policy_ops *p = registry[i];
        if (!p->knobs) continue;
        size_t j = 0;
        while (j < i && registry[j]->knobs != p->knobs) j++;
        if (j < i) { /* shares an earlier policy's table */
            knob_base[i] = knob_base[j];
            continue;
        }
        knob_base[i] = (used + 15) / 16 * 16;
        used = knob_base[i] + p->knobs_size;
        assert(used <= POLICY_KNOBS_MAX_BYTES && "raise POLICY_KNOBS_MAX_BYTES");
        opts_join(&knob_specs, &knob_count, p->knobs, offsetof(policy_knobs, bytes) + knob_base[i], NULL);
    }
    if (!knob_specs) knob_specs = xcalloc(1, sizeof *knob_specs); /* OPT_END alone */
}

const opt_spec *policy_knob_specs(void)
{
    if (!knob_specs) build_knob_table();
    return knob_specs;
}

static size_t registry_index(const policy_ops *p)
{
    for (size_t i = 0; i < ARRAY_LEN(registry); i++)
        if (registry[i] == p) return i;
    assert(!"policy not in the registry");
    return 0;
}

const void *policy_knobs_of(const policy_ops *p, const policy_knobs *all)
{
    if (!p->knobs) return NULL;
    policy_knob_specs();
    return all->bytes + knob_base[registry_index(p)];
}

int policy_knobs_check(const policy_knobs *all, terr *e)
{
    policy_knob_specs();
    for (size_t i = 0; i < ARRAY_LEN(registry); i++)
        if (registry[i]->knobs_check && registry[i]->knobs_check(all->bytes + knob_base[i], e)) return -1;
    return 0;
}
