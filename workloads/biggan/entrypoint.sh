#!/bin/sh
# Container entrypoint for Atlas workloads (BigGAN, the probe, the runtime image): makes the image work
# under OpenShift's arbitrary UIDs, then runs the step's command as PID 1's replacement.
#
# OpenShift starts the container as a random UID with GID 0 and no /etc/passwd entry.
# Python's getpass, conda and PyTorch's cache paths look the user up and fail without one
# (the first port's conda broke exactly so), so give this UID an entry: append to
# /etc/passwd where the image made it group-writable, else point nss_wrapper at a copy.
set -eu

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
exec "$@"
