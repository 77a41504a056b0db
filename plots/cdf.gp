# plots/cdf.gp: latency CDFs, one panel per data file, one line per series.
#
#   gnuplot -c plots/cdf.gp OUT TITLE DATA1 XLABEL1 [DATA2 XLABEL2 [DATA3 XLABEL3]]
#
# DATA files come from `tandem reduce cdf`: gnuplot blocks, each headed by `"LABEL" "F"`. The x
# axis is logarithmic (latencies span orders of magnitude). Optional, with -e:
#   logx=0          linear x
#   ccdf=1          plot the fraction of the population above x on a log scale (shows the tail)
#   ymin=1e-4       ccdf: the smallest fraction shown (default 1e-3)
#   what="tokens"   what the fractions count (default "requests")
#   key="top left"  where the legend goes (default: bottom left for ccdf, bottom right for CDF)
# Writes OUT.png and OUT.svg.
if (ARGC < 4 || ARGC % 2 != 0) { print "usage: gnuplot -c plots/cdf.gp OUT TITLE DATA1 XLABEL1 [DATA2 XLABEL2 [DATA3 XLABEL3]]"; exit status 2 }
script_dir = ARG0[1:strstrt(ARG0, "cdf.gp")-1]
load script_dir."common.gp"

OUT = ARG1; TITLE = ARG2
npanels = (ARGC - 2) / 2
array DATA[3]; array XLAB[3]
DATA[1] = ARG3; XLAB[1] = ARG4
if (npanels >= 2) { DATA[2] = ARG5; XLAB[2] = ARG6 }
if (npanels >= 3) { DATA[3] = ARG7; XLAB[3] = ARG8 }
if (!exists("logx")) logx = 1
if (!exists("ccdf")) ccdf = 0
if (!exists("ymin")) ymin = 1e-3
if (!exists("what")) what = "requests"
if (!exists("key")) key = ccdf ? "bottom left" : "bottom right"

set datafile separator whitespace
set datafile columnheaders
array NBLOCKS[3]
do for [p = 1:npanels] {
    stats DATA[p] using 1 nooutput
    NBLOCKS[p] = STATS_blocks
}

dash(i) = i == 0 ? 1 : i % 4 + 1
W = npanels == 1 ? 640 : 460 * npanels; H = key eq "below" ? 430 : 380
do for [ext in FORMATS] {
    eval term_cmd(ext, W, H)
    set output OUT.".".ext
    set multiplot layout 1, npanels title TITLE font ",12"
    do for [p = 1:npanels] {
        set xlabel XLAB[p]
        set xlabel offset 0, 0
        if (logx) { set logscale x } else { unset logscale x }
        if (ccdf) {
            set logscale y; set yrange [ymin:1]; set ylabel sprintf("fraction of %s above x", what)
            eval "set key ".key.(key eq "below" ? " nobox height 1" : " box opaque")." samplen 2 reverse Left"
        } else {
            unset logscale y; set yrange [0:1]; set ylabel sprintf("fraction of %s at or below x (CDF)", what)
            eval "set key ".key.(key eq "below" ? " nobox height 1" : " box opaque")." samplen 2 reverse Left"
        }
        # later series are dashed, so that a line lying on an earlier one stays visible
        plot for [i = 0:NBLOCKS[p]-1] DATA[p] index i using 1:(ccdf ? 1 - $2 : $2) \
            with lines ls i+1 lw 2 dt dash(i) title columnheader(1)
    }
    unset multiplot
    unset output
    if (ext eq "svg") { system(svg_tidy_cmd(OUT.".svg")) }
}
