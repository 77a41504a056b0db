/*
 * test_traces.c: the trace readers (every format, every bad-input case, streaming) and
 * `tandem trace gen` (determinism, rates, burstiness, length distributions, CLI errors).
 *
 * Small inputs are written to a fresh temp dir per test; the bundled samples are read from
 * traces/samples (tests run from the repository root). Statistical checks use N = 20000 and
 * tolerances several standard errors wide, with fixed seeds, so they cannot flake, yet a wrong
 * formula (rate instead of 1/rate, shape instead of 1/shape) lands far outside them.
 */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "traces/trace.h"
#include "traces/tracegen.h"

/* ---- helpers -------------------------------------------------------------------------------- */

typedef struct rows {
    arrival *a;    /* (n) */
    int64_t n;
    uint64_t *hashes_first, *hashes_last; /* copies of the first and last rows' hashes */
    int rc;        /* 0: read to the end; -1: error */
    terr err;
    int64_t bad;
    const char *format;
} rows;

static rows read_all_opt(const char *path, const trace_options *opt)
{
    rows r = {0};
    trace_reader *t;
    if (trace_open(&t, path, opt, &r.err)) {
        r.rc = -1;
        return r;
    }
    r.format = trace_format_name(t);
    arrival_source s = trace_source(t);
    size_t cap = 0;
    arrival a;
    int got;
    while ((got = s.next(s.self, &a, &r.err)) == 1) {
        if ((size_t)r.n == cap) r.a = realloc(r.a, (cap = cap ? 2 * cap : 64) * sizeof *r.a);
        if (a.num_hashes > 0) {
            uint64_t *copy = malloc((size_t)a.num_hashes * sizeof *copy);
            memcpy(copy, a.hashes, (size_t)a.num_hashes * sizeof *copy);
            if (r.n == 0) r.hashes_first = copy;
            else {
                free(r.hashes_last);
                r.hashes_last = copy;
            }
        }
        a.hashes = NULL;
        r.a[r.n++] = a;
    }
    r.rc = got < 0 ? -1 : 0;
    r.bad = trace_bad_rows(t);
    ck_assert_int_eq(trace_rows_read(t), r.n);
    trace_close(t);
    return r;
}

static rows read_all(const char *path) { return read_all_opt(path, NULL); }

static void rows_free(rows *r)
{
    free(r->a);
    free(r->hashes_first);
    free(r->hashes_last);
}

static char *write_bytes(const char *dir, const char *name, const void *data, size_t len)
{
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fwrite(data, 1, len, f);
    fclose(f);
    return path;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
static void rm_tree(char *dir)
{
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* The reader fails, with a message that starts "PATH:LINE: " and contains `what`. */
static void expect_error_opt(const char *dir, const char *name, const void *data, size_t len,
                             const trace_options *opt, int line, const char *what)
{
    char *path = write_bytes(dir, name, data, len);
    rows r = read_all_opt(path, opt);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    ck_assert_msg(r.rc == -1, "%s: expected an error \"%s\" at line %d, but it read %lld rows",
                  name, what, line, (long long)r.n);
    ck_assert_msg(!strncmp(r.err.msg, prefix, strlen(prefix)) && strstr(r.err.msg, what),
                  "%s: expected \"%s...%s...\", got \"%s\"", name, prefix, what, r.err.msg);
    rows_free(&r);
    free(path);
}

static void expect_error(const char *dir, const char *name, const char *text, int line,
                         const char *what)
{
    expect_error_opt(dir, name, text, strlen(text), NULL, line, what);
}

/* ---- the bundled samples -------------------------------------------------------------------- */

START_TEST(test_azure_conv_sample_parses_all_rows)
{
    rows r = read_all("traces/samples/azure_conv_2023.csv");
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_str_eq(r.format, "azure");
    ck_assert_int_eq(r.n, 19366);
    /* 2023-11-16 18:15:46.6805900,374,44 ... 2023-11-16 19:14:08.4025270,197,183 */
    ck_assert_int_eq(r.a[0].arrival_ns, 0);
    ck_assert_int_eq(r.a[0].prompt_tokens, 374);
    ck_assert_int_eq(r.a[0].output_tokens, 44);
    ck_assert_int_eq(r.a[0].line, 2);
    ck_assert_int_eq(r.a[1].arrival_ns, 4314579000LL); /* 18:15:50.9951690 */
    arrival last = r.a[r.n - 1];
    ck_assert_int_eq(last.arrival_ns, 3501721937000LL); /* span 3,501.7 s, exact to 100 ns */
    ck_assert_int_eq(last.prompt_tokens, 197);
    ck_assert_int_eq(last.output_tokens, 183);
    ck_assert_int_eq(last.line, 19367);
    rows_free(&r);
}
END_TEST

START_TEST(test_azure_code_sample_parses_all_rows)
{
    rows r = read_all("traces/samples/azure_code_2023.csv");
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.n, 8819);
    ck_assert_int_eq(r.a[0].prompt_tokens, 4808);
    ck_assert_int_eq(r.a[0].output_tokens, 10);
    ck_assert_int_eq(r.a[1].arrival_ns, 52000000LL); /* 18:17:03.9799600 -> 18:17:04.0319600 */
    ck_assert_int_eq(r.a[r.n - 1].arrival_ns, 3435948056000LL);
    ck_assert_int_eq(r.a[r.n - 1].prompt_tokens, 549);
    ck_assert_int_eq(r.a[r.n - 1].output_tokens, 173);
    rows_free(&r);
}
END_TEST

START_TEST(test_mooncake_sample_parses_with_hashes)
{
    rows r = read_all("traces/samples/mooncake_conversation_2k.jsonl");
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_str_eq(r.format, "mooncake");
    ck_assert_int_eq(r.n, 2000);
    ck_assert_int_eq(r.a[0].line, 1);
    ck_assert_int_eq(r.a[0].prompt_tokens, 6758);
    ck_assert_int_eq(r.a[0].output_tokens, 500);
    ck_assert_int_eq(r.a[0].num_hashes, 14); /* ceil(6758/512) */
    for (int i = 0; i < 14; i++) ck_assert_int_eq(r.hashes_first[i], i);
    arrival last = r.a[r.n - 1];
    ck_assert_int_eq(last.arrival_ns, 669000LL * 1000000); /* timestamp 669000 ms */
    ck_assert_int_eq(last.prompt_tokens, 1504);
    ck_assert_int_eq(last.output_tokens, 462);
    ck_assert_int_eq(last.num_hashes, 3);
    ck_assert_int_eq(r.hashes_last[0], 0);
    ck_assert_int_eq(r.hashes_last[1], 36636);
    ck_assert_int_eq(r.hashes_last[2], 38787);
    rows_free(&r);
}
END_TEST

/* ---- small files of each format ------------------------------------------------------------- */

START_TEST(test_vidur_columns_by_name_extra_ignored)
{
    char *dir = make_temp_dir("traces");
    char *p = write_temp_file(dir, "v.csv",
                              "num_decode_tokens,num_total_tokens,arrived_at,num_prefill_tokens\n"
                              "7,17,0.25,10\n"
                              "8,28,1.5,20\n"
                              "9,39,2.000000001,30\n");
    rows r = read_all(p);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_str_eq(r.format, "vidur");
    ck_assert_int_eq(r.n, 3);
    /* offsets from the first row (0.25 s) */
    ck_assert_int_eq(r.a[0].arrival_ns, 0);
    ck_assert_int_eq(r.a[1].arrival_ns, 1250000000LL);
    ck_assert_int_eq(r.a[2].arrival_ns, 1750000001LL);
    ck_assert_int_eq(r.a[2].prompt_tokens, 30);
    ck_assert_int_eq(r.a[2].output_tokens, 9);
    ck_assert_int_eq(r.a[2].line, 4);
    rows_free(&r);
    free(p);
    rm_tree(dir);
}
END_TEST

START_TEST(test_tandem_columns_in_any_order)
{
    char *dir = make_temp_dir("traces");
    char *p = write_temp_file(dir, "t.csv",
                              "client,output_tokens,arrival_s,prompt_tokens,priority\n"
                              "3,16,0.000000,100,2\n"
                              "1,32,0.000001,\"200\",0\n");
    rows r = read_all(p);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_str_eq(r.format, "tandem");
    ck_assert_int_eq(r.n, 2);
    ck_assert_int_eq(r.a[0].client_id, 3);
    ck_assert_int_eq(r.a[0].priority, 2);
    ck_assert_int_eq(r.a[0].prompt_tokens, 100);
    ck_assert_int_eq(r.a[0].output_tokens, 16);
    ck_assert_int_eq(r.a[1].arrival_ns, 1000);
    ck_assert_int_eq(r.a[1].prompt_tokens, 200); /* quoted fields are CSV too */
    ck_assert_int_eq(r.a[1].client_id, 1);
    rows_free(&r);
    free(p);
    /* Without the optional columns priority and client are 0. */
    p = write_temp_file(dir, "t2.csv", "arrival_s,prompt_tokens,output_tokens\n5,1,1\n");
    r = read_all(p);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.a[0].priority, 0);
    ck_assert_int_eq(r.a[0].client_id, 0);
    ck_assert_int_eq(r.a[0].arrival_ns, 0); /* the first row is the origin */
    rows_free(&r);
    free(p);
    rm_tree(dir);
}
END_TEST

START_TEST(test_files_without_final_newline)
{
    char *dir = make_temp_dir("traces");
    char *p = write_temp_file(dir, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,2\n3,4,5");
    rows r = read_all(p);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.n, 2);
    ck_assert_int_eq(r.a[1].arrival_ns, 3 * NS_PER_S);
    ck_assert_int_eq(r.a[1].output_tokens, 5);
    rows_free(&r);
    free(p);
    p = write_temp_file(dir, "m.jsonl",
                        "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                        "\"hash_ids\": [7]}\n"
                        "{\"timestamp\": 2.5, \"input_length\": 513, \"output_length\": 4, "
                        "\"hash_ids\": [7, 8]}");
    r = read_all(p);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.n, 2);
    ck_assert_int_eq(r.a[1].arrival_ns, 2500000); /* 2.5 ms */
    ck_assert_int_eq(r.a[1].num_hashes, 2);
    ck_assert_int_eq(r.hashes_last[1], 8);
    rows_free(&r);
    free(p);
    rm_tree(dir);
}
END_TEST

/* ---- Azure time ----------------------------------------------------------------------------- */

START_TEST(test_azure_timestamp_exact)
{
    int64_t ns;
    const char *s = "2023-11-16 18:17:03.9799600";
    ck_assert_int_eq(trace_azure_timestamp_ns(s, strlen(s), &ns), 0);
    ck_assert_int_eq(ns, 1700158623979960000LL); /* python: datetime(2023,11,16,18,17,3) - epoch */
    s = "1970-01-01 00:00:00";
    ck_assert_int_eq(trace_azure_timestamp_ns(s, strlen(s), &ns), 0);
    ck_assert_int_eq(ns, 0);
    s = "1900-01-01T00:00:00.5";
    ck_assert_int_eq(trace_azure_timestamp_ns(s, strlen(s), &ns), 0);
    ck_assert_int_eq(ns, -2208988800LL * NS_PER_S + 500000000);
    static const char *const bad[] = {
        "2023-02-29 00:00:00",         /* not a leap year */
        "2023-13-01 00:00:00",         /* month 13 */
        "2023-11-16 24:00:00",         /* hour 24 */
        "2023-11-16 18:60:00",         /* minute 60 */
        "2023-11-16 18:17:03.",        /* dot without digits */
        "2023-11-16 18:17:03.1234567890", /* 10 fraction digits */
        "2023-11-16 18:17:3",          /* short field */
        "2023/11/16 18:17:03",
        "2023-11-16 18:17:03Z",
        "1800-01-01 00:00:00",         /* outside int64 ns range we accept */
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(trace_azure_timestamp_ns(bad[i], strlen(bad[i]), &ns) == -1,
                      "\"%s\" was accepted as %lld ns", bad[i], (long long)ns);
}
END_TEST

START_TEST(test_azure_offsets_across_day_month_year_and_leap_day)
{
    char *dir = make_temp_dir("traces");
    char *p = write_temp_file(dir, "a.csv",
                              "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                              "2023-11-30 23:59:59.9999999,10,1\r\n"
                              "2023-12-01 00:00:00.0000001,10,1\r\n"
                              "2023-12-31 23:59:59.5000000,10,1\r\n"
                              "2024-01-01 00:00:00.2500000,10,1\r\n"
                              "2024-02-28 23:00:00.0000000,10,1\r\n"
                              "2024-03-01 01:00:00.0000000,10,1");
    rows r = read_all(p);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.n, 6);
    ck_assert_int_eq(r.a[1].arrival_ns, 200); /* over midnight and a month end */
    int64_t dec31 = r.a[2].arrival_ns;
    ck_assert_int_eq(dec31, 31LL * 86400 * NS_PER_S - 499999900); /* 31 days less 0.4999999 s */
    ck_assert_int_eq(r.a[3].arrival_ns - dec31, 750000000LL);           /* over New Year */
    ck_assert_int_eq(r.a[5].arrival_ns - r.a[4].arrival_ns, 26LL * 3600 * NS_PER_S); /* Feb 29 */
    rows_free(&r);
    free(p);
    rm_tree(dir);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------------------ */

#define TANDEM_HDR "arrival_s,prompt_tokens,output_tokens\n"
#define AZURE_HDR "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
#define MC(ts, in, out, ids) \
    "{\"timestamp\": " #ts ", \"input_length\": " #in ", \"output_length\": " #out \
    ", \"hash_ids\": " ids "}\n"

START_TEST(test_bad_rows_name_file_and_line)
{
    char *d = make_temp_dir("traces");
    expect_error(d, "few_fields.csv", TANDEM_HDR "0,1,1\n1.0,5\n", 3, "expected 3 fields");
    expect_error(d, "many_fields.csv", TANDEM_HDR "0,1,1,\n", 2, "expected 3 fields");
    expect_error(d, "not_number.csv", TANDEM_HDR "0,abc,1\n", 2, "prompt_tokens \"abc\" is not an integer");
    expect_error(d, "float_tokens.csv", TANDEM_HDR "0,12.5,1\n", 2, "not an integer");
    expect_error(d, "empty_field.csv", TANDEM_HDR "0,,1\n", 2, "prompt_tokens is empty");
    expect_error(d, "negative.csv", TANDEM_HDR "0,1,1\n1,-5,1\n", 3, "prompt_tokens is negative");
    expect_error(d, "zero_output.csv", TANDEM_HDR "0,5,0\n", 2, "output_tokens is 0");
    expect_error(d, "zero_prompt.csv", TANDEM_HDR "0,0,5\n", 2, "prompt_tokens is 0");
    expect_error(d, "absurd.csv", TANDEM_HDR "0,16777217,5\n", 2, "absurd");
    expect_error(d, "huge.csv", TANDEM_HDR "0,99999999999999999999999,5\n", 2, "not an integer");
    expect_error(d, "bad_time.csv", TANDEM_HDR "0,1,1\nsoon,1,1\n", 3, "arrival_s \"soon\"");
    expect_error(d, "neg_time.csv", TANDEM_HDR "-1,1,1\n", 2, "arrival_s \"-1\"");
    expect_error(d, "nan_time.csv", TANDEM_HDR "nan,1,1\n", 2, "arrival_s \"nan\"");
    expect_error(d, "backwards.csv", TANDEM_HDR "0,1,1\n2,1,1\n1.5,1,1\n", 4, "backwards");
    expect_error(d, "empty_line.csv", TANDEM_HDR "0,1,1\n\n1,1,1\n", 3, "empty line");
    expect_error(d, "quote.csv", TANDEM_HDR "0,\"1,1\n", 2, "unterminated quote");
    expect_error(d, "neg_priority.csv", "arrival_s,prompt_tokens,output_tokens,priority\n0,1,1,-1\n",
                 2, "priority -1 is out of range");
    expect_error(d, "stray_cr.csv", TANDEM_HDR "0,1\r,1\n", 2, "carriage return");
    expect_error_opt(d, "nul.csv", TANDEM_HDR "0,12\0" "3,1\n", sizeof(TANDEM_HDR "0,12\0" "3,1\n") - 1,
                     NULL, 2, "not an integer");
    expect_error(d, "vidur_neg.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,-3\n", 2,
                 "num_decode_tokens is negative");
    expect_error(d, "azure_feb29.csv", AZURE_HDR "2023-02-29 00:00:00.0000000,1,1\r\n", 2,
                 "TIMESTAMP \"2023-02-29 00:00:00.0000000\"");
    expect_error(d, "azure_mixed.csv", AZURE_HDR "2023-02-28 00:00:00,1,1\r\n2023-02-28 00:00:01,1,1\n"
                 "2023-02-28 00:00:02,1,1\r\n", 3, "mixed line ends");
    /* Mooncake */
    expect_error(d, "truncated.jsonl", MC(0, 1, 1, "[0]") MC(1, 1, 1, "[1]") "{\"timestamp\": 2, \"inp",
                 3, "bad JSON");
    expect_error(d, "not_object.jsonl", MC(0, 1, 1, "[0]") "[1, 2]\n", 2, "expected a JSON object");
    expect_error(d, "hash_count.jsonl", MC(0, 1025, 1, "[0, 1]"), 1, "expected ceil(input_length/512) = 3");
    expect_error(d, "hash_neg.jsonl", MC(0, 1025, 1, "[0, -1, 2]"), 1, "hash_ids[1]");
    expect_error(d, "hash_str.jsonl", MC(0, 1, 1, "[\"a\"]"), 1, "hash_ids[0]");
    expect_error(d, "mc_missing.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"hash_ids\": [0]}\n", 1,
                 "missing field \"output_length\"");
    expect_error(d, "mc_zero.jsonl", MC(0, 1, 0, "[0]"), 1, "\"output_length\" is 0");
    expect_error(d, "mc_backwards.jsonl", MC(5, 1, 1, "[0]") MC(4, 1, 1, "[0]"), 2, "backwards");
    expect_error(d, "mc_ts_string.jsonl", MC("5", 1, 1, "[0]"), 1, "\"timestamp\" is not a number");
    expect_error(d, "mc_dup.jsonl", "{\"timestamp\": 0, \"timestamp\": 1}\n", 1, "bad JSON");
    rm_tree(d);
}
END_TEST

START_TEST(test_bad_files_are_errors_even_when_skipping)
{
    char *d = make_temp_dir("traces");
    trace_options skip = trace_options_default();
    skip.skip_bad_rows = true;
#define FILE_ERR(name, text, line, what)                                              \
    do {                                                                               \
        expect_error_opt(d, name, text, sizeof(text) - 1, NULL, line, what);           \
        expect_error_opt(d, name, text, sizeof(text) - 1, &skip, line, what);          \
    } while (0)
    FILE_ERR("empty.csv", "", 1, "empty file");
    FILE_ERR("header_only.csv", TANDEM_HDR, 1, "header only");
    FILE_ERR("header_only_nonl.csv", "arrival_s,prompt_tokens,output_tokens", 1, "header only");
    FILE_ERR("bom.csv", "\xEF\xBB\xBF" TANDEM_HDR "0,1,1\n", 1, "byte order mark");
    FILE_ERR("unknown.csv", "time,in,out\n0,1,1\n", 1, "unknown trace header \"time,in,out\"");
    FILE_ERR("binary.csv", "\x01\x02\xff\n", 1, "unknown trace header \"???\"");
    FILE_ERR("crlf.csv", "arrival_s,prompt_tokens,output_tokens\r\n0,1,1\r\n", 1, "CRLF");
    FILE_ERR("crlf_vidur.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\r\n0,1,1\r\n", 1,
             "CRLF");
    FILE_ERR("crlf.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                           "\"hash_ids\": [0]}\r\n", 1, "CRLF");
    FILE_ERR("missing_col.csv", "arrival_s,prompt_tokens\n0,1\n", 1,
             "missing column \"output_tokens\"");
    FILE_ERR("azure_missing.csv", "TIMESTAMP,GeneratedTokens\n2023-01-01 00:00:00,1\n", 1,
             "missing column \"ContextTokens\"");
    FILE_ERR("unknown_col.csv", "arrival_s,prompt_tokens,output_tokens,prioirty\n0,1,1,1\n", 1,
             "unknown column \"prioirty\"");
    FILE_ERR("dup_col.csv", "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,1,1,1\n", 1,
             "column \"prompt_tokens\" appears twice");
#undef FILE_ERR
    /* With skipping, a trace in which no row is valid is an error too. */
    expect_error_opt(d, "all_bad.csv", TANDEM_HDR "0,0,1\n0,x,1\n", sizeof(TANDEM_HDR) + 11, &skip, 3,
                     "no requests in the trace (2 bad rows skipped)");
    /* A missing file names the file (there is no line). */
    rows r = read_all("/nonexistent/trace.csv");
    ck_assert_int_eq(r.rc, -1);
    ck_assert_msg(strstr(r.err.msg, "/nonexistent/trace.csv: cannot open"), "got \"%s\"", r.err.msg);
    rm_tree(d);
}
END_TEST

START_TEST(test_skip_bad_rows_skips_and_counts)
{
    char *d = make_temp_dir("traces");
    char *p = write_temp_file(d, "mixed.csv",
                              TANDEM_HDR
                              "1.0,10,1\n"   /* line 2: ok, origin */
                              "1.5,abc,1\n"  /* bad: not a number */
                              "2.0,20,2\n"   /* ok */
                              "2.5,30,0\n"   /* bad: zero output */
                              "0.5,40,4\n"   /* bad: backwards */
                              "\n"           /* bad: empty line */
                              "3.0,50,5");   /* ok, no final newline */
    trace_options o = trace_options_default();
    o.skip_bad_rows = true;
    rows r = read_all_opt(p, &o);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.n, 3);
    ck_assert_int_eq(r.bad, 4);
    ck_assert_int_eq(r.a[0].prompt_tokens, 10);
    ck_assert_int_eq(r.a[1].prompt_tokens, 20);
    ck_assert_int_eq(r.a[1].arrival_ns, NS_PER_S);
    ck_assert_int_eq(r.a[2].prompt_tokens, 50);
    ck_assert_int_eq(r.a[2].arrival_ns, 2 * NS_PER_S);
    ck_assert_int_eq(r.a[2].line, 8);
    rows_free(&r);
    /* Without skipping, the first bad row stops the reader, after the good rows before it. */
    r = read_all(p);
    ck_assert_int_eq(r.rc, -1);
    ck_assert_int_eq(r.n, 1);
    ck_assert_msg(strstr(r.err.msg, ":3: prompt_tokens \"abc\""), "got \"%s\"", r.err.msg);
    rows_free(&r);
    free(p);
    /* Mooncake: a truncated last line is skipped and counted. */
    p = write_temp_file(d, "m.jsonl", MC(0, 1, 1, "[0]") MC(1, 2, 1, "[0]") "{\"timestamp\": 3, \"in");
    r = read_all_opt(p, &o);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.n, 2);
    ck_assert_int_eq(r.bad, 1);
    rows_free(&r);
    free(p);
    rm_tree(d);
}
END_TEST

START_TEST(test_time_scale_and_max_requests)
{
    char *d = make_temp_dir("traces");
    char *p = write_temp_file(d, "t.csv", TANDEM_HDR "10,1,1\n11,2,1\n13.000001,3,1\nbad,4,1\n");
    trace_options o = trace_options_default();
    o.time_scale = 0.5;
    o.max_requests = 3; /* stops before the bad row, which is never read */
    rows r = read_all_opt(p, &o);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.n, 3);
    ck_assert_int_eq(r.a[1].arrival_ns, 500000000LL);
    ck_assert_int_eq(r.a[2].arrival_ns, 1500000500LL);
    rows_free(&r);
    o.time_scale = 2;
    o.max_requests = 1;
    r = read_all_opt(p, &o);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.n, 1);
    rows_free(&r);
    o.time_scale = 0; /* a zeroed options struct is refused, not silently read at scale 0 */
    r = read_all_opt(p, &o);
    ck_assert_int_eq(r.rc, -1);
    ck_assert_msg(strstr(r.err.msg, "time scale"), "got \"%s\"", r.err.msg);
    rows_free(&r);
    free(p);
    rm_tree(d);
}
END_TEST

/* ---- streaming ------------------------------------------------------------------------------ */

START_TEST(test_streaming_200k_rows_in_constant_memory)
{
    char *d = make_temp_dir("traces");
    char path[4200];
    snprintf(path, sizeof path, "%s/big.csv", d);
    FILE *f = fopen(path, "w");
    fputs("arrival_s,prompt_tokens,output_tokens,priority,client\n", f);
    const int N = 200000;
    for (int i = 0; i < N; i++)
        fprintf(f, "%d.%06d,%d,%d,%d,%d\n", i / 1000, (i % 1000) * 1000, 1 + i % 4000, 1 + i % 300,
                i % 3, i % 7);
    fclose(f);

    trace_reader *t;
    terr e;
    ck_assert_msg(trace_open(&t, path, NULL, &e) == 0, "%s", e.msg);
    arrival_source s = trace_source(t);
    arrival a;
    int64_t n = 0, sum_prompt = 0;
    size_t bytes_early = 0;
    int r;
    while ((r = s.next(s.self, &a, &e)) == 1) {
        sum_prompt += a.prompt_tokens;
        if (++n == 1000) bytes_early = trace_buffer_bytes(t);
    }
    ck_assert_msg(r == 0, "%s", e.msg);
    ck_assert_int_eq(n, N);
    int64_t want = 0;
    for (int i = 0; i < N; i++) want += 1 + i % 4000;
    ck_assert_int_eq(sum_prompt, want);
    ck_assert_int_eq(a.arrival_ns, (int64_t)(N - 1) * 1000000);
    size_t bytes_end = trace_buffer_bytes(t);
    ck_assert_msg(bytes_end == bytes_early && bytes_end <= 256 * 1024,
                  "reader buffers grew from %zu to %zu bytes over %d rows", bytes_early, bytes_end, N);
    trace_close(t);

    /* One Mooncake row longer than the 64 KiB chunk (19,532 hashes) still parses: the buffer
     * grows to the longest line, once. */
    snprintf(path, sizeof path, "%s/long.jsonl", d);
    f = fopen(path, "w");
    for (int row = 0; row < 3; row++) {
        int in = row == 1 ? 10000000 : 600, nh = (in + 511) / 512;
        fprintf(f, "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": 1, \"hash_ids\": [",
                row, in);
        for (int i = 0; i < nh; i++) fprintf(f, "%s%d", i ? ", " : "", 1000000 + i);
        fputs("]}\n", f);
    }
    fclose(f);
    rows rr = read_all(path);
    ck_assert_msg(rr.rc == 0, "error: %s", rr.err.msg);
    ck_assert_int_eq(rr.n, 3);
    ck_assert_int_eq(rr.a[1].num_hashes, 19532);
    rows_free(&rr);
    rm_tree(d);
}
END_TEST

/* ---- trace gen ------------------------------------------------------------------------------ */

/* Runs `tandem trace gen ARGS... --out DIR/NAME` and reads the result back. */
static rows gen_rows(const char *dir, const char *name, const char *const *args)
{
    char out[4200];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    char *argv[40];
    int n = 0;
    argv[n++] = "tandem";
    argv[n++] = "trace";
    argv[n++] = "gen";
    for (int i = 0; args[i]; i++) argv[n++] = (char *)args[i];
    argv[n++] = "--out";
    argv[n++] = out;
    argv[n] = NULL;
    cli_result c = run_cliv(argv);
    ck_assert_msg(c.exit_code == 0, "trace gen %s exited %d: %s", name, c.exit_code, c.err);
    cli_result_free(&c);
    rows r = read_all(out);
    ck_assert_msg(r.rc == 0, "reading back %s: %s", name, r.err.msg);
    return r;
}

/* Mean and coefficient of variation of the inter-arrival gaps (in seconds). */
static void gap_stats(const rows *r, double *mean, double *cv)
{
    double s = 0, s2 = 0;
    int64_t n = r->n - 1;
    for (int64_t i = 1; i < r->n; i++) {
        double g = (double)(r->a[i].arrival_ns - r->a[i - 1].arrival_ns) / 1e9;
        s += g;
        s2 += g * g;
    }
    *mean = s / (double)n;
    *cv = sqrt(s2 / (double)n - *mean * *mean) / *mean;
}

START_TEST(test_gen_same_seed_is_byte_identical)
{
    cli_result a = run_cli("trace", "gen", "--num-requests", "500", "--rate", "3", "--burstiness",
                           "0.5", "--length-dist", "lognormal", "--priority-classes", "0.5,0.5",
                           "--num-clients", "3", "--seed", "42", NULL);
    cli_result b = run_cli("trace", "gen", "--num-requests", "500", "--rate", "3", "--burstiness",
                           "0.5", "--length-dist", "lognormal", "--priority-classes", "0.5,0.5",
                           "--num-clients", "3", "--seed", "42", NULL);
    cli_result c = run_cli("trace", "gen", "--num-requests", "500", "--rate", "3", "--burstiness",
                           "0.5", "--length-dist", "lognormal", "--priority-classes", "0.5,0.5",
                           "--num-clients", "3", "--seed", "43", NULL);
    ck_assert_msg(a.exit_code == 0, "exit %d: %s", a.exit_code, a.err);
    ck_assert_msg(!strncmp(a.out, "arrival_s,prompt_tokens,output_tokens,priority,client\n", 54),
                  "header: %.80s", a.out);
    ck_assert_msg(!strcmp(a.out, b.out), "same seed, different output");
    ck_assert_msg(strcmp(a.out, c.out) != 0, "seeds 42 and 43 gave the same output");
    /* 6-decimal arrivals: line 2 is "0.000000,..." (the first request is at t = 0). */
    ck_assert_msg(!strncmp(strchr(a.out, '\n') + 1, "0.000000,", 9), "first row: %.40s",
                  strchr(a.out, '\n') + 1);
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&c);
}
END_TEST

START_TEST(test_gen_mean_rate_and_poisson_cv)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "20000", "--rate", "10", "--seed", "1", NULL};
    rows r = gen_rows(d, "poisson.csv", args);
    ck_assert_int_eq(r.n, 20000);
    double span_s = (double)r.a[r.n - 1].arrival_ns / 1e9;
    double rate = (double)(r.n - 1) / span_s;
    ck_assert_msg(fabs(rate - 10) < 0.3, "mean rate %.3f req/s, want 10 +- 3%%", rate);
    double mean, cv;
    gap_stats(&r, &mean, &cv);
    ck_assert_msg(fabs(cv - 1) < 0.05, "Poisson gap CV %.3f, want 1", cv);
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_int_eq(r.a[i].prompt_tokens, 1024); /* fixed default lengths, exact */
        ck_assert_int_eq(r.a[i].output_tokens, 128);
        ck_assert_int_eq(r.a[i].arrival_ns % 1000, 0); /* microsecond resolution */
    }
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_burstiness_sets_gap_cv)
{
    char *d = make_temp_dir("gen");
    static const struct { const char *b; double cv; } cases[] = {{"0.25", 2.0}, {"4", 0.5}};
    for (size_t k = 0; k < 2; k++) {
        const char *args[] = {"--num-requests", "20000", "--rate", "5", "--burstiness",
                              cases[k].b, "--seed", "7", NULL};
        rows r = gen_rows(d, "b.csv", args);
        double mean, cv;
        gap_stats(&r, &mean, &cv);
        ck_assert_msg(fabs(mean - 0.2) < 0.2 * 0.05, "B=%s: mean gap %.4f s, want 0.2", cases[k].b,
                      mean);
        ck_assert_msg(fabs(cv - cases[k].cv) < 0.08 * cases[k].cv, "B=%s: gap CV %.3f, want %.2f",
                      cases[k].b, cv, cases[k].cv);
        rows_free(&r);
    }
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_fixed_and_infinite_rate)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "50", "--rate", "inf", "--input-len", "77",
                          "--output-len", "5", NULL};
    rows r = gen_rows(d, "inf.csv", args);
    ck_assert_int_eq(r.n, 50);
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_int_eq(r.a[i].arrival_ns, 0);
        ck_assert_int_eq(r.a[i].prompt_tokens, 77);
        ck_assert_int_eq(r.a[i].output_tokens, 5);
    }
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_uniform_lengths_within_range)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "20000", "--length-dist", "uniform", "--input-len",
                          "100", "--output-len", "10", "--range-ratio", "0.5", NULL};
    rows r = gen_rows(d, "u.csv", args);
    int lo = 1 << 30, hi = 0, olo = 1 << 30, ohi = 0;
    double sum = 0;
    for (int64_t i = 0; i < r.n; i++) {
        lo = r.a[i].prompt_tokens < lo ? r.a[i].prompt_tokens : lo;
        hi = r.a[i].prompt_tokens > hi ? r.a[i].prompt_tokens : hi;
        olo = r.a[i].output_tokens < olo ? r.a[i].output_tokens : olo;
        ohi = r.a[i].output_tokens > ohi ? r.a[i].output_tokens : ohi;
        sum += r.a[i].prompt_tokens;
    }
    /* vLLM's rule: [int(100*0.5), int(100*1.5)] = [50, 150]; [5, 15] for the outputs. */
    ck_assert_msg(lo == 50 && hi == 150, "prompt range [%d, %d], want [50, 150]", lo, hi);
    ck_assert_msg(olo == 5 && ohi == 15, "output range [%d, %d], want [5, 15]", olo, ohi);
    ck_assert_msg(fabs(sum / (double)r.n - 100) < 1, "prompt mean %.2f, want 100", sum / (double)r.n);
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_lognormal_mean_and_max_len_clamp)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "20000", "--length-dist", "lognormal", "--input-len",
                          "1000", "--lognormal-sigma", "0.5", NULL};
    rows r = gen_rows(d, "ln.csv", args);
    double sum = 0;
    for (int64_t i = 0; i < r.n; i++) sum += r.a[i].prompt_tokens;
    ck_assert_msg(fabs(sum / (double)r.n - 1000) < 15, "lognormal prompt mean %.1f, want 1000",
                  sum / (double)r.n);
    rows_free(&r);

    const char *args2[] = {"--num-requests", "5000", "--length-dist", "lognormal", "--input-len",
                           "1000", "--lognormal-sigma", "2", "--max-len", "2000", NULL};
    r = gen_rows(d, "clamp.csv", args2);
    int at_max = 0;
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_msg(r.a[i].prompt_tokens >= 1 && r.a[i].prompt_tokens <= 2000,
                      "row %lld: prompt %d outside [1, 2000]", (long long)i, r.a[i].prompt_tokens);
        at_max += r.a[i].prompt_tokens == 2000;
    }
    ck_assert_msg(at_max > 100, "only %d of 5000 prompts hit --max-len 2000", at_max);
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_priority_fractions_and_clients)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "20000", "--priority-classes", "0.2,0.3,0.5",
                          "--num-clients", "4", "--seed", "3", NULL};
    rows r = gen_rows(d, "p.csv", args);
    int64_t cls[3] = {0}, cli[4] = {0};
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_msg(r.a[i].priority >= 0 && r.a[i].priority < 3, "priority %d", r.a[i].priority);
        ck_assert_msg(r.a[i].client_id >= 0 && r.a[i].client_id < 4, "client %d", r.a[i].client_id);
        cls[r.a[i].priority]++;
        cli[r.a[i].client_id]++;
    }
    static const double want[3] = {0.2, 0.3, 0.5};
    for (int k = 0; k < 3; k++)
        ck_assert_msg(fabs((double)cls[k] / (double)r.n - want[k]) < 0.015,
                      "class %d fraction %.4f, want %.2f", k, (double)cls[k] / (double)r.n, want[k]);
    for (int k = 0; k < 4; k++)
        ck_assert_msg(fabs((double)cli[k] / (double)r.n - 0.25) < 0.015, "client %d fraction %.4f",
                      k, (double)cli[k] / (double)r.n);
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_lengths_file_draws_only_its_rows)
{
    const char *lf = "traces/samples/sharegpt_lengths_5k.csv";
    /* The set of (prefill, decode) pairs in the file. */
    char *text = slurp(lf, NULL);
    ck_assert_msg(text != NULL, "cannot read %s", lf);
    int32_t (*pairs)[2] = malloc(6000 * sizeof *pairs);
    int np = 0;
    for (char *line = strchr(text, '\n'); line && line[1] && np < 6000; line = strchr(line, '\n')) {
        line++;
        ck_assert_int_eq(sscanf(line, "%d,%d", &pairs[np][0], &pairs[np][1]), 2);
        np++;
    }
    ck_assert_int_eq(np, 5000);
    free(text);
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "3000", "--length-dist", "file", "--lengths-file", lf,
                          "--seed", "9", NULL};
    rows r = gen_rows(d, "lf.csv", args);
    int distinct_prompts = 0;
    for (int64_t i = 0; i < r.n; i++) {
        bool found = false;
        for (int k = 0; k < np && !found; k++)
            found = pairs[k][0] == r.a[i].prompt_tokens && pairs[k][1] == r.a[i].output_tokens;
        ck_assert_msg(found, "row %lld: (%d, %d) is not a row of %s", (long long)i,
                      r.a[i].prompt_tokens, r.a[i].output_tokens, lf);
        distinct_prompts += i > 0 && r.a[i].prompt_tokens != r.a[i - 1].prompt_tokens;
    }
    ck_assert_msg(distinct_prompts > 2500, "draws look stuck: %d changes in 3000", distinct_prompts);
    rows_free(&r);
    free(pairs);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_source_equals_csv_replay)
{
    /* The in-memory source and a replay of the CSV it writes give identical arrivals. */
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "2000", "--rate", "123.4", "--burstiness", "0.7",
                          "--length-dist", "uniform", "--range-ratio", "0.9", "--seed", "11", NULL};
    rows r = gen_rows(d, "s.csv", args);
    tracegen_options o = tracegen_options_default();
    o.num_requests = 2000;
    o.rate_per_s = 123.4;
    o.burstiness = 0.7;
    o.length_dist = TRACEGEN_LEN_UNIFORM;
    o.range_ratio = 0.9;
    o.seed = 11;
    tracegen *g;
    terr e;
    ck_assert_msg(tracegen_open(&g, &o, &e) == 0, "%s", e.msg);
    arrival_source s = tracegen_source(g);
    arrival a;
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_int_eq(s.next(s.self, &a, &e), 1);
        ck_assert_msg(a.arrival_ns == r.a[i].arrival_ns && a.prompt_tokens == r.a[i].prompt_tokens &&
                          a.output_tokens == r.a[i].output_tokens,
                      "row %lld: source (%lld, %d, %d) vs csv (%lld, %d, %d)", (long long)i,
                      (long long)a.arrival_ns, a.prompt_tokens, a.output_tokens,
                      (long long)r.a[i].arrival_ns, r.a[i].prompt_tokens, r.a[i].output_tokens);
    }
    ck_assert_int_eq(s.next(s.self, &a, &e), 0);
    tracegen_close(g);
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_help_lists_every_option_with_default)
{
    cli_result c = run_cli("trace", "gen", "--help", NULL);
    ck_assert_int_eq(c.exit_code, 0);
    static const char *const want[] = {
        "--num-requests N", "[1000]", "--rate S", "--burstiness X", "--input-len N", "[1024]",
        "--output-len N", "[128]", "--length-dist S", "[fixed]", "--range-ratio X",
        "--lognormal-sigma X", "--lengths-file S", "--max-len N", "--priority-classes",
        "--num-clients S", "--seed N", "[0]", "--out S", "none: stdout"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(c.out, want[i]), "--help does not mention \"%s\":\n%s", want[i], c.out);
    cli_result_free(&c);
    c = run_cli("trace", "--help", NULL);
    ck_assert_int_eq(c.exit_code, 0);
    ck_assert_msg(strstr(c.out, "gen"), "`tandem trace --help` does not list gen:\n%s", c.out);
    cli_result_free(&c);
}
END_TEST

START_TEST(test_gen_bad_flags_exit_2_naming_the_flag)
{
    char *d = make_temp_dir("gen");
    char *bad_lengths = write_temp_file(d, "bad_lengths.csv",
                                        "num_prefill_tokens,num_decode_tokens\n5,6\n7,zero\n");
    char *no_cols = write_temp_file(d, "nocols.csv", "a,b\n1,2\n");
    char bad_lengths_line[4200];
    snprintf(bad_lengths_line, sizeof bad_lengths_line, "%s:3: num_decode_tokens \"zero\"",
             bad_lengths);
    const struct {
        const char *args[8];
        const char *want; /* in stderr */
    } cases[] = {
        {{"--rate", "abc"}, "--rate"},
        {{"--rate", "0"}, "--rate"},
        {{"--rate", "-2"}, "--rate"},
        {{"--rate"}, "--rate: needs a value"},
        {{"--burstiness", "0"}, "--burstiness"},
        {{"--burstiness", "1e9"}, "--burstiness"},
        {{"--num-requests", "0"}, "--num-requests"},
        {{"--num-requests", "10x"}, "--num-requests"},
        {{"--input-len", "0"}, "--input-len"},
        {{"--output-len", "99999999999"}, "--output-len"},
        {{"--max-len", "-1"}, "--max-len"},
        {{"--length-dist", "zipf"}, "--length-dist"},
        {{"--range-ratio", "1"}, "--range-ratio"},
        {{"--lognormal-sigma", "x"}, "--lognormal-sigma"},
        {{"--priority-classes", "0.5,0.4"}, "--priority-classes"},
        {{"--priority-classes", "0.5,,0.5"}, "--priority-classes"},
        {{"--priority-classes", "1.5,-0.5"}, "--priority-classes"},
        {{"--num-clients", "0"}, "--num-clients"},
        {{"--seed", "-1"}, "--seed"},
        {{"--lengths-file", "x.csv"}, "--lengths-file"},
        {{"--length-dist", "file"}, "--lengths-file"},
        {{"--length-dist", "file", "--lengths-file", "/nonexistent/l.csv"}, "/nonexistent/l.csv"},
        {{"--length-dist", "file", "--lengths-file", bad_lengths}, bad_lengths_line},
        {{"--length-dist", "file", "--lengths-file", no_cols}, "missing column \"num_prefill_tokens\""},
        {{"--rate", "0.000001"}, "--rate"},
        {{"--bogus"}, "--bogus"},
        {{"-x"}, "-x"},
        {{"stray"}, "stray"},
        {{"--out", "/nonexistent/dir/o.csv"}, "--out"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *argv[16] = {"tandem", "trace", "gen"};
        int n = 3;
        for (int i = 0; cases[k].args[i]; i++) argv[n++] = (char *)cases[k].args[i];
        argv[n] = NULL;
        cli_result c = run_cliv(argv);
        ck_assert_msg(c.exit_code == 2 && strstr(c.err, cases[k].want),
                      "case %zu (%s %s): exit %d, stderr \"%s\"; want exit 2 and \"%s\"", k,
                      cases[k].args[0], cases[k].args[1] ? cases[k].args[1] : "", c.exit_code,
                      c.err, cases[k].want);
        ck_assert_msg(c.out[0] == 0, "case %zu wrote to stdout: %.80s", k, c.out);
        cli_result_free(&c);
    }
    cli_result c = run_cli("trace", NULL);
    ck_assert_int_eq(c.exit_code, 2);
    cli_result_free(&c);
    c = run_cli("trace", "nope", NULL);
    ck_assert_msg(c.exit_code == 2 && strstr(c.err, "nope"), "exit %d: %s", c.exit_code, c.err);
    cli_result_free(&c);
    free(bad_lengths);
    free(no_cols);
    rm_tree(d);
}
END_TEST

static Suite *traces_suite(void)
{
    Suite *s = suite_create("traces");
    TCase *rd = tcase_create("readers");
    tcase_add_test(rd, test_azure_conv_sample_parses_all_rows);
    tcase_add_test(rd, test_azure_code_sample_parses_all_rows);
    tcase_add_test(rd, test_mooncake_sample_parses_with_hashes);
    tcase_add_test(rd, test_vidur_columns_by_name_extra_ignored);
    tcase_add_test(rd, test_tandem_columns_in_any_order);
    tcase_add_test(rd, test_files_without_final_newline);
    tcase_add_test(rd, test_azure_timestamp_exact);
    tcase_add_test(rd, test_azure_offsets_across_day_month_year_and_leap_day);
    tcase_add_test(rd, test_bad_rows_name_file_and_line);
    tcase_add_test(rd, test_bad_files_are_errors_even_when_skipping);
    tcase_add_test(rd, test_skip_bad_rows_skips_and_counts);
    tcase_add_test(rd, test_time_scale_and_max_requests);
    tcase_add_test(rd, test_streaming_200k_rows_in_constant_memory);
    suite_add_tcase(s, rd);
    TCase *gen = tcase_create("gen");
    tcase_add_test(gen, test_gen_same_seed_is_byte_identical);
    tcase_add_test(gen, test_gen_mean_rate_and_poisson_cv);
    tcase_add_test(gen, test_gen_burstiness_sets_gap_cv);
    tcase_add_test(gen, test_gen_fixed_and_infinite_rate);
    tcase_add_test(gen, test_gen_uniform_lengths_within_range);
    tcase_add_test(gen, test_gen_lognormal_mean_and_max_len_clamp);
    tcase_add_test(gen, test_gen_priority_fractions_and_clients);
    tcase_add_test(gen, test_gen_lengths_file_draws_only_its_rows);
    tcase_add_test(gen, test_gen_source_equals_csv_replay);
    tcase_add_test(gen, test_gen_help_lists_every_option_with_default);
    tcase_add_test(gen, test_gen_bad_flags_exit_2_naming_the_flag);
    suite_add_tcase(s, gen);
    return s;
}

int main(void) { return run_suite(traces_suite()) ? 1 : 0; }
