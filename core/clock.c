/* clock.c: see clock.h. */
#include "clock.h"

#include <errno.h>
#include <time.h>

static int64_t sim_now(tclock *c) { return c->sim_now_ns; }
static void sim_advance(tclock *c, int64_t d) { c->sim_now_ns += d; }
static void sim_wait_until(tclock *c, int64_t t)
{
    if (t > c->sim_now_ns) c->sim_now_ns = t;
}

void tclock_init_sim(tclock *c)
{
    *c = (tclock){.now = sim_now, .advance = sim_advance, .wait_until = sim_wait_until};
}

int64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t wall_now(tclock *c) { return clock_mono_ns() - c->wall_origin_ns; }
static void wall_advance(tclock *c, int64_t d) { (void)c, (void)d; }
static void wall_wait_until(tclock *c, int64_t t)
{
    int64_t abs_ns = c->wall_origin_ns + t;
    struct timespec ts = {.tv_sec = abs_ns / 1000000000LL, .tv_nsec = abs_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

void tclock_init_wall(tclock *c)
{
    *c = (tclock){.now = wall_now, .advance = wall_advance, .wait_until = wall_wait_until};
    c->wall_origin_ns = clock_mono_ns();
    c->real_time = true;
}
