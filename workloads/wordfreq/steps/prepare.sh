#!/bin/sh
# prepare --repeat N --out FILE: the shipped texts (corpus/*.txt), N times over, into FILE.
set -eu
repeat=1
out=
while [ "$#" -gt 0 ]; do
    case "$1" in
        --repeat) repeat=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "prepare: unknown option $1 (use --repeat N --out FILE)" >&2; exit 64 ;;
    esac
done
[ -n "$out" ] || { echo "prepare: --out FILE is required" >&2; exit 64; }
mkdir -p "$(dirname "$out")"
# By doubling: one copy, two, four, ...; the copies whose bit is set in N are appended.
cat corpus/*.txt >"$out.chunk"
: >"$out.partial"
left=$repeat
while [ "$left" -gt 0 ]; do
    if [ $((left % 2)) -eq 1 ]; then
        cat "$out.chunk" >>"$out.partial"
    fi
    left=$((left / 2))
    if [ "$left" -gt 0 ]; then
        cat "$out.chunk" "$out.chunk" >"$out.double"
        mv "$out.double" "$out.chunk"
    fi
done
rm -f "$out.chunk"
# Renamed only when whole: a step that starts on it never reads half a corpus.
mv "$out.partial" "$out"
echo "prepare: $(wc -c <"$out") bytes in $out ($repeat copies of $(ls corpus/*.txt | wc -l) texts)"
