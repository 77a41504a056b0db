/*
 * test_timeline.c: `tandem timeline` writes a run as valid trace event JSON (the format Perfetto
 * and chrome://tracing read) that says what the run's CSVs say: a track per request whose phases
 * nest in its span and follow each other, a slice per step with its batch in args, and one
 * preempted span per preemption of the run (preemptions.csv, written by the serving loop).
 * The run is a small simulated one with a KV cache small enough to force preemptions.
 */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char *dir;
static char run[4300], out[4300];
static json_t *summary, *events;

static void setup_run(void)
{
    dir = make_temp_dir("timeline");
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(out, sizeof out, "%s/t.json", dir);
    cli_result r = run_cli("sim", "--trace", "traces/samples/azure_conv_2023.csv", "--max-requests", "300",
                           "--time-scale", "0.2", "--num-gpu-blocks-override", "200", "--scheduling-policy", "priority",
                           "--priority-classes", "0.2,0.8", "--out", run, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "tandem sim: exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    r = run_cli("timeline", run, "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "tandem timeline: exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    summary = load_json(run, "summary.json");
    json_t *doc = load_json(dir, "t.json");
    events = json_incref(json_object_get(doc, "traceEvents"));
    json_decref(doc);
}

static void teardown_run(void)
{
    json_decref(summary);
    json_decref(events);
    free(dir);
}

static long long num(json_t *o, const char *key) { return (long long)json_integer_value(json_object_get(o, key)); }
static const char *str(json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

START_TEST(every_event_has_the_fields_of_its_phase)
{
    ck_assert_msg(json_is_array(events) && json_array_size(events) > 0, "no traceEvents array");
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        const char *ph = str(ev, "ph");
        ck_assert_msg(ph && strchr("XMC", ph[0]) && !ph[1], "event %zu: ph \"%s\" is not X, M or C", i, ph ? ph : "");
        ck_assert_msg(json_is_integer(json_object_get(ev, "pid")) && str(ev, "name"), "event %zu: no pid or name", i);
        if (ph[0] == 'M') ck_assert_msg(json_is_object(json_object_get(ev, "args")), "metadata event %zu: no args", i);
        if (ph[0] != 'X') continue;
        ck_assert_msg(json_is_integer(json_object_get(ev, "tid")), "slice %zu: no tid", i);
        ck_assert_msg(num(ev, "ts") >= 0 && num(ev, "dur") >= 0, "slice %zu (%s): ts %lld, dur %lld", i,
                      str(ev, "name"), num(ev, "ts"), num(ev, "dur"));
    }
}
END_TEST

/* The slices of pid 2 (requests): per request, its outer span and what lies inside it. */
START_TEST(request_phases_nest_in_their_span_and_follow_each_other)
{
    long long requests = json_integer_value(json_object_get(summary, "num_prompts"));
    long long *start = calloc((size_t)requests, sizeof *start), *end = calloc((size_t)requests, sizeof *end);
    long long *q_end = calloc((size_t)requests, sizeof *q_end), *p_start = calloc((size_t)requests, sizeof *p_start);
    long long spans = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        if (strcmp(str(ev, "ph"), "X") || num(ev, "pid") != 2 || strncmp(str(ev, "name"), "request ", 8)) continue;
        long long id = num(ev, "tid");
        ck_assert_msg(id >= 0 && id < requests, "request track %lld: not a request of the run", id);
        start[id] = num(ev, "ts");
        end[id] = start[id] + num(ev, "dur");
        q_end[id] = p_start[id] = -1;
        spans++;
    }
    ck_assert_msg(spans == requests, "%lld request tracks, the run has %lld requests", spans, requests);
    json_array_foreach(events, i, ev) {
        if (strcmp(str(ev, "ph"), "X") || num(ev, "pid") != 2 || !strncmp(str(ev, "name"), "request ", 8)) continue;
        long long id = num(ev, "tid"), ts = num(ev, "ts"), te = ts + num(ev, "dur");
        ck_assert_msg(ts >= start[id] && te <= end[id], "request %lld: %s [%lld, %lld] outside its span [%lld, %lld]",
                      id, str(ev, "name"), ts, te, start[id], end[id]);
        if (!strcmp(str(ev, "name"), "queued")) q_end[id] = te;
        if (!strcmp(str(ev, "name"), "prefill")) p_start[id] = ts;
    }
    for (long long id = 0; id < requests; id++)
        if (p_start[id] >= 0)
            ck_assert_msg(q_end[id] == p_start[id], "request %lld: queued ends at %lld, prefill starts at %lld", id,
                          q_end[id], p_start[id]);
    free(start);
    free(end);
    free(q_end);
    free(p_start);
}
END_TEST

START_TEST(steps_track_has_a_slice_per_step_with_its_batch)
{
    long long steps = 0, tokens = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        if (strcmp(str(ev, "ph"), "X") || num(ev, "pid") != 1) continue;
        json_t *args = json_object_get(ev, "args");
        ck_assert_msg(json_is_integer(json_object_get(args, "batch_size")), "step slice %zu: no batch_size in args", i);
        tokens += num(args, "prefill_tokens") + num(args, "decode_tokens");
        steps++;
    }
    long long want = json_integer_value(json_object_get(summary, "num_steps"));
    ck_assert_msg(steps == want, "%lld step slices, summary.json has num_steps %lld", steps, want);
    ck_assert_msg(tokens > 0, "no tokens in the steps' args");
}
END_TEST

START_TEST(one_preempted_span_per_preemption)
{
    long long spans = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
        if (!strcmp(str(ev, "ph"), "X") && str(ev, "cat") && !strcmp(str(ev, "cat"), "preempted")) spans++;
    long long want = json_integer_value(json_object_get(summary, "num_preemptions"));
    ck_assert_msg(want > 0, "the run has no preemptions: the test needs a smaller KV cache");
    ck_assert_msg(spans == want, "%lld preempted spans, summary.json has num_preemptions %lld", spans, want);
}
END_TEST

START_TEST(a_folder_that_is_not_a_run_is_an_error_naming_it)
{
    char empty[4300];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", empty);
    ck_assert_int_eq(system(cmd), 0);
    cli_result r = run_cli("timeline", empty, NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, empty) && strstr(r.err, "requests.csv"),
                  "timeline on an empty folder: exit %d, \"%s\"", r.exit_code, r.err);
    cli_result_free(&r);
    r = run_cli("timeline", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "missing"), "timeline without a folder: exit %d, \"%s\"",
                  r.exit_code, r.err);
    cli_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("timeline");
    TCase *tc = tcase_create("timeline");
    tcase_add_unchecked_fixture(tc, setup_run, teardown_run);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_event_has_the_fields_of_its_phase);
    tcase_add_test(tc, request_phases_nest_in_their_span_and_follow_each_other);
    tcase_add_test(tc, steps_track_has_a_slice_per_step_with_its_batch);
    tcase_add_test(tc, one_preempted_span_per_preemption);
    tcase_add_test(tc, a_folder_that_is_not_a_run_is_an_error_naming_it);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
