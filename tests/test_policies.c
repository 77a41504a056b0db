/*
 * test_policies.c: every policy's promise in a small scenario worked out by hand, the swap
 * and prefix-caching mechanisms, and a property test of invariants across all of them.
 *
 * Steps are written "id:tokens" in batch order, " P" per preemption, " pad=N" for padding
 * rows, " out=N"/" in=N" for blocks swapped out/in. One step costs 1 ms.
 */
#include <check.h>
#include <stdio.h>
#include <gsl/gsl_rng.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policies.h"
#include "testutil.h"

/* 4 blocks of 4. L (priority 1, prompt 12, 4 outputs: at most 15 slots) arrives at 0,
 * H (priority 0, prompt 8, 2 outputs) at 1.5 ms.
 *   1: L 12 (3 blocks)          2: L 1 (13 slots: 4th block)
 *   3: running pass schedules L 1; H arrives and needs 2 blocks, none free: L is less
 *      important and holds 4 >= 2, so L is displaced (its scheduled token refunded), H 8.
 *   4: H 1 (3rd block), H done; L (seq 14: 4 blocks) cannot come back yet
 *   5: L recomputes its 14 tokens (its step-3 token never ran) and samples its 3rd token;
 *   6: L samples its 4th.
 * vllm (FCFS) keeps L: H waits until L finishes at step 4, then runs at steps 5-6. */
START_TEST(priority_displaces_less_important)
{
    scenario s = scenario_base(&policy_priority);
    s.num_blocks = 4;
    s.cfg.max_num_batched_tokens = 64;
    scenario_add(&s, 0, 12, 4)->priority = 1;
    scenario_add(&s, 0, 8, 2)->arrival_ns = 3 * MS / 2;
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:12", "0:1", "1:8 P", "1:1", "0:14", "0:1"};
    scenario_expect(o, want, 6);
    free(o);
    s.policy = &policy_vllm;
    o = scenario_run(&s);
    const char *fcfs[] = {"0:12", "0:1", "0:1", "0:1", "1:8", "1:1"};
    scenario_expect(o, fcfs, 6);
    free(o);
}
END_TEST

/* Priority orders admission: three requests at once with priorities 2, 0, 1 and room for one
 * at a time (max_num_seqs 1): they run 1, 2, 0. Equal priorities keep arrival order. */
START_TEST(priority_orders_waiting_queue)
{
    scenario s = scenario_base(&policy_priority);
    s.cfg.max_num_seqs = 1;
    scenario_add(&s, 0, 4, 1)->priority = 2;
    scenario_add(&s, 0, 4, 1)->priority = 0;
    scenario_add(&s, 0, 4, 1)->priority = 1;
    scenario_add(&s, 0, 4, 1)->priority = 1;
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"1:4", "2:4", "3:4", "0:4"};
    scenario_expect(o, want, 4);
    free(o);
}
END_TEST

/* Swap instead of recompute, in the preemption scenario of test_vllm_policy: B's 2 blocks go
 * to host memory at step 3 and come back, with its computed tokens, once A finishes (step
 * 10): B then computes just its 1 pending token instead of recomputing 6. */
START_TEST(swap_preemption_keeps_computed_tokens)
{
    scenario s = scenario_base(&policy_vllm);
    s.num_blocks = 4;
    s.num_host_blocks = 16;
    s.cfg.preemption_mode = PREEMPT_SWAP;
    s.cfg.long_prefill_token_threshold = 4;
    s.cfg.reserve_full_isl = false;
    scenario_add(&s, 0, 8, 9);
    scenario_add(&s, 0, 4, 10);
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:4 1:4", "0:4 1:1", "0:1 P out=2", "0:1", "0:1", "0:1", "0:1", "0:1", "0:1", "0:1",
                          "1:1 in=2"};
    scenario_expect(o, want, 11);
    ck_assert_int_eq(o->sum.num_preemptions, 1);
    free(o);
    /* too little swap space: falls back to recompute */
    s.num_host_blocks = 1;
    o = scenario_run(&s);
    const char *recompute[] = {"0:4 1:4", "0:4 1:1", "0:1 P", "0:1 1:4"};
    scenario_expect(o, recompute, 4);
    free(o);
}
END_TEST

/* Prefix caching: B shares A's 512-token prefix block (hash 7): with blocks of 4, B's first 8
 * prompt tokens are cached (its last token is always computed), so B computes 2 of 10. */
START_TEST(prefix_caching_skips_cached_tokens)
{
    scenario s = scenario_base(&policy_vllm);
    s.cfg.enable_prefix_caching = true;
    s.cfg.max_num_batched_tokens = 64;
    arrival *a = scenario_add(&s, 0, 10, 2), *b = scenario_add(&s, 5, 10, 2);
    s.hashes[0][0] = s.hashes[1][0] = 7;
    a->hashes = s.hashes[0], b->hashes = s.hashes[1];
    a->num_hashes = b->num_hashes = 1;
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:10", "0:1", "1:2", "1:1"};
    scenario_expect(o, want, 4);
    ck_assert_double_eq_tol(o->sum.prefix_cache_hit_rate, 8.0 / 20, 1e-12);
    free(o);
    s.cfg.enable_prefix_caching = false;
    o = scenario_run(&s);
    ck_assert_str_eq(o->log.lines[2], "1:10");
    ck_assert_double_eq_tol(o->sum.prefix_cache_hit_rate, 0, 1e-12);
    free(o);
}
END_TEST

/* Sarathi: the budget is --chunk-size, and decodes go first. B (prompt 20) is admitted before
 * A (prompt 2); long_prefill_token_threshold 6 leaves room for A in step 1. Step 2: vllm keeps
 * running order (B's chunk, then A's decode); sarathi puts A's decode first. */
START_TEST(sarathi_decodes_first_under_chunk_budget)
{
    scenario s = scenario_base(&policy_sarathi);
    s.cfg.max_num_batched_tokens = 8192;
    scenario_knob(&s, "chunk-size", "8");
    s.cfg.long_prefill_token_threshold = 6;
    scenario_add(&s, 0, 20, 2);
    scenario_add(&s, 0, 2, 4);
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:6 1:2", "1:1 0:6", "1:1 0:6", "1:1 0:2"};
    scenario_expect(o, want, 4);
    free(o);
    s.policy = &policy_vllm;
    s.cfg.max_num_batched_tokens = 8;
    o = scenario_run(&s);
    const char *v1[] = {"0:6 1:2", "0:6 1:1"};
    scenario_expect(o, v1, 2);
    free(o);
}
END_TEST

/* SJF with one slot: outputs 10, 2, 5 arrive together; the oracle order is 1, 2, 0. */
START_TEST(sjf_runs_shortest_predicted_first)
{
    scenario s = scenario_base(&policy_sjf);
    s.cfg.max_num_seqs = 1;
    scenario_add(&s, 0, 4, 10);
    scenario_add(&s, 0, 4, 2);
    scenario_add(&s, 0, 4, 5);
    scenario_outcome *o = scenario_run(&s);
    /* 1 runs 2 steps, 2 runs 5, then 0 */
    ck_assert_str_eq(o->log.lines[0], "1:4");
    ck_assert_str_eq(o->log.lines[2], "2:4");
    ck_assert_str_eq(o->log.lines[7], "0:4");
    free(o);
}
END_TEST

/* SRPT with one slot: A (10 outputs) runs; B (2 outputs) arrives at 2.5 ms. At step 4 A has
 * 7 left > 2: B displaces it. SJF (non-preemptive) lets A finish first. */
START_TEST(srpt_preempts_longer_remaining)
{
    scenario s = scenario_base(&policy_srpt);
    s.cfg.max_num_seqs = 1;
    scenario_add(&s, 0, 4, 10);
    scenario_add(&s, 0, 4, 2)->arrival_ns = 5 * MS / 2;
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:4", "0:1", "0:1", "1:4 P", "1:1", "0:7"};
    scenario_expect(o, want, 6);
    free(o);
    s.policy = &policy_sjf;
    o = scenario_run(&s);
    ck_assert_str_eq(o->log.lines[3], "0:1");
    ck_assert_str_eq(o->log.lines[10], "1:4");
    free(o);
}
END_TEST

/* VTC: client 0 sends 4 requests at 0, client 1 one at 0.5 ms; one slot. After step 1 client
 * 0's counter is 4 + 2 = 6; client 1 arrives backlogged-lifted to 6; step 2 serves client 0
 * (decode, counter 8); at step 3 client 1 (6) goes before client 0 (8). FCFS would run id 1. */
START_TEST(fair_serves_least_served_client)
{
    scenario s = scenario_base(&policy_fair);
    s.cfg.max_num_seqs = 1;
    for (int i = 0; i < 4; i++) scenario_add(&s, 0, 4, 2);
    scenario_add(&s, 0, 4, 2)->client_id = 1;
    s.arrivals[4].arrival_ns = MS / 2;
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:4", "0:1", "4:4"};
    scenario_expect(o, want, 3);
    free(o);
    s.policy = &policy_vllm;
    o = scenario_run(&s);
    ck_assert_str_eq(o->log.lines[2], "1:4");
    free(o);
}
END_TEST

/* vLLM V0: a step is all prefills or all decodes. B arrives at 1.5 ms while A decodes: step 3
 * is B's prefill alone (A pauses); V1 mixes them. Prompts over min(max_model_len, budget)
 * are rejected with a reason. */
START_TEST(vllm_v0_separates_prefill_and_decode_steps)
{
    scenario s = scenario_base(&policy_vllm_v0);
    scenario_add(&s, 0, 4, 3);
    scenario_add(&s, 0, 4, 2)->arrival_ns = 3 * MS / 2;
    scenario_add(&s, 0, 9, 2); /* 9 > budget 8: rejected */
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:4", "0:1", "1:4", "0:1 1:1"};
    scenario_expect(o, want, 4);
    ck_assert_int_eq(o->sum.rejected_by_reason[REJECT_BATCH_TOKENS], 1);
    free(o);
}
END_TEST

/* Static batching: max_num_seqs 2. A (prompt 4, 3 outputs) and B (prompt 2, 1 output) form a
 * batch; C (0.5 ms) waits for the whole batch. Step 1 pads B's prompt to 4 (pad=2); B is
 * done but its slot is padding until A finishes at step 3. */
START_TEST(static_runs_batch_to_completion)
{
    scenario s = scenario_base(&policy_static);
    s.cfg.max_num_seqs = 2;
    scenario_add(&s, 0, 4, 3);
    scenario_add(&s, 0, 2, 1);
    scenario_add(&s, 0, 4, 1)->arrival_ns = MS / 2;
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:4 1:2 pad=2", "0:1 pad=1", "0:1 pad=1", "2:4"};
    scenario_expect(o, want, 4);
    ck_assert_int_eq(o->log.n, 4);
    free(o);
}
END_TEST

/* The context phase holds at most max_num_batched_tokens padded rows a pass: with budget 8 and
 * prompts 4, 2, 3, 1 (padded to 4), two members a pass; generation starts when all four have
 * their first token. */
START_TEST(static_context_phase_respects_budget)
{
    scenario s = scenario_base(&policy_static);
    s.cfg.max_num_seqs = 4;
    scenario_add(&s, 0, 4, 2);
    scenario_add(&s, 0, 2, 2);
    scenario_add(&s, 0, 3, 2);
    scenario_add(&s, 0, 1, 2);
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:4 1:2 pad=2", "2:3 3:1 pad=4", "0:1 1:1 2:1 3:1"};
    scenario_expect(o, want, 3);
    ck_assert_int_eq(o->log.n, 3);
    free(o);
}
END_TEST

/* Orca reserves max_model_len (16 -> 15 slots, 4 blocks) per request: 8 blocks hold two of
 * three tiny requests. With exact reservations (prompt + output - 1 = 3 slots) all three run. */
START_TEST(orca_reservation_limits_batch)
{
    scenario s = scenario_base(&policy_orca);
    s.num_blocks = 8;
    s.cfg.max_model_len = 16;
    for (int i = 0; i < 3; i++) scenario_add(&s, 0, 2, 2);
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:2 1:2", "0:1 1:1", "2:2"};
    scenario_expect(o, want, 3);
    free(o);
    scenario_knob(&s, "orca-reserve", "exact");
    o = scenario_run(&s);
    const char *exact[] = {"0:2 1:2 2:2"};
    scenario_expect(o, exact, 1);
    free(o);
}
END_TEST

/* Scheduling ahead: step 2 is scheduled when step 1 starts (t = 0), so a request arriving
 * during step 1 (at 0.5 ms) first runs in step 3, where the loop that waits for each step runs
 * it in step 2; request 0's steps are the same either way. */
START_TEST(async_scheduling_takes_arrivals_a_step_later)
{
    scenario s = scenario_base(&policy_vllm);
    scenario_add(&s, 0, 4, 4);
    scenario_add(&s, 0, 2, 2)->arrival_ns = MS / 2;
    scenario_outcome *o = scenario_run(&s);
    const char *sync[] = {"0:4", "0:1 1:2", "0:1 1:1", "0:1"};
    scenario_expect(o, sync, 4);
    free(o);
    s.async_scheduling = true;
    o = scenario_run(&s);
    const char *ahead[] = {"0:4", "0:1", "0:1 1:2", "0:1 1:1"};
    scenario_expect(o, ahead, 4);
    ck_assert_int_eq(o->log.n, 4);
    free(o);
}
END_TEST

/* ---- property test ---- */

typedef struct prop_check {
    const policy_ops *policy;
    int steps;
    bool verbose; /* PROP_TRIAL=N prints trial N's steps, to debug a failure */
    char failure[256];
} prop_check;

/* Per step: no scheduled request is strictly less important than a request the priority
 * policy preempted in that step (victims are always the least important). */
static void prop_on_step(void *ud, int64_t step, const batch *b, int64_t start, int64_t dur)
{
    (void)step, (void)start, (void)dur;
    prop_check *pc = ud;
    pc->steps++;
    if (pc->verbose) {
        printf("step %lld t=%.3fms:", (long long)step, start / 1e6);
        for (int32_t i = 0; i < b->num_items; i++)
            printf(" %lld:%d(ctx %d seq %d)", (long long)b->items[i].req->id, b->items[i].num_tokens,
                   b->items[i].context_tokens, request_num_tokens(b->items[i].req));
        printf(" preempted %d\n", b->num_preempted);
    }
    if (pc->policy != &policy_priority || pc->failure[0]) return;
    for (int32_t v = 0; v < b->num_preempted; v++)
        for (int32_t i = 0; i < b->num_items; i++)
            if (b->items[i].req->priority > b->preempted[v]->priority)
                snprintf(pc->failure, sizeof pc->failure,
                         "step %lld: request %lld (priority %d) runs while %lld (priority %d) was preempted",
                         (long long)step, (long long)b->items[i].req->id, b->items[i].req->priority,
                         (long long)b->preempted[v]->id, b->preempted[v]->priority);
}

START_TEST(invariants_hold_across_policies_and_configs)
{
    const policy_ops *all[] = {&policy_vllm, &policy_vllm_v0, &policy_priority, &policy_sarathi, &policy_sjf,
                               &policy_srpt, &policy_fair,    &policy_static,   &policy_orca};
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 2024);
    int64_t total_preemptions = 0, total_swaps = 0;
    for (int trial = 0; trial < 2000; trial++) {
        const policy_ops *pol = all[trial % (int)(sizeof all / sizeof all[0])];
        sched_config cfg = {
            .max_num_seqs = 1 + (int32_t)gsl_rng_uniform_int(rng, 8),
            .max_model_len = 32 + 16 * (int32_t)gsl_rng_uniform_int(rng, 4),
            .block_size = 1 << gsl_rng_uniform_int(rng, 4),
            .enable_chunked_prefill = gsl_rng_uniform(rng) < 0.7,
            .long_prefill_token_threshold = gsl_rng_uniform(rng) < 0.3 ? 1 + (int32_t)gsl_rng_uniform_int(rng, 16) : 0,
            .reserve_full_isl = gsl_rng_uniform(rng) < 0.5,
            .preemption_mode = gsl_rng_uniform(rng) < 0.4 ? PREEMPT_SWAP : PREEMPT_RECOMPUTE,
            .enable_prefix_caching = gsl_rng_uniform(rng) < 0.4,
        };
        /* the policies' own knobs, drawn as the CLI would set them */
        policy_knobs knobs = {0};
        opts_defaults(policy_knob_specs(), &knobs);
        char chunk[16];
        snprintf(chunk, sizeof chunk, "%d", 4 + (int)gsl_rng_uniform_int(rng, 32));
        terr ke;
        ck_assert(opts_set(policy_knob_specs(), &knobs, "chunk-size", chunk, &ke) == 0 &&
                  opts_set(policy_knob_specs(), &knobs, "length-predictor-error",
                           gsl_rng_uniform(rng) < 0.5 ? "0.5" : "0", &ke) == 0 &&
                  opts_set(policy_knob_specs(), &knobs, "orca-reserve", gsl_rng_uniform(rng) < 0.5 ? "exact" : "max",
                           &ke) == 0);
        cfg.max_num_batched_tokens = cfg.max_num_seqs + (int32_t)gsl_rng_uniform_int(rng, 64);
        if (!cfg.enable_chunked_prefill && cfg.max_num_batched_tokens < cfg.max_model_len)
            cfg.max_num_batched_tokens = cfg.max_model_len;
        int32_t min_blocks = (cfg.max_model_len + cfg.block_size - 1) / cfg.block_size;
        serve_config sc = {.sched = cfg, .policy = pol, .policy_knobs = policy_knobs_of(pol, &knobs),
                           .num_gpu_blocks = min_blocks + (int32_t)gsl_rng_uniform_int(rng, (uint32_t)min_blocks * 3),
                           .num_host_blocks = (int32_t)gsl_rng_uniform_int(rng, 64),
                           .seed = (uint64_t)trial, .max_steps = 200000,
                           /* every other round of the policies schedules ahead */
                           .async_scheduling = trial / (int)(sizeof all / sizeof all[0]) % 2};
        int n = 1 + (int)gsl_rng_uniform_int(rng, 40);
        arrival arr[40];
        uint64_t hashes[40][2];
        int64_t t = 0;
        for (int i = 0; i < n; i++) {
            t += (int64_t)(gsl_rng_uniform(rng) * 3 * MS);
            int32_t prompt = 1 + (int32_t)gsl_rng_uniform_int(rng, (uint32_t)cfg.max_model_len + 8);
            arr[i] = (arrival){.arrival_ns = t, .prompt_tokens = prompt,
                               .output_tokens = 1 + (int32_t)gsl_rng_uniform_int(rng, 40),
                               .priority = (int32_t)gsl_rng_uniform_int(rng, 3),
                               .client_id = (int32_t)gsl_rng_uniform_int(rng, 3)};
            if (gsl_rng_uniform(rng) < 0.5) { /* shared prefixes */
                hashes[i][0] = gsl_rng_uniform_int(rng, 2);
                hashes[i][1] = 10 + gsl_rng_uniform_int(rng, 2);
                arr[i].hashes = hashes[i];
                arr[i].num_hashes = 1 + (prompt > 512);
            }
        }
        array_source as;
        linear_exec lx = {.base_ns = MS, .per_token_ns = 1000};
        tclock clock;
        tclock_init_sim(&clock);
        prop_check pc = {.policy = pol, .verbose = getenv("PROP_TRIAL") && atoi(getenv("PROP_TRIAL")) == trial};
        for (int i = 0; pc.verbose && i < n; i++)
            printf("arrival %d t=%.3fms prompt %d output %d prio %d hashes %d\n", i, arr[i].arrival_ns / 1e6,
                   arr[i].prompt_tokens, arr[i].output_tokens, arr[i].priority, arr[i].num_hashes);
        serve_hooks hooks = {.on_step = prop_on_step, .ud = &pc};
        metrics *m;
        metrics_options mo = {0};
        terr e;
        ck_assert(metrics_open(&m, &mo, &e) == 0);
        serve_result res;
        int rc = serve_run(&sc, array_source_make(&as, arr, n), linear_exec_make(&lx), &clock, m, &hooks, &res, &e);
        ck_assert_msg(rc == 0, "trial %d (%s): %s", trial, pol->name, e.msg);
        metrics_summary sum;
        ck_assert(metrics_finish(m, NULL, &sum, &e) == 0);
        metrics_free(m);
        ck_assert_msg(res.num_finished + res.num_rejected == n && sum.num_requests == n,
                      "trial %d (%s): %d requests, %lld finished + %lld rejected", trial, pol->name, n,
                      (long long)res.num_finished, (long long)res.num_rejected);
        ck_assert_msg(res.kv_blocks_leaked == 0, "trial %d (%s): %d blocks leaked", trial, pol->name, res.kv_blocks_leaked);
        ck_assert_msg(sum.rejected_by_reason[REJECT_UNSCHEDULABLE] == 0,
                      "trial %d (%s): %lld requests stranded (unschedulable); seqs %d budget %d len %d bs %d "
                      "blocks %d host %d chunked %d thr %d reserve %d swap %d pc %d chunk %s",
                      trial, pol->name, (long long)sum.rejected_by_reason[REJECT_UNSCHEDULABLE], cfg.max_num_seqs,
                      cfg.max_num_batched_tokens, cfg.max_model_len, cfg.block_size, sc.num_gpu_blocks,
                      sc.num_host_blocks, cfg.enable_chunked_prefill, cfg.long_prefill_token_threshold,
                      cfg.reserve_full_isl, cfg.preemption_mode, cfg.enable_prefix_caching, chunk);
        ck_assert_msg(!pc.failure[0], "trial %d: %s", trial, pc.failure);
        total_preemptions += sum.num_preemptions;
        total_swaps += cfg.preemption_mode == PREEMPT_SWAP ? sum.num_preemptions : 0;
        opts_free(policy_knob_specs(), &knobs);
    }
    /* the random configurations must actually exercise preemption, or the test proves little */
    ck_assert_msg(total_preemptions > 100 && total_swaps > 10, "only %lld preemptions (%lld swaps) in 2000 trials",
                  (long long)total_preemptions, (long long)total_swaps);
    gsl_rng_free(rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("policies");
    TCase *tc = tcase_create("scenarios");
    tcase_add_test(tc, priority_displaces_less_important);
    tcase_add_test(tc, priority_orders_waiting_queue);
    tcase_add_test(tc, swap_preemption_keeps_computed_tokens);
    tcase_add_test(tc, prefix_caching_skips_cached_tokens);
    tcase_add_test(tc, sarathi_decodes_first_under_chunk_budget);
    tcase_add_test(tc, sjf_runs_shortest_predicted_first);
    tcase_add_test(tc, srpt_preempts_longer_remaining);
    tcase_add_test(tc, fair_serves_least_served_client);
    tcase_add_test(tc, vllm_v0_separates_prefill_and_decode_steps);
    tcase_add_test(tc, static_runs_batch_to_completion);
    tcase_add_test(tc, static_context_phase_respects_budget);
    tcase_add_test(tc, orca_reservation_limits_batch);
    tcase_add_test(tc, async_scheduling_takes_arrivals_a_step_later);
    suite_add_tcase(s, tc);
    TCase *tp = tcase_create("properties");
    tcase_add_test(tp, invariants_hold_across_policies_and_configs);
    suite_add_tcase(s, tp);
    return run_suite(s) ? 1 : 0;
}
