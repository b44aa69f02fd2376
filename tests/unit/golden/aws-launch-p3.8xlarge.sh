#!/bin/bash
# Atlas launch script: workload biggan, stack hybrid, environment aws,
# run 1, on p3.8xlarge (4 x Tesla-V100-SXM2-16GB).
# Rendered by infra/aws/launch.py; cloud-init runs it once, as root, at first boot.
set -euo pipefail
exec >>/var/log/atlas-launch.log 2>&1
echo "atlas: launch script started $(date -u +%FT%TZ)"
ATLAS_USER=ubuntu
ATLAS_HOME="$(getent passwd "$ATLAS_USER" | cut -d: -f6)"
ATLAS_RUN_DIR="$ATLAS_HOME"/atlas-runs/hybrid/aws/biggan
ATLAS_PREFIX=atlas/hybrid/aws/biggan
NODE=$(hostname -s)
CPUS=$(nproc)
# What the kernel sees, less 4 GiB for the node's own daemons: a larger RealMemory drains the node.
MEMORY_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 4096 ))

# The driver comes with the image; without it the steps would run on no GPU.
test "$(nvidia-smi -L | wc -l)" -eq 4

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q slurm-wlm munge python3-numpy python3-h5py python3-sklearn
command -v aws >/dev/null || apt-get install -y -q awscli

# One node, its GPUs as generic resources: the steps are Slurm jobs, as on Satori.
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat >/etc/slurm/slurm.conf <<EOF_SLURM
ClusterName=atlas
SlurmctldHost=${NODE}
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
MinJobAge=3600
ReturnToService=2
NodeName=${NODE} CPUs=${CPUS} RealMemory=${MEMORY_MB} Gres=gpu:4 State=UNKNOWN
PartitionName=normal Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF_SLURM
cat >/etc/slurm/gres.conf <<EOF_GRES
NodeName=${NODE} Name=gpu File=/dev/nvidia[0-3]
EOF_GRES
systemctl enable --now munge
systemctl enable --now slurmctld slurmd
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -qx idle && break; sleep 2; done
sinfo -h -o %T | grep -qx idle

# The staged files, from the data bucket (read through the instance's role).
sudo -u "$ATLAS_USER" mkdir -p "$ATLAS_RUN_DIR"
aws s3 sync --only-show-errors "s3://$ATLAS_BUCKET/$ATLAS_PREFIX/" "$ATLAS_RUN_DIR/"
mkdir -p "$ATLAS_RUN_DIR"/.atlas/jobs
mkdir -p "$ATLAS_RUN_DIR"/logs
mkdir -p "$ATLAS_RUN_DIR"/telemetry
chown -R "$ATLAS_USER": "$ATLAS_RUN_DIR"

mkdir -p /var/lib/atlas
date -u +%FT%TZ >/var/lib/atlas/ready
echo "atlas: ready $(date -u +%FT%TZ)"
