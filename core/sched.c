/* sched.c: see sched.h. */
#include "sched.h"

#include <assert.h>

int32_t sched_preempt(sched_env *env, request *r, batch *b)
{
    assert(r->state == REQ_RUNNING);
    int32_t refund = batch_remove(b, r);
    env->kv_tokens -= r->num_computed_tokens; /* swapped or dropped: off the GPU either way */
    r->num_preemptions++;
    batch_note_preempted(b, r);
    if (env->cfg->preemption_mode == PREEMPT_SWAP && env->swap && r->blocks.len > 0 &&
        kv_allocate_table(env->swap, &r->host_blocks, r->blocks.len)) {
        for (int32_t i = 0; i < r->blocks.len; i++)
            batch_add_swap_out(b, r->blocks.ids[i], r->host_blocks.ids[i]);
        kv_free_request(env->kv, r);
        r->state = REQ_SWAPPED;
        return refund;
    }
    /* recompute (or the swap space is full): the KV is dropped and rebuilt on readmission */
    kv_free_request(env->kv, r);
    r->num_computed_tokens = 0;
    r->state = REQ_PREEMPTED;
    return refund;
}

bool sched_swap_in(sched_env *env, request *r, batch *b)
{
    assert(r->state == REQ_SWAPPED && r->blocks.len == 0);
    if (!kv_allocate_table(env->kv, &r->blocks, r->host_blocks.len)) return false;
    for (int32_t i = 0; i < r->blocks.len; i++)
        batch_add_swap_in(b, r->blocks.ids[i], r->host_blocks.ids[i]);
    kv_free_table(env->swap, &r->host_blocks);
    env->kv_tokens += r->num_computed_tokens;
    r->state = REQ_RUNNING;
    return true;
}

sched_admission sched_admission_probe(sched_env *env, request *r)
{
    sched_admission a = {0};
    a.cached_tokens = r->num_computed_tokens == 0 ? kv_cached_prefix_tokens(env->kv, r) : 0;
    a.blocks_available = env->kv->num_free - kv_cached_prefix_free_blocks(env->kv, r, a.cached_tokens);
    return a;
}

bool sched_admit_allocate(sched_env *env, request *r, const sched_admission *a, int32_t num_new)
{
    int32_t cached_blocks = a->cached_tokens / env->kv->block_size;
    int32_t need = kv_blocks_for_tokens(env->kv, (int64_t)a->cached_tokens + num_new) - cached_blocks;
    if (need > a->blocks_available) return false;
    kv_take_cached_prefix(env->kv, r, a->cached_tokens);
    bool ok = kv_allocate_slots(env->kv, r, (int64_t)a->cached_tokens + num_new);
    assert(ok);
    (void)ok;
    r->num_computed_tokens = a->cached_tokens;
    env->kv_tokens += a->cached_tokens;
    if (r->num_cached_tokens < 0) r->num_cached_tokens = a->cached_tokens;
    return true;
}

void sched_mark_running(sched_env *env, request *r)
{
    r->state = REQ_RUNNING;
    if (r->first_scheduled_ns < 0) r->first_scheduled_ns = env->now_ns;
}
