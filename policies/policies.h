/*
 * policies.h: the registry of scheduling policies, chosen by `--scheduling-policy NAME`.
 * Each policy lives in its own file in policies/ and documents itself at the top.
 *
 * Policies' own knobs (policy_ops.knobs) are offered to the commands as one table over one
 * block of POLICY_KNOBS_MAX_BYTES: every distinct knob table once, each at its own aligned
 * place, so `--chunk-size` is a flag and a sweep dimension whichever policy runs.
 */
#ifndef TANDEM_POLICIES_H
#define TANDEM_POLICIES_H

#include <stdio.h>

#include "core/policy.h"

extern const policy_ops policy_vllm, policy_vllm_v0, policy_priority, policy_sarathi,
    policy_sjf, policy_srpt, policy_fair, policy_static, policy_orca;

/* NULL if no policy has that name. */
const policy_ops *policy_find(const char *name);
/* "  name  summary" lines, for --help and for the error on an unknown name. */
void policy_list(FILE *f);

/* Room for every policy's knobs, laid end to end (checked when the table is built). */
#define POLICY_KNOBS_MAX_BYTES 256
typedef struct policy_knobs {
    _Alignas(16) unsigned char bytes[POLICY_KNOBS_MAX_BYTES];
} policy_knobs;

/* Every policy's knobs as one option table whose offsets point into a policy_knobs. */
const opt_spec *policy_knob_specs(void);
/* Where p's knobs sit in all (NULL when p has none). */
const void *policy_knobs_of(const policy_ops *p, const policy_knobs *all);
/* Every policy's knobs_check over all; -1 with e naming the flag. */
int policy_knobs_check(const policy_knobs *all, terr *e);

#endif
