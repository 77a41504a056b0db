/*
 * test_sweep.c: the sweep spec parser (good and bad specs), the results table against a
 * direct `tandem sim` run, resumption after a kill, -j independence, and a 2-rank MPI sweep
 * when mpirun is present.
 */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "cli/sweep.h"
#include "testutil.h"

START_TEST(spec_parses_lists_ranges_quotes_comments)
{
    sweep_spec s;
    terr e;
    const char *text = "# a sweep\n"
                       "trace = traces/samples/azure_code_2023.csv   # the bursty one\n"
                       "\n"
                       "scheduling-policy = vllm, priority\n"
                       "--max-num-seqs= 8..32:8\n"
                       "goodput = \"ttft:500 tpot:50\", \"ttft:1000,tpot:100\"\n";
    ck_assert_msg(sweep_spec_parse(&s, text, "spec", &e) == 0, "%s", e.msg);
    ck_assert_int_eq(s.num_params, 4);
    ck_assert_str_eq(s.params[2].name, "max-num-seqs");
    ck_assert_int_eq(s.params[2].num_values, 4); /* 8 16 24 32 */
    ck_assert_str_eq(s.params[2].values[3], "32");
    ck_assert_str_eq(s.params[3].values[1], "ttft:1000,tpot:100");
    ck_assert_int_eq(s.num_points, 1 * 2 * 4 * 2);
    /* last parameter fastest */
    const char *v[4];
    sweep_point_values(&s, 1, v);
    ck_assert_str_eq(v[1], "vllm");
    ck_assert_str_eq(v[2], "8");
    ck_assert_str_eq(v[3], "ttft:1000,tpot:100");
    sweep_point_values(&s, 15, v);
    ck_assert_str_eq(v[1], "priority");
    ck_assert_str_eq(v[2], "32");
    /* ids do not depend on the order of the lines */
    char id1[17], id2[17];
    sweep_point_id(&s, 5, id1);
    sweep_point_values(&s, 5, v);
    sweep_spec t;
    char text2[1024];
    snprintf(text2, sizeof text2, "goodput = \"%s\"\nmax-num-seqs = %s\nscheduling-policy = %s\ntrace = %s\n", v[3], v[2],
             v[1], v[0]);
    ck_assert_msg(sweep_spec_parse(&t, text2, "spec2", &e) == 0, "%s", e.msg);
    sweep_point_id(&t, 0, id2);
    ck_assert_str_eq(id1, id2);
    sweep_spec_free(&t);
    sweep_spec_free(&s);
}
END_TEST

START_TEST(bad_specs_name_file_and_line)
{
    struct {
        const char *text, *want;
    } cases[] = {
        {"trace = x\nmax-num-sequences = 4\n", "spec:2: unknown option \"max-num-sequences\""},
        {"trace = x\nmax-num-seqs 4\n", "spec:2: expected \"option = value"},
        {"trace = x\nmax-num-seqs = 4, abc\n", "spec:2: --max-num-seqs: \"abc\" is not an integer"},
        {"trace = x\nseed = 1\nseed = 2\n", "spec:3: \"seed\" is already set at line 2"},
        {"trace = x\nseed = 1,,2\n", "spec:2: empty value"},
        {"trace = x\nout = here\n", "spec:2: \"out\" is set by the sweep"},
        {"trace = x\ngoodput = \"ttft:5\n", "spec:2: unterminated quote"},
        {"trace = x\nseed = 5..1\n", "spec:2: range \"5..1\""},
        /* huge ranges are refused before anything is allocated, overflow included */
        {"trace = x\nseed = 0..9223372036854775807:3\n", "spec:2: range"},
        {"trace = x\nseed = -9223372036854775808..9223372036854775807\n", "gives 1.845e+19 values"},
        {"trace = x\nseed = 0..60000, 0..60000\n", "spec:2: range \"0..60000\" gives 6e+04 values; a spec lists at most 100000 in all"},
        /* the cap counts every option's values, not one range's or one line's */
        {"trace = x\nseed = 0..60000\nmax-num-seqs = 1..60000\n", "spec:3: range \"1..60000\""},
        {"seed = 1\n", "spec: no `trace = FILE` line"},
        {"# only a comment\n\n", "spec: no options"},
        {"trace = x\r\n", "spec:1: CRLF"},
        {"trace = x\nenable-prefix-caching = maybe\n", "spec:2: --enable-prefix-caching: \"maybe\" is not true or false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sweep_spec s;
        terr e = {{0}};
        ck_assert_msg(sweep_spec_parse(&s, cases[i].text, "spec", &e) != 0, "case %zu parsed", i);
        ck_assert_msg(strstr(e.msg, cases[i].want), "case %zu: \"%s\" lacks \"%s\"", i, e.msg, cases[i].want);
    }
}
END_TEST

static char *spec_file(const char *dir, const char *body)
{
    return write_temp_file(dir, "spec.txt", body);
}

/* A value that cannot run (an unknown policy) fails before anything runs, naming the point. */
START_TEST(bad_point_fails_before_running)
{
    char *dir = make_temp_dir("sweepbad");
    char *spec = spec_file(dir, "trace = traces/samples/azure_code_2023.csv\nscheduling-policy = vllm, nope\n");
    char out[4200];
    snprintf(out, sizeof out, "%s/out", dir);
    cli_result r = run_cli("sweep", spec, "--out", out, NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(strstr(r.err, "point 1 (scheduling-policy=nope)") && strstr(r.err, "unknown policy"), "%s", r.err);
    char pts[4300];
    snprintf(pts, sizeof pts, "%s/points", out);
    ck_assert_msg(access(pts, F_OK) != 0, "points were created for a bad spec");
    cli_result_free(&r);
    r = run_cli("sweep", "no-such-spec.txt", "--out", out, NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(strstr(r.err, "no-such-spec.txt: cannot open"), "%s", r.err);
    cli_result_free(&r);
    /* a point's profile is read and fitted before any point runs */
    char *bad = write_temp_file(dir, "bad.csv", "# model: llama-2-7b\n# gpu: h200\n# block_size: 16\nkind,oops\n");
    char text[8800];
    snprintf(text, sizeof text, "trace = traces/samples/azure_code_2023.csv\ncost-model = roofline, profile:%s\n", bad);
    free(spec);
    spec = spec_file(dir, text);
    r = run_cli("sweep", spec, "--out", out, NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(strstr(r.err, "point 1 (") && strstr(r.err, "bad.csv:4: 2 fields"), "%s", r.err);
    ck_assert_msg(access(pts, F_OK) != 0, "points were created for a spec with a bad profile");
    cli_result_free(&r);
    free(bad);
    free(spec);
    free(dir);
}
END_TEST

static char *read_results(const char *out)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/results.csv", out);
    return slurp(path, NULL);
}

/* results.csv has one row per point in spec order, and its numbers are the sim's own. */
START_TEST(results_table_matches_direct_sim)
{
    char *dir = make_temp_dir("sweeptab");
    char *spec = spec_file(dir, "trace = traces/samples/azure_code_2023.csv\nmax-requests = 1500\n"
                                "scheduling-policy = vllm, orca\nmax-num-seqs = 32, 128\n");
    char out[4200], sim_out[4200];
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(sim_out, sizeof sim_out, "%s/sim", dir);
    cli_result r = run_cli("sweep", spec, "--out", out, "-j", "2", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    ck_assert_msg(strstr(r.out, "4 points (4 run now, 0 already done, 0 errors, 0 missing)"), "%s", r.out);
    cli_result_free(&r);
    char *csv = read_results(out);
    ck_assert_msg(strstr(csv, "point,id,trace,max-requests,scheduling-policy,max-num-seqs,status,completed,"), "%s", csv);
    /* point 3 = orca, 128 */
    char *row3 = strstr(csv, "\n3,");
    ck_assert_msg(row3 && strstr(row3, ",orca,128,ok,"), "%s", csv);
    r = run_cli("sim", "--trace", "traces/samples/azure_code_2023.csv", "--max-requests", "1500",
                "--scheduling-policy", "orca", "--max-num-seqs", "128", "--out", sim_out, "--quiet", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    cli_result_free(&r);
    char path[4300];
    snprintf(path, sizeof path, "%s/summary.json", sim_out);
    char *js = slurp(path, NULL);
    long completed = strtol(strstr(js, "\"completed\": ") + 13, NULL, 10);
    double thr = strtod(strstr(js, "\"request_throughput\": ") + 22, NULL);
    char *p = strstr(row3, ",ok,") + 4;
    long t_completed = strtol(p, &p, 10);
    strtol(p + 1, &p, 10);          /* num_rejected */
    strtod(p + 1, &p);              /* duration */
    double t_thr = strtod(p + 1, NULL);
    ck_assert_int_eq(t_completed, completed);
    ck_assert_msg(t_thr / thr > 0.999999 && t_thr / thr < 1.000001, "throughput %g vs sim %g", t_thr, thr);
    free(js);
    free(csv);
    free(spec);
    free(dir);
}
END_TEST

static int count_points(const char *out)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/points", out);
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

/* Waits (up to 5 s) until nothing holds OUT/.lock. A sweep's workers hold it too, and killed
 * ones let go of it only once they have exited, which can be after the sweep's own process has
 * been reaped: a rerun at once may be refused, rightly, as a second writer. */
static void wait_for_lock(const char *out)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/.lock", out);
    int fd = open(path, O_RDWR | O_CLOEXEC), tries = 0;
    ck_assert_msg(fd >= 0, "%s: cannot open", path);
    while (flock(fd, LOCK_EX | LOCK_NB) && ++tries < 1000) nanosleep(&(struct timespec){0, 5000000}, NULL);
    close(fd);
    ck_assert_msg(tries < 1000, "the killed sweep's workers still hold %s after 5 s", path);
}

/* Kill a sweep midway (SIGKILL: no cleanup), rerun the same command: only the missing points
 * run, and the table comes out complete and equal to an uninterrupted sweep's. */
START_TEST(resumes_after_kill_running_only_missing_points)
{
    char *dir = make_temp_dir("sweepkill");
    char *spec = spec_file(dir, "trace = traces/samples/azure_conv_2023.csv\nmax-requests = 8000\n"
                                "max-num-seqs = 16, 32, 64, 128, 256, 512\nseed = 0, 1\n");
    char out[4200], ref[4200];
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", 1);
        dup2(devnull, 1), dup2(devnull, 2);
        const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
        setpgid(0, 0); /* its own group, so we can kill the workers with it */
        execl(bin, "tandem", "sweep", spec, "--out", out, "-j", "2", (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    int done = 0;
    for (int i = 0; i < 3000 && (done = count_points(out)) < 3; i++) nanosleep(&(struct timespec){0, 5000000}, NULL);
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
    wait_for_lock(out);
    done = count_points(out);
    ck_assert_msg(done >= 3 && done < 12, "killed with %d of 12 points done: the test needs a partial sweep", done);
    cli_result r = run_cli("sweep", spec, "--out", out, "-j", "2", NULL);
    ck_assert_msg(r.exit_code == 0, "rerun: exit %d: %s", r.exit_code, r.err);
    char want[128];
    snprintf(want, sizeof want, "12 points (%d run now, %d already done, 0 errors, 0 missing)", 12 - done, done);
    ck_assert_msg(strstr(r.out, want), "rerun said \"%s\", expected \"%s\"", r.out, want);
    cli_result_free(&r);
    ck_assert_int_eq(count_points(out), 12);
    /* no half-written point directories left */
    char pts[4300];
    snprintf(pts, sizeof pts, "%s/points", out);
    DIR *d = opendir(pts);
    for (struct dirent *de; (de = readdir(d));)
        ck_assert_msg(strncmp(de->d_name, ".tmp-", 5) != 0, "leftover %s", de->d_name);
    closedir(d);
    r = run_cli("sweep", spec, "--out", ref, "-j", "1", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    cli_result_free(&r);
    char *a = read_results(out), *b = read_results(ref);
    ck_assert_msg(a && b && strcmp(a, b) == 0, "resumed results differ from an uninterrupted -j 1 sweep");
    free(a);
    free(b);
    free(spec);
    free(dir);
}
END_TEST

/* Starts `tandem sweep SPEC --out OUT -j JOBS` in its own process group, output discarded. */
static pid_t start_sweep(const char *spec, const char *out, const char *jobs)
{
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", 1);
        dup2(devnull, 1), dup2(devnull, 2);
        const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
        setpgid(0, 0);
        execl(bin, "tandem", "sweep", spec, "--out", out, "-j", jobs, "--quiet", (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    return pid;
}

/* The pids of pid's children (at most max), from /proc. */
static int children_of(pid_t pid, pid_t *kids, int max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    int n = 0, k;
    while (f && n < max && fscanf(f, "%d", &k) == 1) kids[n++] = k;
    if (f) fclose(f);
    return n;
}

/* True while pid runs (a zombie no longer does). */
static bool is_running(pid_t pid)
{
    char path[64], state = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1) state = 0;
    fclose(f);
    return state && state != 'Z' && state != 'X';
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A spec whose points take seconds each: 1 M requests. */
static char *slow_spec(const char *dir)
{
    char trace[4300], body[4400];
    snprintf(trace, sizeof trace, "%s/t1m.csv", dir);
    cli_result r = run_cli("trace", "gen", "--num-requests", "1000000", "--rate", "30", "--out", trace, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    snprintf(body, sizeof body, "trace = %s\nsteps = false\nrequests = false\nseed = 0, 1, 2, 3\n", trace);
    return spec_file(dir, body);
}

/* kill -9 of a sweep leaves no worker running (they get SIGTERM when their parent dies). */
START_TEST(workers_die_with_a_killed_sweep)
{
    char *dir = make_temp_dir("sweeporphan");
    char *spec = slow_spec(dir), out[4300];
    snprintf(out, sizeof out, "%s/out", dir);
    pid_t pid = start_sweep(spec, out, "2"), kids[8];
    int n = 0;
    for (int i = 0; i < 2000 && (n = children_of(pid, kids, 8)) < 2; i++) nanosleep(&(struct timespec){0, 5000000}, NULL);
    ck_assert_msg(n == 2, "the sweep started %d workers, want 2", n);
    kill(pid, SIGKILL); /* the parent alone, as `kill -9 PID` does */
    waitpid(pid, NULL, 0);
    int alive = n;
    for (int i = 0; i < 500 && alive; i++) {
        alive = 0;
        for (int k = 0; k < n; k++) alive += is_running(kids[k]);
        if (alive) nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    for (int k = 0; k < n; k++) kill(kids[k], SIGKILL); /* don't leave them if the check fails */
    ck_assert_msg(alive == 0, "%d workers still running 5 s after their sweep was killed", alive);
    free(spec), free(dir);
}
END_TEST

/* Ctrl-C (SIGINT to the sweep's process group) stops a -j 1 sweep at once, not after the
 * point it is running: a point takes seconds here. */
START_TEST(ctrl_c_stops_a_j1_sweep_at_once)
{
    char *dir = make_temp_dir("sweepint");
    char *spec = slow_spec(dir), out[4300];
    snprintf(out, sizeof out, "%s/out", dir);
    pid_t pid = start_sweep(spec, out, "1"), kids[4];
    for (int i = 0; i < 2000 && children_of(pid, kids, 4) < 1; i++) nanosleep(&(struct timespec){0, 5000000}, NULL);
    nanosleep(&(struct timespec){0, 200000000}, NULL); /* the point is under way */
    double t0 = now_s();
    kill(-pid, SIGINT);
    int status;
    waitpid(pid, &status, 0);
    double waited = now_s() - t0;
    ck_assert_msg(waited < 1.5, "the sweep took %.2f s to stop after Ctrl-C", waited);
    ck_assert_msg(count_points(out) == 0, "an interrupted point was kept");
    free(spec), free(dir);
}
END_TEST

/* A second sweep into a DIR that one is writing is refused (DIR/.lock), and runs once the
 * first is done. */
START_TEST(a_second_sweep_into_the_same_dir_is_refused)
{
    char *dir = make_temp_dir("sweeplock");
    char *spec = spec_file(dir, "trace = traces/samples/azure_conv_2023.csv\nmax-requests = 50\nseed = 0, 1\n");
    char out[4300], lock[4400];
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(lock, sizeof lock, "%s/.lock", out);
    cli_result r = run_cli("sweep", spec, "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    int fd = open(lock, O_RDWR);
    ck_assert_msg(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "no %s, or the finished sweep still holds it", lock);
    r = run_cli("sweep", spec, "--out", out, "--quiet", NULL); /* while we hold it, as a running sweep does */
    ck_assert_msg(r.exit_code == 1 && strstr(r.err, "another sweep is writing it"), "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    close(fd);
    r = run_cli("sweep", spec, "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "after the lock is released: %s", r.err);
    cli_result_free(&r);
    free(spec), free(dir);
}
END_TEST

/* A 2-rank sweep under mpirun splits the points: each rank runs some, rank 0 writes the whole
 * table, equal to a local sweep's. */
START_TEST(mpi_two_ranks_split_points)
{
#ifndef TANDEM_HAVE_MPI
    printf("mpi_two_ranks_split_points: SKIPPED (built with MPI=0)\n");
    return;
#endif
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        printf("mpi_two_ranks_split_points: SKIPPED (no mpirun)\n");
        return;
    }
    char *dir = make_temp_dir("sweepmpi");
    char *spec = spec_file(dir, "trace = traces/samples/azure_code_2023.csv\nmax-requests = 1000\n"
                                "scheduling-policy = vllm, sarathi, priority\nseed = 0, 1\n");
    char cmd[8192], out[4200], ref[4200];
    snprintf(out, sizeof out, "%s/mpi", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp "
             "mpirun -np 2 --oversubscribe %s sweep %s --out %s > %s/mpi.log 2>&1",
             bin, spec, out, dir);
    int rc = system(cmd);
    char logp[4300];
    snprintf(logp, sizeof logp, "%s/mpi.log", dir);
    char *log = slurp(logp, NULL);
    ck_assert_msg(rc == 0, "mpirun failed (%d):\n%s", rc, log);
    ck_assert_msg(strstr(log, "6 points (6 run now, 0 already done, 0 errors, 0 missing)"),
                  "the final line does not count every rank's points:\n%s", log);
    free(log);
    snprintf(cmd, sizeof cmd, "cat %s/points/*/ran_by.txt | cut -d, -f1 | sort | uniq -c > %s/ranks.txt", out, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(logp, sizeof logp, "%s/ranks.txt", dir);
    char *ranks = slurp(logp, NULL);
    ck_assert_msg(strstr(ranks, "3 rank 0 of 2") && strstr(ranks, "3 rank 1 of 2"), "points per rank:\n%s", ranks);
    free(ranks);
    cli_result r = run_cli("sweep", spec, "--out", ref, NULL);
    ck_assert_int_eq(r.exit_code, 0);
    cli_result_free(&r);
    char *a = read_results(out), *b = read_results(ref);
    ck_assert_msg(a && b && strcmp(a, b) == 0, "MPI results differ from a local sweep's");
    free(a);
    free(b);
    free(spec);
    free(dir);
}
END_TEST

/* On a terminal (a pty made by script(1)) a progress line counts the points; piped, it is quiet. */
START_TEST(progress_line_only_on_a_terminal)
{
    if (system("command -v script >/dev/null 2>&1") != 0) {
        printf("progress_line_only_on_a_terminal: SKIPPED (no script(1))\n");
        return;
    }
    char *dir = make_temp_dir("sweeptty");
    char *spec = spec_file(dir, "trace = traces/samples/azure_code_2023.csv\nmax-requests = 300\nseed = 0..3\n");
    const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
    char cmd[8192], log[4300];
    snprintf(log, sizeof log, "%s/tty.log", dir);
    snprintf(cmd, sizeof cmd, "script -qec \"%s sweep %s --out %s/tty -j 1\" /dev/null > %s 2>&1", bin, spec, dir, log);
    ck_assert_int_eq(system(cmd), 0);
    char *out = slurp(log, NULL);
    ck_assert_msg(strstr(out, "sweep: 4/4 points done") && strstr(out, "points/s"), "no progress line:\n%s", out);
    free(out);
    char out_dir[4300];
    snprintf(out_dir, sizeof out_dir, "%s/piped", dir);
    cli_result r = run_cli("sweep", spec, "--out", out_dir, "-j", "1", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert_msg(!strstr(r.err, "points done"), "progress line when not a terminal:\n%s", r.err);
    cli_result_free(&r);
    free(spec);
    free(dir);
}
END_TEST

/* Regenerating the trace at the same path (the researcher's main loop) makes the points stale:
 * a rerun runs them again and says so, and results.csv has the new trace's numbers. */
START_TEST(regenerated_trace_makes_points_stale)
{
    char *dir = make_temp_dir("sweepstale");
    char trace[4200], out[4200], spec_text[8400];
    snprintf(trace, sizeof trace, "%s/t.csv", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    cli_result r = run_cli("trace", "gen", "--num-requests", "200", "--rate", "5", "--seed", "1", "--out", trace, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    snprintf(spec_text, sizeof spec_text, "trace = %s\nmax-num-seqs = 4, 64\n", trace);
    char *spec = spec_file(dir, spec_text);
    r = run_cli("sweep", spec, "--out", out, "-j", "2", NULL);
    ck_assert_msg(r.exit_code == 0 && strstr(r.out, "2 points (2 run now, 0 already done"), "%s%s", r.out, r.err);
    cli_result_free(&r);
    char *before = read_results(out);
    r = run_cli("sweep", spec, "--out", out, NULL);
    ck_assert_msg(strstr(r.out, "2 points (0 run now, 2 already done"), "an unchanged rerun ran points: %s", r.out);
    cli_result_free(&r);
    r = run_cli("trace", "gen", "--num-requests", "200", "--rate", "5", "--seed", "2", "--out", trace, NULL);
    cli_result_free(&r);
    r = run_cli("sweep", spec, "--out", out, NULL);
    ck_assert_msg(r.exit_code == 0 && strstr(r.out, "2 points (2 run now (2 stale), 0 already done"),
                  "after the trace changed: %s%s", r.out, r.err);
    cli_result_free(&r);
    char *after = read_results(out);
    ck_assert_msg(strcmp(before, after) != 0, "results.csv kept the old trace's numbers");
    /* each point names its inputs and their hashes */
    char cmd[8800], path[4300];
    snprintf(cmd, sizeof cmd, "cat %s/points/*/inputs.txt > %s/inputs.all", out, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/inputs.all", dir);
    char *inputs = slurp(path, NULL);
    char want[4400];
    snprintf(want, sizeof want, "trace %s xxh3:", trace);
    ck_assert_msg(strstr(inputs, "identity ") && strstr(inputs, " build ") && strstr(inputs, want), "inputs.txt:\n%s", inputs);
    free(inputs);
    free(before);
    free(after);
    free(spec);
    free(dir);
}
END_TEST

/* --keep-requests on a rerun gives every point done its requests.csv; --force reruns all. */
START_TEST(keep_requests_and_force_on_a_rerun)
{
    char *dir = make_temp_dir("sweepkeep");
    char *spec = spec_file(dir, "trace = traces/samples/azure_code_2023.csv\nmax-requests = 200\nmax-num-seqs = 4, 64\n");
    char out[4200], path[4400];
    snprintf(out, sizeof out, "%s/out", dir);
    cli_result r = run_cli("sweep", spec, "--out", out, NULL);
    ck_assert_int_eq(r.exit_code, 0);
    cli_result_free(&r);
    snprintf(path, sizeof path, "%s/points/*/requests.csv", out);
    char cmd[8800];
    snprintf(cmd, sizeof cmd, "test $(ls %s 2>/dev/null | wc -l) = 0", path);
    ck_assert_msg(system(cmd) == 0, "requests.csv kept without --keep-requests");
    r = run_cli("sweep", spec, "--out", out, "--keep-requests", NULL);
    ck_assert_msg(strstr(r.out, "2 points (2 run now, 0 already done"), "%s", r.out);
    cli_result_free(&r);
    snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) = 2", path);
    ck_assert_msg(system(cmd) == 0, "--keep-requests on a rerun did not add requests.csv to the points done");
    r = run_cli("sweep", spec, "--out", out, "--keep-requests", NULL);
    ck_assert_msg(strstr(r.out, "2 points (0 run now, 2 already done"), "%s", r.out);
    cli_result_free(&r);
    r = run_cli("sweep", spec, "--out", out, "--force", NULL);
    ck_assert_msg(strstr(r.out, "2 points (2 run now, 0 already done"), "--force: %s", r.out);
    cli_result_free(&r);
    free(spec);
    free(dir);
}
END_TEST

/* Options that cannot change a result are named once, however many points carry them. */
START_TEST(useless_options_warned_once)
{
    char *dir = make_temp_dir("sweepwarn");
    char *spec = spec_file(dir, "trace = traces/samples/azure_code_2023.csv\nmax-requests = 100\n"
                                "scheduling-policy = priority\nseed = 0..3\n");
    char out[4200];
    snprintf(out, sizeof out, "%s/out", dir);
    cli_result r = run_cli("sweep", spec, "--out", out, NULL);
    ck_assert_int_eq(r.exit_code, 0);
    const char *a = strstr(r.err, "warning: --scheduling-policy priority: the trace has no priority column");
    const char *b = strstr(r.err, "warning: --seed changes nothing here");
    ck_assert_msg(a && b && !strstr(a + 1, "warning: --scheduling-policy priority") && !strstr(b + 1, "warning: --seed"), "%s", r.err);
    cli_result_free(&r);
    free(spec);
    free(dir);
}
END_TEST

/* A model config given as a file is an input like the trace: editing it makes the points stale. */
START_TEST(edited_model_config_makes_points_stale)
{
    char *dir = make_temp_dir("sweepmodel");
    size_t n;
    char *cfg = slurp("configs/models/llama-2-7b.json", &n);
    ck_assert_msg(cfg, "no configs/models/llama-2-7b.json");
    char *model = write_temp_file(dir, "config.json", cfg);
    char text[8400], out[4200];
    snprintf(text, sizeof text, "trace = traces/samples/azure_code_2023.csv\nmax-requests = 100\nmodel = %s\n", model);
    char *spec = spec_file(dir, text);
    snprintf(out, sizeof out, "%s/out", dir);
    cli_result r = run_cli("sweep", spec, "--out", out, NULL);
    ck_assert_msg(r.exit_code == 0 && strstr(r.out, "1 points (1 run now, 0 already done"), "%s%s", r.out, r.err);
    cli_result_free(&r);
    char *edited = xmalloc(n + 2);
    snprintf(edited, n + 2, "%s\n", cfg); /* the same model, one more newline: a different file */
    free(write_temp_file(dir, "config.json", edited));
    r = run_cli("sweep", spec, "--out", out, NULL);
    ck_assert_msg(r.exit_code == 0 && strstr(r.out, "1 points (1 run now (1 stale), 0 already done"), "%s%s", r.out, r.err);
    cli_result_free(&r);
    free(edited);
    free(cfg);
    free(model);
    free(spec);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sweep");
    TCase *tc = tcase_create("sweep");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, spec_parses_lists_ranges_quotes_comments);
    tcase_add_test(tc, bad_specs_name_file_and_line);
    tcase_add_test(tc, bad_point_fails_before_running);
    tcase_add_test(tc, results_table_matches_direct_sim);
    tcase_add_test(tc, resumes_after_kill_running_only_missing_points);
    tcase_add_test(tc, workers_die_with_a_killed_sweep);
    tcase_add_test(tc, ctrl_c_stops_a_j1_sweep_at_once);
    tcase_add_test(tc, a_second_sweep_into_the_same_dir_is_refused);
    tcase_add_test(tc, mpi_two_ranks_split_points);
    tcase_add_test(tc, progress_line_only_on_a_terminal);
    tcase_add_test(tc, regenerated_trace_makes_points_stale);
    tcase_add_test(tc, keep_requests_and_force_on_a_rerun);
    tcase_add_test(tc, useless_options_warned_once);
    tcase_add_test(tc, edited_model_config_makes_points_stale);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
