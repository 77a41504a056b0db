# plots/vs_x.gp: metrics against one swept parameter, one panel per metric, one line per series.
#
#   gnuplot -c plots/vs_x.gp CSV OUT TITLE XCOL "YCOL..." [SERIESCOL] [XLABEL]
#
# CSV is a comma-separated file with a header (a sweep's results.csv, or a file cut from it by
# `tandem reduce select`); columns are named, so any sweep works. XCOL is the x column; YCOLs
# (space-separated) get a panel each; SERIESCOL, if given and not "", splits the rows into one
# line per distinct value, in order of first appearance. Rows of one series with equal x are
# averaged (gnuplot's `smooth unique`), so seeds collapse into their mean. Writes OUT.png and
# OUT.svg. Axis labels come from the column names (common.gp's metric_label). A latency column
# in ms whose values pass 100,000 ms (100 s) is drawn in seconds.
#
# Optional, with -e before -c:
#   logx=1                   log-scale x (logx=2: base 2, tics at powers of two)
#   logy="YCOL ..."          log-scale y of these panels
#   ncols=N                  panels per row (default: all in one row, at most 3)
#   hline="YCOL=VALUE=TEXT"  a dashed reference line (an SLO) on panel YCOL
#   yrange0=1                start every linear y axis at 0
#   panel_w=W panel_h=H      pixels per panel (default 430 x 330)
#   key="above"              where the legend goes: "above" (the default) puts it in a strip
#                            under the title, above every panel, where it can hide no data;
#                            any gnuplot key position ("bottom right") puts it inside panel
#                            keypanel (default 1)
#   facet="COL"              small multiples: one row of panels per distinct value of COL
#                            (then the YCOL panels of a row share that value), titled by it
if (ARGC < 5) { print "usage: gnuplot -c plots/vs_x.gp CSV OUT TITLE XCOL \"YCOL...\" [SERIESCOL] [XLABEL]"; exit status 2 }
script_dir = ARG0[1:strstrt(ARG0, "vs_x.gp")-1]
load script_dir."common.gp"

CSV = ARG1; OUT = ARG2; TITLE = ARG3; XCOL = ARG4; YCOLS = ARG5
SERIESCOL = ARGC >= 6 ? ARG6 : ""
XLABEL = (ARGC >= 7 && ARG7 ne "") ? ARG7 : metric_label(XCOL)
if (!exists("logx")) logx = 0
if (!exists("logy")) logy = ""
if (!exists("hline")) hline = ""
if (!exists("yrange0")) yrange0 = 0
if (!exists("panel_w")) panel_w = 430
if (!exists("panel_h")) panel_h = 330

set datafile separator ","
set datafile columnheaders
set datafile missing NaN

if (!exists("facet")) facet = ""
if (!exists("key")) key = "above"
if (!exists("keypanel")) keypanel = 1
nmetrics = words(YCOLS)
facets = facet ne "" ? distinct(CSV, facet) : "\"\""
nfacets = words(facets)
npanels = nmetrics * nfacets
if (!exists("ncols")) ncols = facet ne "" ? nmetrics : (npanels < 3 ? npanels : 3)
nrows = (npanels + ncols - 1) / ncols
series = SERIESCOL ne "" ? distinct(CSV, SERIESCOL) : "\"all\""
nseries = words(series)
in_series(s, f) = (SERIESCOL eq "" ? 1 : strcol(SERIESCOL) eq s) && (facet eq "" ? 1 : strcol(facet) eq f)

# hline = "YCOL=VALUE=TEXT"
hl_col = ""; hl_val = 0; hl_text = ""
if (hline ne "") {
    i1 = strstrt(hline, "=")
    hl_col = hline[1:i1-1]
    rest = hline[i1+1:]
    i2 = strstrt(rest, "=")
    hl_val = i2 ? real(rest[1:i2-1]) : real(rest)
    hl_text = i2 ? rest[i2+1:] : ""
}
is_logy(m) = strstrt(" ".logy." ", " ".m." ") > 0

# the legend strip: one row of entries per ~4 series
key_rows = key eq "above" && nseries > 1 ? (nseries + 3) / 4 : 0
W = panel_w * ncols; H = panel_h * nrows + 40 + 22 * key_rows + (key_rows ? 12 : 0)
# columns in ms drawn in seconds: those whose largest value passes 100 s
in_s = ""
do for [j = 1:nmetrics] {
    m = word(YCOLS, j)
    if (strstrt(m, "_ms") == strlen(m) - 2) {
        stats CSV using (column(m)) nooutput
        if (STATS_max > 1e5) { in_s = in_s." ".m }
    }
}
is_s(m) = strstrt(in_s." ", " ".m." ") > 0
ylabel_of(m) = is_s(m) ? subst(metric_label(m), "(ms)", "(s)") : metric_label(m)
yscale(m) = is_s(m) ? 1e-3 : 1
do for [ext in FORMATS] {
    eval term_cmd(ext, W, H)
    set output OUT.".".ext
    # panels in a grid below a strip that holds the title (and the legend, with key="above")
    strip = (40.0 + 22 * key_rows + (key_rows ? 12 : 0)) / H
    set multiplot title TITLE font ",12"
    pw = 1.0 / ncols; ph = (1.0 - strip) / nrows
    do for [p = 1:npanels] {
        set origin ((p - 1) % ncols) * pw, (nrows - 1 - (p - 1) / ncols) * ph
        set size pw, ph
        m = word(YCOLS, (p - 1) % nmetrics + 1)
        f = word(facets, (p - 1) / nmetrics + 1)
        if (facet ne "") { set title sprintf("%s = %s", facet, f) } else { unset title }
        set xlabel XLABEL
        set ylabel ylabel_of(m)
        if (logx) { eval sprintf("set logscale x %d", logx == 2 ? 2 : 10); set autoscale xfix; set offsets graph 0.04, graph 0.04, 0, 0 } else { unset logscale x; set autoscale x; set offsets 0, 0, 0, 0 }
        if (is_logy(m)) { set logscale y; set yrange [*:*] } else { unset logscale y; if (yrange0) { set yrange [0:*] } else { set yrange [*:*] } }
        if (!key_rows && p == keypanel && nseries > 1) { eval "set key ".key." box opaque samplen 2 reverse Left" } else { unset key }
        if (hl_col eq m) {
            hl_y = hl_val * yscale(m)
            set arrow 1 from graph 0, first hl_y to graph 1, first hl_y nohead dt 2 lc rgb "#606060" lw 1.2
            set label 1 hl_text at graph 0.98, first hl_y right offset 0, 0.6 tc rgb "#404040"
        } else { unset arrow 1; unset label 1 }
        plot for [i = 1:nseries] CSV \
            using (in_series(word(series, i), f) ? column(XCOL) : NaN):(column(m) * yscale(m)) \
            smooth unique with linespoints ls i title word(series, i)
    }
    if (key_rows) {
        # the legend alone, in the strip, as wide as the figure
        set origin 0, 1.0 - strip; set size 1, strip - 34.0 / H
        unset title; unset xlabel; unset ylabel; unset arrow 1; unset label 1; unset logscale; unset grid
        unset border; unset tics; set offsets 0, 0, 0, 0; set xrange [0:1]; set yrange [0:1]
        set key center center horizontal maxrows key_rows box opaque samplen 2 reverse Left width 1
        # the lines lie above the y range: only their legend entries show
        plot for [i = 1:nseries] 2 with linespoints ls i title word(series, i)
        set border 3; set tics; set grid xtics ytics; set autoscale xy
    }
    unset multiplot
    unset output
    if (ext eq "svg") { system(svg_tidy_cmd(OUT.".svg")) }
}
