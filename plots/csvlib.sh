# plots/csvlib.sh: sourced by the plots/*.sh reducers.
# shellcheck shell=bash
#
# csv_clean FILE: FILE to stdout with each double-quoted field unquoted and the commas inside it
# turned into semicolons, so that awk -F, sees one field per column. `tandem sweep` quotes spec
# values that hold commas (priority-classes = "0.2,0.8" is written "0.2,0.8" in results.csv,
# and comes out of here as 0.2;0.8). Lines without quotes pass unchanged (requests.csv and
# steps.csv have none).
csv_clean() {
    awk '!index($0, "\"") { print; next }
    {
        out = ""; q = 0
        for (i = 1; i <= length($0); i++) {
            ch = substr($0, i, 1)
            if (ch == "\"") { q = !q; continue }
            if (ch == "," && q) ch = ";"
            out = out ch
        }
        print out
    }' "$1"
}
