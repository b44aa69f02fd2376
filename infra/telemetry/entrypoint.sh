#!/bin/sh
# Container entrypoint for Atlas workloads: makes the image work under OpenShift's arbitrary UIDs,
# then runs the step's command as PID 1's replacement.
#
# Two ways in, one script (docs/workloads.md, "Any image"):
# - Atlas's own images (BigGAN, the probe, the runtime image) carry it as /usr/local/bin/atlas-entrypoint,
#   their ENTRYPOINT; the Job's args are the step's command, already wrapped by the sampler
#   (`python3 -m infra.telemetry.sampler ... -- argv`, the sampler under /opt/atlas in the image).
# - Any other image (`atlas:openshift.image.reference`): Atlas mounts this script and the sampler's
#   modules from a ConfigMap (infra/telemetry/bundle.py) and runs
#       sh <tools>/atlas-entrypoint --sample OUT INTERVAL STEP -- argv
#   The sampler then runs under the image's own python3, found here at run time; where the image
#   has none (or one older than the sampler needs), the step runs unsampled and OUT's `.unsampled`
#   file (OUT without `.jsonl`) says why, for the report.
#
# OpenShift starts the container as a random UID with GID 0 and no /etc/passwd entry.
# Python's getpass, conda and PyTorch's cache paths look the user up and fail without one
# (the first port's conda broke exactly so), so give this UID an entry: append to
# /etc/passwd where the image made it group-writable, else point nss_wrapper at a copy.
set -eu

sample_out=""
if [ "${1:-}" = "--sample" ]; then
    if [ "$#" -lt 5 ] || [ "$5" != "--" ]; then
        echo "atlas-entrypoint: usage: atlas-entrypoint --sample OUT INTERVAL STEP -- COMMAND [ARG...]" >&2
        exit 64
    fi
    sample_out=$2
    sample_interval=$3
    sample_step=$4
    shift 5
fi

uid=$(id -u)
gid=$(id -g)

# HOME: OpenShift may leave it as "/" (not writable); caches (torch hub, matplotlib) go there.
if [ -z "${HOME:-}" ] || [ "${HOME}" = "/" ] || ! [ -w "${HOME}" ]; then
    HOME=$(pwd)
    [ -w "${HOME}" ] || HOME=/tmp
fi
export HOME

if ! getent passwd "${uid}" >/dev/null 2>&1; then
    entry="atlas:x:${uid}:${gid}:Atlas workload (arbitrary UID):${HOME}:/bin/sh"
    if [ -w /etc/passwd ]; then
        echo "${entry}" >>/etc/passwd
    else
        for lib in /usr/lib/*/libnss_wrapper.so /usr/lib64/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
            [ -f "${lib}" ] || continue
            wrapper_dir=$(mktemp -d)
            cp /etc/passwd "${wrapper_dir}/passwd"
            cp /etc/group "${wrapper_dir}/group"
            echo "${entry}" >>"${wrapper_dir}/passwd"
            export NSS_WRAPPER_PASSWD="${wrapper_dir}/passwd" NSS_WRAPPER_GROUP="${wrapper_dir}/group"
            export LD_PRELOAD="${lib}${LD_PRELOAD:+ ${LD_PRELOAD}}"
            break
        done
    fi
    getent passwd "${uid}" >/dev/null 2>&1 ||
        echo "atlas-entrypoint: warning: no passwd entry for UID ${uid} (/etc/passwd not writable, no nss_wrapper)" >&2
fi

# The NVIDIA container runtime reads these from the image and the pod spec *before* this
# script runs (the Containerfile sets them with ENV; the Job sets them too), so exporting
# them here only fills them in for the step's own process when the platform left them out.
# The first port saw GPUs only with all three set.
export NVIDIA_VISIBLE_DEVICES="${NVIDIA_VISIBLE_DEVICES:-all}"
export NVIDIA_DRIVER_CAPABILITIES="${NVIDIA_DRIVER_CAPABILITIES:-compute,utility}"
export NVIDIA_REQUIRE_CUDA="${NVIDIA_REQUIRE_CUDA:-cuda>=5.0}"

# A folder source on Kubernetes (docs/workloads.md): the workload's files are mounted read-only
# from a ConfigMap; copy them into the working directory, where the step's command looks for them,
# as the HPC side stages them into its run directory. `.[!.]*` leaves out the ConfigMap volume's
# own `..data` links; -L copies the files the volume's links point to.
if [ -n "${ATLAS_SOURCE_DIR:-}" ] && [ -d "${ATLAS_SOURCE_DIR}" ]; then
    for entry in "${ATLAS_SOURCE_DIR}"/* "${ATLAS_SOURCE_DIR}"/.[!.]*; do
        [ -e "${entry}" ] || continue
        cp -R -L "${entry}" .
    done
fi

if [ "$#" -eq 0 ]; then
    echo "atlas-entrypoint: no command given; the Job's args name the step's command" >&2
    exit 64
fi

if [ -n "${sample_out}" ]; then
    # The sampler's modules lie beside this script (the ConfigMap's infra/ folder). They are put first
    # on the sampler's own sys.path, not in PYTHONPATH: the step, its child, sees the environment as
    # the image set it (a package of the workload's own named `infra` stays its own). -B: the
    # ConfigMap's folder is read-only.
    tools=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
    mkdir -p "$(dirname -- "${sample_out}")"
    reason=""
    python=$(command -v python3 || true)
    if [ -z "${python}" ]; then
        reason="the image has no python3"
    elif ! version=$("${python}" -c 'import sys; print("%d.%d" % sys.version_info[:2]); sys.exit(sys.version_info < (3, 8))' 2>/dev/null); then
        reason="the image's python3 (${python}, ${version:-which did not run}) is older than 3.8, which the sampler needs"
    fi
    if [ -z "${reason}" ]; then
        rm -f "${sample_out%.jsonl}.unsampled"  # an earlier run's, in an image without python3
        exec "${python}" -B -c 'import sys; sys.path.insert(0, sys.argv.pop(1)); from infra.telemetry.sampler import main; sys.exit(main(sys.argv[1:]))' \
            "${tools}" --out "${sample_out}" --interval "${sample_interval}" --step "${sample_step}" -- "$@"
    fi
    echo "atlas-entrypoint: step ${sample_step} runs unsampled: ${reason}" >&2
    # An earlier run's telemetry would be read as this one's: set aside, as the HPC side's job scripts do.
    if [ -e "${sample_out}" ]; then mv -f "${sample_out}" "${sample_out}.$(date +%s)"; fi
    printf '%s\n' "${reason}" >"${sample_out%.jsonl}.unsampled"
fi
exec "$@"
