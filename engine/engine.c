/*
 * engine.c: backend-independent half of the engine: resolving --model, opening the weights,
 * checking each step against the invariants in engine.h, and dispatching to the backend chosen
 * at open through its table of function pointers.
 */
#include "engine/engine.h"
#include "engine/sampler.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/clock.h"
#include "core/kv.h"
#include "engine/weights.h"

static const engine_backend_ops *const backends[] = {&cuda_backend_ops, &cpu_backend_ops};

const char *engine_backend_names(void) { return "cuda, cpu"; }

void engine_opts_default(engine_opts *o)
{
    *o = (engine_opts){
        .backend = "cuda",
        .block_size = KV_DEFAULT_BLOCK_SIZE,
        .max_tokens = 2048,
        .max_seqs = 256,
        .cuda_graphs = true,
        .stream_seqs = -1,
    };
}

int engine_resolve_model(const char *spec, model_config *mc, bool *synthetic, terr *e)
{
    if (strncmp(spec, "synthetic:", 10) == 0) {
        *synthetic = true;
        return model_config_load(mc, spec + 10, e);
    }
    *synthetic = false;
    struct stat st;
    if (stat(spec, &st) != 0 || !S_ISDIR(st.st_mode))
        return terr_set(e, "--model: \"%s\" is not a checkpoint directory (or use synthetic:CONFIG)",
                        spec);
    return model_config_load(mc, spec, e);
}

int engine_open(engine *eng, const engine_opts *o, terr *e)
{
    *eng = (engine){0};
    eng->opts = *o;
    engine_opts *r = &eng->opts;
    for (size_t i = 0; i < ARRAY_LEN(backends); i++)
        if (r->backend && strcmp(r->backend, backends[i]->name) == 0) eng->ops = backends[i];
    if (!eng->ops)
        return terr_set(e, "--backend: \"%s\" is not one of: %s", r->backend ? r->backend : "",
                        engine_backend_names());
    if (!r->model) return terr_set(e, "--model is required");
    bool synthetic;
    if (engine_resolve_model(r->model, &eng->mc, &synthetic, e)) return ENGINE_ERR_INPUT;
    if (r->block_size < 1 || r->max_tokens < 1 || r->max_seqs < 1 || r->num_blocks < 0 ||
        r->max_model_len < 0 || r->num_host_blocks < 0)
        return terr_set(e, "engine: block_size, max_tokens and max_seqs must be positive");
    if (r->max_model_len == 0) r->max_model_len = eng->mc.max_position_embeddings;
    if (!eng->ops->kernel_meter) r->kernel_trace = false; /* no kernels to time (cpu) */
    eng->max_blocks_per_seq = (int32_t)div_ceil_i64(r->max_model_len, r->block_size);
    if (r->num_blocks == 0) {
        int64_t nb = (int64_t)r->max_seqs * eng->max_blocks_per_seq;
        if (nb > INT32_MAX / r->block_size)
            return terr_set(e, "engine: max_seqs x max_model_len is too large; give num_blocks");
        r->num_blocks = (int32_t)nb;
    }
    if ((int64_t)(r->num_blocks + 1) * r->block_size > INT32_MAX) /* + the pad block */
        return terr_set(e, "engine: num_blocks x block_size must fit in 31 bits (slot ids)");

    wt_source src;
    if (synthetic) {
        wt_source_synthetic(&src, r->weight_seed);
    } else if (wt_source_open_checkpoint(&src, &eng->mc, r->model, e)) {
        return ENGINE_ERR_INPUT;
    }
    if (r->num_host_blocks) eng->swap_seen = xcalloc((size_t)max_i32(r->num_blocks, r->num_host_blocks), 1);
    int rc = eng->ops->open(&eng->self, &eng->mc, r, &src, e);
    wt_source_close(&src);
    if (rc) {
        eng->self = NULL;
        free(eng->swap_seen);
        eng->swap_seen = NULL;
        return rc;
    }
    if (eng->ops->warmup) {
        int64_t t0 = clock_mono_ns();
        if ((rc = eng->ops->warmup(eng->self, e))) {
            engine_close(eng);
            return rc;
        }
        eng->warmup_ns = clock_mono_ns() - t0;
    }
    return 0;
}

void engine_close(engine *eng)
{
    if (eng->ops && eng->self) eng->ops->destroy(eng->self);
    free(eng->swap_seen);
    *eng = (engine){0};
}

static int check_step(const engine *eng, const eng_step *s, terr *e)
{
    const engine_opts *o = &eng->opts;
    int32_t T = s->num_tokens, B = s->num_seqs, bs = o->block_size, V = eng->mc.vocab_size;
    if (T < 1 || T > o->max_tokens)
        return terr_set(e, "step: %d tokens (the engine was opened for 1..%d)", T, o->max_tokens);
    if (B < 1 || B > o->max_seqs)
        return terr_set(e, "step: %d sequences (the engine was opened for 1..%d)", B, o->max_seqs);
    if (s->num_logits < 0 || s->num_logits > o->max_seqs)
        return terr_set(e, "step: %d logits rows (at most %d)", s->num_logits, o->max_seqs);
    if (s->query_start_loc[0] != 0 || s->query_start_loc[B] != T)
        return terr_set(e, "step: query_start_loc must run from 0 to num_tokens");
    /* Runs every step, on the host's critical path: the block-table and token-id scans are
     * branch-free (vectorised), and only a step that fails them is searched for its culprit. */
    for (int32_t b = 0; b < B; b++) {
        int32_t q0 = s->query_start_loc[b], n = s->query_start_loc[b + 1] - q0, len = s->seq_lens[b];
        if (n < 1) return terr_set(e, "step: sequence %d has no tokens", b);
        if (len < n || len > o->max_model_len)
            return terr_set(e, "step: sequence %d has length %d with %d new tokens (max_model_len %d)",
                            b, len, n, o->max_model_len);
        int32_t nblk = (len + bs - 1) / bs;
        if (nblk > s->block_table_stride)
            return terr_set(e, "step: sequence %d needs %d blocks, block table rows hold %d", b, nblk,
                            s->block_table_stride);
        const int32_t *bt = s->block_tables + (int64_t)b * s->block_table_stride;
        uint32_t bad = 0;
        for (int32_t k = 0; k < nblk; k++) bad |= (uint32_t)bt[k] > (uint32_t)o->num_blocks;
        if (bad)
            for (int32_t k = 0; k < nblk; k++)
                if (bt[k] < 0 || bt[k] > o->num_blocks)
                    return terr_set(e, "step: sequence %d block %d is %d (num_blocks %d, then the pad block)", b,
                                    k, bt[k], o->num_blocks);
        /* the rows' positions run to len - 1, and their slots follow the table */
        int32_t pos = len - n, blk = pos / bs, off = pos % bs;
        for (int32_t t = q0; t < q0 + n; t++, pos++) {
            if (s->positions[t] != pos)
                return terr_set(e, "step: row %d (sequence %d) has position %d, expected %d", t, b,
                                s->positions[t], pos);
            if (s->slot_mapping[t] != bt[blk] * bs + off)
                return terr_set(e, "step: row %d slot %d disagrees with the block table (%d)", t,
                                s->slot_mapping[t], bt[blk] * bs + off);
            if (++off == bs) off = 0, blk++;
        }
    }
    uint32_t bad = 0;
    for (int32_t t = 0; t < T; t++) bad |= (uint32_t)s->token_ids[t] >= (uint32_t)V;
    if (bad)
        for (int32_t t = 0; t < T; t++) {
            int32_t id = s->token_ids[t];
            if (id < 0 && -1 - (int64_t)id >= eng->num_sampled)
                return terr_set(e, "step: row %d token id %d names sampled row %lld, and the last sampling had %d rows",
                                t, id, -1 - (long long)id, eng->num_sampled);
            if (id >= V)
                return terr_set(e, "step: row %d token id %d is outside the vocabulary (%d)", t, id, V);
        }
    for (int32_t i = 0; i < s->num_logits; i++)
        if (s->logits_rows[i] < 0 || s->logits_rows[i] >= T)
            return terr_set(e, "step: logits row %d is %d (num_tokens %d)", i, s->logits_rows[i], T);
    return 0;
}

int engine_forward(engine *eng, const eng_step *s, terr *e)
{
    if (check_step(eng, s, e)) return ENGINE_ERR_INPUT;
    int rc = eng->ops->forward(eng->self, s, e);
    eng->last_num_logits = rc ? 0 : s->num_logits;
    return rc;
}

int engine_sample_start(engine *eng, const eng_sampling *sp, terr *e)
{
    int32_t n = eng->last_num_logits;
    for (int32_t i = 0; i < n; i++)
        if (!(sp->top_p[i] > 0 && sp->top_p[i] <= 1) || !(sp->temperature[i] >= 0) ||
            !(sp->uniform[i] >= 0 && sp->uniform[i] < 1))
            return terr_set(e, "sampling row %d: need temperature >= 0, top_p in (0, 1], u in [0, 1)",
                            i);
    if (eng->samp_unwaited == 2) return terr_set(e, "sampling: two samplings are already waiting to be read");
    int rc = eng->ops->sample_start(eng->self, n, sp, e);
    if (rc) return rc;
    eng->samp_rows[eng->samp_unwaited++] = eng->num_sampled = n;
    return 0;
}

int engine_sample_wait(engine *eng, int32_t *out, int32_t *nout, terr *e)
{
    if (eng->samp_unwaited == 0) return terr_set(e, "sampling: no sampling to wait for");
    int32_t n = eng->samp_rows[0];
    eng->samp_rows[0] = eng->samp_rows[1];
    eng->samp_unwaited--;
    if (nout) *nout = n;
    int rc = eng->ops->sample_wait(eng->self, n, out, e);
    if (rc) return rc;
    for (int32_t i = 0; i < n; i++)
        if (out[i] == SAMPLE_NOT_FINITE) {
            terr_set(e, "the logits of row %d hold NaN or +inf: the model's weights or arithmetic "
                        "broke down (check the checkpoint's values and config.json); stopping", i);
            return ENGINE_ERR_DEVICE;
        }
    return 0;
}

int engine_sample(engine *eng, const eng_sampling *sp, int32_t *out, terr *e)
{
    int rc = engine_sample_start(eng, sp, e);
    return rc ? rc : engine_sample_wait(eng, out, NULL, e);
}

int engine_logits(engine *eng, float *out, terr *e)
{
    return eng->ops->logits(eng->self, eng->last_num_logits, out, e);
}

int engine_sync(engine *eng, terr *e) { return eng->ops->sync(eng->self, e); }

ktrace_meter *engine_kernel_meter(engine *eng)
{
    return eng->opts.kernel_trace ? eng->ops->kernel_meter(eng->self) : NULL;
}

int engine_swap(engine *eng, bool to_host, int32_t n, const int32_t *dev, const int32_t *host, terr *e)
{
    const engine_opts *o = &eng->opts;
    if (n == 0) return 0;
    if (n < 0 || !eng->ops->swap || o->num_host_blocks == 0)
        return terr_set(e, "swap: the engine was opened without a host swap pool (num_host_blocks 0)");
    const int32_t *dst = to_host ? host : dev;
    uint8_t *seen = eng->swap_seen;
    int rc = 0;
    for (int32_t i = 0; i < n && !rc; i++) {
        if (dev[i] < 0 || dev[i] >= o->num_blocks || host[i] < 0 || host[i] >= o->num_host_blocks)
            rc = terr_set(e, "swap: block %d <-> host block %d is outside %d device / %d host blocks", dev[i],
                          host[i], o->num_blocks, o->num_host_blocks);
        else if (seen[dst[i]]++)
            rc = terr_set(e, "swap %s: %s block %d is written twice", to_host ? "out" : "in",
                          to_host ? "host" : "device", dst[i]);
    }
    for (int32_t i = 0; i < n; i++)
        if (dst[i] >= 0 && dst[i] < (to_host ? o->num_host_blocks : o->num_blocks)) seen[dst[i]] = 0;
    return rc ? ENGINE_ERR_INPUT : eng->ops->swap(eng->self, to_host, n, dev, host, e);
}
