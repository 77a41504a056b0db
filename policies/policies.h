/*
 * policies.h: the registry of scheduling policies, chosen by `--scheduling-policy NAME`.
 * Each policy lives in its own file in policies/ and documents itself at the top.
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

#endif
