/*
 * test_vllm_policy.c: each rule of the `vllm` policy in a small scenario whose batches were
 * worked out by hand (the derivation is in the comment above each test).
 *
 * Steps are written "id:tokens" in batch order, with " P" for each preemption in the step.
 * The executor costs 1 ms per step, so a request arriving at t ms is seen by step t+1.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/serve.h"
#include "policies/policies.h"
#include "testutil.h"

static scenario base(void) { return scenario_base(&policy_vllm); }

/* Budget 8, one prompt of 20: chunks 8, 8, 4 (the last one samples), then one token a step. */
START_TEST(chunked_prefill_cuts_prompt_to_budget)
{
    scenario s = base();
    scenario_add(&s, 0, 20, 3);
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:8", "0:8", "0:4", "0:1", "0:1"};
    scenario_expect(o, want, 5);
    ck_assert_int_eq(o->log.n, 5);
    free(o);
}
END_TEST

/* Budget 8; A (prompt 6) and B (prompt 6) arrive together. Step 1: A takes 6, B gets the
 * remaining 2 (chunked). Step 2: running first: A decodes 1, B finishes its prompt with 4. */
START_TEST(admission_chunks_into_remaining_budget)
{
    scenario s = base();
    scenario_add(&s, 0, 6, 2);
    scenario_add(&s, 0, 6, 2);
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:6 1:2", "0:1 1:4", "1:1"};
    scenario_expect(o, want, 3);
    free(o);
}
END_TEST

/* Budget 3 with four decoding requests: the budget runs out after three; the fourth is not
 * scheduled until one finishes (running requests are served in order, never skipped ahead). */
START_TEST(budget_exhaustion_stops_running_pass)
{
    scenario s = base();
    s.cfg.max_num_batched_tokens = 3;
    for (int i = 0; i < 4; i++) scenario_add(&s, 0, 1, 3);
    scenario_outcome *o = scenario_run(&s);
    /* step 1 admits three one-token prompts; step 2 decodes them; step 3 too, finishing all
     * three (3 outputs each); step 4 finally admits the fourth */
    const char *want[] = {"0:1 1:1 2:1", "0:1 1:1 2:1", "0:1 1:1 2:1", "3:1", "3:1", "3:1"};
    scenario_expect(o, want, 6);
    free(o);
}
END_TEST

/* max_num_seqs 2: three prompts arrive; only two run until one finishes. */
START_TEST(max_num_seqs_caps_running)
{
    scenario s = base();
    s.cfg.max_num_seqs = 2;
    scenario_add(&s, 0, 2, 2);
    scenario_add(&s, 0, 2, 3);
    scenario_add(&s, 0, 2, 1);
    scenario_outcome *o = scenario_run(&s);
    /* step 1: 0 and 1 admitted (2 running = cap); step 2: both decode, 0 finishes (2 outputs);
     * step 3: 1 decodes (its last), then 2 is admitted */
    const char *want[] = {"0:2 1:2", "0:1 1:1", "1:1 2:2"};
    scenario_expect(o, want, 3);
    ck_assert_int_eq(o->log.n, 3);
    free(o);
}
END_TEST

/* Chunked prefill off: a prompt that does not fit the remaining budget stops admission, even
 * if a later, smaller one would fit (head-of-line). Budget 16 = max_model_len. */
START_TEST(no_chunking_prompt_over_budget_stops_admission)
{
    scenario s = base();
    s.cfg.enable_chunked_prefill = false;
    s.cfg.max_num_batched_tokens = 16;
    s.cfg.max_model_len = 16;
    scenario_add(&s, 0, 10, 2);
    scenario_add(&s, 0, 10, 2);
    scenario_add(&s, 0, 2, 2);
    scenario_outcome *o = scenario_run(&s);
    /* step 1: A 10, B needs 10 > 6 left: stop (C waits behind B); step 2: A decodes 1 (its
     * last), B 10 fits in 15, C 2 fits in 5; step 3: B and C decode their last tokens */
    const char *want[] = {"0:10", "0:1 1:10 2:2", "1:1 2:1"};
    scenario_expect(o, want, 3);
    free(o);
}
END_TEST

/* Preemption. 4 blocks of 4 slots, budget 8, long_prefill_token_threshold 4, reserve off.
 * A (prompt 8, 9 outputs: at most 16 slots) and B (prompt 4, 10 outputs) arrive together.
 *   1: A 4 (1 block), B 4 (1 block; samples)                          free 2
 *   2: A 4 (2 blocks; samples), B 1 (5 slots: 2 blocks)               free 0
 *   3: A needs a 3rd block: preempt the tail, B (frees 2), A takes 1;  free 1
 *      B goes to the front of the waiting queue, computed = 0. B's chunk (4 tokens, 1 block)
 *      would fit, but nothing is admitted in a step that preempted.
 *   4: A 1; B readmitted with 4 (its sequence is now 6: prompt + 2 outputs)   free 0
 *   5: A 1 (10 slots, still 3 blocks); B needs 2 more tokens = a 2nd block: free 0, the tail is
 *      B itself: B preempts itself and the running pass stops.                  */
START_TEST(preempts_tail_requeues_front_and_skips_admission)
{
    scenario s = base();
    s.num_blocks = 4;
    s.cfg.long_prefill_token_threshold = 4;
    s.cfg.reserve_full_isl = false;
    scenario_add(&s, 0, 8, 9);
    scenario_add(&s, 0, 4, 10);
    scenario_outcome *o = scenario_run(&s);
    const char *want[] = {"0:4 1:4", "0:4 1:1", "0:1 P", "0:1 1:4", "0:1 P"};
    scenario_expect(o, want, 5);
    ck_assert_msg(o->sum.num_preemptions >= 2, "expected B preempted at least twice, got %lld",
                  (long long)o->sum.num_preemptions);
    ck_assert_int_eq(o->res.num_finished, 2);
    free(o);
}
END_TEST

/* reserve_full_isl: 5 blocks of 4, budget 8. A and B (prompts 12) arrive together.
 * Step 1: A is admitted (its 3 blocks are free) with a chunk of 8 (2 blocks); budget gone.
 * Step 2: A's last 4 (3 blocks in all; free 2). B's chunk of 4 needs 1 block, but its whole
 * prompt needs 3 > 2 free: with reservation B waits; without, it is admitted. */
START_TEST(reserve_full_isl_gates_admission_on_whole_prompt)
{
    scenario s = base();
    s.num_blocks = 5;
    scenario_add(&s, 0, 12, 2);
    scenario_add(&s, 0, 12, 2);
    scenario_outcome *on = scenario_run(&s);
    const char *want_on[] = {"0:8", "0:4"};
    scenario_expect(on, want_on, 2);
    s.cfg.reserve_full_isl = false;
    scenario_outcome *off = scenario_run(&s);
    const char *want_off[] = {"0:8", "0:4 1:4"};
    scenario_expect(off, want_off, 2);
    free(on);
    free(off);
}
END_TEST

/* A prompt that leaves no room for an output under max_model_len is rejected on arrival with
 * a reason; one just under the limit runs and stops at max_model_len. */
START_TEST(over_long_prompt_rejected_on_arrival)
{
    scenario s = base();
    s.cfg.max_model_len = 32;
    scenario_add(&s, 0, 32, 5);  /* rejected: prompt_too_long */
    scenario_add(&s, 0, 40, 5);  /* rejected */
    scenario_add(&s, 0, 31, 5);  /* runs: 31 + 1 output = max_model_len */
    scenario_outcome *o = scenario_run(&s);
    ck_assert_int_eq(o->res.num_rejected, 2);
    ck_assert_int_eq(o->sum.rejected_by_reason[REJECT_PROMPT_TOO_LONG], 2);
    ck_assert_int_eq(o->res.num_finished, 1);
    ck_assert_int_eq(o->sum.total_output_tokens, 1);
    free(o);
}
END_TEST

/* 2 blocks of 4 = 8 slots. A request's peak KV is prompt + output - 1 slots: 5 + 4 - 1 = 8
 * fits; 6 + 4 - 1 = 9 can never fit and is rejected on arrival instead of waiting forever. */
START_TEST(request_larger_than_cache_rejected)
{
    scenario s = base();
    s.num_blocks = 2;
    scenario_add(&s, 0, 6, 4);
    scenario_add(&s, 0, 5, 4);
    scenario_outcome *o = scenario_run(&s);
    ck_assert_int_eq(o->sum.rejected_by_reason[REJECT_KV_CAPACITY], 1);
    ck_assert_int_eq(o->res.num_finished, 1);
    ck_assert_int_eq(o->sum.total_output_tokens, 4);
    free(o);
}
END_TEST

/* An idle server jumps to the next arrival: a request at t=100 ms starts at 100 ms. */
START_TEST(idle_clock_jumps_to_next_arrival)
{
    scenario s = base();
    scenario_add(&s, 100, 4, 2);
    scenario_outcome *o = scenario_run(&s);
    /* 2 steps of 1 ms: TTFT = 1 ms, E2E = 2 ms, duration 2 ms from first arrival */
    ck_assert_double_eq_tol(o->sum.ttft.mean, 1.0, 1e-9);
    ck_assert_double_eq_tol(o->sum.e2el.mean, 2.0, 1e-9);
    ck_assert_double_eq_tol(o->sum.duration_s, 0.002, 1e-12);
    free(o);
}
END_TEST

/* The same loop on the wall clock (what the real engine uses): steps take real time (this
 * executor sleeps 2 ms a step) and an idle server sleeps until the next arrival, at 30 ms. */
static int sleepy_execute(void *self, const batch *b, step_result *out, terr *e)
{
    (void)self, (void)b, (void)e;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    nanosleep(&(struct timespec){0, 2 * MS}, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->duration_ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    out->sampled = NULL;
    return 0;
}

START_TEST(wall_clock_runs_in_real_time)
{
    static const executor_ops sleepy = {.name = "sleepy", .execute = sleepy_execute};
    scenario s = base();
    scenario_add(&s, 0, 4, 2);
    scenario_add(&s, 30, 4, 2);
    serve_config sc = {.sched = s.cfg, .policy = &policy_vllm, .num_gpu_blocks = 64};
    array_source as;
    tclock clock;
    tclock_init_wall(&clock);
    metrics *m;
    metrics_options mo = {0};
    terr e;
    ck_assert(metrics_open(&m, &mo, &e) == 0);
    serve_result res;
    ck_assert(serve_run(&sc, array_source_make(&as, s.arrivals, s.n), (executor){&sleepy, NULL}, &clock, m, NULL,
                        &res, &e) == 0);
    metrics_summary sum;
    ck_assert(metrics_finish(m, NULL, &sum, &e) == 0);
    metrics_free(m);
    ck_assert_int_eq(res.num_finished, 2);
    /* 30 ms of idle plus two 2 ms steps for the second request, on the wall */
    ck_assert_msg(res.end_ns >= 34 * MS && res.end_ns < 200 * MS, "ended at %.1f ms", res.end_ns / 1e6);
    ck_assert_msg(sum.ttft.mean >= 2.0 && sum.ttft.mean < 50, "TTFT %.2f ms", sum.ttft.mean);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vllm_policy");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, chunked_prefill_cuts_prompt_to_budget);
    tcase_add_test(tc, admission_chunks_into_remaining_budget);
    tcase_add_test(tc, budget_exhaustion_stops_running_pass);
    tcase_add_test(tc, max_num_seqs_caps_running);
    tcase_add_test(tc, no_chunking_prompt_over_budget_stops_admission);
    tcase_add_test(tc, preempts_tail_requeues_front_and_skips_admission);
    tcase_add_test(tc, reserve_full_isl_gates_admission_on_whole_prompt);
    tcase_add_test(tc, over_long_prompt_rejected_on_arrival);
    tcase_add_test(tc, request_larger_than_cache_rejected);
    tcase_add_test(tc, idle_clock_jumps_to_next_arrival);
    tcase_add_test(tc, wall_clock_runs_in_real_time);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
