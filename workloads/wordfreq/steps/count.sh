#!/bin/sh
# count --in FILE --out FILE --log FILE: how often each word occurs, most frequent first; the
# rate in words/s goes to the log, where Atlas's report reads it (workload.yaml: report).
set -eu
in=
out=
log=
while [ "$#" -gt 0 ]; do
    case "$1" in
        --in) in=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --log) log=$2; shift 2 ;;
        *) echo "count: unknown option $1 (use --in FILE --out FILE --log FILE)" >&2; exit 64 ;;
    esac
done
[ -n "$in" ] && [ -n "$out" ] && [ -n "$log" ] || { echo "count: --in, --out and --log are required" >&2; exit 64; }
mkdir -p "$(dirname "$out")" "$(dirname "$log")"
start=$(date +%s.%N)
tr -cs 'A-Za-z' '\n' <"$in" | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2 \
    | awk '{ print $2 "\t" $1 }' >"$out.partial"
end=$(date +%s.%N)
mv "$out.partial" "$out"
words=$(awk -F '\t' '{ total += $2 } END { print total + 0 }' "$out")
awk -v words="$words" -v start="$start" -v end="$end" -v distinct="$(wc -l <"$out")" 'BEGIN {
    seconds = end - start
    if (seconds <= 0) seconds = 0.000001
    printf "count: %d words (%d distinct) in %.3f s, rate %.1f words/s\n", words, distinct, seconds, words / seconds
}' | tee -a "$log"
