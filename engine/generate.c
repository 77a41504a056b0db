/*
 * generate.c: `tandem generate`: run one prompt through the engine and print the generated
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
#include <getopt.h>
#include <gsl/gsl_rng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/weights.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "--dump-logits writes host floats as LE");

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tandem generate --model DIR|synthetic:CONFIG --prompt-ids 1,2,3 [options]\n"
            "\n"
            "Runs a Llama-family model on the GPU (or the CPU reference) and prints the ids of\n"
            "the generated tokens, comma-separated.\n"
            "\n"
            "  --model SPEC          Hugging Face checkpoint directory (config.json + safetensors),\n"
            "                        or synthetic:NAME|CONFIG.json for seeded random weights\n"
            "  --backend B           %s (default cuda)\n"
            "  --prompt-ids LIST     comma-separated token ids (required)\n"
            "  --max-tokens N        tokens to generate at most (default 16)\n"
            "  --ignore-eos          go on past the model's EOS token (default: stop after it)\n"
            "  --temperature T       0 = greedy (default 0)\n"
            "  --top-p P             nucleus size in (0, 1] (default 1)\n"
            "  --seed S              sampling generator seed (default 0)\n"
            "  --weight-seed S       synthetic weights seed (default 0)\n"
            "  --dump-logits FILE    write each generated position's logits (float32 LE,\n"
            "                        positions x vocab)\n"
            "  --block-size N        tokens per KV block (default 16)\n"
            "  --prefill-chunk N     prefill the prompt N tokens per step (default: all at once)\n"
            "  --cpu-bf16            cpu backend: round to bf16 where the GPU does\n"
            "  --no-cuda-graphs      cuda backend: launch decode steps without a CUDA graph\n"
            "  --save-checkpoint DIR write the synthetic model as a Hugging Face checkpoint\n"
            "                        (config.json + model.safetensors, bf16) and exit\n",
            engine_backend_names());
}

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
            return -1;
        }
        grow_array((void **)ids, sizeof **ids, &cap, (size_t)*n + 1);
        (*ids)[(*n)++] = (int32_t)v;
    }
    free(copy);
    return *n > 0 ? 0 : -1;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

enum { OPT_MODEL = 256, OPT_BACKEND, OPT_PROMPT, OPT_MAX_TOKENS, OPT_TEMP, OPT_TOP_P, OPT_SEED,
       OPT_WSEED, OPT_DUMP, OPT_BLOCK, OPT_CHUNK, OPT_CPU_BF16, OPT_NO_GRAPHS, OPT_SAVE,
       OPT_IGNORE_EOS, OPT_HELP };

static int bad_flag(const char *flag, const char *val)
{
    fprintf(stderr, "tandem generate: %s: bad value \"%s\"\n", flag, val);
    return 2;
}

int generate_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"model", required_argument, 0, OPT_MODEL},
        {"backend", required_argument, 0, OPT_BACKEND},
        {"prompt-ids", required_argument, 0, OPT_PROMPT},
        {"max-tokens", required_argument, 0, OPT_MAX_TOKENS},
        {"temperature", required_argument, 0, OPT_TEMP},
        {"top-p", required_argument, 0, OPT_TOP_P},
        {"seed", required_argument, 0, OPT_SEED},
        {"weight-seed", required_argument, 0, OPT_WSEED},
        {"dump-logits", required_argument, 0, OPT_DUMP},
        {"block-size", required_argument, 0, OPT_BLOCK},
        {"prefill-chunk", required_argument, 0, OPT_CHUNK},
        {"cpu-bf16", no_argument, 0, OPT_CPU_BF16},
        {"no-cuda-graphs", no_argument, 0, OPT_NO_GRAPHS},
        {"save-checkpoint", required_argument, 0, OPT_SAVE},
        {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
        {"help", no_argument, 0, OPT_HELP},
        {0, 0, 0, 0},
    };
    engine_opts o;
    engine_opts_default(&o);
    const char *prompt = NULL, *dump = NULL, *save = NULL;
    int64_t max_new = 16, seed = 0, wseed = 0, block = 16, chunk = 0;
    double temperature = 0, top_p = 1;
    bool ignore_eos = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o.model = optarg; break;
        case OPT_BACKEND: o.backend = optarg; break;
        case OPT_PROMPT: prompt = optarg; break;
        case OPT_MAX_TOKENS:
            if (parse_i64(optarg, &max_new) || max_new < 1 || max_new > 1 << 20)
                return bad_flag("--max-tokens", optarg);
            break;
        case OPT_TEMP:
            if (parse_f64(optarg, &temperature) || temperature < 0)
                return bad_flag("--temperature", optarg);
            break;
        case OPT_TOP_P:
            if (parse_f64(optarg, &top_p) || !(top_p > 0 && top_p <= 1))
                return bad_flag("--top-p", optarg);
            break;
        case OPT_SEED:
            if (parse_i64(optarg, &seed) || seed < 0) return bad_flag("--seed", optarg);
            break;
        case OPT_WSEED:
            if (parse_i64(optarg, &wseed) || wseed < 0) return bad_flag("--weight-seed", optarg);
            break;
        case OPT_DUMP: dump = optarg; break;
        case OPT_BLOCK:
            if (parse_i64(optarg, &block) || block < 1 || block > 4096)
                return bad_flag("--block-size", optarg);
            break;
        case OPT_CHUNK:
            if (parse_i64(optarg, &chunk) || chunk < 1 || chunk > 1 << 20)
                return bad_flag("--prefill-chunk", optarg);
            break;
        case OPT_CPU_BF16: o.cpu_round_bf16 = true; break;
        case OPT_NO_GRAPHS: o.cuda_graphs = false; break;
        case OPT_SAVE: save = optarg; break;
        case OPT_IGNORE_EOS: ignore_eos = true; break;
        case OPT_HELP: usage(stdout); return 0;
        default:
            fprintf(stderr, "tandem generate: unknown or incomplete option \"%s\"\n\n",
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tandem generate: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (!o.model) {
        fprintf(stderr, "tandem generate: --model is required\n\n");
        usage(stderr);
        return 2;
    }
    terr e = {{0}};
    if (save) {
        model_config mc;
        bool synthetic;
        if (engine_resolve_model(o.model, &mc, &synthetic, &e)) {
            fprintf(stderr, "tandem generate: %s\n", e.msg);
            return 2;
        }
        if (!synthetic) {
            fprintf(stderr, "tandem generate: --save-checkpoint needs a synthetic:CONFIG model\n");
            return 2;
        }
        wt_source src;
        wt_source_synthetic(&src, (uint64_t)wseed);
        if (wt_write_checkpoint(&src, &mc, save, &e)) {
            fprintf(stderr, "tandem generate: %s\n", e.msg);
            return 1;
        }
        fprintf(stderr, "generate: wrote %s (%s, weight seed %lld)\n", save, mc.name, (long long)wseed);
        return 0;
    }
    if (!prompt) {
        fprintf(stderr, "tandem generate: --prompt-ids is required\n");
        return 2;
    }
    int32_t *ids, n_prompt;
    if (parse_ids(prompt, &ids, &n_prompt)) return bad_flag("--prompt-ids", prompt);

    int32_t total = n_prompt + (int32_t)max_new; /* the last token is sampled, never run */
    o.weight_seed = (uint64_t)wseed;
    o.block_size = (int32_t)block;
    o.max_seqs = 1;
    o.max_model_len = total;
    o.max_tokens = (int32_t)(chunk ? min_i64(chunk, n_prompt) : n_prompt);
    o.num_blocks = (int32_t)div_ceil_i64(total, block);
    engine eng;
    int rc = engine_open(&eng, &o, &e);
    if (rc) {
        fprintf(stderr, "tandem generate: %s\n", e.msg);
        free(ids);
        return rc == ENGINE_ERR_DEVICE ? 1 : 2;
    }
    const model_config *mc = &eng.mc;
    int exit_code = 0;
    for (int32_t i = 0; i < n_prompt; i++) {
        if (ids[i] >= mc->vocab_size) {
            fprintf(stderr, "tandem generate: --prompt-ids: id %d is outside the vocabulary (%d)\n",
                    ids[i], mc->vocab_size);
            exit_code = 2;
            goto out;
        }
    }
    if (total > mc->max_position_embeddings) {
        fprintf(stderr, "tandem generate: prompt + max-tokens = %d exceeds the model's "
                        "max_position_embeddings %d\n", total, mc->max_position_embeddings);
        exit_code = 2;
        goto out;
    }
    FILE *dump_f = NULL;
    if (dump && !(dump_f = fopen(dump, "wb"))) {
        fprintf(stderr, "tandem generate: --dump-logits: cannot create %s\n", dump);
        exit_code = 2;
        goto out;
    }

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
        if ((rc = engine_forward(&eng, &s, &e))) break;
        computed += n;
        if (!emits) continue;
        float temp = (float)temperature, tp = (float)top_p, u = (float)gsl_rng_uniform(rng);
        eng_sampling sp = {&temp, &tp, &u};
        int32_t tok;
        if ((rc = engine_sample(&eng, &sp, &tok, &e))) break;
        if (dump_f) {
            if ((rc = engine_logits(&eng, logits, &e))) break;
            if (fwrite(logits, sizeof *logits, (size_t)mc->vocab_size, dump_f) != (size_t)mc->vocab_size) {
                rc = terr_set(&e, "--dump-logits: write to %s failed", dump);
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
    if (dump_f && fclose(dump_f) && !rc) rc = terr_set(&e, "--dump-logits: write to %s failed", dump);
    if (rc) {
        fprintf(stderr, "tandem generate: %s\n", e.msg);
        exit_code = rc == ENGINE_ERR_DEVICE ? 1 : 2;
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
