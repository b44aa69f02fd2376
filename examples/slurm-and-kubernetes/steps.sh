#!/bin/sh
# steps.sh make --lines N --out FILE | count --in FILE --out FILE: the workload's two steps.
set -eu
step=$1; shift
lines=100 in= out=
while [ "$#" -gt 0 ]; do
    case "$1" in
        --lines) lines=$2; shift 2 ;;
        --in) in=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "$step: unknown option $1" >&2; exit 64 ;;
    esac
done
mkdir -p "$(dirname "$out")"
case "$step" in
    make) awk -v n="$lines" 'BEGIN { for (i = 1; i <= n; i++) print "line", i, "of a text to count" }' >"$out" ;;
    count) wc -w <"$in" >"$out" ;;
    *) echo "steps.sh: unknown step $step (make or count)" >&2; exit 64 ;;
esac
