/* preempt_log.c: see preempt_log.h. */
#include "preempt_log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

int preempt_log_open(preempt_log *l, const char *dir, terr *e)
{
    memset(l, 0, sizeof *l);
    snprintf(l->path, sizeof l->path, "%s/preemptions.csv", dir);
    if (!(l->f = fopen(l->path, "wb"))) return terr_set(e, "%s: cannot create: %s", l->path, strerror(errno));
    fputs("step,time_s,id,event\n", l->f);
    return 0;
}

static void row(preempt_log *l, int64_t step, int64_t start_ns, int64_t id, const char *event)
{
    int64_t us = (start_ns + 500) / 1000;
    fprintf(l->f, "%" PRId64 ",%" PRId64 ".%06" PRId64 ",%" PRId64 ",%s\n", step, us / 1000000, us % 1000000, id,
            event);
}

void preempt_log_step(preempt_log *l, int64_t step, int64_t start_ns, const batch *b)
{
    if (!l->f) return;
    for (int32_t i = 0; l->num_pending && i < b->num_items; i++) {
        int64_t id = b->items[i].req->id;
        size_t k = (size_t)id / 8;
        uint8_t bit = (uint8_t)(1u << (id % 8));
        if (k < l->cap_bytes && (l->pending[k] & bit)) {
            l->pending[k] &= (uint8_t)~bit;
            l->num_pending--;
            row(l, step, start_ns, id, "resumed");
        }
    }
    for (int32_t i = 0; i < b->num_preempted; i++) {
        const request *r = b->preempted[i];
        size_t k = (size_t)r->id / 8, old = l->cap_bytes;
        if (k >= l->cap_bytes) {
            grow_array((void **)&l->pending, 1, &l->cap_bytes, k + 1);
            memset(l->pending + old, 0, l->cap_bytes - old);
        }
        uint8_t bit = (uint8_t)(1u << (r->id % 8));
        if (!(l->pending[k] & bit)) l->num_pending++;
        l->pending[k] |= bit;
        row(l, step, start_ns, r->id, r->state == REQ_SWAPPED ? "swapped" : "preempted");
    }
}

int preempt_log_close(preempt_log *l, terr *e)
{
    int rc = 0;
    if (l->f) {
        bool ok = !ferror(l->f);
        if (fclose(l->f) || !ok) rc = terr_set(e, "%s: write failed", l->path);
    }
    free(l->pending);
    memset(l, 0, sizeof *l);
    return rc;
}
