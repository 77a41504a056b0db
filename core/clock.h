/*
 * clock.h: where the serving loop's time comes from.
 *
 * The simulated clock is an int64 count of nanoseconds that moves only when told: advanced by
 * each step's predicted duration, and jumping to the next arrival when the server is idle. The
 * wall clock reads CLOCK_MONOTONIC (since start) and sleeps when idle; the real engine's steps
 * take real time, so advance() is a no-op. The loop cannot tell them apart.
 */
#ifndef TANDEM_CLOCK_H
#define TANDEM_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tclock tclock;
struct tclock {
    int64_t (*now)(tclock *c);
    void (*advance)(tclock *c, int64_t duration_ns); /* a step of this length just ran */
    void (*wait_until)(tclock *c, int64_t t_ns);     /* idle until t */
    int64_t sim_now_ns;                              /* simulated clock's time */
    int64_t wall_origin_ns;                          /* wall clock's CLOCK_MONOTONIC at start */
    bool real_time;                                  /* the wall clock: steps take real time */
};

void tclock_init_sim(tclock *c);
void tclock_init_wall(tclock *c);

/* CLOCK_MONOTONIC in ns: every measured duration in tandem reads it. */
int64_t clock_mono_ns(void);

#endif
