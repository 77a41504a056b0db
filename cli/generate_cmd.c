/*
 * generate_cmd.c: `tandem generate`: run one prompt through the engine and print the generated
 * token ids. It builds the same flat step arrays a serving loop would (engine.h), for one
 * sequence: the prompt in one step (or chunks of --prefill-chunk tokens), then one step per
 * generated token. Its block table deliberately uses block ids in reverse order, so even this
 * path exercises the paged layout.
 *
 * Generation stops after --max-tokens tokens or at the model's EOS token (config.json's
 * eos_token_id, the first if a list), which is printed, as vLLM does unless --ignore-eos.
 *
 * stdout: the generated ids, comma-separated, one line. stderr: what ran and how long it took.
 * --dump-logits FILE: the logits every generated token was sampled from, float32 little-endian,
 * (generated tokens, vocab). Exit 0 ok, 1 runtime (device) failure, 2 bad flags or model files.
 */
#include <gsl/gsl_rng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/clock.h"
#include "core/kv.h"
#include "core/options.h"
#include "engine/engine.h"
#include "engine/weights.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "--dump-logits writes host floats as LE");

typedef struct generate_flags {
    char *model, *backend, *prompt_ids, *dump_logits, *save_checkpoint;
    int64_t max_tokens, seed, weight_seed, block_size, prefill_chunk;
    double temperature, top_p;
    bool ignore_eos, cpu_bf16, cuda_graphs;
} generate_flags;

#define O(f) offsetof(generate_flags, f)
static const opt_spec generate_specs[] = {
    {"model", OPT_STR, O(model), "", "Hugging Face checkpoint directory (config.json + safetensors), or synthetic:NAME|CONFIG.json for seeded random weights"},
    {"backend", OPT_STR, O(backend), "cuda", "engine backend: cuda or cpu"},
    {"prompt-ids", OPT_STR, O(prompt_ids), "", "comma-separated prompt token ids (required)"},
    {"max-tokens", OPT_I64, O(max_tokens), "16", "tokens to generate at most"},
    {"ignore-eos", OPT_BOOL, O(ignore_eos), "false", "go on past the model's EOS token"},
    {"temperature", OPT_F64, O(temperature), "0", "0 = greedy"},
    {"top-p", OPT_F64, O(top_p), "1", "nucleus size in (0, 1]"},
    {"seed", OPT_I64, O(seed), "0", "sampling generator seed"},
    {"weight-seed", OPT_I64, O(weight_seed), "0", "synthetic weights seed"},
    {"dump-logits", OPT_STR, O(dump_logits), "", "write each generated position's logits (float32 LE, positions x vocab)"},
    {"block-size", OPT_I64, O(block_size), KV_DEFAULT_BLOCK_SIZE_STR, "tokens per KV block"},
    {"prefill-chunk", OPT_I64, O(prefill_chunk), "0", "prefill the prompt N tokens per step (0: all at once)"},
    {"cpu-bf16", OPT_BOOL, O(cpu_bf16), "false", "cpu backend: round to bf16 where the GPU does"},
    {"cuda-graphs", OPT_BOOL, O(cuda_graphs), "true", "cuda backend: replay decode steps from a CUDA graph"},
    {"save-checkpoint", OPT_STR, O(save_checkpoint), "", "write the synthetic model as a Hugging Face checkpoint (config.json + model.safetensors, bf16) and exit"},
    OPT_END,
};
#undef O

static const char *usage =
    "usage: tandem generate --model DIR|synthetic:CONFIG --prompt-ids 1,2,3 [options]\n"
    "\n"
    "Runs a Llama-family model on the GPU (or the CPU reference) and prints the ids of\n"
    "the generated tokens, comma-separated.";

static int parse_ids(const char *s, int32_t **ids, int32_t *n)
{
    *n = 0;
    size_t cap = 0;
    *ids = NULL;
    char *copy = xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int64_t v;
        if (parse_i64(tok, &v) || v < 0 || v > INT32_MAX) {
            free(copy);
            free(*ids);
            *ids = NULL;
            return -1;
        }
        grow_array((void **)ids, sizeof **ids, &cap, (size_t)*n + 1);
        (*ids)[(*n)++] = (int32_t)v;
    }
    free(copy);
    if (*n > 0) return 0;
    free(*ids);
    *ids = NULL;
    return -1;
}

static double now_ms(void) { return (double)clock_mono_ns() / 1e6; }

/* The flags' ranges; -1 with e naming the flag. */
static int check_flags(const generate_flags *f, terr *e)
{
    if (!f->model) return terr_set(e, "--model is required (see --help)");
    if (f->max_tokens < 1 || f->max_tokens > 1 << 20) return terr_set(e, "--max-tokens: %lld is not in [1, %d]", (long long)f->max_tokens, 1 << 20);
    if (!(f->temperature >= 0)) return terr_set(e, "--temperature: %g must be >= 0", f->temperature);
    if (!(f->top_p > 0 && f->top_p <= 1)) return terr_set(e, "--top-p: %g is not in (0, 1]", f->top_p);
    if (f->seed < 0) return terr_set(e, "--seed: %lld must be >= 0", (long long)f->seed);
    if (f->weight_seed < 0) return terr_set(e, "--weight-seed: %lld must be >= 0", (long long)f->weight_seed);
    if (f->block_size < 1 || f->block_size > 4096) return terr_set(e, "--block-size: %lld is not in [1, 4096]", (long long)f->block_size);
    if (f->prefill_chunk < 0 || f->prefill_chunk > 1 << 20) return terr_set(e, "--prefill-chunk: %lld is not in [0, %d]", (long long)f->prefill_chunk, 1 << 20);
    return 0;
}

/* --save-checkpoint: the synthetic model as a checkpoint. Returns the exit code. */
static int save_checkpoint(const generate_flags *f, terr *e)
{
    model_config mc;
    bool synthetic;
    if (engine_resolve_model(f->model, &mc, &synthetic, e)) return 2;
    if (!synthetic) return terr_set(e, "--save-checkpoint needs a synthetic:CONFIG model"), 2;
    wt_source src;
    wt_source_synthetic(&src, (uint64_t)f->weight_seed);
    if (wt_write_checkpoint(&src, &mc, f->save_checkpoint, e)) return 1;
    fprintf(stderr, "generate: wrote %s (%s, weight seed %lld)\n", f->save_checkpoint, mc.name, (long long)f->weight_seed);
    return 0;
}

static int generate(const generate_flags *f, terr *e);

int generate_main(int argc, char **argv)
{
    generate_flags f = {0};
    opts_defaults(generate_specs, &f);
    terr e = {{0}};
    int code = 2, rc = opts_parse(generate_specs, &f, argc, argv, NULL, usage, &e);
    if (rc == 1) code = 0;
    else if (rc || check_flags(&f, &e)) code = 2;
    else if (f.save_checkpoint) code = save_checkpoint(&f, &e);
    else code = generate(&f, &e);
    if (code && rc != 1) fprintf(stderr, "tandem generate: %s\n", e.msg);
    opts_free(generate_specs, &f);
    return code;
}

/* One prompt through the engine; returns the exit code (e set when it is not 0). */
static int generate(const generate_flags *f, terr *e)
{
    if (!f->prompt_ids) return terr_set(e, "--prompt-ids is required"), 2;
    int32_t *ids, n_prompt;
    if (parse_ids(f->prompt_ids, &ids, &n_prompt)) return terr_set(e, "--prompt-ids: bad value \"%s\"", f->prompt_ids), 2;
    engine_opts o;
    engine_opts_default(&o);
    o.model = f->model;
    o.backend = f->backend;
    o.cpu_round_bf16 = f->cpu_bf16;
    o.cuda_graphs = f->cuda_graphs;
    int64_t max_new = f->max_tokens, seed = f->seed, wseed = f->weight_seed, chunk = f->prefill_chunk;
    double temperature = f->temperature, top_p = f->top_p;
    const char *dump = f->dump_logits;
    bool ignore_eos = f->ignore_eos;

    int32_t total = n_prompt + (int32_t)max_new; /* the last token is sampled, never run */
    o.weight_seed = (uint64_t)wseed;
    o.block_size = (int32_t)f->block_size;
    o.max_seqs = 1;
    o.max_model_len = total;
    o.max_tokens = (int32_t)(chunk ? min_i64(chunk, n_prompt) : n_prompt);
    o.num_blocks = (int32_t)div_ceil_i64(total, o.block_size);
    engine eng;
    int rc = engine_open(&eng, &o, e);
    if (rc) {
        free(ids);
        return rc == ENGINE_ERR_DEVICE ? 1 : 2;
    }
    const model_config *mc = &eng.mc;
    int exit_code = 0;
    for (int32_t i = 0; i < n_prompt; i++) {
        if (ids[i] >= mc->vocab_size) {
            terr_set(e, "--prompt-ids: id %d is outside the vocabulary (%d)", ids[i], mc->vocab_size);
            exit_code = 2;
            goto out;
        }
    }
    if (total > mc->max_position_embeddings) {
        terr_set(e, "prompt + max-tokens = %d exceeds the model's max_position_embeddings %d", total,
                 mc->max_position_embeddings);
        exit_code = 2;
        goto out;
    }
    out_atomic dump_out = {0}; /* complete or absent (core/util.h) */
    if (dump && out_atomic_open(&dump_out, dump, "wb", e)) {
        terr_set(e, "--dump-logits: cannot create %s", dump);
        exit_code = 1;
        goto out;
    }
    FILE *dump_f = dump_out.f;
    bool dump_failed = false;
    int32_t nb = o.num_blocks, T_max = eng.opts.max_tokens;
    int32_t *seq = xmalloc(sizeof *seq * (size_t)total);
    memcpy(seq, ids, sizeof *seq * (size_t)n_prompt);
    int32_t *bt = xmalloc(sizeof *bt * (size_t)nb);
    for (int32_t i = 0; i < nb; i++) bt[i] = nb - 1 - i;
    int32_t *pos = xmalloc(sizeof *pos * (size_t)T_max), *slots = xmalloc(sizeof *slots * (size_t)T_max);
    float *logits = xmalloc(sizeof *logits * (size_t)mc->vocab_size);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, (unsigned long)seed);
    fprintf(stderr, "generate: %s on %s, weights %s (seed %lld), sampling seed %lld, T=%g top_p=%g\n",
            mc->name, eng.ops->name, o.model, (long long)wseed, (long long)seed, temperature, top_p);

    int32_t len = n_prompt, computed = 0, generated = 0;
    double t0 = now_ms(), t_first = 0;
    while (generated < max_new) {
        int32_t n = min_i32(len - computed, T_max);
        for (int32_t i = 0; i < n; i++) {
            int32_t p = computed + i;
            pos[i] = p;
            slots[i] = bt[p / o.block_size] * o.block_size + p % o.block_size;
        }
        int32_t qsl[2] = {0, n}, seq_len = computed + n, last = n - 1;
        bool emits = seq_len == len;
        eng_step s = {
            .num_tokens = n, .num_seqs = 1, .token_ids = seq + computed, .positions = pos,
            .slot_mapping = slots, .query_start_loc = qsl, .seq_lens = &seq_len,
            .block_tables = bt, .block_table_stride = nb, .num_logits = emits, .logits_rows = &last,
        };
        if ((rc = engine_forward(&eng, &s, e))) break;
        computed += n;
        if (!emits) continue;
        float temp = (float)temperature, tp = (float)top_p, u = (float)gsl_rng_uniform(rng);
        eng_sampling sp = {&temp, &tp, &u};
        int32_t tok;
        if ((rc = engine_sample(&eng, &sp, &tok, e))) break;
        if (dump_f) {
            if ((rc = engine_logits(&eng, logits, e))) break;
            if (fwrite(logits, sizeof *logits, (size_t)mc->vocab_size, dump_f) != (size_t)mc->vocab_size) {
                rc = terr_set(e, "--dump-logits: write to %s failed", dump);
                dump_failed = true;
                break;
            }
        }
        if (generated == 0) t_first = now_ms();
        seq[len++] = tok;
        generated++;
        if (tok == mc->eos_token_id && !ignore_eos) {
            fprintf(stderr, "generate: stopped at the EOS token (id %d) after %d tokens\n", tok, generated);
            break;
        }
    }
    double t_end = now_ms();
    if (dump_f && out_atomic_close(&dump_out, !rc, e) && !rc) {
        rc = terr_set(e, "--dump-logits: write to %s failed", dump);
        dump_failed = true;
    }
    if (rc) {
        exit_code = rc == ENGINE_ERR_DEVICE || dump_failed ? 1 : 2; /* an output lost is a runtime failure */
    } else {
        for (int32_t i = 0; i < generated; i++) printf("%s%d", i ? "," : "", seq[n_prompt + i]);
        printf("\n");
        fprintf(stderr, "generate: prompt %d tokens -> first token in %.2f ms; %d more in %.2f ms "
                        "(%.3f ms/token)\n", n_prompt, t_first - t0, generated - 1, t_end - t_first,
                generated > 1 ? (t_end - t_first) / (generated - 1) : 0.0);
    }
    gsl_rng_free(rng);
    free(logits), free(pos), free(slots), free(bt), free(seq);
out:
    engine_close(&eng);
    free(ids);
    return exit_code;
}
