/*
 * routers.h: the routers tandem can put in front of a cluster of replicas (core/router.h), by
 * name. Each router's file says what it models and where it comes from.
 */
#ifndef TANDEM_ROUTERS_H
#define TANDEM_ROUTERS_H

#include <stdio.h>

#include "core/router.h"

extern const router_ops router_round_robin, router_random, router_least_outstanding, router_least_kv,
    router_power_of_two, router_prefix_affinity;

const router_ops *router_find(const char *name); /* NULL if unknown */
void router_list(FILE *f);                       /* valid names with summaries */

#endif
