#!/bin/sh
# Count for --seconds, then write the total to --out and the rate to --log (POSIX sh only).
set -eu
seconds=2 out=results/total.txt log=logs/count.log
while [ "$#" -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2 ;;
        --out) out=$2 ;;
        --log) log=$2 ;;
        *) echo "count.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
end=$(( $(date +%s) + seconds ))
total=0
while [ "$(date +%s)" -lt "${end}" ]; do
    i=0
    while [ "${i}" -lt 1000 ]; do i=$((i + 1)); done
    total=$((total + i))
done
mkdir -p "$(dirname "${out}")" "$(dirname "${log}")"
echo "${total}" >"${out}"
echo "rate $((total / seconds)) counts/s" >>"${log}"
