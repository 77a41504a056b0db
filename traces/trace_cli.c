/*
 * trace_cli.c: `tandem trace SUBCOMMAND`: a table of subcommands (like cli/main.c), and
 * `trace gen`, the command-line face of tracegen.h.
 *
 * Key decision: subcommands that live in other files are declared weak (trace.h), so `stats`
 * can land as a new file defining trace_stats_main() without editing this one; an entry whose
 * function is absent is simply not offered.
 *
 * Exit codes: 0 ok, 1 the output could not be written, 2 bad flags or bad input files. Every
 * message names the flag or the "FILE:LINE" it is about.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"
#include "traces/trace.h"
#include "traces/tracegen.h"

typedef struct trace_command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} trace_command;

static const trace_command trace_commands[] = {
    {"gen", trace_gen_main, "write a synthetic trace (tandem CSV): Poisson/Gamma arrivals"},
    {"stats", trace_stats_main, "summarise a trace file"},
};

static void trace_usage(FILE *f)
{
    fprintf(f, "usage: tandem trace SUBCOMMAND [OPTIONS]\n\nsubcommands:\n");
    for (size_t i = 0; i < ARRAY_LEN(trace_commands); i++)
        if (trace_commands[i].main)
            fprintf(f, "  %-8s %s\n", trace_commands[i].name, trace_commands[i].summary);
    fprintf(f, "\n`tandem trace SUBCOMMAND --help` lists its options with their defaults.\n");
}

int trace_main(int argc, char **argv)
{
    if (argc < 2) {
        trace_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        trace_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < ARRAY_LEN(trace_commands); i++)
        if (trace_commands[i].main && !strcmp(argv[1], trace_commands[i].name))
            return trace_commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "tandem trace: unknown subcommand \"%s\"\n\n", argv[1]);
    trace_usage(stderr);
    return 2;
}

/* ---- trace gen ------------------------------------------------------------------------------ */

enum {
    OPT_NUM_REQUESTS = 256,
    OPT_RATE,
    OPT_BURSTINESS,
    OPT_INPUT_LEN,
    OPT_OUTPUT_LEN,
    OPT_LENGTH_DIST,
    OPT_RANGE_RATIO,
    OPT_LOGNORMAL_SIGMA,
    OPT_LENGTHS_FILE,
    OPT_MAX_LEN,
    OPT_PRIORITY_CLASSES,
    OPT_NUM_CLIENTS,
    OPT_SEED,
    OPT_OUT,
};

static const struct option gen_options[] = {
    {"num-requests", required_argument, NULL, OPT_NUM_REQUESTS},
    {"rate", required_argument, NULL, OPT_RATE},
    {"burstiness", required_argument, NULL, OPT_BURSTINESS},
    {"input-len", required_argument, NULL, OPT_INPUT_LEN},
    {"output-len", required_argument, NULL, OPT_OUTPUT_LEN},
    {"length-dist", required_argument, NULL, OPT_LENGTH_DIST},
    {"range-ratio", required_argument, NULL, OPT_RANGE_RATIO},
    {"lognormal-sigma", required_argument, NULL, OPT_LOGNORMAL_SIGMA},
    {"lengths-file", required_argument, NULL, OPT_LENGTHS_FILE},
    {"max-len", required_argument, NULL, OPT_MAX_LEN},
    {"priority-classes", required_argument, NULL, OPT_PRIORITY_CLASSES},
    {"num-clients", required_argument, NULL, OPT_NUM_CLIENTS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"out", required_argument, NULL, OPT_OUT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void gen_usage(FILE *f)
{
    tracegen_options d = tracegen_options_default();
    fprintf(f,
            "usage: tandem trace gen [OPTIONS]\n\n"
            "Writes a synthetic trace as tandem CSV: arrival_s,prompt_tokens,output_tokens\n"
            "[,priority][,client]. Arrivals as in vLLM's benchmark: the first at t=0, then gaps\n"
            "~ Gamma(shape=B, scale=1/(rate*B)). Same options and seed: byte-identical output.\n\n"
            "options (default in brackets):\n"
            "  --num-requests N        requests to generate [%lld]\n"
            "  --rate R                mean arrivals per second; inf = all at t=0 [%g]\n"
            "  --burstiness B          Gamma shape of the gaps: 1 = Poisson, <1 burstier,\n"
            "                          gap CV = 1/sqrt(B); 0.001 to 1000 [%g]\n"
            "  --input-len N           prompt tokens: fixed value, uniform centre or lognormal\n"
            "                          mean [%d]\n"
            "  --output-len N          output tokens, likewise [%d]\n"
            "  --length-dist D         fixed|uniform|lognormal|file [%s]\n"
            "  --range-ratio F         uniform: lengths in [len*(1-F), len*(1+F)], 0<=F<1 [%g]\n"
            "  --lognormal-sigma S     lognormal: sigma of ln(length); the mean stays len [%g]\n"
            "  --lengths-file CSV      file: draw (num_prefill_tokens, num_decode_tokens) rows\n"
            "                          uniformly with replacement [none]\n"
            "  --max-len N             clamp every prompt and output length to <= N [%d]\n"
            "  --priority-classes F0,F1,...\n"
            "                          class i with probability Fi (sum 1); adds a priority\n"
            "                          column; 0 is the most important [none]\n"
            "  --num-clients N         adds a client column, ids uniform in [0, N) [none]\n"
            "  --seed S                seed of the mt19937 generator [%llu]\n"
            "  --out FILE              output file [stdout]\n"
            "  --help                  this text\n",
            (long long)d.num_requests, d.rate_per_s, d.burstiness, d.input_len, d.output_len,
            tracegen_length_dist_name(d.length_dist), d.range_ratio, d.lognormal_sigma,
            d.max_len, (unsigned long long)d.seed);
}

/* Flag-value parsers: 0, or -1 after printing "--flag: what is wrong". */
static int bad_value(const char *flag, const char *arg, const char *want)
{
    fprintf(stderr, "--%s: \"%s\" is not %s\n", flag, arg, want);
    return -1;
}

static int flag_int(const char *flag, const char *arg, int64_t lo, int64_t hi, int64_t *out)
{
    char want[96];
    snprintf(want, sizeof want, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    if (parse_i64(arg, out) || *out < lo || *out > hi) return bad_value(flag, arg, want);
    return 0;
}

static int flag_double(const char *flag, const char *arg, double *out)
{
    if (parse_f64(arg, out)) return bad_value(flag, arg, "a number");
    return 0;
}

static int flag_fractions(const char *arg, tracegen_options *o)
{
    char buf[512];
    if (strlen(arg) >= sizeof buf) return bad_value("priority-classes", arg, "a short list");
    strcpy(buf, arg);
    o->num_priority_classes = 0;
    char *p = buf;
    /* Empty entries ("0.5,,0.5") are errors, so split by hand instead of strtok. */
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        double f;
        if (o->num_priority_classes == TRACEGEN_MAX_PRIORITY_CLASSES)
            return bad_value("priority-classes", arg, "a list of at most 16 fractions");
        if (parse_f64(p, &f)) return bad_value("priority-classes", arg, "a list of fractions");
        o->priority_fraction[o->num_priority_classes++] = f;
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

int trace_gen_main(int argc, char **argv)
{
    tracegen_options o = tracegen_options_default();
    const char *out_path = NULL;
    int64_t v;
    int c, rc = 0;
    opterr = 0; /* our messages name the flag; getopt's would not say "exit 2" consistently */
    optind = 0; /* glibc: full re-initialisation, in case gen is run twice in one process */
    while ((c = getopt_long(argc, argv, ":h", gen_options, NULL)) != -1) {
        const char *flag = NULL;
        for (const struct option *op = gen_options; op->name; op++)
            if (op->val == c) flag = op->name;
        switch (c) {
        case 'h':
            gen_usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "%s: needs a value (see tandem trace gen --help)\n", argv[optind - 1]);
            return 2;
        case '?':
            if (optopt)
                fprintf(stderr, "-%c: unknown option (see tandem trace gen --help)\n", optopt);
            else
                fprintf(stderr, "%s: unknown option (see tandem trace gen --help)\n",
                        argv[optind - 1]);
            return 2;
        case OPT_NUM_REQUESTS:
            rc = flag_int(flag, optarg, 1, INT64_MAX / 2, &o.num_requests);
            break;
        case OPT_RATE:
            if (!strcasecmp(optarg, "inf") || !strcasecmp(optarg, "infinity"))
                o.rate_per_s = INFINITY;
            else if (parse_f64(optarg, &o.rate_per_s) || !(o.rate_per_s > 0))
                rc = bad_value(flag, optarg, "a positive number or inf");
            break;
        case OPT_BURSTINESS:
            rc = flag_double(flag, optarg, &o.burstiness);
            if (!rc && !(o.burstiness >= 1e-3 && o.burstiness <= 1e3))
                rc = bad_value(flag, optarg, "a number in [0.001, 1000]");
            break;
        case OPT_INPUT_LEN:
        case OPT_OUTPUT_LEN:
        case OPT_MAX_LEN:
            rc = flag_int(flag, optarg, 1, TRACE_MAX_TOKENS, &v);
            if (!rc) *(c == OPT_INPUT_LEN ? &o.input_len : c == OPT_OUTPUT_LEN ? &o.output_len
                                                                              : &o.max_len) = (int32_t)v;
            break;
        case OPT_LENGTH_DIST:
            if (tracegen_length_dist_parse(optarg, &o.length_dist))
                rc = bad_value(flag, optarg, "one of fixed|uniform|lognormal|file");
            break;
        case OPT_RANGE_RATIO:
            rc = flag_double(flag, optarg, &o.range_ratio);
            if (!rc && !(o.range_ratio >= 0 && o.range_ratio < 1))
                rc = bad_value(flag, optarg, "a number in [0, 1)");
            break;
        case OPT_LOGNORMAL_SIGMA:
            rc = flag_double(flag, optarg, &o.lognormal_sigma);
            if (!rc && !(o.lognormal_sigma >= 0 && o.lognormal_sigma <= 10))
                rc = bad_value(flag, optarg, "a number in [0, 10]");
            break;
        case OPT_LENGTHS_FILE:
            o.lengths_file = optarg;
            break;
        case OPT_PRIORITY_CLASSES:
            rc = flag_fractions(optarg, &o);
            break;
        case OPT_NUM_CLIENTS:
            rc = flag_int(flag, optarg, 1, INT32_MAX, &v);
            if (!rc) o.num_clients = (int32_t)v;
            break;
        case OPT_SEED:
            rc = flag_int(flag, optarg, 0, INT64_MAX, &v);
            if (!rc) o.seed = (uint64_t)v;
            break;
        case OPT_OUT:
            out_path = optarg;
            break;
        }
        if (rc) return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "tandem trace gen: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return 2;
    }

    terr e = {{0}};
    tracegen *g;
    if (tracegen_open(&g, &o, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    FILE *f = stdout;
    if (out_path && !(f = fopen(out_path, "w"))) {
        fprintf(stderr, "--out: cannot open %s: %s\n", out_path, strerror(errno));
        tracegen_close(g);
        return 2;
    }
    int status = 0;
    if (tracegen_write_csv(g, f, &e)) {
        fprintf(stderr, "%s: %s\n", out_path ? out_path : "stdout", e.msg);
        status = 1;
    }
    if (f != stdout && fclose(f)) {
        fprintf(stderr, "%s: cannot write: %s\n", out_path, strerror(errno));
        status = 1;
    }
    tracegen_close(g);
    return status;
}
