#!/usr/bin/env bash
# test_layers.sh: the house's arrows run down. Each room may include its own headers and those
# of the floors below it, never a room beside it or above it:
#
#   cli/                          the commands
#   sim/  engine/                 the two backends, side by side
#   policies/  traces/  kernels/  what the backends and commands stand on
#   core/                         the ground: what every room shares
#
# tests/, experiments/ and dev harnesses (kernels/dev/) may include anything.
set -u
cd "$(dirname "$0")/.."
floor() {
    case "$1" in
    core) echo 0 ;;
    policies | traces | kernels) echo 1 ;;
    sim | engine) echo 2 ;;
    cli) echo 3 ;;
    *) echo -1 ;;
    esac
}
fail=0 checked=0
while IFS= read -r file; do
    room=${file%%/*}
    from=$(floor "$room")
    [ "$from" -lt 0 ] && continue
    case "$file" in kernels/dev/*) continue ;; esac
    while IFS= read -r inc; do
        to_room=${inc%%/*}
        [ "$inc" = "$to_room" ] && continue # a header of the same folder, by its bare name
        to=$(floor "$to_room")
        [ "$to" -lt 0 ] && continue
        checked=$((checked + 1))
        if [ "$to_room" != "$room" ] && [ "$to" -ge "$from" ]; then
            echo "test_layers: $file includes $inc: $room/ may not include $to_room/ (floor $from -> $to)"
            fail=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null || find . -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | sed 's|^\./||')
if [ $checked -lt 50 ]; then
    echo "test_layers: only $checked includes checked; is this the repository root?"
    fail=1
fi
if [ $fail = 0 ]; then echo "test_layers: $checked includes, every arrow runs down"; else exit 1; fi
