/*
 * profile_gpu.c: `bench_engine_gpu profile`: where the time of a whole engine step goes, kernel by
 * kernel. The start and end of every kernel, memcpy and memset come from the GPU's own timestamps
 * through the CUPTI Activity API (CONCURRENT_KERNEL, MEMCPY, MEMSET), kernels replayed from CUDA
 * graphs included, which no host-side timer can split. SM clock and power come from NVML, loaded
 * with dlopen so that the binary needs no NVML to link or to start.
 *
 * Key decisions:
 *   - Tracing is turned on once, before any engine exists, and stays on, so every CUDA graph is
 *     captured and instantiated while it is on. A region is what runs between prof_begin and
 *     prof_end (each synchronises the device and forces a flush); other records are dropped.
 *   - The steps of a region are told apart by the host-to-device copy of the step arrays that
 *     opens every engine step (engine/cuda_backend.c; outside the graph when one is replayed).
 *     A stream-ordered copy starts after the previous step's last kernel ends and ends before
 *     the next kernel starts, so the split is exact. If the copies do not match the step count,
 *     records are split evenly by count, with a warning.
 *   - Records go into one array allocated by prof_init. The trace itself (CUPTI, loaded at run
 *     time, its buffers and flushes) is engine/kernel_trace.h's, which the engine's kernel time
 *     per step uses too; records may arrive on a CUPTI thread, hence the lock.
 *
 * Reading a region's output (tables: the last step; "mean of N steps": every step):
 *   kernel table: kernels grouped by name (demangled, arguments dropped, long names cut in the
 *     middle), by total time. "% wall" is of the step's wall time. "idle before" sums the time
 *     the GPU ran nothing just before each launch of the kernel (launch latency, the host falling
 *     behind, a drain between kernels that are not overlapped); "overlap" sums the time each
 *     launch ran while earlier work still did (programmatic dependent launch lets a kernel
 *     start in its predecessor's tail).
 *   step lines: wall (CUDA events around the step) = H2D copy + copy end to first kernel + span
 *     + rest (event to copy, last kernel to event); span (first kernel start to last end) =
 *     kernels summed + idle gaps - overlap. So "wall - kernels summed" is idle gaps, the step's
 *     lead-in and the rest, less what overlap hides.
 *   by launch shape (prefill): one row per (kernel, grid, block) in first-launch order, i.e. a
 *     layer's order, with launches per layer and mean / min / max over the layers, so cuBLAS
 *     kernels of different GEMMs (qkv, o, gate_up, down) land on different rows.
 *   CLOCKS lines: NVML's SM clock and board power at one moment, or sampled every millisecond
 *     through a region; "limited by" lists NVML's clock-event reasons (e.g. sw power cap).
 *
 * Tracing is not free: CUPTI timestamps every kernel, which adds work around each launch. Compare
 * the wall times here with `bench_engine_gpu steps` before reading much into small gaps.
 */
#include "engine/bench/profile_gpu.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h> /* not pthread.h: with -Icore, its <sched.h> is core/sched.h */
#include <time.h>

#include "engine/kernel_trace.h"
#include "kernels/cuda_check.h"

static int trace_init(void);
static void trace_shutdown(void);
static void nvml_open(void);
static void nvml_close(void);

int prof_init(void)
{
    if (trace_init()) return -1;
    nvml_open();
    return 0;
}

void prof_shutdown(void)
{
    trace_shutdown();
    nvml_close();
}

/* ---- the kernel trace (CUPTI) ------------------------------------------------------------------ */
#if TANDEM_HAVE_CUPTI

#define PROF_MAX_RECORDS (1 << 17)      /* one region's records (6 MB) */
#define PROF_MAX_NAMES 512              /* distinct kernel names */
#define PROF_MAX_SHAPES 256             /* distinct (name, grid, block) in one step */
#define NAME_WIDTH 60
#define NAME_RULE "--------------------------------------------------------------" /* NAME_WIDTH + 2 */

enum { REC_KERNEL, REC_H2D, REC_COPY, REC_SET };
enum { NAME_H2D, NAME_COPY, NAME_SET, NAME_OTHER, NAME_FIRST_KERNEL };

typedef struct prof_rec {
    uint64_t start_ns, end_ns; /* CUPTI timestamps */
    int32_t name;              /* index into names */
    int32_t grid[3], block_x;  /* launch shape (kernels only) */
    uint32_t graph_id;         /* 0 unless run by a CUDA graph */
    uint8_t kind;              /* REC_* */
} prof_rec;

typedef struct prof_name {
    const char *key; /* CUPTI's string, shared by every record of one kernel */
    char *raw;       /* a copy of it */
    char *shown;     /* demangled, without return type and arguments */
} prof_name;

static mtx_t lock;     /* guards everything below; made by trace_init */
static prof_rec *recs; /* (PROF_MAX_RECORDS) */
static int n_recs;
static bool recording;
static long lost_full, lost_untimed; /* since prof_begin */
static prof_name names[PROF_MAX_NAMES] = {
    [NAME_H2D] = {.shown = "[memcpy HtoD]"}, [NAME_COPY] = {.shown = "[memcpy, other]"},
    [NAME_SET] = {.shown = "[memset]"}, [NAME_OTHER] = {.shown = "[other kernels]"},
};
static int n_names = NAME_FIRST_KERNEL;

/* The trace's errors, as this file reports them: on stderr, -1. */
#define TRACE_TRY(call)                                                                           \
    do {                                                                                          \
        terr e_ = {{0}};                                                                          \
        if (call(&e_)) {                                                                          \
            fprintf(stderr, "profile: %s\n", e_.msg);                                             \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status); /* libstdc++ */

/* "void k<128>(float const*, int)" -> "k<128>". NULL when out of memory. */
static char *shown_name(const char *raw)
{
    int st = 0;
    char *s = strncmp(raw, "_Z", 2) ? NULL : __cxa_demangle(raw, NULL, NULL, &st);
    if (!s && !(s = strdup(raw))) return NULL;
    size_t i = strlen(s);
    if (i > 0 && s[i - 1] == ')') /* cut at the '(' that opens the argument list */
        for (int depth = 0; i-- > 0;) {
            depth += (s[i] == ')') - (s[i] == '(');
            if (depth == 0) {
                if (i > 0) s[i] = '\0';
                break;
            }
        }
    if (!strncmp(s, "void ", 5)) memmove(s, s + 5, strlen(s + 5) + 1);
    return s;
}

/* The index of a kernel's name (lock held). */
static int32_t intern(const char *key)
{
    if (!key) return NAME_OTHER;
    for (int i = NAME_FIRST_KERNEL; i < n_names; i++)
        if (names[i].key == key) return i;
    for (int i = NAME_FIRST_KERNEL; i < n_names; i++)
        if (!strcmp(names[i].raw, key)) return i;
    if (n_names == PROF_MAX_NAMES) return NAME_OTHER;
    char *raw = strdup(key), *shown = shown_name(key);
    if (!raw || !shown) {
        free(raw), free(shown);
        return NAME_OTHER;
    }
    names[n_names] = (prof_name){key, raw, shown};
    return n_names++;
}

/* Keeps one activity record of the region (lock held). */
static void keep(const CUpti_Activity *r)
{
    prof_rec x;
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        x = (prof_rec){k->start, k->end, intern(k->name), {k->gridX, k->gridY, k->gridZ},
                       k->blockX, k->graphId, REC_KERNEL};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
        bool h2d = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
        x = (prof_rec){m->start, m->end, h2d ? NAME_H2D : NAME_COPY, {0, 0, 0}, 0, m->graphId,
                       h2d ? REC_H2D : REC_COPY};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
        x = (prof_rec){m->start, m->end, NAME_SET, {0, 0, 0}, 0, m->graphId, REC_SET};
    } else {
        return;
    }
    if (x.start_ns == 0 || x.end_ns < x.start_ns)
        lost_untimed++;
    else if (n_recs == PROF_MAX_RECORDS)
        lost_full++;
    else
        recs[n_recs++] = x;
}

/* The trace hands records over here (engine/kernel_trace.h), on CUPTI's thread or in a flush. */
static void take_record(void *ud, const CUpti_Activity *r)
{
    mtx_lock(&lock);
    if (recording) keep(r);
    mtx_unlock(&lock);
}

static int open_trace(terr *e)
{
    if (ktrace_open(take_record, NULL, e) || ktrace_enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, e)) return -1;
    /* Copies split a region into steps; without them steps are split by record count. */
    terr w = {{0}};
    if (ktrace_enable(CUPTI_ACTIVITY_KIND_MEMCPY, &w))
        printf("profile: warning: no memcpy tracing (%s); steps will be split by record count\n", w.msg);
    if (ktrace_enable(CUPTI_ACTIVITY_KIND_MEMSET, &w))
        printf("profile: warning: no memset tracing (%s); memsets will read as idle time\n", w.msg);
    return 0;
}

static int trace_init(void)
{
    recs = malloc(sizeof *recs * PROF_MAX_RECORDS);
    if (!recs || mtx_init(&lock, mtx_plain) != thrd_success) {
        fprintf(stderr, "profile: no memory for %d trace records and their lock\n", PROF_MAX_RECORDS);
        return -1;
    }
    TRACE_TRY(open_trace);
    return 0;
}

static void trace_shutdown(void)
{
    ktrace_close();
    mtx_lock(&lock);
    free(recs), recs = NULL, n_recs = 0;
    for (int i = NAME_FIRST_KERNEL; i < n_names; i++) free(names[i].raw), free(names[i].shown);
    n_names = NAME_FIRST_KERNEL;
    mtx_unlock(&lock);
}

int prof_begin(void)
{
    CUDA_CHECK(cudaDeviceSynchronize());
    TRACE_TRY(ktrace_flush); /* earlier work: dropped */
    ktrace_take_losses();
    mtx_lock(&lock);
    n_recs = 0, lost_full = lost_untimed = 0;
    recording = true;
    mtx_unlock(&lock);
    return 0;
}

int prof_end(void)
{
    CUDA_CHECK(cudaDeviceSynchronize());
    TRACE_TRY(ktrace_flush);
    ktrace_losses l = ktrace_take_losses();
    mtx_lock(&lock);
    recording = false;
    if (lost_full || lost_untimed || l.bad_buffers || l.dropped)
        printf("profile: warning: records missing from the figures below: %ld found no room, %ld "
               "had no timestamps, %llu buffers unreadable, %llu dropped by CUPTI\n",
               lost_full, lost_untimed, (unsigned long long)l.bad_buffers, (unsigned long long)l.dropped);
    mtx_unlock(&lock);
    return 0;
}

/* ---- report ---- */

typedef struct step_stats {
    double wall_us, copy_us, lead_us;             /* events; H2D copy; copy end to first kernel */
    double busy_us, span_us, idle_us, overlap_us; /* kernels summed; first start to last end */
    int kernels, from_graph;
} step_stats;

typedef struct name_sum {
    int32_t name, count;
    double total_us, idle_us, overlap_us;
} name_sum;

typedef struct shape_sum { /* one (kernel, grid, block) */
    int32_t name, grid[3], block_x, count;
    int32_t per_layer, seen; /* launches a layer (count / layers when it divides, else 1); walked */
} shape_sum;

typedef struct slot_sum { /* the slot-th launch of a shape within each layer */
    int32_t shape, slot, count;
    double total_us, min_us, max_us;
} slot_sum;

static double us_between(uint64_t a_ns, uint64_t b_ns) { return (double)(int64_t)(b_ns - a_ns) / 1e3; }

static int cmp_start(const void *a, const void *b)
{
    const prof_rec *x = a, *y = b;
    if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
    return (x->end_ns > y->end_ns) - (x->end_ns < y->end_ns);
}

static int cmp_total(const void *a, const void *b)
{
    const name_sum *x = a, *y = b;
    if (x->total_us != y->total_us) return x->total_us < y->total_us ? 1 : -1;
    return y->count - x->count;
}

/* Walks one step's records [lo, hi) in start order. An H2D copy at lo opens the step and stays
 * out of the timeline; everything else (kernels, other copies, memsets) is the timeline.
 * by_name (PROF_MAX_NAMES entries, or NULL) gets each name's share. */
static step_stats walk_step(int lo, int hi, name_sum *by_name)
{
    step_stats s = {0};
    uint64_t first = 0, reach = 0, copy_end = 0;
    bool any = false;
    for (int i = lo; i < hi; i++) {
        const prof_rec *r = &recs[i];
        double dur = us_between(r->start_ns, r->end_ns), idle = 0, overlap = 0;
        if (i == lo && r->kind == REC_H2D) {
            s.copy_us = dur, copy_end = r->end_ns;
            continue;
        }
        if (!any) {
            any = true, first = r->start_ns, reach = r->end_ns;
            if (copy_end) s.lead_us = us_between(copy_end, first);
        } else if (r->start_ns > reach) {
            idle = us_between(reach, r->start_ns);
        } else { /* what of it overlaps earlier work, which covers [start, reach] */
            overlap = us_between(r->start_ns, r->end_ns < reach ? r->end_ns : reach);
        }
        if (r->end_ns > reach) reach = r->end_ns;
        s.busy_us += dur, s.idle_us += idle, s.overlap_us += overlap;
        s.kernels += r->kind == REC_KERNEL;
        s.from_graph += r->kind == REC_KERNEL && r->graph_id != 0;
        if (by_name) {
            name_sum *n = &by_name[r->name];
            n->name = r->name, n->count++;
            n->total_us += dur, n->idle_us += idle, n->overlap_us += overlap;
        }
    }
    if (any) s.span_us = us_between(first, reach);
    return s;
}

/* A name in NAME_WIDTH columns: long ones keep their head and tail. */
static const char *fit(const char *s, char buf[NAME_WIDTH + 1])
{
    size_t n = strlen(s);
    if (n <= NAME_WIDTH) return s;
    snprintf(buf, NAME_WIDTH + 1, "%.*s..%s", NAME_WIDTH - 18, s, s + n - 16);
    return buf;
}

/* The index of r's shape in sh[n], adding it if new (-1: no room). */
static int shape_of(const prof_rec *r, shape_sum *sh, int *n)
{
    for (int k = 0; k < *n; k++)
        if (sh[k].name == r->name && sh[k].grid[0] == r->grid[0] && sh[k].grid[1] == r->grid[1] &&
            sh[k].grid[2] == r->grid[2] && sh[k].block_x == r->block_x)
            return k;
    if (*n == PROF_MAX_SHAPES) return -1;
    sh[*n] = (shape_sum){r->name, {r->grid[0], r->grid[1], r->grid[2]}, r->block_x, 0, 1, 0};
    return (*n)++;
}

/* The kernels of one step by shape, in first-launch order. A shape launched m times a layer (two
 * GEMMs with one cuBLAS kernel and grid, say o and down) gets m rows: a layer's launches in order,
 * since every layer launches the same sequence. */
static void print_shapes(int lo, int hi, int layers)
{
    static shape_sum sh[PROF_MAX_SHAPES];
    static slot_sum rows[PROF_MAX_SHAPES];
    int n = 0, n_rows = 0;
    for (int i = lo; i < hi; i++) {
        int k = recs[i].kind == REC_KERNEL ? shape_of(&recs[i], sh, &n) : -1;
        if (k >= 0) sh[k].count++;
    }
    for (int k = 0; k < n; k++)
        if (sh[k].count >= layers && sh[k].count % layers == 0) sh[k].per_layer = sh[k].count / layers;
    for (int i = lo; i < hi; i++) {
        int k = recs[i].kind == REC_KERNEL ? shape_of(&recs[i], sh, &n) : -1;
        if (k < 0) continue;
        int slot = sh[k].seen++ % sh[k].per_layer, j = 0;
        while (j < n_rows && !(rows[j].shape == k && rows[j].slot == slot)) j++;
        if (j == PROF_MAX_SHAPES) continue;
        double dur = us_between(recs[i].start_ns, recs[i].end_ns);
        if (j == n_rows) rows[n_rows++] = (slot_sum){k, slot, 0, 0, dur, dur};
        rows[j].count++, rows[j].total_us += dur;
        if (dur < rows[j].min_us) rows[j].min_us = dur;
        if (dur > rows[j].max_us) rows[j].max_us = dur;
    }
    printf("\nkernels of the last step by launch shape, in launch order (per layer: launches / %d "
           "layers; slot: which of a shape's launches within a layer)\n\n", layers);
    printf("| %-60s | %-15s | %5s | %4s | %9s | %8s | %8s | %8s | %12s |\n", "kernel", "grid", "block",
           "slot", "per layer", "mean us", "min us", "max us", "us per layer");
    printf("|" NAME_RULE "|-----------------|-------|------|-----------|----------|----------|"
           "----------|--------------|\n");
    for (int j = 0; j < n_rows; j++) {
        const slot_sum *r = &rows[j];
        const shape_sum *k = &sh[r->shape];
        char buf[NAME_WIDTH + 1], grid[48], slot[24] = "-";
        snprintf(grid, sizeof grid, "%dx%dx%d", k->grid[0], k->grid[1], k->grid[2]);
        if (k->per_layer > 1) snprintf(slot, sizeof slot, "%d/%d", r->slot + 1, k->per_layer);
        printf("| %-60s | %-15s | %5d | %4s | %9.2f | %8.2f | %8.2f | %8.2f | %12.2f |\n",
               fit(names[k->name].shown, buf), grid, k->block_x, slot, (double)r->count / layers,
               r->total_us / r->count, r->min_us, r->max_us, r->total_us / layers);
    }
}

void prof_report(const char *title, int steps, const float *wall_ms, int layers, bool by_shape)
{
    mtx_lock(&lock);
    printf("\n### profile: %s\n\n", title);
    if (n_recs == 0 || steps < 1 || steps > PROF_MAX_STEPS) {
        printf("profile: no records for %d steps: nothing to report\n", steps);
        mtx_unlock(&lock);
        return;
    }
    qsort(recs, (size_t)n_recs, sizeof *recs, cmp_start);
    int bound[PROF_MAX_STEPS + 1], copies = 0;
    for (int i = 0; i < n_recs; i++)
        if (recs[i].kind == REC_H2D) {
            if (copies < steps) bound[copies] = i;
            copies++;
        }
    if (copies != steps) {
        printf("profile: warning: %d host-to-device copies for %d steps; steps split by record count\n",
               copies, steps);
        for (int k = 0; k < steps; k++) bound[k] = (int)((int64_t)n_recs * k / steps);
    }
    bound[steps] = n_recs;

    static name_sum by_name[PROF_MAX_NAMES];
    memset(by_name, 0, sizeof by_name);
    step_stats last = {0}, mean = {0};
    double wall_min = 1e30, wall_max = 0;
    for (int k = 0; k < steps; k++) {
        step_stats s = walk_step(bound[k], bound[k + 1], k == steps - 1 ? by_name : NULL);
        s.wall_us = wall_ms[k] * 1e3;
        mean.wall_us += s.wall_us / steps, mean.busy_us += s.busy_us / steps;
        mean.span_us += s.span_us / steps, mean.idle_us += s.idle_us / steps;
        mean.overlap_us += s.overlap_us / steps;
        if (s.wall_us < wall_min) wall_min = s.wall_us;
        if (s.wall_us > wall_max) wall_max = s.wall_us;
        last = s;
    }

    qsort(by_name, PROF_MAX_NAMES, sizeof *by_name, cmp_total);
    printf("kernels of the last of %d steps, by total time (%% wall: of the step's wall time)\n\n", steps);
    printf("| %-60s | %5s | %9s | %8s | %6s | %14s | %10s |\n", "kernel", "count", "total us",
           "mean us", "% wall", "idle before us", "overlap us");
    printf("|" NAME_RULE "|-------|-----------|----------|--------|----------------|------------|\n");
    for (int i = 0; i < PROF_MAX_NAMES && by_name[i].count; i++) {
        const name_sum *n = &by_name[i];
        char buf[NAME_WIDTH + 1];
        printf("| %-60s | %5d | %9.1f | %8.2f | %5.1f%% | %14.1f | %10.1f |\n",
               fit(names[n->name].shown, buf), n->count, n->total_us, n->total_us / n->count,
               100 * n->total_us / last.wall_us, n->idle_us, n->overlap_us);
    }
    printf("\nlast step: wall %.1f us (CUDA events) = H2D copy %.1f + copy end to first kernel %.1f + "
           "span %.1f + rest %.1f\n",
           last.wall_us, last.copy_us, last.lead_us, last.span_us,
           last.wall_us - last.copy_us - last.lead_us - last.span_us);
    printf("           span %.1f us = kernels summed %.1f + idle gaps %.1f - overlap %.1f "
           "(%d kernels, %d of them from a CUDA graph)\n",
           last.span_us, last.busy_us, last.idle_us, last.overlap_us, last.kernels, last.from_graph);
    printf("PROFILE %s, last step: wall %.3f ms, kernels summed %.3f ms, span %.3f ms, idle gaps "
           "%.3f ms, overlap %.3f ms\n",
           title, last.wall_us / 1e3, last.busy_us / 1e3, last.span_us / 1e3, last.idle_us / 1e3,
           last.overlap_us / 1e3);
    printf("PROFILE %s, mean of %d steps: wall %.3f ms (min %.3f, max %.3f), kernels summed %.3f ms, "
           "span %.3f ms, idle gaps %.3f ms, overlap %.3f ms\n",
           title, steps, mean.wall_us / 1e3, wall_min / 1e3, wall_max / 1e3, mean.busy_us / 1e3,
           mean.span_us / 1e3, mean.idle_us / 1e3, mean.overlap_us / 1e3);
    if (by_shape) print_shapes(bound[steps - 1], bound[steps], layers);
    mtx_unlock(&lock);
}

#else /* built without CUPTI */

static int trace_init(void)
{
    fprintf(stderr, "profile: bench_engine_gpu was built without CUPTI (the Makefile found no cupti.h "
                    "under CUDA_HOME): no kernel trace\n");
    return -1;
}
static void trace_shutdown(void) {}
int prof_begin(void) { return -1; }
int prof_end(void) { return -1; }
void prof_report(const char *title, int steps, const float *wall_ms, int layers, bool by_shape) {}

#endif

/* ---- clocks and power (NVML, loaded at run time: no nvml.h needed) ------------------------------ */

typedef int nvml_return;                    /* nvmlReturn_t; 0 is NVML_SUCCESS */
typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
enum { NVML_TEMPERATURE_GPU = 0, NVML_CLOCK_SM = 1 };

static struct {
    void *lib;
    nvml_device dev; /* NULL: no readings */
    nvml_return (*clock)(nvml_device, int type, unsigned *mhz);     /* nvmlDeviceGetClockInfo */
    nvml_return (*max_clock)(nvml_device, int type, unsigned *mhz); /* nvmlDeviceGetMaxClockInfo */
    nvml_return (*power)(nvml_device, unsigned *mw);                /* nvmlDeviceGetPowerUsage */
    nvml_return (*temperature)(nvml_device, int sensor, unsigned *c);
    nvml_return (*reasons)(nvml_device, unsigned long long *bits); /* clock-event reasons */
    const char *(*error)(nvml_return);
    nvml_return (*shutdown)(void);
} nvml;

static const struct {
    unsigned long long bit;
    const char *name;
} clock_reasons[] = { /* nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*) */
    {0x1, "idle"}, {0x2, "application clocks"}, {0x4, "sw power cap"}, {0x8, "hw slowdown"},
    {0x10, "sync boost"}, {0x20, "sw thermal"}, {0x40, "hw thermal"}, {0x80, "hw power brake"},
    {0x100, "display clock"},
};

static void nvml_open(void)
{
    nvml.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml.lib) {
        printf("profile: no NVML (%s): no clock readings\n", dlerror());
        return;
    }
    nvml_return (*init)(void) = dlsym(nvml.lib, "nvmlInit_v2");
    nvml_return (*by_index)(unsigned, nvml_device *) = dlsym(nvml.lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml_return (*by_bus)(const char *, nvml_device *) = dlsym(nvml.lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml.clock = dlsym(nvml.lib, "nvmlDeviceGetClockInfo");
    nvml.max_clock = dlsym(nvml.lib, "nvmlDeviceGetMaxClockInfo");
    nvml.power = dlsym(nvml.lib, "nvmlDeviceGetPowerUsage");
    nvml.temperature = dlsym(nvml.lib, "nvmlDeviceGetTemperature");
    nvml.reasons = dlsym(nvml.lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!nvml.reasons) nvml.reasons = dlsym(nvml.lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    nvml.error = dlsym(nvml.lib, "nvmlErrorString");
    nvml.shutdown = dlsym(nvml.lib, "nvmlShutdown");
    nvml_return st;
    if (!init || !by_index || !nvml.clock || !nvml.power || !nvml.error || !nvml.shutdown) {
        printf("profile: NVML lacks nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetClockInfo "
               "or nvmlDeviceGetPowerUsage: no clock readings\n");
    } else if ((st = init()) != 0) {
        printf("profile: nvmlInit_v2 failed: %s: no clock readings\n", nvml.error(st));
    } else {
        /* The board of CUDA device 0 (CUDA_VISIBLE_DEVICES may renumber), else NVML's first. */
        char bus[64];
        st = -1;
        if (by_bus && cudaDeviceGetPCIBusId(bus, sizeof bus, 0) == cudaSuccess) st = by_bus(bus, &nvml.dev);
        if (st != 0) st = by_index(0, &nvml.dev);
        if (st == 0) return;
        printf("profile: NVML has no handle for the device: %s: no clock readings\n", nvml.error(st));
        nvml.shutdown();
    }
    nvml.dev = NULL;
    dlclose(nvml.lib);
    nvml.lib = NULL;
}

static void nvml_close(void)
{
    if (!nvml.dev) return;
    nvml.shutdown();
    dlclose(nvml.lib);
    nvml.dev = NULL, nvml.lib = NULL;
}

void prof_clocks(const char *when)
{
    if (!nvml.dev) return;
    unsigned mhz, max_mhz, mw, celsius;
    unsigned long long bits;
    nvml_return st = nvml.clock(nvml.dev, NVML_CLOCK_SM, &mhz);
    if (st != 0) {
        printf("CLOCKS %s: nvmlDeviceGetClockInfo failed: %s\n", when, nvml.error(st));
        return;
    }
    printf("CLOCKS %-28s: SM %u MHz", when, mhz);
    if (nvml.max_clock && nvml.max_clock(nvml.dev, NVML_CLOCK_SM, &max_mhz) == 0) printf(" (max %u)", max_mhz);
    if ((st = nvml.power(nvml.dev, &mw)) == 0)
        printf(", power %.0f W", mw / 1e3);
    else
        printf(", power: %s", nvml.error(st));
    if (nvml.temperature && nvml.temperature(nvml.dev, NVML_TEMPERATURE_GPU, &celsius) == 0)
        printf(", %u C", celsius);
    if (nvml.reasons && nvml.reasons(nvml.dev, &bits) == 0) {
        printf(", limited by:");
        if (!bits) printf(" nothing");
        for (size_t i = 0; i < sizeof clock_reasons / sizeof *clock_reasons; i++)
            if (bits & clock_reasons[i].bit) printf(" %s;", clock_reasons[i].name);
    }
    printf("\n");
}

static struct {
    thrd_t thread;
    atomic_bool run;
    bool started;
    unsigned n, mhz_min, mhz_max, mw_min, mw_max; /* written by the thread until joined */
    double mhz_sum, mw_sum;
} watch;

static int watch_loop(void *arg)
{
    const struct timespec ms = {0, 1000000};
    while (atomic_load(&watch.run)) {
        unsigned mhz, mw;
        if (nvml.clock(nvml.dev, NVML_CLOCK_SM, &mhz) == 0 && nvml.power(nvml.dev, &mw) == 0) {
            if (watch.n == 0 || mhz < watch.mhz_min) watch.mhz_min = mhz;
            if (watch.n == 0 || mw < watch.mw_min) watch.mw_min = mw;
            if (mhz > watch.mhz_max) watch.mhz_max = mhz;
            if (mw > watch.mw_max) watch.mw_max = mw;
            watch.mhz_sum += mhz, watch.mw_sum += mw, watch.n++;
        }
        thrd_sleep(&ms, NULL);
    }
    return 0;
}

void prof_watch_start(void)
{
    if (!nvml.dev || watch.started) return;
    watch.n = watch.mhz_max = watch.mw_max = 0, watch.mhz_sum = watch.mw_sum = 0;
    atomic_store(&watch.run, true);
    watch.started = thrd_create(&watch.thread, watch_loop, NULL) == thrd_success;
    if (!watch.started) printf("profile: no clock-sampling thread: no clock samples\n");
}

void prof_watch_stop(const char *when)
{
    if (!watch.started) return;
    atomic_store(&watch.run, false);
    thrd_join(watch.thread, NULL);
    watch.started = false;
    if (watch.n == 0) {
        printf("CLOCKS %s: no samples\n", when);
        return;
    }
    printf("CLOCKS %-28s: SM %u / %.0f / %u MHz, power %.0f / %.0f / %.0f W (min / mean / max of %u "
           "samples ~1 ms apart)\n",
           when, watch.mhz_min, watch.mhz_sum / watch.n, watch.mhz_max, watch.mw_min / 1e3,
           watch.mw_sum / watch.n / 1e3, watch.mw_max / 1e3, watch.n);
}
