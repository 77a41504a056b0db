# plots/common.gp: what every figure script shares, loaded with `load dir."common.gp"`.
#
# Every script draws its figure twice, once per format, in a loop
#     do for [ext in FORMATS] { eval term_cmd(ext, W, H); set output OUT.".".ext; ...; unset output }
# (each script sets script_dir, the folder of plots/, before loading this file)
# so one OUT prefix gives OUT.png and OUT.svg with the same content. The palette is Okabe-Ito
# (readable by colour-blind readers), with a distinct point type per series so that figures
# stay readable in grey.

FORMATS = "png svg"
# then the SVG goes through svg_tidy.sh (drops empty groups: a third of its bytes)
svg_tidy_cmd(f) = sprintf("bash '%ssvg_tidy.sh' '%s'", script_dir, f)
term_cmd(ext, w, h) = ext eq "png" \
    ? sprintf("set terminal pngcairo size %d,%d font 'Sans,10' linewidth 1.2 noenhanced", w, h) \
    : sprintf("set terminal svg size %d,%d font 'Sans,11' linewidth 1.2 background rgb 'white' noenhanced", w, h)

set style line 1 lc rgb "#0072B2" pt 7 ps 0.7 lw 1.6
set style line 2 lc rgb "#D55E00" pt 5 ps 0.7 lw 1.6
set style line 3 lc rgb "#009E73" pt 9 ps 0.8 lw 1.6
set style line 4 lc rgb "#CC79A7" pt 11 ps 0.8 lw 1.6
set style line 5 lc rgb "#E69F00" pt 13 ps 0.8 lw 1.6
set style line 6 lc rgb "#56B4E9" pt 6 ps 0.7 lw 1.6
set style line 7 lc rgb "#000000" pt 4 ps 0.7 lw 1.6
set style line 8 lc rgb "#999999" pt 8 ps 0.8 lw 1.6
set style line 9 lc rgb "#0072B2" pt 6 ps 0.7 lw 1.6 dt 2
set style line 10 lc rgb "#D55E00" pt 4 ps 0.7 lw 1.6 dt 2
set style line 11 lc rgb "#009E73" pt 8 ps 0.8 lw 1.6 dt 2
set style line 12 lc rgb "#CC79A7" pt 10 ps 0.8 lw 1.6 dt 2
set style increment user

set grid xtics ytics lc rgb "#e4e4e4" lw 0.8
set border 3 lc rgb "#404040"
set tics nomirror out
set key noenhanced

# s with every "a" replaced by "b" (recursive: gnuplot has no replace function).
subst(s, a, b) = strstrt(s, a) ? s[1:strstrt(s, a)-1].b.subst(s[strstrt(s, a)+strlen(a):], a, b) : s
# "class0_p99_ttft_ms" -> "class0 p99 TTFT (ms)": a prefix, then a known latency suffix.
pre(m, suffix) = subst(m[1:strstrt(m, suffix)-1], "_", " ")

# Axis labels, with units, of the metric columns tandem writes (results.csv, summary.json,
# requests.csv, steps.csv) and of the derived columns the experiments add. Unknown names are
# shown as they are.
metric_label(m) = \
    m eq "request_throughput"     ? "throughput (requests/s)" : \
    m eq "request_goodput"        ? "goodput (requests/s meeting the SLO)" : \
    m eq "output_throughput"      ? "output throughput (tokens/s)" : \
    m eq "total_token_throughput" ? "total throughput (tokens/s)" : \
    m eq "rate"                   ? "request rate (requests/s)" : \
    m eq "max-num-seqs"           ? "max_num_seqs" : \
    m eq "max-num-batched-tokens" ? "max_num_batched_tokens (tokens/step)" : \
    m eq "time-scale"             ? "time scale (x trace arrival times)" : \
    m eq "ttft_ms"                ? "TTFT (ms)" : \
    m eq "e2el_ms"                ? "end-to-end latency (ms)" : \
    m eq "tpot_ms"                ? "TPOT (ms)" : \
    m eq "queue_ms"               ? "queueing delay (ms)" : \
    m eq "ttft_s"                 ? "TTFT (s)" : \
    m eq "e2el_s"                 ? "end-to-end latency (s)" : \
    m eq "norm_latency_s"         ? "normalized latency (s/token)" : \
    m eq "mean_norm_latency_s"    ? "mean normalized latency (s/token)" : \
    m eq "p99_norm_latency_s"     ? "p99 normalized latency (s/token)" : \
    m eq "busy_fraction"          ? "GPU busy fraction (time with a step running)" : \
    m eq "peak_kv_usage"          ? "peak KV cache usage (fraction)" : \
    m eq "mean_kv_usage"          ? "mean KV cache usage (fraction)" : \
    m eq "mean_kv_token_usage"    ? "mean KV tokens stored (fraction of capacity)" : \
    m eq "peak_kv_token_usage"    ? "peak KV tokens stored (fraction of capacity)" : \
    m eq "mean_batch_size"        ? "mean batch size (requests/step)" : \
    m eq "num_preemptions"        ? "preemptions" : \
    m eq "num-replicas"           ? "replicas (H200s)" : \
    m eq "num_gpus"               ? "GPUs (replicas x tensor-parallel size)" : \
    m eq "load_imbalance"         ? "load imbalance (max / mean busy time)" : \
    m eq "prefix_cache_hit_rate"  ? "prefix cache hit rate (prompt tokens)" : \
    m eq "preempted_fraction"     ? "requests preempted at least once (fraction)" : \
    m eq "kv_usage"               ? "KV cache usage (fraction)" : \
    m eq "p999_itl_ms"            ? "p99.9 ITL (ms)" : \
    m eq "batch_size"             ? "batch size (requests)" : \
    m eq "num_waiting"            ? "waiting requests" : \
    m eq "num_running"            ? "running requests" : \
    strstrt(m, "_ttft_ms") ? pre(m, "_ttft_ms")." TTFT (ms)" : \
    strstrt(m, "_tpot_ms") ? pre(m, "_tpot_ms")." TPOT (ms)" : \
    strstrt(m, "_itl_ms") ? pre(m, "_itl_ms")." ITL (ms)" : \
    strstrt(m, "_e2el_ms") ? pre(m, "_e2el_ms")." E2E latency (ms)" : \
    strstrt(m, "_queue_ms") ? pre(m, "_queue_ms")." queueing delay (ms)" : \
    m

# The distinct values of column `col` of CSV `file` in order of first appearance, as a list of
# quoted words for `word()` (values may hold spaces).
distinct(file, col) = system(sprintf( \
    "awk -F, -v c='%s' 'NR==1{for(i=1;i<=NF;i++) if($i==c) k=i; if(!k){print \"no column \" c > \"/dev/stderr\"; exit 1} next} !seen[$k]++{printf \"\\\"%%s\\\" \", $k}' '%s'", \
    col, file))
