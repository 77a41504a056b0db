/*
 * test_engine_cpu.c: the CPU reference engine on tiny random models (what CI runs; no GPU).
 *
 * What is proved: the paged layout is invisible (shuffled block ids give bit-identical logits);
 * chunked prefill, one-shot prefill and token-by-token decode agree, also when sequences in
 * different phases share one step; checkpoints round-trip through the safetensors writer and
 * reader (single file and shards); every kind of malformed file gives an error naming the file
 * and the tensor; llama3 RoPE scaling gives hand-computed frequencies; sampling picks the
 * argmax, stays in the top-p nucleus and repeats with the seed; `tandem generate --backend cpu`
 * prints the same ids every time and dumps positions x vocab logits.
 */
#include <gsl/gsl_rng.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/cpu_ops.h"
#if TANDEM_HAVE_CUDA
#include "kernels/kernels.h"
#endif
#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine/sampler.h"
#include "engine/weights.h"
#include "kernels/numerics.h"
#include "testutil.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static void open_cpu(engine *eng, const char *model, int32_t num_blocks)
{
    engine_opts o;
    engine_opts_default(&o);
    o.model = model;
    o.backend = "cpu";
    o.weight_seed = 42;
    o.block_size = 4; /* small blocks: every test sequence spans several */
    o.num_blocks = num_blocks;
    o.max_tokens = 64;
    o.max_seqs = 64;
    o.max_model_len = 128;
    terr e = {{0}};
    int rc = engine_open(eng, &o, &e);
    ck_assert_msg(rc == 0, "engine_open(%s): %s", model, e.msg);
}

/* A step over B sequences; sequence b has tokens seq[b][0 .. ctx[b] + n[b]) of which the last n[b]
 * are computed now, with block table bt + b*stride. Logits for every row into `logits` (T, V). */
static void run_step(engine *eng, int32_t B, int32_t *const *seq, const int32_t *ctx,
                     const int32_t *n, const int32_t *bt, int32_t stride, float *logits)
{
    int32_t T = 0, qsl[65], lens[64], toks[64], pos[64], slots[64], rows[64];
    int32_t bs = eng->opts.block_size;
    qsl[0] = 0;
    for (int32_t b = 0; b < B; b++) {
        for (int32_t i = 0; i < n[b]; i++, T++) {
            int32_t p = ctx[b] + i;
            toks[T] = seq[b][p];
            pos[T] = p;
            slots[T] = bt[b * stride + p / bs] * bs + p % bs;
            rows[T] = T;
        }
        qsl[b + 1] = T;
        lens[b] = ctx[b] + n[b];
    }
    eng_step s = {.num_tokens = T, .num_seqs = B, .token_ids = toks, .positions = pos,
                  .slot_mapping = slots, .query_start_loc = qsl, .seq_lens = lens,
                  .block_tables = bt, .block_table_stride = stride, .num_logits = T,
                  .logits_rows = rows};
    terr e = {{0}};
    ck_assert_msg(engine_forward(eng, &s, &e) == 0, "forward: %s", e.msg);
    ck_assert_msg(engine_logits(eng, logits, &e) == 0, "logits: %s", e.msg);
}

/* Runs one sequence of `len` tokens in chunks of `chunk`, collecting every position's logits. */
static void run_chunked(engine *eng, int32_t *seq, int32_t len, int32_t chunk, const int32_t *bt,
                        int32_t stride, float *logits)
{
    int32_t V = eng->mc.vocab_size;
    for (int32_t done = 0; done < len;) {
        int32_t n = min_i32(chunk, len - done);
        run_step(eng, 1, &seq, &done, &n, bt, stride, logits + (int64_t)done * V);
        done += n;
    }
}

static double max_abs_diff(const float *a, const float *b, int64_t n, double *max_ref)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    if (max_ref) *max_ref = m;
    return d;
}

static void shuffled(int32_t *ids, int32_t n, unsigned long seed)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, seed);
    for (int32_t i = 0; i < n; i++) ids[i] = i;
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = (int32_t)gsl_rng_uniform_int(r, (unsigned long)i + 1), t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    gsl_rng_free(r);
}

static void random_tokens(int32_t *t, int32_t n, int32_t vocab, unsigned long seed)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, seed);
    for (int32_t i = 0; i < n; i++) t[i] = (int32_t)gsl_rng_uniform_int(r, (unsigned long)vocab);
    gsl_rng_free(r);
}

/* ---- paging and chunking -------------------------------------------------------------------- */

static void check_paged_equals_contiguous(const char *model)
{
    engine a, b;
    open_cpu(&a, model, 32);
    open_cpu(&b, model, 32);
    int32_t V = a.mc.vocab_size, len = 37, seq[37];
    random_tokens(seq, len, V, 1);
    int32_t contiguous[32], shuffle[32];
    for (int32_t i = 0; i < 32; i++) contiguous[i] = i;
    shuffled(shuffle, 32, 2);
    float *la = xmalloc(sizeof(float) * (size_t)(len * V)), *lb = xmalloc(sizeof(float) * (size_t)(len * V));
    run_chunked(&a, seq, len, len, contiguous, 32, la);
    run_chunked(&b, seq, len, len, shuffle, 32, lb);
    ck_assert_msg(memcmp(la, lb, sizeof(float) * (size_t)(len * V)) == 0,
                  "%s: logits with shuffled block ids differ from contiguous ones (max |diff| %g)",
                  model, max_abs_diff(la, lb, (int64_t)len * V, NULL));
    free(la), free(lb);
    engine_close(&a), engine_close(&b);
}

START_TEST(paged_equals_contiguous)
{
    check_paged_equals_contiguous("synthetic:tiny-llama2");
    check_paged_equals_contiguous("synthetic:tiny-llama3");
}
END_TEST

static void check_chunking(const char *model)
{
    engine eng;
    open_cpu(&eng, model, 32);
    int32_t V = eng.mc.vocab_size, len = 29, seq[29], bt[32];
    random_tokens(seq, len, V, 3);
    shuffled(bt, 32, 4);
    int64_t n = (int64_t)len * V;
    float *one = xmalloc(sizeof(float) * (size_t)n), *other = xmalloc(sizeof(float) * (size_t)n);
    run_chunked(&eng, seq, len, len, bt, 32, one); /* one-shot prefill */
    int32_t chunks[] = {1, 5, 8};                  /* token-by-token decode, then chunked prefill */
    for (size_t c = 0; c < ARRAY_LEN(chunks); c++) {
        run_chunked(&eng, seq, len, chunks[c], bt, 32, other);
        double ref, d = max_abs_diff(other, one, n, &ref);
        ck_assert_msg(d <= 1e-5 * (1 + ref),
                      "%s: chunks of %d tokens differ from one-shot prefill by %g (max |logit| %g)",
                      model, chunks[c], d, ref);
    }
    free(one), free(other);
    engine_close(&eng);
}

START_TEST(chunked_prefill_equals_one_shot_and_decode)
{
    check_chunking("synthetic:tiny-llama2");
    check_chunking("synthetic:tiny-llama3");
}
END_TEST

/* Three sequences in different phases share one step; each row must match a solo run. */
START_TEST(mixed_batch_equals_solo_runs)
{
    engine solo, mixed;
    open_cpu(&solo, "synthetic:tiny-llama3", 48);
    open_cpu(&mixed, "synthetic:tiny-llama3", 48);
    int32_t V = solo.mc.vocab_size, stride = 16;
    int32_t a[12], b[10], c[6];
    random_tokens(a, 12, V, 5), random_tokens(b, 10, V, 6), random_tokens(c, 6, V, 7);
    int32_t *seqs[3] = {a, b, c}, lens[3] = {12, 10, 6};
    int32_t perm[48], bt[3 * 16];
    shuffled(perm, 48, 8);
    for (int32_t i = 0; i < 3 * 16; i++) bt[i] = perm[i];
    float *ref = xmalloc(sizeof(float) * (size_t)(12 * V));
    float *got = xmalloc(sizeof(float) * (size_t)(64 * V));

    /* step 1: a prefills [0, 7), b prefills [0, 9). step 2: a prefills its last chunk [7, 12),
     * b decodes position 9, c prefills all of [0, 6). */
    int32_t ctx1[2] = {0, 0}, n1[2] = {7, 9};
    run_step(&mixed, 2, seqs, ctx1, n1, bt, stride, got);
    int32_t ctx2[3] = {7, 9, 0}, n2[3] = {5, 1, 6};
    run_step(&mixed, 3, seqs, ctx2, n2, bt, stride, got);

    int32_t row = 0;
    for (int32_t s = 0; s < 3; s++) {
        run_chunked(&solo, seqs[s], lens[s], lens[s], bt + s * stride, stride, ref);
        for (int32_t i = 0; i < n2[s]; i++, row++) {
            const float *r = ref + (int64_t)(ctx2[s] + i) * V, *g = got + (int64_t)row * V;
            double mref, d = max_abs_diff(g, r, V, &mref);
            ck_assert_msg(d <= 1e-5 * (1 + mref),
                          "sequence %d position %d: mixed-batch logits differ from a solo run by %g",
                          s, ctx2[s] + i, d);
        }
    }
    free(ref), free(got);
    engine_close(&solo), engine_close(&mixed);
}
END_TEST

START_TEST(bad_steps_are_errors)
{
    engine eng;
    open_cpu(&eng, "synthetic:tiny-llama2", 8);
    int32_t tok[2] = {1, 2}, pos[2] = {0, 1}, slots[2] = {0, 1}, qsl[2] = {0, 2}, len = 2,
            bt[2] = {0, 1}, row = 1;
    eng_step s = {.num_tokens = 2, .num_seqs = 1, .token_ids = tok, .positions = pos,
                  .slot_mapping = slots, .query_start_loc = qsl, .seq_lens = &len,
                  .block_tables = bt, .block_table_stride = 2, .num_logits = 1, .logits_rows = &row};
    terr e = {{0}};
    ck_assert_int_eq(engine_forward(&eng, &s, &e), 0);
    pos[1] = 3;
    ck_assert_int_eq(engine_forward(&eng, &s, &e), ENGINE_ERR_INPUT);
    ck_assert_msg(strstr(e.msg, "position"), "message: %s", e.msg);
    pos[1] = 1, slots[1] = 7;
    ck_assert_int_eq(engine_forward(&eng, &s, &e), ENGINE_ERR_INPUT);
    ck_assert_msg(strstr(e.msg, "slot"), "message: %s", e.msg);
    slots[1] = 1, tok[0] = 100000;
    ck_assert_int_eq(engine_forward(&eng, &s, &e), ENGINE_ERR_INPUT);
    ck_assert_msg(strstr(e.msg, "vocabulary"), "message: %s", e.msg);
    tok[0] = 1, bt[0] = 99;
    ck_assert_int_eq(engine_forward(&eng, &s, &e), ENGINE_ERR_INPUT);
    ck_assert_msg(strstr(e.msg, "num_blocks"), "message: %s", e.msg);
    /* a swap without a host pool, then with one: ids in range, no destination twice */
    int32_t dev[2] = {0, 1}, host[2] = {0, 0};
    ck_assert_int_eq(engine_swap(&eng, true, 1, dev, host, &e), -1);
    ck_assert_msg(strstr(e.msg, "host swap pool"), "message: %s", e.msg);
    engine_close(&eng);
    engine_opts o;
    engine_opts_default(&o);
    o.model = "synthetic:tiny-llama2", o.backend = "cpu", o.num_blocks = 8, o.num_host_blocks = 4;
    o.max_model_len = 128;
    ck_assert_int_eq(engine_open(&eng, &o, &e), 0);
    ck_assert_int_eq(engine_swap(&eng, true, 2, dev, host, &e), ENGINE_ERR_INPUT);
    ck_assert_msg(strstr(e.msg, "host block 0 is written twice"), "message: %s", e.msg);
    ck_assert_int_eq(engine_swap(&eng, false, 2, dev, host, &e), 0); /* two reads of one host block */
    host[1] = 4;
    ck_assert_int_eq(engine_swap(&eng, true, 2, dev, host, &e), ENGINE_ERR_INPUT);
    ck_assert_msg(strstr(e.msg, "outside 8 device / 4 host blocks"), "message: %s", e.msg);
    dev[1] = 8, host[1] = 1; /* the pad block is the engine's, not the scheduler's */
    ck_assert_int_eq(engine_swap(&eng, true, 2, dev, host, &e), ENGINE_ERR_INPUT);
    engine_close(&eng);
}
END_TEST

/* ---- safetensors ---------------------------------------------------------------------------- */

static char *save_synthetic(const char *model_name, const char *tag)
{
    char *dir = make_temp_dir(tag);
    model_config mc;
    terr e = {{0}};
    ck_assert_msg(model_config_load(&mc, model_name, &e) == 0, "%s", e.msg);
    wt_source src;
    wt_source_synthetic(&src, 42);
    ck_assert_msg(wt_write_checkpoint(&src, &mc, dir, &e) == 0, "%s", e.msg);
    return dir;
}

START_TEST(safetensors_round_trip)
{
    char *dir = save_synthetic("tiny-llama2", "st-rt");
    model_config mc;
    terr e = {{0}};
    ck_assert_msg(model_config_load(&mc, dir, &e) == 0, "%s", e.msg);
    wt_source ck, syn;
    ck_assert_msg(wt_source_open_checkpoint(&ck, &mc, dir, &e) == 0, "%s", e.msg);
    wt_source_synthetic(&syn, 42);
    int32_t n = wt_count(&mc);
    wt_tensor *ts = xcalloc((size_t)n, sizeof *ts);
    wt_list(&mc, ts);
    for (int32_t i = 0; i < n; i++) {
        size_t k = (size_t)(ts[i].rows * ts[i].cols);
        uint16_t *x = xmalloc(2 * k), *y = xmalloc(2 * k);
        ck_assert_int_eq(wt_read_bf16(&ck, &ts[i], x, &e), 0);
        ck_assert_int_eq(wt_read_bf16(&syn, &ts[i], y, &e), 0);
        ck_assert_msg(memcmp(x, y, 2 * k) == 0, "tensor %s changed in the round trip", ts[i].name);
        free(x), free(y);
    }
    free(ts);
    wt_source_close(&ck);
    free(dir);
}
END_TEST

static const void *array_bytes(void *ctx, int32_t i, terr *e)
{
    (void)e;
    return ((const void *const *)ctx)[i];
}

START_TEST(safetensors_f32_f16_round_trip)
{
    char *dir = make_temp_dir("st-f32"), path[4096];
    snprintf(path, sizeof path, "%s/mixed.safetensors", dir);
    float f32[6] = {1.5f, -2.25f, 3e-3f, 0, 65504, -1e-7f};
    uint16_t f16[4] = {0x3c00, 0xc000, 0x0001, 0x7bff}; /* 1, -2, smallest subnormal, 65504 */
    st_write_tensor w[2] = {{"a", ST_F32, 2, {2, 3}}, {"b", ST_F16, 1, {4}}};
    const void *data[2] = {f32, f16};
    terr e = {{0}};
    ck_assert_msg(st_write(path, w, 2, array_bytes, data, &e) == 0, "%s", e.msg);
    st_file f;
    ck_assert_msg(st_open(&f, path, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(f.num_tensors, 2);
    const st_tensor *a = st_find(&f, "a"), *b = st_find(&f, "b");
    ck_assert(a && b && a->dtype == ST_F32 && b->dtype == ST_F16);
    ck_assert(a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && b->ndim == 1 && b->shape[0] == 4);
    ck_assert(memcmp(st_tensor_data(&f, a), f32, sizeof f32) == 0);
    uint16_t got[4];
    memcpy(got, st_tensor_data(&f, b), sizeof got);
    float want[4] = {1.0f, -2.0f, 5.9604645e-8f, 65504.0f};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(f16_to_f32(got[i]) == want[i], "f16 %#x -> %g, want %g", got[i],
                      f16_to_f32(got[i]), want[i]);
    ck_assert_msg((size_t)((const uint8_t *)st_tensor_data(&f, a) - f.map) % 8 == 0,
                  "data should start 8-byte aligned");
    st_close(&f);
    free(dir);
}
END_TEST

/* A checkpoint split over two shards with an index loads the same weights (and logits). */
START_TEST(sharded_checkpoint_equals_single_file)
{
    model_config mc;
    terr e = {{0}};
    ck_assert_msg(model_config_load(&mc, "tiny-llama3", &e) == 0, "%s", e.msg);
    char *dir = make_temp_dir("st-shards");
    wt_source syn;
    wt_source_synthetic(&syn, 42);
    ck_assert_msg(wt_write_checkpoint(&syn, &mc, dir, &e) == 0, "%s", e.msg); /* config.json */
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    int32_t n = wt_count(&mc), half = n / 2;
    wt_tensor *ts = xcalloc((size_t)n, sizeof *ts);
    wt_list(&mc, ts);
    st_write_tensor *w = xcalloc((size_t)n, sizeof *w);
    const void **data = xcalloc((size_t)n, sizeof *data);
    for (int32_t i = 0; i < n; i++) {
        w[i] = (st_write_tensor){ts[i].name, ST_BF16, ts[i].ndim, {ts[i].rows, ts[i].cols}};
        uint16_t *buf = xmalloc((size_t)(2 * ts[i].rows * ts[i].cols));
        wt_read_bf16(&syn, &ts[i], buf, &e);
        data[i] = buf;
    }
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    ck_assert_msg(st_write(path, w, half, array_bytes, data, &e) == 0, "%s", e.msg);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    ck_assert_msg(st_write(path, w + half, n - half, array_bytes, data + half, &e) == 0, "%s", e.msg);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
    for (int32_t i = 0; i < n; i++)
        fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", ts[i].name,
                i < half ? 1 : 2);
    fprintf(f, "}}\n");
    fclose(f);

    engine a, b;
    open_cpu(&a, dir, 16);
    open_cpu(&b, "synthetic:tiny-llama3", 16);
    int32_t V = mc.vocab_size, seq[9], bt[16];
    random_tokens(seq, 9, V, 11);
    for (int32_t i = 0; i < 16; i++) bt[i] = i;
    float *la = xmalloc(sizeof(float) * (size_t)(9 * V)), *lb = xmalloc(sizeof(float) * (size_t)(9 * V));
    run_chunked(&a, seq, 9, 9, bt, 16, la);
    run_chunked(&b, seq, 9, 9, bt, 16, lb);
    ck_assert_msg(memcmp(la, lb, sizeof(float) * (size_t)(9 * V)) == 0,
                  "sharded checkpoint gives other logits than the synthetic weights it holds");
    engine_close(&a), engine_close(&b);
    for (int32_t i = 0; i < n; i++) free((void *)data[i]);
    free(data), free(w), free(ts), free(la), free(lb), free(dir);
}
END_TEST

/* ---- malformed files ------------------------------------------------------------------------ */

/* Writes an 8-byte length (hlen_override if nonzero), the header text, and `data_len` bytes. */
static char *write_raw(const char *dir, const char *name, const char *header, uint64_t hlen_override,
                       size_t data_len)
{
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    uint64_t hlen = hlen_override ? hlen_override : strlen(header);
    for (int i = 0; i < 8; i++) fputc((int)((hlen >> (8 * i)) & 0xff), f);
    fputs(header, f);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i * 7 & 0xff), f);
    fclose(f);
    return path;
}

static void expect_st_error(const char *path, const char *what, const char *tensor, const char *why)
{
    st_file f;
    terr e = {{0}};
    int rc = st_open(&f, path, &e);
    ck_assert_msg(rc == -1, "%s: st_open accepted a file with %s", path, why);
    ck_assert_msg(strstr(e.msg, path), "%s: message does not name the file: %s", why, e.msg);
    if (tensor) ck_assert_msg(strstr(e.msg, tensor), "%s: message does not name \"%s\": %s", why, tensor, e.msg);
    ck_assert_msg(strstr(e.msg, what), "%s: message lacks \"%s\": %s", why, what, e.msg);
}

START_TEST(malformed_safetensors_are_clear_errors)
{
    char *dir = make_temp_dir("st-bad");
    const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    char *p = write_raw(dir, "ok.safetensors", ok, 0, 16);
    st_file f;
    terr e = {{0}};
    ck_assert_msg(st_open(&f, p, &e) == 0, "control file rejected: %s", e.msg);
    st_close(&f);
    free(p);

    p = write_raw(dir, "truncated.safetensors", ok, 0, 10);
    expect_st_error(p, "truncated", "\"w\"", "data cut short");
    free(p);
    p = write_raw(dir, "short.safetensors", "", 0, 0);
    truncate(p, 5);
    expect_st_error(p, "too short", NULL, "a 5-byte file");
    free(p);
    p = write_raw(dir, "hlen.safetensors", ok, 1ull << 40, 16);
    expect_st_error(p, "header length", NULL, "a header length beyond the file");
    free(p);
    p = write_raw(dir, "json.safetensors", "{\"w\":{\"dtype\":\"F32\",", 0, 16);
    expect_st_error(p, "JSON", NULL, "bad JSON");
    free(p);
    p = write_raw(dir, "dtype.safetensors",
                  "{\"w\":{\"dtype\":\"Q4\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 0, 16);
    expect_st_error(p, "unknown dtype", "\"w\"", "an unknown dtype");
    free(p);
    p = write_raw(dir, "size.safetensors",
                  "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 0, 24);
    expect_st_error(p, "need 24", "\"w\"", "offsets that disagree with the shape");
    free(p);
    p = write_raw(dir, "oob.safetensors",
                  "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[32,48]}}", 0, 16);
    expect_st_error(p, "past the end", "\"w\"", "out-of-bounds offsets");
    free(p);
    p = write_raw(dir, "neg.safetensors",
                  "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", 0, 16);
    expect_st_error(p, "shape", "\"w\"", "a negative dimension");
    free(p);
    p = write_raw(dir, "overlap.safetensors",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 0, 16);
    expect_st_error(p, "overlap", "\"b\"", "overlapping tensors");
    free(p);
    /* an index whose second shard name is bad, after a good one (found by fuzz_safetensors_index:
     * it crashed closing shards it had counted but not opened) */
    char sub[4300];
    snprintf(sub, sizeof sub, "%s/idx", dir);
    mkdir(sub, 0755);
    char *ip = write_temp_file(sub, "model.safetensors.index.json",
                               "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"b/../a.safetensors\"}}");
    st_checkpoint ck;
    terr ie = {{0}};
    ck_assert_msg(st_checkpoint_open(&ck, sub, &ie) == -1 && strstr(ie.msg, "weight_map[\"y\"] must be a file name"),
                  "a shard name with a slash: %s", ie.msg);
    free(ip);
    free(dir);
}
END_TEST

/* A complete tiny-llama2 checkpoint in which one tensor is altered by `mutate`. */
static char *checkpoint_with(const char *tag, void (*mutate)(st_write_tensor *w, int32_t n))
{
    char *dir = save_synthetic("tiny-llama2", tag), path[4096];
    model_config mc;
    terr e = {{0}};
    model_config_load(&mc, "tiny-llama2", &e);
    int32_t n = wt_count(&mc);
    wt_tensor *ts = xcalloc((size_t)n, sizeof *ts);
    wt_list(&mc, ts);
    st_write_tensor *w = xcalloc((size_t)n, sizeof *w);
    for (int32_t i = 0; i < n; i++)
        w[i] = (st_write_tensor){xstrdup(ts[i].name), ST_BF16, ts[i].ndim, {ts[i].rows, ts[i].cols}};
    mutate(w, n);
    size_t most = 0;
    for (int32_t i = 0; i < n; i++) {
        int64_t k = 1;
        for (int32_t d = 0; d < w[i].ndim; d++) k *= w[i].shape[d];
        most = (size_t)max_i64((int64_t)most, k * st_dtype_size(w[i].dtype));
    }
    void *zeros = xcalloc(most, 1);
    const void **data = xcalloc((size_t)n, sizeof *data);
    for (int32_t i = 0; i < n; i++) data[i] = zeros;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(st_write(path, w, n, array_bytes, data, &e) == 0, "%s", e.msg);
    for (int32_t i = 0; i < n; i++) free((char *)w[i].name);
    free(zeros), free(data), free(w), free(ts);
    return dir;
}

#define Q0 "model.layers.0.self_attn.q_proj.weight"
static void wrong_shape(st_write_tensor *w, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(w[i].name, Q0)) w[i].shape[1] += 1;
}
static void wrong_dtype(st_write_tensor *w, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(w[i].name, Q0)) w[i].dtype = ST_I32;
}
static void missing_norm(st_write_tensor *w, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(w[i].name, "model.norm.weight")) ((char *)w[i].name)[0] = 'x';
}

static void expect_model_error(const char *dir, const char *tensor, const char *what)
{
    engine eng;
    engine_opts o;
    engine_opts_default(&o);
    o.model = dir;
    o.backend = "cpu";
    o.max_model_len = 64;
    o.max_seqs = 1;
    terr e = {{0}};
    int rc = engine_open(&eng, &o, &e);
    ck_assert_msg(rc == ENGINE_ERR_INPUT, "a checkpoint with %s was accepted", what);
    ck_assert_msg(strstr(e.msg, "model.safetensors"), "message does not name the file: %s", e.msg);
    ck_assert_msg(strstr(e.msg, tensor), "message does not name %s: %s", tensor, e.msg);
    ck_assert_msg(strstr(e.msg, what), "message lacks \"%s\": %s", what, e.msg);
}

START_TEST(checkpoint_with_wrong_tensors_is_clear_error)
{
    char *d = checkpoint_with("ck-shape", wrong_shape);
    expect_model_error(d, Q0, "shape");
    free(d);
    d = checkpoint_with("ck-dtype", wrong_dtype);
    expect_model_error(d, Q0, "dtype");
    free(d);
    d = checkpoint_with("ck-missing", missing_norm);
    expect_model_error(d, "model.norm.weight", "missing");
    free(d);
}
END_TEST

/* ---- RoPE ----------------------------------------------------------------------------------- */

START_TEST(rope_llama3_scaling_matches_hand_computed)
{
    model_config mc;
    terr e = {{0}};
    ck_assert_msg(model_config_load(&mc, "llama-3.1-8b", &e) == 0, "%s", e.msg);
    float inv[64];
    cpu_rope_inv_freq(&mc, inv);
    /* theta 500000, hd 128, factor 8, low 1, high 4, original 8192; worked out by hand from the
     * formula in the Llama 3.1 release: wavelengths under 2048 unchanged (i <= 28), over 8192
     * divided by 8 (i >= 35), smoothly interpolated between. */
    struct { int i; double want; } cases[] = {
        {0, 1.0},                  {20, 0.016560440080994446},    {29, 0.002166570763503359},
        {32, 5.248461609929547e-4}, {34, 1.785078127679964e-4},  {35, 9.556212353964683e-05},
        {50, 4.411534674558404e-06}, {63, 3.068925988914511e-07},
    };
    for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
        double got = inv[cases[k].i], want = cases[k].want;
        ck_assert_msg(fabs(got - want) <= 2e-6 * want, "inv_freq[%d] = %.9g, want %.9g", cases[k].i,
                      got, want);
    }
    /* And the rotation itself: a unit vector along dim i rotated by pos*inv_freq[i] into dim
     * i + hd/2 (rotate_half pairing). */
    model_config_load(&mc, "tiny-llama3", &e);
    int32_t hd = mc.head_dim, nh = mc.num_heads, nkv = mc.num_kv_heads, stride = (nh + 2 * nkv) * hd;
    float f[64], *qkv = xcalloc((size_t)stride, sizeof(float));
    cpu_rope_inv_freq(&mc, f);
    qkv[3] = 1.0f;
    int32_t pos = 7;
    cpu_rope(qkv, &pos, 1, nh, nkv, hd, f);
    ck_assert_msg(fabs(qkv[3] - cos(7.0 * f[3])) < 1e-6 && fabs(qkv[3 + hd / 2] - sin(7.0 * f[3])) < 1e-6,
                  "rotate_half pairing: got (%g, %g)", qkv[3], qkv[3 + hd / 2]);
    free(qkv);
}
END_TEST

/* ---- sampling ------------------------------------------------------------------------------- */

START_TEST(sampling_greedy_top_p_and_seed)
{
    float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f};
    ck_assert_int_eq(sample_argmax(logits, 6), 1); /* tie: lowest id */
    ck_assert_int_eq(sample_row(logits, 6, 0.0f, 0.5f, 0.99f, NULL), 1);

    /* probabilities 0.5, 0.3, 0.15, 0.05 (ids 2, 0, 3, 1): top_p 0.7 keeps {2, 0}. */
    float l2[4] = {logf(0.3f), logf(0.05f), logf(0.5f), logf(0.15f)}, scratch[4];
    int hits[4] = {0};
    for (int k = 0; k < 1000; k++) hits[sample_top_p(l2, 4, 1.0f, 0.7f, k / 1000.0f, scratch)]++;
    ck_assert_msg(hits[1] == 0 && hits[3] == 0, "top_p 0.7 sampled outside {0, 2}: %d %d %d %d",
                  hits[0], hits[1], hits[2], hits[3]);
    /* In id order the nucleus is 0 (0.3) then 2 (0.5): u < 0.3/0.8 picks 0. */
    ck_assert_int_eq(hits[0], 375);
    ck_assert_int_eq(hits[2], 625);
    /* top_p 0.95 adds id 3; top_p 1 keeps everything. */
    ck_assert_int_eq(sample_top_p(l2, 4, 1.0f, 0.95f, 0.99f, scratch), 3);
    ck_assert_int_eq(sample_top_p(l2, 4, 1.0f, 1.0f, 0.999f, scratch), 3);
    ck_assert_int_eq(sample_top_p(l2, 4, 1.0f, 1.0f, 0.0f, scratch), 0);
    /* A tiny temperature is (almost) greedy. */
    ck_assert_int_eq(sample_top_p(l2, 4, 1e-3f, 1.0f, 0.999f, scratch), 2);
}
END_TEST

/* ---- the CLI ---------------------------------------------------------------------------------- */

START_TEST(cli_generate_is_deterministic_and_dumps_logits)
{
    char *dir = make_temp_dir("cli"), dump[4096];
    snprintf(dump, sizeof dump, "%s/logits.bin", dir);
    cli_result a = run_cli("generate", "--model", "synthetic:tiny-llama2", "--backend", "cpu",
                           "--prompt-ids", "1,2,3,4,5", "--max-tokens", "12", "--dump-logits", dump,
                           NULL);
    ck_assert_msg(a.exit_code == 0, "exit %d: %s", a.exit_code, a.err);
    cli_result b = run_cli("generate", "--model", "synthetic:tiny-llama2", "--backend", "cpu",
                           "--prompt-ids", "1,2,3,4,5", "--max-tokens", "12", "--prefill-chunk", "2",
                           NULL);
    ck_assert_msg(b.exit_code == 0, "exit %d: %s", b.exit_code, b.err);
    ck_assert_msg(strcmp(a.out, b.out) == 0, "greedy ids differ between runs:\n%s%s", a.out, b.out);
    /* Golden ids: a change here means the forward pass changed (or the synthetic weights). */
    ck_assert_str_eq(a.out, "234,311,89,35,326,103,103,103,270,83,360,401\n");
    size_t len;
    char *bytes = slurp(dump, &len);
    ck_assert_msg(bytes && len == 12 * 512 * sizeof(float), "dump is %zu bytes, want 12 x 512 floats", len);
    /* Each dumped row's argmax is the token printed for it. */
    char *p = a.out;
    for (int r = 0; r < 12; r++) {
        int tok = (int)strtol(p, &p, 10);
        p++;
        ck_assert_int_eq(sample_argmax((const float *)bytes + r * 512, 512), tok);
    }
    free(bytes);

    cli_result s1 = run_cli("generate", "--model", "synthetic:tiny-llama3", "--backend", "cpu",
                            "--prompt-ids", "7,8,9", "--max-tokens", "10", "--temperature", "0.9",
                            "--top-p", "0.9", "--seed", "5", NULL);
    cli_result s2 = run_cli("generate", "--model", "synthetic:tiny-llama3", "--backend", "cpu",
                            "--prompt-ids", "7,8,9", "--max-tokens", "10", "--temperature", "0.9",
                            "--top-p", "0.9", "--seed", "5", NULL);
    cli_result s3 = run_cli("generate", "--model", "synthetic:tiny-llama3", "--backend", "cpu",
                            "--prompt-ids", "7,8,9", "--max-tokens", "10", "--temperature", "0.9",
                            "--top-p", "0.9", "--seed", "6", NULL);
    ck_assert_msg(s1.exit_code == 0 && s3.exit_code == 0, "%s", s1.err);
    ck_assert_msg(!strcmp(s1.out, s2.out), "same seed, other tokens:\n%s%s", s1.out, s2.out);
    ck_assert_msg(strcmp(s1.out, s3.out), "seeds 5 and 6 gave the same 10 sampled tokens: %s", s1.out);
    cli_result_free(&a), cli_result_free(&b), cli_result_free(&s1), cli_result_free(&s2),
        cli_result_free(&s3);
    free(dir);
}
END_TEST

/* Runs `tandem generate` on checkpoint `model` and returns its dumped logits (malloc'd). */
static char *logits_of(const char *model, const char *dump, size_t *len)
{
    cli_result r = run_cli("generate", "--model", model, "--backend", "cpu", "--prompt-ids", "3,1,4,1,5,9,2,6",
                           "--max-tokens", "4", "--ignore-eos", "--dump-logits", dump, NULL);
    ck_assert_msg(r.exit_code == 0, "generate %s: %s", model, r.err);
    cli_result_free(&r);
    char *bytes = slurp(dump, len);
    ck_assert_msg(bytes && *len > 0, "no logits from %s", model);
    return bytes;
}

/* The checkpoint in dir with its config.json rewritten by `edit` (the weights shared). */
static char *checkpoint_with_config(const char *base, const char *name, void (*edit)(json_t *cfg, void *ud), void *ud)
{
    char path[4200], weights[4300], target[4300];
    snprintf(path, sizeof path, "%s/%s", base, name);
    ck_assert(mkdir_p(path) == 0);
    snprintf(target, sizeof target, "%s/orig/model.safetensors", base);
    snprintf(weights, sizeof weights, "%s/model.safetensors", path);
    ck_assert_msg(symlink(target, weights) == 0, "symlink %s", weights);
    snprintf(target, sizeof target, "%s/orig/config.json", base);
    json_error_t je;
    json_t *cfg = json_load_file(target, 0, &je);
    ck_assert_msg(cfg, "%s: %s", target, je.text);
    edit(cfg, ud);
    snprintf(target, sizeof target, "%s/config.json", path);
    ck_assert(json_dump_file(cfg, target, JSON_INDENT(2)) == 0);
    json_decref(cfg);
    return strdup(path);
}

/* transformers 5's spelling: rope_theta and rope_scaling folded into rope_parameters, dtype for
 * torch_dtype, eos_token_id as a list. `ud` scales the llama3 factor (1: unchanged). */
static void to_transformers5(json_t *cfg, void *ud)
{
    json_t *rp = json_deep_copy(json_object_get(cfg, "rope_scaling"));
    ck_assert_msg(json_is_object(rp), "the base config has no rope_scaling to fold");
    json_object_set(rp, "rope_theta", json_object_get(cfg, "rope_theta"));
    json_object_set_new(rp, "factor", json_real(json_number_value(json_object_get(rp, "factor")) * *(double *)ud));
    json_object_set_new(cfg, "rope_parameters", rp);
    json_object_del(cfg, "rope_theta");
    json_object_del(cfg, "rope_scaling");
    json_object_set(cfg, "dtype", json_object_get(cfg, "torch_dtype"));
    json_object_del(cfg, "torch_dtype");
    json_object_set_new(cfg, "eos_token_id", json_pack("[O, i]", json_object_get(cfg, "eos_token_id"), 99));
}

/* A checkpoint saved by transformers 5 loads as the same model as the older spelling: equal
 * logits, bit for bit. And the new spelling is read, not defaulted: another factor in it changes
 * them. */
START_TEST(checkpoint_configs_of_transformers_4_and_5_give_equal_logits)
{
    char *dir = make_temp_dir("cfg5"), orig[4200], dump[4300];
    snprintf(orig, sizeof orig, "%s/orig", dir);
    cli_result r = run_cli("generate", "--model", "synthetic:tiny-llama3", "--weight-seed", "3", "--save-checkpoint",
                           orig, NULL);
    ck_assert_msg(r.exit_code == 0, "save: %s", r.err);
    cli_result_free(&r);
    double same = 1, other = 2;
    char *v5 = checkpoint_with_config(dir, "v5", to_transformers5, &same);
    char *v5b = checkpoint_with_config(dir, "v5-factor", to_transformers5, &other);
    size_t n4, n5, nb;
    snprintf(dump, sizeof dump, "%s/l4.bin", dir);
    char *l4 = logits_of(orig, dump, &n4);
    snprintf(dump, sizeof dump, "%s/l5.bin", dir);
    char *l5 = logits_of(v5, dump, &n5);
    snprintf(dump, sizeof dump, "%s/l5b.bin", dir);
    char *l5b = logits_of(v5b, dump, &nb);
    ck_assert_msg(n4 == n5 && !memcmp(l4, l5, n4), "the transformers 5 config gives other logits");
    ck_assert_msg(n4 != nb || memcmp(l4, l5b, n4), "rope_parameters' factor changed nothing: it was not read");
    free(l4), free(l5), free(l5b), free(v5), free(v5b), free(dir);
}
END_TEST

/* Generation stops after the model's EOS token (printed, and its logits dumped) unless
 * --ignore-eos: tiny-llama2 with eos_token_id set to 103, the golden sequence's sixth token. */
START_TEST(cli_generate_stops_at_eos)
{
    char *dir = make_temp_dir("eos"), dump[4096];
    size_t n;
    char *json = slurp("configs/models/tiny-llama2.json", &n);
    ck_assert_msg(json, "cannot read configs/models/tiny-llama2.json");
    char *at = strstr(json, "\"eos_token_id\": 2");
    ck_assert_msg(at, "tiny-llama2.json has no \"eos_token_id\": 2");
    char edited[8192];
    snprintf(edited, sizeof edited, "%.*s\"eos_token_id\": 103%s", (int)(at - json), json,
             at + strlen("\"eos_token_id\": 2"));
    char *cfg = write_temp_file(dir, "tiny-eos103.json", edited), model[4200];
    snprintf(model, sizeof model, "synthetic:%s", cfg);
    snprintf(dump, sizeof dump, "%s/logits.bin", dir);
    cli_result a = run_cli("generate", "--model", model, "--backend", "cpu", "--prompt-ids", "1,2,3,4,5",
                           "--max-tokens", "12", "--dump-logits", dump, NULL);
    ck_assert_msg(a.exit_code == 0, "exit %d: %s", a.exit_code, a.err);
    ck_assert_str_eq(a.out, "234,311,89,35,326,103\n");
    ck_assert_msg(strstr(a.err, "EOS"), "stderr does not say why it stopped: %s", a.err);
    size_t len;
    char *bytes = slurp(dump, &len);
    ck_assert_msg(bytes && len == 6 * 512 * sizeof(float), "dump is %zu bytes, want 6 x 512 floats", len);
    cli_result b = run_cli("generate", "--model", model, "--backend", "cpu", "--prompt-ids", "1,2,3,4,5",
                           "--max-tokens", "12", "--ignore-eos", NULL);
    ck_assert_msg(b.exit_code == 0, "exit %d: %s", b.exit_code, b.err);
    ck_assert_str_eq(b.out, "234,311,89,35,326,103,103,103,270,83,360,401\n");
    free(bytes), free(json), free(cfg);
    cli_result_free(&a), cli_result_free(&b);
    free(dir);
}
END_TEST

START_TEST(cli_generate_rejects_bad_input)
{
    struct { const char *flag, *value, *expect; } cases[] = {
        {"--prompt-ids", "1,x,3", "--prompt-ids"},
        {"--prompt-ids", "1,99999", "vocabulary"},
        {"--temperature", "-1", "--temperature"},
        {"--top-p", "1.5", "--top-p"},
        {"--backend", "tpu", "--backend"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        const char *prompt = strcmp(cases[i].flag, "--prompt-ids") ? "1,2" : cases[i].value;
        const char *flag = strcmp(cases[i].flag, "--prompt-ids") ? cases[i].flag : "--max-tokens";
        const char *value = strcmp(cases[i].flag, "--prompt-ids") ? cases[i].value : "2";
        cli_result r = run_cli("generate", "--model", "synthetic:tiny-llama2", "--backend", "cpu",
                               "--prompt-ids", prompt, flag, value, NULL);
        ck_assert_msg(r.exit_code == 2, "%s %s: exit %d, want 2", cases[i].flag, cases[i].value,
                      r.exit_code);
        ck_assert_msg(strstr(r.err, cases[i].expect), "%s %s: message lacks \"%s\": %s",
                      cases[i].flag, cases[i].value, cases[i].expect, r.err);
        cli_result_free(&r);
    }
    cli_result r = run_cli("generate", "--model", "/nonexistent/dir", "--backend", "cpu",
                           "--prompt-ids", "1", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "/nonexistent/dir"), "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
}
END_TEST

/* A NaN in the weights makes every logit NaN: the sampler reports the row, and generate stops
 * with exit 1 instead of printing made-up tokens. */
/* Overwrites the first element of bf16 tensor `name` in DIR/model.safetensors; 0 on success. */
static int poke_bf16(const char *dir, const char *name, uint16_t v)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_file f;
    terr e = {{0}};
    if (st_open(&f, path, &e)) return -1;
    const st_tensor *t = st_find(&f, name);
    if (!t || t->dtype != ST_BF16) {
        st_close(&f);
        return -1;
    }
    long off = (long)((const uint8_t *)st_tensor_data(&f, t) - f.map);
    st_close(&f);
    FILE *w = fopen(path, "r+b");
    if (!w || fseek(w, off, SEEK_SET) || fwrite(&v, 2, 1, w) != 1) {
        if (w) fclose(w);
        return -1;
    }
    return fclose(w) ? -1 : 0;
}

START_TEST(non_finite_logits_stop_the_engine)
{
    float row[4] = {0.5f, -INFINITY, 2.0f, 1.0f}, scratch[4];
    ck_assert_int_eq(sample_row(row, 4, 0, 1, 0, scratch), 2); /* -inf is a masked token, fine */
    row[3] = NAN;
    ck_assert_int_eq(sample_row(row, 4, 0, 1, 0, scratch), SAMPLE_NOT_FINITE);
    ck_assert_int_eq(sample_row(row, 4, 0.8f, 0.9f, 0.5f, scratch), SAMPLE_NOT_FINITE);
    row[3] = INFINITY;
    ck_assert_int_eq(sample_row(row, 4, 0, 1, 0, scratch), SAMPLE_NOT_FINITE);

    /* weights too large for bf16's range but finite: activations overflow, logits are NaN */
    char *dir = save_synthetic("tiny-llama2", "nan-w");
    ck_assert(poke_bf16(dir, "model.norm.weight", 0x7f7f) == 0);
    cli_result r = run_cli("generate", "--model", dir, "--backend", "cpu", "--prompt-ids", "1,2,3",
                           "--max-tokens", "4", NULL);
    ck_assert_msg(r.exit_code == 1, "exit %d, want 1: %s", r.exit_code, r.err);
    ck_assert_msg(strstr(r.err, "NaN"), "stderr does not name the cause: %s", r.err);
    ck_assert_msg(r.out[0] == 0, "tokens were printed: %s", r.out);
    cli_result_free(&r);
    free(dir);
}
END_TEST

/* A NaN or Inf in a checkpoint is refused at load, naming the file and the tensor (exit 2). */
START_TEST(non_finite_weights_are_refused_at_load)
{
    const uint16_t bad[] = {0x7fc0, 0x7f80, 0xff80}; /* NaN, +Inf, -Inf */
    const char *what[] = {"NaN", "+Inf", "-Inf"};
    for (int k = 0; k < 3; k++) {
        char *dir = save_synthetic("tiny-llama2", "nan-load");
        ck_assert(poke_bf16(dir, "model.layers.0.mlp.down_proj.weight", bad[k]) == 0);
        cli_result r = run_cli("generate", "--model", dir, "--backend", "cpu", "--prompt-ids", "1,2,3",
                               "--max-tokens", "4", NULL);
        ck_assert_msg(r.exit_code == 2, "%s weight: exit %d, want 2: %s", what[k], r.exit_code, r.err);
        ck_assert_msg(strstr(r.err, "model.safetensors") && strstr(r.err, "model.layers.0.mlp.down_proj.weight") &&
                          strstr(r.err, what[k]),
                      "the message does not name the file, the tensor and %s: %s", what[k], r.err);
        cli_result_free(&r);
        free(dir);
    }
}
END_TEST

#if TANDEM_HAVE_CUDA
/* The decode attention partition (kernels.h, which the CUDA engine calls; pure arithmetic, so
 * checked here): a power of two in [64, 256], halved only while the grid has fewer than three
 * blocks an SM and the partials hold the halved split, and never halved past that. */
START_TEST(decode_partition_keeps_three_blocks_an_sm)
{
    static const int32_t heads[][2] = {{32, 32}, {32, 8}, {64, 8}, {40, 40}}, sms[] = {108, 132};
    static const int32_t seqs[] = {1, 2, 3, 4, 8, 16, 64, 256}, lens[] = {1, 17, 129, 513, 2049, 8193, 32768};
    for (size_t h = 0; h < ARRAY_LEN(heads); h++)
        for (size_t s = 0; s < ARRAY_LEN(sms); s++)
            for (size_t b = 0; b < ARRAY_LEN(seqs); b++)
                for (size_t l = 0; l < ARRAY_LEN(lens); l++)
                    for (int64_t cap = 64; cap <= 1 << 20; cap *= 16) {
                        int32_t nh = heads[h][0], nkv = heads[h][1], nd = seqs[b], len = lens[l];
                        int32_t P = k_decode_partition(nh, nkv, nd, len, sms[s], cap);
                        int64_t groups = nh / k_decode_heads_per_block(nh, nkv);
                        int64_t grid = groups * nd * ((len + P - 1) / P), want = 3 * (int64_t)sms[s];
                        int64_t halved = (int64_t)nd * ((len + P / 2 - 1) / (P / 2));
                        ck_assert_msg(P >= 64 && P <= K_DECODE_PARTITION && (P & (P - 1)) == 0,
                                      "heads %d/%d, %d seqs of %d: partition %d", nh, nkv, nd, len, P);
                        ck_assert_msg(P == 64 || grid >= want || halved > cap,
                                      "heads %d/%d, %d seqs of %d, %d SMs: partition %d leaves %lld blocks "
                                      "(want %lld) though halving fits", nh, nkv, nd, len, sms[s], P,
                                      (long long)grid, (long long)want);
                        if (P < K_DECODE_PARTITION) {
                            int64_t wider = groups * nd * ((len + 2 * P - 1) / (2 * P));
                            ck_assert_msg(wider < want, "heads %d/%d, %d seqs of %d: halved to %d though %d "
                                          "gave %lld blocks", nh, nkv, nd, len, P, 2 * P, (long long)wider);
                        }
                    }
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("engine_cpu");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, paged_equals_contiguous);
    tcase_add_test(tc, chunked_prefill_equals_one_shot_and_decode);
    tcase_add_test(tc, mixed_batch_equals_solo_runs);
    tcase_add_test(tc, bad_steps_are_errors);
    tcase_add_test(tc, safetensors_round_trip);
    tcase_add_test(tc, safetensors_f32_f16_round_trip);
    tcase_add_test(tc, sharded_checkpoint_equals_single_file);
    tcase_add_test(tc, malformed_safetensors_are_clear_errors);
    tcase_add_test(tc, checkpoint_with_wrong_tensors_is_clear_error);
    tcase_add_test(tc, rope_llama3_scaling_matches_hand_computed);
    tcase_add_test(tc, sampling_greedy_top_p_and_seed);
    tcase_add_test(tc, cli_generate_is_deterministic_and_dumps_logits);
    tcase_add_test(tc, cli_generate_stops_at_eos);
    tcase_add_test(tc, checkpoint_configs_of_transformers_4_and_5_give_equal_logits);
    tcase_add_test(tc, cli_generate_rejects_bad_input);
    tcase_add_test(tc, non_finite_weights_are_refused_at_load);
    tcase_add_test(tc, non_finite_logits_stop_the_engine);
#if TANDEM_HAVE_CUDA
    tcase_add_test(tc, decode_partition_keeps_three_blocks_an_sm);
#endif
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
