# plots/compare_steps.gp: measured against predicted step time, one point per step, coloured
# by step class, on log-log axes with the y = x line (a perfect cost model puts every point on
# it; above it the model is slow, below it fast).
#
#   gnuplot -c plots/compare_steps.gp OUT TITLE STEP_ERRORS_CSV
#
# STEP_ERRORS_CSV is the step_errors.csv `tandem compare --out DIR` writes (columns step, class,
# measured_ms, predicted_ms, rel_error). Steps measured or predicted at 0 ms cannot sit on a
# log axis and are left out. Writes OUT.png and OUT.svg.
if (ARGC != 3) { print "usage: gnuplot -c plots/compare_steps.gp OUT TITLE STEP_ERRORS_CSV"; exit status 2 }
script_dir = ARG0[1:strstrt(ARG0, "compare_steps.gp")-1]
load script_dir."common.gp"

OUT = ARG1; TITLE = ARG2; CSV = ARG3
set datafile separator ","
set datafile columnheaders
# the classes `tandem compare` writes, in this order and with these colours in every figure;
# those present in the file are drawn
order = "prefill decode_1 decode_2-8 decode_9-32 decode_33-128 decode_129+ mixed other"
present = distinct(CSV, "class")
drawn = ""
do for [i = 1:words(order)] { if (strstrt(present, "\"".word(order, i)."\"")) { drawn = drawn." ".i } }
# the plotted range: every positive time of either axis, padded, the same on both axes
stats CSV using (column("measured_ms") > 0 && column("predicted_ms") > 0 ? column("measured_ms") : NaN) nooutput
lo = STATS_min; hi = STATS_max
stats CSV using (column("measured_ms") > 0 && column("predicted_ms") > 0 ? column("predicted_ms") : NaN) nooutput
lo = (STATS_min < lo ? STATS_min : lo) / 1.5; hi = (STATS_max > hi ? STATS_max : hi) * 1.5

in_class(c) = strcol("class") eq c && column("measured_ms") > 0 && column("predicted_ms") > 0
do for [ext in FORMATS] {
    eval term_cmd(ext, 760, 560)
    set output OUT.".".ext
    set title TITLE font ",12"
    set logscale xy
    set xrange [lo:hi]; set yrange [lo:hi]
    set size ratio -1
    set xlabel "measured step time (ms)"
    set ylabel "predicted step time (ms)"
    # the legend goes right of the square plot area, off the data
    set key outside right top box opaque samplen 1 reverse Left title "step class"
    plot x with lines lc rgb "#606060" dt 2 lw 1.2 title "y = x", \
        for [j = 1:words(drawn)] CSV using (in_class(word(order, int(word(drawn, j)))) ? column("measured_ms") : NaN):"predicted_ms" \
            with points ls int(word(drawn, j)) ps 0.5 title word(order, int(word(drawn, j)))
    unset output
    if (ext eq "svg") { system(svg_tidy_cmd(OUT.".svg")) }
}
