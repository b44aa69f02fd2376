#!/bin/sh
# Every point's value.txt under --from, one line each as `point-<i>: <value>`, to stdout and --out.
set -eu
while [ "$#" -gt 0 ]; do
    case "$1" in
        --from) from=$2 ;;
        --out) out=$2 ;;
        *) echo "gather.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
for folder in "${from}"/point-*; do
    echo "$(basename "${folder}"): $(cat "${folder}/value.txt")"
done | sort | tee "${out}"
