/*
 * test_cli.c: `tandem` as a user runs it: help text, exit codes and messages on bad input,
 * determinism (same inputs and seed, byte-identical outputs), conservation on the bundled
 * Azure chat trace (every request ends finished or rejected, exactly once), and the memory of a
 * command that never opens the CUDA engine.
 */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "testutil.h"

#define CONV "traces/samples/azure_conv_2023.csv"
#define CODE "traces/samples/azure_code_2023.csv"

START_TEST(help_lists_every_option_with_default)
{
    cli_result r = run_cli("--help", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert_msg(strstr(r.out, "sim") && strstr(r.out, "trace"), "tandem --help: %s", r.out);
    cli_result_free(&r);
    r = run_cli("sim", "--help", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    const char *want[] = {"--max-num-seqs N", "[1024]", "--max-num-batched-tokens N", "[8192]", "--block-size N", "[16]",
                          "--gpu-memory-utilization X", "[0.9]", "--num-gpu-blocks-override", "--[no-]enable-chunked-prefill",
                          "--long-prefill-token-threshold", "--[no-]scheduler-reserve-full-isl", "--seed", "--time-scale",
                          "--max-requests", "skip-bad-rows", "--goodput", "[llama-2-7b]", "[h200]", "[vllm]"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(r.out, want[i]), "sim --help lacks \"%s\":\n%s", want[i], r.out);
    cli_result_free(&r);
}
END_TEST

START_TEST(bad_flags_exit_2_naming_the_flag)
{
    struct {
        const char *args[4];
        const char *msg;
    } cases[] = {
        {{"--scheduling-policy", "nope"}, "unknown policy \"nope\"; valid:\n  vllm"},
        {{"--max-num-seqs", "0"}, "--max-num-seqs: 0 is out of range"},
        {{"--max-num-batched-tokens", "12x"}, "--max-num-batched-tokens: \"12x\" is not an integer"},
        {{"--gpu", "tpu"}, "--gpu: unknown GPU \"tpu\""},
        {{"--model", "no-such-model"}, "--model: \"no-such-model\" is neither a shipped model"},
        {{"--gpu-memory-utilization", "1.5"}, "--gpu-memory-utilization"},
        {{"--max-model-len", "9000"}, "greater than the model's max_position_embeddings (4096)"},
        {{"--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048"}, "smaller than --max-model-len"},
        {{"--preemption-mode", "evict"}, "--preemption-mode"},
        {{"--goodput", "ttft:abc"}, "--goodput"},
        {{"--bogus"}, "--bogus: unknown option"},
        {{"--priority-classes", "0.5,0.6"}, "--priority-classes: fractions must sum to 1"},
        {{"--priority-classes", "0.5,x"}, "--priority-classes: \"x\" is not a fraction"},
        {{"--model", "llama-2-13b", "--gpu-memory-utilization", "0.12"}, "raise --gpu-memory-utilization"},
        /* names match exactly: an abbreviation is an unknown option, not the longer flag */
        {{"--max-num-seq", "5"}, "--max-num-seq: unknown option"},
        {{"--max-num-seqs=5", "--enable-chunked"}, "--enable-chunked: unknown option"},
        {{"--no-enable-prefix-caching=yes"}, "--no-enable-prefix-caching: takes no value"},
        /* a policy's own knobs are checked by the policy, named by their flag */
        {{"--chunk-size", "0"}, "--chunk-size: 0 is out of range"},
        {{"--orca-reserve", "some"}, "--orca-reserve: \"some\" is not max or exact"},
        {{"--length-predictor-error", "-1"}, "--length-predictor-error: -1 must be >= 0"},
        /* sizes that would allocate gigabytes of block tables are flag errors, not aborts */
        {{"--num-gpu-blocks-override", "2147483647"}, "--num-gpu-blocks-override: 2147483647 is out of range"},
        {{"--preemption-mode", "swap", "--swap-space", "1e300"}, "--swap-space: 1e+300 GiB is not in"},
        {{"--time-scale", "1e300"}, "--time-scale: 1e+300 is not in (0, 1000]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[12] = {"tandem", "sim", "--trace", CONV};
        int n = 4;
        for (int k = 0; k < 4 && cases[i].args[k]; k++) argv[n++] = (char *)cases[i].args[k];
        argv[n] = NULL;
        cli_result r = run_cliv(argv);
        ck_assert_msg(r.exit_code == 2, "case %zu: exit %d, stderr: %s", i, r.exit_code, r.err);
        ck_assert_msg(strstr(r.err, cases[i].msg), "case %zu: stderr lacks \"%s\":\n%s", i, cases[i].msg, r.err);
        cli_result_free(&r);
    }
    cli_result r = run_cli("sim", NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(strstr(r.err, "--trace is required"), "%s", r.err);
    cli_result_free(&r);
}
END_TEST

/* The binary says what built it: `git describe` of its tree. */
START_TEST(version_names_the_build)
{
    cli_result r = run_cli("--version", NULL);
    ck_assert_msg(r.exit_code == 0 && !strncmp(r.out, "tandem ", 7) && strlen(r.out) > 9, "--version: exit %d, \"%s\"",
                  r.exit_code, r.out);
    cli_result_free(&r);
}
END_TEST

/* One parser serves every command, and none takes a prefix of a flag for the flag. */
START_TEST(every_command_refuses_abbreviated_flags)
{
    struct {
        const char *argv[8];
        const char *msg;
    } cases[] = {
        {{"sim", "--trace", CONV, "--max-num-seq", "5"}, "--max-num-seq: unknown option"},
        {{"run", "--trace", CONV, "--backen", "cpu"}, "--backen: unknown option"},
        {{"sweep", "--job", "2", "x.spec"}, "--job: unknown option"},
        {{"trace", "gen", "--num-request", "5"}, "--num-request: unknown option"},
        {{"trace", "stats", CONV, "--bin-second", "60"}, "--bin-second: unknown option"},
        {{"generate", "--model", "synthetic:tiny-llama2", "--max-token", "3"}, "--max-token: unknown option"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[10] = {"tandem"};
        int n = 1;
        for (int k = 0; k < 8 && cases[i].argv[k]; k++) argv[n++] = (char *)cases[i].argv[k];
        argv[n] = NULL;
        cli_result r = run_cliv(argv);
        ck_assert_msg(r.exit_code == 2, "tandem %s: exit %d, stderr: %s", cases[i].argv[0], r.exit_code, r.err);
        ck_assert_msg(strstr(r.err, cases[i].msg), "tandem %s: stderr lacks \"%s\":\n%s", cases[i].argv[0],
                      cases[i].msg, r.err);
        cli_result_free(&r);
    }
}
END_TEST

/* Exit status of `tandem ARGS` with stdout sent to /dev/full (a disk with no room). */
static int exit_with_full_stdout(const char *args)
{
    const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s > /dev/full 2>/dev/null", bin, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* An output that could not be written is a runtime failure (exit 1), stdout included, and a
 * file output is complete or absent. */
START_TEST(lost_output_is_exit_1_and_leaves_nothing_half_written)
{
    const char *cases[] = {
        "sim --trace " CONV " --max-requests 30",
        "trace gen --num-requests 100",
        "generate --model synthetic:tiny-llama2 --backend cpu --prompt-ids 1,2 --max-tokens 2",
        "trace stats " CONV,
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(exit_with_full_stdout(cases[i]) == 1, "tandem %s > /dev/full: exit %d, want 1", cases[i],
                      exit_with_full_stdout(cases[i]));
    cli_result r = run_cli("generate", "--model", "synthetic:tiny-llama2", "--backend", "cpu", "--prompt-ids", "1,2",
                           "--max-tokens", "2", "--dump-logits", "/dev/full", NULL);
    ck_assert_msg(r.exit_code == 1 && strstr(r.err, "--dump-logits"), "dump to a full disk: exit %d: %s", r.exit_code,
                  r.err);
    cli_result_free(&r);
    char *dir = make_temp_dir("lost"), out[4300], cmd[9000];
    snprintf(out, sizeof out, "%s/missing/t.csv", dir);
    r = run_cli("trace", "gen", "--num-requests", "10", "--out", out, NULL);
    ck_assert_msg(r.exit_code == 1, "trace gen into a missing directory: exit %d: %s", r.exit_code, r.err);
    ck_assert_msg(access(out, F_OK), "trace gen left a file behind");
    cli_result_free(&r);
    /* A disk that fills part way: a file size limit (ulimit -f, SIGXFSZ ignored) fails the
     * writes after the first 8 KiB with EFBIG, as ENOSPC would. */
    const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
    const char *fills[][2] = {
        {"trace gen --num-requests 5000 --out %s/g.csv", "g.csv"},
        {"sim --trace " CONV " --max-requests 300 --quiet --out %s/run", "run"},
        {"generate --model synthetic:tiny-llama2 --backend cpu --prompt-ids 1,2 --max-tokens 8 --dump-logits %s/d.f32",
         "d.f32"},
        {"trace stats " CONV " --bin-seconds 1 --rate-csv %s/rate.csv", "rate.csv"},
    };
    for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++) {
        char args[4500];
        snprintf(args, sizeof args, fills[i][0], dir);
        snprintf(cmd, sizeof cmd, "sh -c \"ulimit -f 8; trap '' XFSZ; exec %s %s\" >/dev/null 2>&1", bin, args);
        int st = system(cmd);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "tandem %s on a disk that fills: status %d, want exit 1",
                      args, st);
        snprintf(cmd, sizeof cmd, "ls %s/%s* 2>/dev/null | grep -q .", dir, fills[i][1]);
        ck_assert_msg(system(cmd) != 0, "tandem %s on a disk that fills left a file behind", args);
    }
    /* --out naming a symbolic link (or a device) is written through, not replaced */
    char target[4400], link[4400];
    snprintf(target, sizeof target, "%s/target.csv", dir);
    snprintf(link, sizeof link, "%s/link.csv", dir);
    ck_assert(symlink(target, link) == 0);
    r = run_cli("trace", "gen", "--num-requests", "10", "--out", link, NULL);
    struct stat lst;
    ck_assert_msg(r.exit_code == 0 && lstat(link, &lst) == 0 && S_ISLNK(lst.st_mode) && access(target, F_OK) == 0,
                  "trace gen --out LINK replaced the link instead of writing its target: %s", r.err);
    cli_result_free(&r);
    free(dir);
}
END_TEST

/* A run into an --out that holds an earlier run either replaces it whole or, when it fails,
 * leaves it as it was: never the old summary.json beside new, cut CSVs. */
START_TEST(a_failed_run_leaves_the_earlier_outputs_whole)
{
    char *dir = make_temp_dir("reuse");
    char *good = write_temp_file(dir, "good.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.1,20,5\n0.2,30,5\n");
    char *bad = write_temp_file(dir, "bad.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.1,-5,3\n");
    char out[4300], path[4400];
    snprintf(out, sizeof out, "%s/out", dir);
    cli_result r = run_cli("sim", "--trace", good, "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    snprintf(path, sizeof path, "%s/requests.csv", out);
    char *before = slurp(path, NULL);
    r = run_cli("sim", "--trace", bad, "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 2, "a bad trace: exit %d", r.exit_code);
    cli_result_free(&r);
    char *after = slurp(path, NULL);
    ck_assert_msg(before && after && !strcmp(before, after), "the failed run changed the earlier requests.csv");
    snprintf(path, sizeof path, "%s/summary.json", out);
    ck_assert_msg(access(path, F_OK) == 0, "the earlier summary.json is gone");
    char cmd[4500];
    snprintf(cmd, sizeof cmd, "ls -d %s/out.* 2>/dev/null | grep -q .", dir);
    ck_assert_msg(system(cmd) != 0, "a temporary folder was left beside --out");
    /* and a run that succeeds replaces the whole folder */
    r = run_cli("sim", "--trace", good, "--max-requests", "1", "--out", out, "--quiet", "--no-steps", NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    snprintf(path, sizeof path, "%s/steps.csv", out);
    ck_assert_msg(access(path, F_OK) != 0, "steps.csv of the earlier run was left beside the new run's files");
    /* while another run writes --out (it holds OUT.lock), a second is refused */
    snprintf(path, sizeof path, "%s.lock", out);
    int fd = open(path, O_CREAT | O_RDWR, 0644);
    ck_assert(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
    r = run_cli("sim", "--trace", good, "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 1 && strstr(r.err, "another run is writing it"), "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    close(fd);
    r = run_cli("sim", "--trace", good, "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "after the lock is released: %s", r.err);
    ck_assert_msg(access(path, F_OK) != 0, "the run left its lock file behind");
    cli_result_free(&r);
    free(before), free(after), free(good), free(bad), free(dir);
}
END_TEST

/* A request whose output is cut at max_model_len says what it asked, and is counted. */
START_TEST(outputs_cut_at_max_model_len_are_recorded_and_counted)
{
    char *dir = make_temp_dir("cut");
    char *trace = write_temp_file(dir, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,50\n0,10,20\n");
    char out[4300], path[4400];
    snprintf(out, sizeof out, "%s/o", dir);
    cli_result r = run_cli("sim", "--trace", trace, "--max-model-len", "120", "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    snprintf(path, sizeof path, "%s/summary.json", out);
    char *js = slurp(path, NULL);
    ck_assert_msg(js && strstr(js, "\"num_truncated\": 1"), "summary.json does not count the cut request:\n%.400s", js);
    snprintf(path, sizeof path, "%s/requests.csv", out);
    char *csv = slurp(path, NULL);
    ck_assert_msg(csv && strstr(csv, ",output_tokens_asked\n"), "requests.csv has no output_tokens_asked column");
    ck_assert_msg(strstr(csv, ",100,20,") && strstr(csv, ",50\n"), "the cut request does not show 20 of 50:\n%s", csv);
    free(js), free(csv), free(trace), free(dir);
}
END_TEST

START_TEST(bad_trace_row_is_file_line_error_or_skipped_and_counted)
{
    char *dir = make_temp_dir("cli");
    char *trace = write_temp_file(dir, "bad.csv", "arrival_s,prompt_tokens,output_tokens\n0.1,10,5\n0.2,abc,5\n0.3,10,5\n");
    cli_result r = run_cli("sim", "--trace", trace, NULL);
    ck_assert_int_eq(r.exit_code, 2);
    char want[4200];
    snprintf(want, sizeof want, "%s:3:", trace);
    ck_assert_msg(strstr(r.err, want), "stderr lacks \"%s\": %s", want, r.err);
    cli_result_free(&r);
    char out[4200];
    snprintf(out, sizeof out, "%s/out", dir);
    r = run_cli("sim", "--trace", trace, "--skip-bad-rows", "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    char path[4300];
    snprintf(path, sizeof path, "%s/summary.json", out);
    char *s = slurp(path, NULL);
    ck_assert_msg(s && strstr(s, "\"num_bad_rows_skipped\": 1") && strstr(s, "\"completed\": 2"), "%s", s);
    free(s);
    free(trace);
    free(dir);
}
END_TEST

static void run_to(const char *out, const char *seed)
{
    cli_result r = run_cli("sim", "--trace", CODE, "--max-requests", "3000", "--scheduling-policy", "srpt",
                           "--length-predictor-error", "0.5", "--seed", seed, "--num-gpu-blocks-override", "3000",
                           "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
}

/* Drops the line naming the output directory (it differs between runs by design). */
static void drop_out_line(char *s, size_t *len)
{
    char *p = strstr(s, "\"out\": ");
    if (!p) return;
    while (p > s && p[-1] != '\n') p--;
    char *q = strchr(p, '\n');
    q = q ? q + 1 : s + *len;
    memmove(p, q, (size_t)(s + *len - q) + 1);
    *len -= (size_t)(q - p);
}

/* Drops summary.json's "tandem" block: when, where and by which command it ran. */
static void drop_tandem_block(char *s, size_t *len)
{
    char *p = strstr(s, "\n  \"tandem\": {");
    if (!p) return;
    char *q = strstr(p, "\n  }");
    if (!q) return;
    q += 4;
    if (*q == ',') q++;
    memmove(p, q, (size_t)(s + *len - q) + 1);
    *len -= (size_t)(q - p);
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    if (x && y) {
        drop_out_line(x, &la);
        drop_out_line(y, &lb);
        drop_tandem_block(x, &la);
        drop_tandem_block(y, &lb);
    }
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

/* Same inputs and seed: byte-identical outputs (but summary.json's record of when and where it
 * ran). A different seed changes the predictor's draws. */
START_TEST(same_seed_gives_byte_identical_outputs)
{
    char *dir = make_temp_dir("det");
    char a[4200], b[4200], c[4200];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(c, sizeof c, "%s/c", dir);
    run_to(a, "7");
    run_to(b, "7");
    run_to(c, "8");
    const char *files[] = {"requests.csv", "steps.csv", "summary.json"};
    for (int i = 0; i < 3; i++) {
        char pa[4300], pb[4300];
        snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
        ck_assert_msg(same_file(pa, pb), "%s differs between two runs with seed 7", files[i]);
    }
    char pa[4300], pc[4300];
    snprintf(pa, sizeof pa, "%s/requests.csv", a);
    snprintf(pc, sizeof pc, "%s/requests.csv", c);
    ck_assert_msg(!same_file(pa, pc), "seeds 7 and 8 gave the same schedule: the seed is not used");
    free(dir);
}
END_TEST

/* Every request of the Azure chat trace ends exactly once, finished or rejected with a reason. */
START_TEST(every_request_ends_exactly_once)
{
    char *dir = make_temp_dir("cons");
    cli_result r = run_cli("sim", "--trace", CONV, "--out", dir, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    char path[4200];
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    enum { N = 19366 };
    char *seen = calloc(N, 1);
    char line[1024];
    int rows = 0, finished = 0, rejected = 0;
    ck_assert(fgets(line, sizeof line, f)); /* header */
    while (fgets(line, sizeof line, f)) {
        long id = strtol(line, NULL, 10);
        ck_assert_msg(id >= 0 && id < N, "bad id in row: %s", line);
        ck_assert_msg(!seen[id], "request %ld has two rows", id);
        seen[id] = 1;
        rows++;
        if (strstr(line, ",finished,")) finished++;
        else if (strstr(line, ",rejected,prompt_too_long,") || strstr(line, ",rejected,kv_capacity,")) rejected++;
        else ck_abort_msg("row neither finished nor rejected with a reason: %s", line);
    }
    fclose(f);
    ck_assert_int_eq(rows, N);
    ck_assert_int_eq(finished + rejected, N);
    /* Llama-2-7B's context is 4096 tokens: the trace's longer prompts are rejected, with reason */
    ck_assert_msg(rejected > 0 && rejected < N / 10, "rejected %d", rejected);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    char *s = slurp(path, NULL);
    char want[64];
    snprintf(want, sizeof want, "\"completed\": %d", finished);
    ck_assert_msg(strstr(s, want), "summary lacks %s", want);
    free(s);
    free(seen);
    free(dir);
}
END_TEST

START_TEST(time_scale_compresses_arrivals)
{
    char *dir = make_temp_dir("ts");
    cli_result r = run_cli("sim", "--trace", CONV, "--max-requests", "200", "--time-scale", "0.5", "--out", dir,
                           "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    char path[4200];
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    char *s = slurp(path, NULL);
    /* request 1 of the trace arrives 4.3145790 s after request 0; halved: 2.1572895 s */
    ck_assert_msg(strstr(s, "\n1,2.157290,") || strstr(s, "\n1,2.157289,"), "request 1 not at 2.15729 s:\n%.400s", s);
    free(s);
    free(dir);
}
END_TEST

/* --request-rate inf replays every request at t = 0, and summary.json records the rate as "inf". */
START_TEST(request_rate_inf_puts_every_arrival_at_zero)
{
    char *dir = make_temp_dir("rinf");
    cli_result r = run_cli("sim", "--trace", CONV, "--max-requests", "50", "--request-rate", "inf", "--out", dir,
                           "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    char path[4200];
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    char *s = slurp(path, NULL);
    ck_assert_msg(strstr(s, "\n49,0.000000,"), "request 49 does not arrive at 0:\n%.400s", s);
    free(s);
    json_t *js = load_json(dir, "summary.json");
    const char *rate = json_string_value(json_object_get(json_object_get(js, "config"), "request-rate"));
    ck_assert_msg(rate && !strcmp(rate, "inf"), "config.request-rate is not \"inf\"");
    json_decref(js);
    r = run_cli("sim", "--trace", CONV, "--request-rate", "nan", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--request-rate: \"nan\" is not a number or inf"), "%s", r.err);
    cli_result_free(&r);
    free(dir);
}
END_TEST

/* run's sampling flags are checked before the engine opens, and named. */
START_TEST(run_sampling_flags_are_flag_errors)
{
    struct {
        const char *flag, *value, *msg;
    } cases[] = {
        {"--temperature", "1e39", "--temperature: 1e+39 must be a finite number >= 0"},
        {"--temperature", "-0.5", "--temperature: -0.5 must be a finite number >= 0"},
        {"--top-p", "0", "--top-p: 0 is not in (0, 1]"},
        {"--top-p", "1.5", "--top-p: 1.5 is not in (0, 1]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_result r = run_cli("run", "--trace", CONV, "--model", "synthetic:tiny-llama2", "--backend", "cpu",
                               cases[i].flag, cases[i].value, NULL);
        ck_assert_msg(r.exit_code == 2 && strstr(r.err, cases[i].msg), "case %zu: exit %d, stderr: %s", i,
                      r.exit_code, r.err);
        cli_result_free(&r);
    }
}
END_TEST

/* --priority-classes draws a class per request on replay, in about the given fractions. */
START_TEST(priority_classes_assigned_on_replay)
{
    char *dir = make_temp_dir("prio");
    cli_result r = run_cli("sim", "--trace", CODE, "--priority-classes", "0.25,0.75", "--scheduling-policy", "priority",
                           "--out", dir, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    char path[4200];
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0, high = 0;
    ck_assert(fgets(line, sizeof line, f));
    while (fgets(line, sizeof line, f)) {
        char *c = line;
        for (int k = 0; k < 14; k++) c = strchr(c, ',') + 1; /* the priority column */
        n++;
        high += *c == '0';
    }
    fclose(f);
    ck_assert_int_eq(n, 8819);
    ck_assert_msg(high > 0.22 * n && high < 0.28 * n, "%d of %d requests in class 0, expected ~25%%", high, n);
    free(dir);
}
END_TEST

/* sim names what it runs, warns once about an option that cannot change the result, and
 * records both, with what built and ran it, in summary.json. */
START_TEST(sim_header_warnings_and_provenance)
{
    char *dir = make_temp_dir("simhdr");
    char out[4200];
    snprintf(out, sizeof out, "%s/o", dir);
    cli_result r = run_cli("sim", "--trace", CODE, "--max-requests", "200", "--scheduling-policy", "fair",
                           "--chunk-size", "256", "--goodput", "ttft:500", "--out", out, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "llama-2-7b on h200, policy fair, trace " CODE ", first 200 requests"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "Request goodput (req/s):"), "no goodput line:\n%s", r.out);
    ck_assert_msg(strstr(r.err, "warning: --scheduling-policy fair: the trace has no client column"), "%s", r.err);
    ck_assert_msg(strstr(r.err, "warning: --chunk-size is a knob of another policy"), "%s", r.err);
    cli_result_free(&r);
    json_t *js = load_json(out, "summary.json");
    json_t *t = json_object_get(js, "tandem");
    ck_assert_msg(t && json_string_value(json_object_get(t, "version")) && json_string_value(json_object_get(t, "build_id")) &&
                      json_string_value(json_object_get(t, "host")),
                  "summary.json has no tandem block");
    const char *date = json_string_value(json_object_get(t, "date"));
    ck_assert_msg(date && strlen(date) == 15 && date[8] == '-', "date \"%s\" is not %%Y%%m%%d-%%H%%M%%S", date ? date : "");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(t, "command"), 1)), "sim");
    ck_assert_int_eq(json_array_size(json_object_get(js, "warnings")), 2);
    json_decref(js);
    /* fair over named clients and a lengths file re-timed: no warning; the file needs the rate */
    char *trace = write_temp_file(dir, "named.csv", "arrival_s,prompt_tokens,output_tokens,client\n0,100,10,alice\n0.1,100,10,bob\n");
    r = run_cli("sim", "--trace", trace, "--scheduling-policy", "fair", "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0 && !strstr(r.err, "warning"), "%s", r.err);
    cli_result_free(&r);
    js = load_json(out, "summary.json");
    json_t *names = json_object_get(json_object_get(json_object_get(js, "config"), "resolved"), "client_names");
    ck_assert_msg(json_array_size(names) == 2 && !strcmp(json_string_value(json_array_get(names, 1)), "bob"),
                  "summary.json does not name the clients by id");
    json_decref(js);
    r = run_cli("sim", "--trace", "traces/samples/sharegpt_lengths_5k.csv", "--quiet", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--request-rate"), "%s", r.err);
    cli_result_free(&r);
    r = run_cli("sim", "--trace", "traces/samples/sharegpt_lengths_5k.csv", "--request-rate", "2", "--max-requests", "300",
                "--seed", "1", NULL);
    ck_assert_msg(r.exit_code == 0 && !strstr(r.err, "warning") && strstr(r.out, "re-timed at 2 req/s (Poisson)"), "%s%s",
                  r.out, r.err);
    cli_result_free(&r);
    r = run_cli("sim", "--trace", CODE, "--burstiness", "0.5", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--burstiness 0.5"), "%s", r.err);
    cli_result_free(&r);
    free(trace);
    free(dir);
}
END_TEST

/* Peak RSS in KB of tandem run with argv (stdout and stderr dropped); fails unless it exits 0. */
static long peak_rss_kb(char *const argv[])
{
    const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork failed");
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execv(bin, argv);
        _exit(127);
    }
    int status;
    struct rusage ru;
    ck_assert_msg(wait4(pid, &status, 0, &ru) == pid, "wait4 failed");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s %s did not exit 0 (status 0x%x)", bin, argv[1],
                  status);
    return ru.ru_maxrss; /* KB on Linux */
}

/* cuBLAS and CUPTI are loaded only when the CUDA engine opens (engine/cuda_libs.h). Linked, cuBLAS
 * alone took every command to ~220 MB at start; these take 5 MB (--help) and 9 MB (sim), 11 and
 * 20 MB under the sanitizers. */
START_TEST(commands_without_the_cuda_engine_do_not_map_cublas)
{
    const long bound_kb = 100 * 1024;
    char *dir = make_temp_dir("rss");
    char out[4200];
    snprintf(out, sizeof out, "%s/sim", dir);
    char *help[] = {"tandem", "--help", NULL};
    char *sim[] = {"tandem", "sim", "--trace", CONV, "--max-requests", "2000", "--out", out, "--quiet", NULL};
    long help_kb = peak_rss_kb(help), sim_kb = peak_rss_kb(sim);
    ck_assert_msg(help_kb < bound_kb, "tandem --help peaked at %ld KB (bound %ld): is a CUDA library linked?",
                  help_kb, bound_kb);
    ck_assert_msg(sim_kb < bound_kb, "tandem sim peaked at %ld KB (bound %ld): is a CUDA library linked?", sim_kb,
                  bound_kb);
    rm_tree(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, help_lists_every_option_with_default);
    tcase_add_test(tc, sim_header_warnings_and_provenance);
    tcase_add_test(tc, bad_flags_exit_2_naming_the_flag);
    tcase_add_test(tc, every_command_refuses_abbreviated_flags);
    tcase_add_test(tc, version_names_the_build);
    tcase_add_test(tc, lost_output_is_exit_1_and_leaves_nothing_half_written);
    tcase_add_test(tc, outputs_cut_at_max_model_len_are_recorded_and_counted);
    tcase_add_test(tc, a_failed_run_leaves_the_earlier_outputs_whole);
    tcase_add_test(tc, bad_trace_row_is_file_line_error_or_skipped_and_counted);
    tcase_add_test(tc, same_seed_gives_byte_identical_outputs);
    tcase_add_test(tc, every_request_ends_exactly_once);
    tcase_add_test(tc, time_scale_compresses_arrivals);
    tcase_add_test(tc, request_rate_inf_puts_every_arrival_at_zero);
    tcase_add_test(tc, run_sampling_flags_are_flag_errors);
    tcase_add_test(tc, priority_classes_assigned_on_replay);
    tcase_add_test(tc, commands_without_the_cuda_engine_do_not_map_cublas);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
