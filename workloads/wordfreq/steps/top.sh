#!/bin/sh
# top --in FILE --n N --out FILE: the N most frequent words of a counts file.
set -eu
in=
n=10
out=
while [ "$#" -gt 0 ]; do
    case "$1" in
        --in) in=$2; shift 2 ;;
        --n) n=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "top: unknown option $1 (use --in FILE --n N --out FILE)" >&2; exit 64 ;;
    esac
done
[ -n "$in" ] && [ -n "$out" ] || { echo "top: --in and --out are required" >&2; exit 64; }
mkdir -p "$(dirname "$out")"
head -n "$n" "$in" >"$out"
echo "top: the $n most frequent words:"
cat "$out"
