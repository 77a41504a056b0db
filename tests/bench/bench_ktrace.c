/*
 * bench_ktrace.c: `make bench-ktrace` (also part of `make bench`): the host cost per step of the
 * kernel trace's bookkeeping (engine/kernel_trace.h, ktrace_ledger) as the CUDA engine's meter
 * drives it, without a GPU: 300 kernels a step, each starting in its predecessor's tail (PDL),
 * 5 ms steps, CUPTI handing over ~19k records at a time (a 4 MB buffer of 216-byte kernel
 * records), a settle after every step (lag 8, at most 4 steps) and a final one. What it leaves
 * out: the two cuptiGetTimestamp calls a step and the inbox's lock, which need CUPTI (their sum
 * is in `tandem run`'s config.executor.kernel_trace_us_per_step). A benchmark, not a test.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "engine/kernel_trace.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    enum { PER_STEP = 300, BUFFER = 19000, LAG = 8, MAX = 4 };
    int steps = argc > 1 ? atoi(argv[1]) : 100000;
    if (steps <= 0) {
        fprintf(stderr, "usage: bench_ktrace [STEPS > 0]\n");
        return 2;
    }
    ktrace_ledger l;
    ktrace_ledger_init(&l);
    ktrace_span *buf = xmalloc(sizeof *buf * BUFFER); /* (BUFFER) what CUPTI has not handed over */
    int64_t *cost_ns = xmalloc(sizeof *cost_ns * (size_t)steps), settled = 0, total_ns = 0;
    size_t nb = 0;
    uint64_t t = 1000000;
    for (int k = 0; k < steps; k++) {
        uint64_t begin = t;
        for (int i = 0; i < PER_STEP; i++) {
            uint64_t s = t + 2000 + (uint64_t)i * 15;
            buf[nb++] = (ktrace_span){s, s + 17, (uint8_t)(i % KERNEL_NUM_KINDS)};
            if (nb == BUFFER) ktrace_ledger_spans(&l, buf, nb), nb = 0; /* on CUPTI's thread */
        }
        t += 5000000;
        int64_t t0 = clock_mono_ns();
        ktrace_ledger_window(&l, (ktrace_window){begin, t - 1000});
        const ktrace_step *out;
        settled += (int64_t)ktrace_ledger_settle(&l, false, LAG, MAX, &out);
        cost_ns[k] = clock_mono_ns() - t0;
        total_ns += cost_ns[k];
    }
    ktrace_ledger_spans(&l, buf, nb); /* the forced flush */
    const ktrace_step *out;
    int64_t t0 = clock_mono_ns();
    int64_t at_end = (int64_t)ktrace_ledger_settle(&l, true, LAG, 0, &out);
    int64_t final_ns = clock_mono_ns() - t0;
    qsort(cost_ns, (size_t)steps, sizeof *cost_ns, cmp_i64);
    printf("kernel trace bookkeeping, %d steps of %d kernels: per step mean %.2f us, median %.2f, p99 %.2f, "
           "p99.9 %.2f, max %.1f (preemptions of this thread included); %lld steps settled during the run, %lld at "
           "the end (%.1f us); %lld records outside\n",
           steps, PER_STEP, (double)total_ns / 1e3 / steps, cost_ns[steps / 2] / 1e3,
           cost_ns[(int64_t)steps * 99 / 100] / 1e3, cost_ns[(int64_t)steps * 999 / 1000] / 1e3,
           cost_ns[steps - 1] / 1e3, (long long)settled,
           (long long)at_end, final_ns / 1e3, (long long)l.counts.outside);
    ktrace_ledger_free(&l);
    free(buf), free(cost_ns);
    return settled + at_end == steps && l.counts.outside == 0 ? 0 : 1;
}
