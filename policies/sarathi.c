/*
 * sarathi.c: stall-free batching from Sarathi-Serve (Agrawal et al., OSDI 2024), policy
 * `sarathi`.
 *
 * Each step has a token budget of --chunk-size tokens (capped by max_num_batched_tokens). The
 * running pass serves every decoding request first (one token each), so ongoing generations
 * never stall behind a long prompt, then continues the partial prefills of running requests,
 * then admits new requests with prefill chunks cut to what is left of the budget. Otherwise it
 * is vLLM V1's step (FIFO admission, the newest request is the victim when KV runs out; see
 * policies/cb.c). vLLM's chunked prefill grew out of this design; the differences that remain
 * are the small fixed budget and the strict decode-first order inside the running pass.
 * Chunking is the policy: prompts are chunked even with --no-enable-chunked-prefill.
 *
 * Measured, not assumed: in this V1 model a request still prefilling was admitted after the
 * decoding ones, so it already sits behind them in the running list; with no preemption,
 * `sarathi --chunk-size C` schedules exactly like `vllm --max-num-batched-tokens C`. They part
 * once preemptions reorder the running list (experiments/chunked_prefill.sh).
 */
#include "cb.h"
#include "policies.h"

static const cb_variant sarathi_variant = {
    .wait_push = cb_fifo_push,
    .wait_requeue = cb_fifo_requeue,
    .wait_peek = cb_fifo_peek,
    .wait_remove = cb_fifo_remove,
    .decodes_first = true,
    .always_chunk = true,
};

typedef struct sarathi_knobs {
    int64_t chunk_size; /* prefill + decode tokens per step, at most */
} sarathi_knobs;

static const opt_spec sarathi_knob_specs[] = {
    {"chunk-size", OPT_I64, offsetof(sarathi_knobs, chunk_size), "512", "sarathi: prefill tokens per step"},
    OPT_END,
};

static int sarathi_check(const void *knobs, terr *e)
{
    const sarathi_knobs *k = knobs;
    if (k->chunk_size < 1 || k->chunk_size > 1 << 24)
        return terr_set(e, "--chunk-size: %lld is out of range [1, %d]", (long long)k->chunk_size, 1 << 24);
    return 0;
}

static void *sarathi_create(sched_env *env)
{
    cb_state *s = cb_create(env, &sarathi_variant, NULL);
    s->chunk_size = ((const sarathi_knobs *)env->knobs)->chunk_size;
    return s;
}

const policy_ops policy_sarathi =
    CB_POLICY_OPS("sarathi",
                  "Sarathi-Serve stall-free batching: decodes first, then prefill chunks, --chunk-size tokens a step",
                  sarathi_create, cb_destroy, .knobs = sarathi_knob_specs, .knobs_size = sizeof(sarathi_knobs),
                  .knobs_check = sarathi_check);
