#!/bin/sh
# One point: write its values to <dir>/value.txt; a point whose word is `fail` exits 1 instead.
set -eu
while [ "$#" -gt 0 ]; do
    case "$1" in
        --word) word=$2 ;;
        --n) n=$2 ;;
        --dir) dir=$2 ;;
        *) echo "point.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
if [ "${word}" = fail ]; then
    echo "point ${ATLAS_SWEEP_INDEX}: failing on purpose" >&2
    exit 1
fi
echo "word=${word} n=${n} index=${ATLAS_SWEEP_INDEX} of ${ATLAS_SWEEP_SIZE}" >"${dir}/value.txt"
