# plots/fidelity.gp: how far the simulator is from the engine, per workload, for two cost models
# (experiments/fidelity.sh). Two panels per model and GPU: the signed error of the headline request
# metrics (output throughput, mean TTFT, median TPOT, median E2E) and the per-step median
# absolute error, roofline against profile.
#
#   gnuplot -e "DAT='experiments/results/fidelity/figure.dat'; OUT='docs/figures/fidelity'; TITLES='Llama-2-7B/H200 Llama-3-8B/H200'" plots/fidelity.gp
#
# TITLES: a word per block of DAT. DAT: one block per model and GPU (separated by two blank
# lines), rows
#   workload roofline_tput profile_tput roofline_ttft profile_ttft roofline_tpot profile_tpot
#   roofline_e2el profile_e2el roofline_step profile_step      (percent)
script_dir = "plots/"
load script_dir."common.gp"
n = words(TITLES)
W = 1100; H = 360 * n
do for [ext in FORMATS] {
    eval term_cmd(ext, W, H)
    set output OUT.".".ext
    set multiplot layout n, 2 title "simulated vs measured (tandem run, CUDA engine): error = (sim - measured) / measured"
    set style data histograms
    set style histogram clustered gap 1
    set style fill solid 0.85 border -1
    set boxwidth 0.9
    set xtics rotate by -30 font ",9"
    set key below horizontal font ",9" samplen 1.5
    do for [m = 0:n - 1] {
        set title word(TITLES, m + 1)." : request metrics, roofline (light) and profile (dark)"
        set ylabel "error (%)"
        set yrange [-60:40]
        plot DAT index m using 2:xtic(1) lc rgb "#9ecae1" title "throughput", \
             '' index m using 3 lc rgb "#0072B2" notitle, \
             '' index m using 4 lc rgb "#fdbe85" title "TTFT mean", \
             '' index m using 5 lc rgb "#D55E00" notitle, \
             '' index m using 8 lc rgb "#a1d99b" title "E2E median", \
             '' index m using 9 lc rgb "#009E73" notitle
        set title word(TITLES, m + 1)." : per-step median |error|"
        set ylabel "median |error| of a step (%)"
        set yrange [0:40]
        plot DAT index m using 10:xtic(1) lc rgb "#bdbdbd" title "roofline", \
             '' index m using 11 lc rgb "#000000" title "profile"
    }
    unset multiplot
    unset output
    if (ext eq "svg") { system(svg_tidy_cmd(OUT.".svg")) }
}
