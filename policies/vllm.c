/*
 * vllm.c: vLLM V1's default scheduler (FCFS, one token budget per step), policy `vllm`.
 *
 * What it does each step, as vLLM V1's Scheduler.schedule() does with the FCFS policy
 * (the step itself is policies/cb.c; this variant picks FIFO order and the newest victim):
 *
 * 1. Running requests first, in the order they were admitted. Each takes
 *      n = min(tokens left to compute, long_prefill_token_threshold if > 0,
 *              remaining budget, max_model_len - 1 - computed)
 *    and a request with n == 0 is skipped (not a stop). Its KV slots are allocated; when the
 *    blocks are not free, the request at the *tail* of the running list is preempted and the
 *    allocation retried. If the victim is the request itself, the running pass stops.
 *    Preemption (recompute by default, or swap with --preemption-mode swap) frees the victim's
 *    blocks and puts it at the *front* of the waiting queue, so it is readmitted first.
 * 2. Waiting requests are admitted only if nothing was preempted in this step, in FCFS order,
 *    while running < max_num_seqs and budget remains:
 *      - a request's tokens are its whole current sequence (its prompt, plus its output so far
 *        if it was preempted by recompute) minus any prefix-cache hit, capped by
 *        long_prefill_token_threshold;
 *      - chunked prefill on: cut to the remaining budget; off: a request that does not fit the
 *        remaining budget stops admission;
 *      - with reserve_full_isl (vLLM >= 0.19's default), blocks for the request's whole current
 *        sequence must be free even when only a chunk is scheduled; otherwise only the chunk's;
 *      - a request whose blocks cannot be allocated stops admission (head-of-line blocking).
 *    A swapped-out request (swap mode) sits at the front of the queue and comes back whole
 *    before any new request is admitted.
 * 3. The serving loop rejects on arrival what can never run (prompt >= max_model_len, or more KV
 *    than the whole cache); vLLM refuses such prompts at the API.
 *
 * Where it deliberately differs from vLLM: scheduling is synchronous (no async scheduling or
 * speculative decoding); structured output, LoRA, encoder inputs and KV connectors do not
 * exist here; vLLM V1 has no swap preemption (V0 had), tandem offers it to every policy.
 * Prefix caching is off unless --enable-prefix-caching (vLLM V1 turns it on by default; traces
 * without token identity would see no hits but the ones of recomputed requests).
 */
#include "cb.h"
#include "policies.h"

static const cb_variant vllm_variant = {
    .wait_push = cb_fifo_push,
    .wait_requeue = cb_fifo_requeue,
    .wait_peek = cb_fifo_peek,
    .wait_remove = cb_fifo_remove,
};

static void *vllm_create(sched_env *env) { return cb_create(env, &vllm_variant, NULL); }

const policy_ops policy_vllm =
    CB_POLICY_OPS("vllm",
                  "vLLM V1 default: FCFS, one token budget, running first, preempt the newest",
                  vllm_create, cb_destroy);
