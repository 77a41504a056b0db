/* registry.c: every router tandem can put in front of replicas, by name. Add one with a line here. */
#include "policies/routers/routers.h"

#include <string.h>

#include "core/util.h"

static const router_ops *const registry[] = {
    &router_round_robin,  &router_random,          &router_least_outstanding,
    &router_least_kv,     &router_power_of_two,    &router_prefix_affinity,
};

const router_ops *router_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(registry); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

void router_list(FILE *f)
{
    for (size_t i = 0; i < ARRAY_LEN(registry); i++)
        fprintf(f, "  %-18s %s\n", registry[i]->name, registry[i]->summary);
}
