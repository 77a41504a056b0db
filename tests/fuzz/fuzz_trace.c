/*
 * fuzz_trace.c: the trace readers (traces/trace.c) on any bytes after a format's header.
 * Built once per format (-DFUZZ_TRACE_azure, _vidur, _mooncake or _tandem), the input put
 * after that format's header line (Mooncake's JSONL has none), so the fuzzer spends its time on
 * rows, not on finding a header; the seed corpora carry headers of their own too. Every row is read to the end or to the first error; the first input byte chooses
 * --skip-bad-rows, so both paths run. An input may fail; it must not crash, hang or leak.
 */
#include "fuzz_util.h"
#include "traces/trace.h"

#if defined(FUZZ_TRACE_azure)
#define FUZZ_TRACE_HEADER "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
#elif defined(FUZZ_TRACE_vidur)
#define FUZZ_TRACE_HEADER "arrived_at,num_prefill_tokens,num_decode_tokens\n"
#elif defined(FUZZ_TRACE_mooncake)
#define FUZZ_TRACE_HEADER ""
#elif defined(FUZZ_TRACE_tandem)
#define FUZZ_TRACE_HEADER "arrival_s,prompt_tokens,output_tokens,priority,client\n"
#else
#error "define FUZZ_TRACE_azure, FUZZ_TRACE_vidur, FUZZ_TRACE_mooncake or FUZZ_TRACE_tandem"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    trace_options opt = trace_options_default();
    opt.skip_bad_rows = size && (data[0] & 1);
    opt.time_scale = size > 1 && (data[1] & 1) ? 0.5 : 1.0;
    const char *path = fuzz_write("trace", FUZZ_TRACE_HEADER, data, size);
    trace_reader *t;
    terr e;
    if (trace_open(&t, path, &opt, &e)) return 0;
    arrival_source src = trace_source(t);
    arrival a;
    while (src.next(src.self, &a, &e) == 1) {
        if (a.prompt_tokens < 0 || a.output_tokens < 0 || a.arrival_ns < 0) abort(); /* accepted rows are valid */
    }
    trace_close(t);
    return 0;
}
