/* registry.c: every policy tandem can run, by name. Add a policy by adding a line here. */
#include "policies.h"

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
