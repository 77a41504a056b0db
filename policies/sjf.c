/*
 * sjf.c: shortest job first (`sjf`) and shortest remaining processing time (`srpt`).
 *
 * A request's job is its output length: the decode steps it will occupy a batch slot for.
 * The scheduler does not know it; it sees a prediction made once on arrival:
 *   predicted = output_tokens                                 (--length-predictor-error 0: oracle)
 *   predicted = max(1, round(output_tokens * exp(err * Z)))   Z ~ N(0, 1) from the run's seed
 * a multiplicative log-normal error, so err 0.5 means predictions off by a factor e^0.5 at one
 * standard deviation (the spread of learned length predictors, e.g. Qiu et al. 2024, Fu et al.
 * "Efficient LLM Scheduling by Learning to Rank", NeurIPS 2024).
 *
 * sjf: the waiting queue is ordered by predicted length (ties by arrival); running requests
 *      are never displaced; the newest running request is the victim when KV runs out.
 * srpt: ordered by predicted remaining output (predicted - generated, at least 0); an
 *      admission preempts running requests with strictly more predicted work left (most work
 *      first) when blocks or max_num_seqs are short, and the running request with the most
 *      remaining work is the victim when KV runs out. Preempted requests keep their generated
 *      tokens' credit, so a request that outlives its prediction sorts first (remaining 0).
 * Both starve long requests under sustained load; that is what they are for comparing.
 */
#include <gsl/gsl_randist.h>
#include <math.h>

#include "cb.h"
#include "policies.h"

static double remaining(const request *r)
{
    double rem = r->policy_key - r->num_output_tokens;
    return rem > 0 ? rem : 0;
}

static int cmp_job(const request *a, const request *b)
{
    if (a->policy_key != b->policy_key) return a->policy_key < b->policy_key ? -1 : 1;
    return req_cmp_fcfs(a, b);
}

static int cmp_remaining(const request *a, const request *b)
{
    double x = remaining(a), y = remaining(b);
    if (x != y) return x < y ? -1 : 1;
    return req_cmp_fcfs(a, b);
}

/* Both policies' knob: how wrong the length predictions are. */
typedef struct sjf_knobs {
    double length_predictor_error; /* sigma of ln(predicted / true output length) */
} sjf_knobs;

static const opt_spec sjf_knob_specs[] = {
    {"length-predictor-error", OPT_F64, offsetof(sjf_knobs, length_predictor_error), "0",
     "sjf/srpt: relative error of predicted output lengths"},
    OPT_END,
};

static int sjf_check(const void *knobs, terr *e)
{
    double err = ((const sjf_knobs *)knobs)->length_predictor_error;
    if (!(err >= 0)) return terr_set(e, "--length-predictor-error: %g must be >= 0", err);
    return 0;
}

static reject_reason predict(cb_state *s, request *r)
{
    double err = ((const sjf_knobs *)s->env->knobs)->length_predictor_error, pred = r->max_output_tokens;
    if (err > 0) pred = fmax(1.0, round(pred * exp(err * gsl_ran_gaussian(s->env->rng, 1.0))));
    r->policy_key = pred;
    return REJECT_NONE;
}

static bool more_remaining(const request *r, const request *cand) { return remaining(r) > remaining(cand); }

static request *most_remaining(cb_state *s, request *r)
{
    (void)r;
    return cb_running_max(s, cmp_remaining);
}

static request *srpt_displace(cb_state *s, const request *cand, int32_t need_blocks)
{
    return cb_displace_least_important(s, cand, need_blocks, cmp_remaining, more_remaining);
}

static const cb_variant sjf_variant = {
    .wait_push = cb_heap_push,
    .wait_requeue = cb_heap_requeue,
    .wait_peek = cb_heap_peek,
    .wait_remove = cb_heap_remove,
    .on_arrival = predict,
};

static const cb_variant srpt_variant = {
    .wait_push = cb_heap_push,
    .wait_requeue = cb_heap_requeue,
    .wait_peek = cb_heap_peek,
    .wait_remove = cb_heap_remove,
    .victim = most_remaining,
    .displace = srpt_displace,
    .on_arrival = predict,
};

static void *sjf_create(sched_env *env) { return cb_create(env, &sjf_variant, cmp_job); }
static void *srpt_create(sched_env *env) { return cb_create(env, &srpt_variant, cmp_remaining); }

const policy_ops policy_sjf =
    CB_POLICY_OPS("sjf",
                  "shortest (predicted) job first, non-preemptive admission order",
                  sjf_create, cb_destroy, .knobs = sjf_knob_specs, .knobs_size = sizeof(sjf_knobs),
                  .knobs_check = sjf_check);

const policy_ops policy_srpt =
    CB_POLICY_OPS("srpt",
                  "shortest (predicted) remaining output first, preempting requests with more work left",
                  srpt_create, cb_destroy, .knobs = sjf_knob_specs, .knobs_size = sizeof(sjf_knobs),
                  .knobs_check = sjf_check);
