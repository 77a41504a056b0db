/*
 * sched.h: mechanisms policies share: preemption (by recompute or by swap), swapping back in,
 * and the admission arithmetic of prefix caching. Policies decide *whom*; these do *how*, the
 * same way for every policy.
 */
#ifndef TANDEM_SCHED_H
#define TANDEM_SCHED_H

#include <stdbool.h>

#include "batch.h"
#include "policy.h"

/* Preempts running request r (the caller has taken it out of its running queue; if r was
 * scheduled earlier in this step, its item is removed from b and its tokens are returned so the
 * caller can refund its budget).
 *   recompute: all of r's KV blocks are freed, num_computed_tokens = 0, state PREEMPTED.
 *   swap: r's blocks are copied to host swap blocks (swap_out ops in b), the GPU blocks freed,
 *         state SWAPPED; when the swap space is full, falls back to recompute.
 * Counts the preemption on r and on b. */
int32_t sched_preempt(sched_env *env, request *r, batch *b);

/* Blocks needed to swap r back in. */
static inline int32_t sched_swap_in_blocks(const request *r) { return r->host_blocks.len; }
/* Moves swapped request r back to GPU blocks (swap_in ops in b), state RUNNING. Returns false
 * and changes nothing if the GPU blocks are not free. */
bool sched_swap_in(sched_env *env, request *r, batch *b);

/* Admission arithmetic for a waiting (or preempted) request, with prefix caching:
 * cached = tokens found in the prefix cache; new blocks needed for computing `num_new` tokens
 * after them; free blocks available (cached blocks nobody holds don't count: taking them
 * removes them from the free queue). */
typedef struct sched_admission {
    int32_t cached_tokens;
    int32_t blocks_available;
} sched_admission;
sched_admission sched_admission_probe(sched_env *env, request *r);
/* Takes r's cached prefix and allocates blocks for `num_new` tokens after it. False (and nothing
 * changed) if the blocks are not free. On success r->num_computed_tokens = cached tokens and,
 * on r's first admission, num_cached_tokens records the hit. */
bool sched_admit_allocate(sched_env *env, request *r, const sched_admission *a, int32_t num_new);

/* Marks r running from now (first_scheduled_ns on its first admission). */
void sched_mark_running(sched_env *env, request *r);

#endif
