/*
 * test_traces.c: the trace readers (every format, every bad-input case, streaming). The
 * generator's tests are in test_tracegen.c.
 *
 * Small inputs are written to a fresh temp dir per test; the bundled samples are read from
 * traces/samples (tests run from the repository root).
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

/* The reader fails, with a message that starts "PATH:LINE: " and contains `what`. */
static void expect_error_opt(const char *dir, const char *name, const void *data, size_t len,
                             const trace_options *opt, int line, const char *what)
{
    char *path = write_bytes(dir, name, data, len);
    trace_rows r = read_all_opt(path, opt);
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
    trace_rows r = read_all("traces/samples/azure_conv_2023.csv");
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
    trace_rows r = read_all("traces/samples/azure_code_2023.csv");
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
    trace_rows r = read_all("traces/samples/mooncake_conversation_2k.jsonl");
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
    trace_rows r = read_all(p);
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
    trace_rows r = read_all(p);
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
    trace_rows r = read_all(p);
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
    trace_rows r = read_all(p);
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
    /* stamps 300 years apart: the difference would overflow int64 ns */
    expect_error(d, "azure_far.csv", AZURE_HDR "1900-01-01 00:00:00,1,1\r\n2200-12-31 23:59:59,1,1\r\n", 3,
                 "more than 1000000000 s after the first row");
    /* and backwards: the message's offset must not overflow either (UBSan checks) */
    expect_error(d, "azure_far_back.csv", AZURE_HDR "2200-12-31 23:59:59,1,1\r\n1900-01-01 00:00:00,1,1\r\n", 3,
                 "arrival time goes backwards");
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
    trace_rows r = read_all("/nonexistent/trace.csv");
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
    trace_rows r = read_all_opt(p, &o);
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
    trace_rows r = read_all_opt(p, &o);
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
    trace_rows rr = read_all(path);
    ck_assert_msg(rr.rc == 0, "error: %s", rr.err.msg);
    ck_assert_int_eq(rr.n, 3);
    ck_assert_int_eq(rr.a[1].num_hashes, 19532);
    rows_free(&rr);
    rm_tree(d);
}
END_TEST

/* The client column takes names, mapped to 0, 1, ... in order of first appearance; a name
 * after integer ids is an error naming the line (its id could collide). */
START_TEST(test_client_names_map_to_ids_in_order_of_appearance)
{
    char *dir = make_temp_dir("traces");
    char *p = write_temp_file(dir, "names.csv",
                              "arrival_s,prompt_tokens,output_tokens,client\n"
                              "0,10,5,tenant-b\n0.1,10,5,tenant-a\n0.2,10,5,tenant-b\n0.3,10,5,\"7\"\n0.4,10,5,tenant-a\n");
    trace_rows r = read_all(p);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    int want[] = {0, 1, 0, 2, 1};
    for (int i = 0; i < 5; i++) ck_assert_msg(r.a[i].client_id == want[i], "row %d: client %d, want %d", i, r.a[i].client_id, want[i]);
    rows_free(&r);
    free(p);
    p = write_temp_file(dir, "mixed.csv", "arrival_s,prompt_tokens,output_tokens,client\n0,10,5,3\n1,10,5,tenant-a\n");
    r = read_all(p);
    ck_assert_int_eq(r.rc, -1);
    ck_assert_msg(strstr(r.err.msg, "mixed.csv:3: client \"tenant-a\" is a name, but earlier rows gave integer ids"), "%s",
                  r.err.msg);
    rows_free(&r);
    free(p);
    rm_tree(dir);
}
END_TEST

/* --request-rate re-times any trace: Gamma gaps of mean 1/R (shape B), the first at 0, the same
 * for the same seed; a lengths-only file replays only so, and says how without it. */
START_TEST(test_request_rate_retimes_and_lengths_files_need_it)
{
    trace_options o = trace_options_default();
    trace_rows r = read_all_opt("traces/samples/sharegpt_lengths_5k.csv", &o);
    ck_assert_int_eq(r.rc, -1);
    ck_assert_msg(strstr(r.err.msg, "sharegpt_lengths_5k.csv:1: a lengths-only trace") && strstr(r.err.msg, "--request-rate"),
                  "%s", r.err.msg);
    rows_free(&r);
    for (int k = 0; k < 2; k++) {
        o.request_rate = 4;
        o.burstiness = k ? 0.25 : 1;
        o.seed = 3;
        r = read_all_opt("traces/samples/sharegpt_lengths_5k.csv", &o);
        ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
        ck_assert_str_eq(r.format, "lengths");
        ck_assert_int_eq(r.n, 5000);
        ck_assert_int_eq(r.a[0].arrival_ns, 0);
        ck_assert_int_eq(r.a[0].prompt_tokens, 74);
        ck_assert_int_eq(r.a[0].output_tokens, 918);
        /* mean gap 1/R; coefficient of variation 1/sqrt(B) */
        double sum = 0, sq = 0;
        for (int64_t i = 1; i < r.n; i++) {
            double g = (double)(r.a[i].arrival_ns - r.a[i - 1].arrival_ns) / 1e9;
            sum += g, sq += g * g;
        }
        double mean = sum / (double)(r.n - 1), cv = sqrt(sq / (double)(r.n - 1) - mean * mean) / mean;
        ck_assert_msg(fabs(mean - 0.25) < 0.02, "burstiness %g: mean gap %g s, want 0.25", o.burstiness, mean);
        ck_assert_msg(fabs(cv - 1 / sqrt(o.burstiness)) < 0.15 / sqrt(o.burstiness), "burstiness %g: CV %g, want %g",
                      o.burstiness, cv, 1 / sqrt(o.burstiness));
        trace_rows again = read_all_opt("traces/samples/sharegpt_lengths_5k.csv", &o);
        ck_assert_msg(again.a[4999].arrival_ns == r.a[4999].arrival_ns, "same seed, other times");
        rows_free(&again);
        rows_free(&r);
    }
    /* a timed trace is re-timed too; infinity puts every request at 0 */
    o.request_rate = INFINITY;
    r = read_all_opt("traces/samples/azure_code_2023.csv", &o);
    ck_assert_msg(r.rc == 0, "error: %s", r.err.msg);
    ck_assert_int_eq(r.a[r.n - 1].arrival_ns, 0);
    rows_free(&r);
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
    tcase_add_test(rd, test_client_names_map_to_ids_in_order_of_appearance);
    tcase_add_test(rd, test_request_rate_retimes_and_lengths_files_need_it);
    tcase_add_test(rd, test_streaming_200k_rows_in_constant_memory);
    suite_add_tcase(s, rd);
    return s;
}

int main(void) { return run_suite(traces_suite()) ? 1 : 0; }
