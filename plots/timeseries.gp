# plots/timeseries.gp: one run (or a few, overlaid) over time: KV cache usage, batch size and
# waiting requests, stacked panels sharing the time axis.
#
#   gnuplot -c plots/timeseries.gp OUT TITLE LABEL1 FILE1 [LABEL2 FILE2 [LABEL3 FILE3]]
#   gnuplot -e 'runs="\"LABEL1\" FILE1 \"LABEL2\" FILE2 ..."' -c plots/timeseries.gp OUT TITLE
#
# FILEs come from `tandem reduce bin` (a steps.csv cut into time bins); more than three runs go
# in `runs` (gnuplot passes at most nine arguments). Optional, with -e:
#   ycols="kv_usage batch_size num_waiting"   the panels, top to bottom (any `tandem reduce bin` column)
#   logy="num_waiting"                        log-scale y of these panels
# Writes OUT.png and OUT.svg.
if ((ARGC < 4 && !exists("runs")) || ARGC % 2 != 0) { print "usage: gnuplot -c plots/timeseries.gp OUT TITLE LABEL1 FILE1 [LABEL2 FILE2 [LABEL3 FILE3]]"; exit status 2 }
script_dir = ARG0[1:strstrt(ARG0, "timeseries.gp")-1]
load script_dir."common.gp"

OUT = ARG1; TITLE = ARG2
if (exists("runs")) {
    nruns = words(runs) / 2
    array LAB[nruns]; array FILE[nruns]
    do for [i = 1:nruns] { LAB[i] = word(runs, 2 * i - 1); FILE[i] = word(runs, 2 * i) }
} else {
    nruns = (ARGC - 2) / 2
    array LAB[3]; array FILE[3]
    LAB[1] = ARG3; FILE[1] = ARG4
    if (nruns >= 2) { LAB[2] = ARG5; FILE[2] = ARG6 }
    if (nruns >= 3) { LAB[3] = ARG7; FILE[3] = ARG8 }
}
if (!exists("ycols")) ycols = "kv_usage batch_size num_waiting"
if (!exists("logy")) logy = ""
is_logy(m) = strstrt(" ".logy." ", " ".m." ") > 0

set datafile separator ","
set datafile columnheaders
npanels = words(ycols)
W = 900; H = 230 * npanels + 50
do for [ext in FORMATS] {
    eval term_cmd(ext, W, H)
    set output OUT.".".ext
    set multiplot layout npanels, 1 title TITLE font ",12" margins 0.09, 0.97, 0.08, 0.92 spacing 0, 0.04
    do for [p = 1:npanels] {
        m = word(ycols, p)
        set ylabel metric_label(m)
        if (p == npanels) { set xlabel "time since the first arrival (s)"; set format x "%g" } else { unset xlabel; set format x "" }
        if (is_logy(m)) { set logscale y; set yrange [*:*] } else { unset logscale y; set yrange [0:*] }
        if (p == 1 && nruns > 1) { set key top right box opaque samplen 2 horizontal } else { unset key }
        plot for [i = 1:nruns] FILE[i] using "t_s":m with lines ls i lw 1.4 title LAB[i]
    }
    unset multiplot
    unset output
    if (ext eq "svg") { system(svg_tidy_cmd(OUT.".svg")) }
}
