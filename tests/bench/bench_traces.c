/*
 * bench_traces.c: parse speed of the trace readers (a benchmark, not a test: `make bench-traces`).
 *
 * For each file: replays it through trace_source() as the serving loop would and prints rows,
 * seconds, rows/s, MB/s, the reader's buffer bytes and the process's peak RSS, which shows that
 * memory does not grow with the trace.
 */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "traces/trace.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_traces TRACE...\n");
        return 2;
    }
    printf("%-48s %-8s %10s %8s %12s %8s %10s %10s\n", "file", "format", "rows", "s", "rows/s",
           "MB/s", "buf_bytes", "maxrss_kB");
    for (int i = 1; i < argc; i++) {
        terr e;
        trace_reader *t;
        double t0 = now_s();
        if (trace_open(&t, argv[i], NULL, &e)) {
            fprintf(stderr, "%s\n", e.msg);
            return 2;
        }
        arrival_source s = trace_source(t);
        arrival a;
        int r;
        int64_t n = 0, tokens = 0;
        while ((r = s.next(s.self, &a, &e)) == 1) {
            n++;
            tokens += a.prompt_tokens; /* use the rows so nothing is optimised away */
        }
        double dt = now_s() - t0;
        if (r < 0) {
            fprintf(stderr, "%s\n", e.msg);
            return 2;
        }
        struct stat st;
        stat(argv[i], &st);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("%-48s %-8s %10lld %8.3f %12.0f %8.1f %10zu %10ld\n", argv[i],
               trace_format_name(t), (long long)n, dt, (double)n / dt,
               (double)st.st_size / dt / 1e6, trace_buffer_bytes(t), ru.ru_maxrss);
        trace_close(t);
        (void)tokens;
    }
    return 0;
}
