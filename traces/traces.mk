# traces/traces.mk: `make bench-traces` (also part of `make bench`): replays a generated
# 1,000,000-row tandem CSV and the bundled samples through the readers and prints rows/s and
# peak memory. A benchmark, not a test: nothing here fails on speed.
.PHONY: bench-traces
bench: bench-traces

BENCH_TRACE_1M := $(BUILD)/bench/trace_1m.csv

$(BUILD)/bench/bench_traces: $(BUILD)/rel/tests/bench/bench_traces.o $(REL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BENCH_TRACE_1M): $(BUILD)/tandem
	@mkdir -p $(dir $@)
	$(BUILD)/tandem trace gen --num-requests 1000000 --rate 100 --length-dist uniform \
	  --range-ratio 0.5 --priority-classes 0.3,0.7 --num-clients 8 --seed 1 --out $@

bench-traces: $(BUILD)/bench/bench_traces $(BENCH_TRACE_1M)
	$(BUILD)/bench/bench_traces $(BENCH_TRACE_1M) traces/samples/azure_conv_2023.csv \
	  traces/samples/azure_code_2023.csv traces/samples/mooncake_conversation_2k.jsonl
