#!/usr/bin/env bash
# plots/svg_tidy.sh FILE.svg: drops the empty groups (`<g ...>` directly followed by `</g>`) that
# gnuplot's svg terminal writes around every setting change, in place: about a third of the
# bytes of a figure, nothing that is drawn. The figure scripts run it on every SVG they write.
set -euo pipefail
if [ $# -ne 1 ] || [ ! -f "$1" ]; then echo "usage: plots/svg_tidy.sh FILE.svg" >&2; exit 2; fi
awk '
/^<g [^>]*>$/ { if (held != "") print held; held = $0; next }
/^<\/g>$/ && held != "" { held = ""; next }
{ if (held != "") { print held; held = "" } print }
END { if (held != "") print held }' "$1" > "$1.tmp"
mv "$1.tmp" "$1"
