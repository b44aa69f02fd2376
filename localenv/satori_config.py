"""The local Satori's config files rendered: sshd_config, slurm.conf, cgroup.conf and gres.conf, and where they live.

Pure: the login node's and the Slurm node's figures (declared, not detected) and the paths
under the environment's `satori_dir`; localenv/satori.py writes the files and runs
sshd, munged, slurmctld and slurmd.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.telemetry.gpu import MOCK_ENV, MOCK_VALUE
from localenv.layout import LOOPBACK, Layout

LOGIN_USER = "atlas"
LOGIN_HOME = Path("/home") / LOGIN_USER
# Mock GPUs say so in their GRES type: the scheduler's own listing (`sinfo -O Gres`) tells Atlas
# they are mock (infra/provenance.py), so no figure of them is taken for a GPU's.
GPU_TYPE = "mock_v100"
GPU_COUNT = 4
FAKE_GPU_DEVICES = tuple(Path(f"/dev/fakegpu{i}") for i in range(GPU_COUNT))
# Declared, not detected (SlurmdParameters=config_overrides): the machine has 2 cores,
# and 8 one-CPU slots let several small jobs run at once, as on a real GPU node.
NODE_CPUS = 8
NODE_MEMORY_MB = 8192
DEF_MEM_PER_CPU_MB = 256
# How long finished jobs stay visible to squeue/scontrol, hence to `bjobs -a`: LSF's
# default CLEAN_PERIOD is one hour.
MIN_JOB_AGE_S = 3600
PARTITIONS = ("normal", "debug")
# A preemptible partition for backfill work (not in PARTITIONS: hidden, not a queue to run in).
BACKFILL_PARTITION = "backfill"
REAL_TIER = 10


@dataclass(frozen=True)
class SatoriPaths:
    root: Path

    @property
    def sshd_config(self) -> Path:
        return self.root / "sshd_config"

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def user_key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def sshd_pid(self) -> Path:
        return self.root / "sshd.pid"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def slurm_conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def cgroup_conf(self) -> Path:
        # Slurm reads cgroup.conf, as gres.conf, from the directory of slurm.conf.
        return self.root / "cgroup.conf"

    @property
    def gres_conf(self) -> Path:
        # Slurm reads gres.conf from the directory of slurm.conf.
        return self.root / "gres.conf"

    @property
    def task_prolog(self) -> Path:
        return self.root / "task_prolog.sh"

    @property
    def slurmctld_state(self) -> Path:
        return self.root / "slurmctld-state"

    @property
    def slurmd_spool(self) -> Path:
        return self.root / "slurmd-spool"

    @property
    def jobcomp_log(self) -> Path:
        return self.root / "jobcomp.log"


def cluster_name(layout: Layout) -> str:
    return f"atlas{layout.ports.base}"


def first_job_id(layout: Layout) -> int:
    """Where this environment's job ids start. Slurm's cgroup plugin puts a job in /slurm_<node>/uid_<U>/job_<N>
    (Debian's build; the prefix is not configurable), and every local environment's node is this host: two
    running at once must never reuse each other's ids. Their port bases are about a block (1000) apart at
    least, their first ids 100 times that."""
    return layout.ports.base * 100


def render_sshd_config(paths: SatoriPaths, port: int, pid_file: Path | None = None) -> str:
    """The login node's sshd_config; another sshd of the same login node (the local site's,
    localenv/site.py) passes its own port and pid file."""
    return "\n".join(
        [
            "# Written by Atlas's local environment; the login node of the local Satori.",
            f"Port {port}",
            f"ListenAddress {LOOPBACK}",
            f"HostKey {paths.host_key}",
            f"PidFile {pid_file or paths.sshd_pid}",
            "AuthorizedKeysFile .ssh/authorized_keys",
            "PubkeyAuthentication yes",
            "AuthenticationMethods publickey",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin no",
            "PermitEmptyPasswords no",
            "UsePAM no",
            f"AllowUsers {LOGIN_USER}",
            "StrictModes yes",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            # The benchmark and the tests open connections in quick succession.
            "MaxStartups 100:30:200",
            "Subsystem sftp internal-sftp",
            f"SetEnv SLURM_CONF={paths.slurm_conf}",
            "",
        ]
    )


def render_slurm_conf(paths: SatoriPaths, layout: Layout, node: str) -> str:
    cpus = NODE_CPUS
    return "\n".join(
        [
            "# Written by Atlas's local environment: a one-node Slurm with 4 (fake) V100s.",
            f"ClusterName={cluster_name(layout)}",
            f"SlurmctldHost={node}({LOOPBACK})",
            f"SlurmctldPort={layout.ports.slurmctld}",
            f"SlurmdPort={layout.ports.slurmd}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={paths.munge_socket}",
            f"StateSaveLocation={paths.slurmctld_state}",
            f"SlurmdSpoolDir={paths.slurmd_spool}",
            f"SlurmctldPidFile={paths.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={paths.root / 'slurmd.pid'}",
            # Each job in cgroups of its own (cgroup.conf), as on Satori: proctrack/cgroup finds every
            # process of a job, task/cgroup gives it a memory cgroup whose peak is the job's own.
            "ProctrackType=proctrack/cgroup",
            "TaskPlugin=task/cgroup",
            f"FirstJobId={first_job_id(layout)}",
            "MpiDefault=none",
            "SwitchType=switch/none",
            # Trust the declared CPUs and memory, not the 2-core host.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "SchedulerType=sched/builtin",
            # Jobs of a partition with a higher PriorityTier preempt those of a lower one.
            "PreemptType=preempt/partition_prio",
            "PreemptMode=REQUEUE",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            f"DefMemPerCPU={DEF_MEM_PER_CPU_MB}",
            "GresTypes=gpu",
            # Each task of a job (the batch script's too) is told its GPUs are mock (render_task_prolog).
            f"TaskProlog={paths.task_prolog}",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={paths.jobcomp_log}",
            f"MinJobAge={MIN_JOB_AGE_S}",
            # bkill should end a job in seconds, not after the default 30 s grace.
            "KillWait=2",
            "InactiveLimit=0",
            "Waittime=0",
            "MessageTimeout=10",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            (
                f"NodeName={node} NodeAddr={LOOPBACK} CPUs={cpus} Boards=1 SocketsPerBoard=1 "
                f"CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory={NODE_MEMORY_MB} "
                f"Gres=gpu:{GPU_TYPE}:{GPU_COUNT} State=UNKNOWN"
            ),
            f"PartitionName=normal Nodes={node} Default=YES MaxTime=INFINITE State=UP PriorityTier={REAL_TIER}",
            f"PartitionName=debug Nodes={node} Default=NO MaxTime=INFINITE State=UP PriorityTier={REAL_TIER}",
            # Backfill that yields (scripts/nodes --backfill): a job of a real partition preempts
            # it, and Slurm requeues it (PreemptMode=REQUEUE), so it starts again once GPUs free up.
            # Hidden: `sinfo` and the LSF command set's `bqueues` list only the real queues.
            (
                f"PartitionName={BACKFILL_PARTITION} Nodes={node} Default=NO MaxTime=INFINITE State=UP "
                "PriorityTier=1 PreemptMode=REQUEUE Hidden=YES"
            ),
            "",
        ]
    )


def render_cgroup_conf() -> str:
    return "\n".join(
        [
            "# Written by Atlas's local environment: Slurm's cgroup plugins (slurm.conf names them).",
            # autodetect: cgroup/v1 on this machine; cgroup/v2 where /sys/fs/cgroup is cgroup2.
            "CgroupPlugin=autodetect",
            "CgroupMountpoint=/sys/fs/cgroup",
            # No systemd here to ask for slurmstepd's scope (cgroup v2 only; v1 ignores it).
            "IgnoreSystemd=yes",
            # The memory cgroup is made only where RAM is constrained: each job to what it asked for.
            "ConstrainRAMSpace=yes",
            "ConstrainSwapSpace=no",
            # The node declares 8 CPUs on a 2-core machine: a cpuset of cores 0-7 cannot exist.
            "ConstrainCores=no",
            # The GPUs are aliases of /dev/null (gres.conf): nothing to fence off.
            "ConstrainDevices=no",
            "",
        ]
    )


def render_task_prolog() -> str:
    """Slurm runs it before each task of a job, as the job's user, and adds the `export` lines it
    prints to the task's environment. Every GPU of this node is mock, and the host's own GPUs (on a
    machine that has some) are never a job's: the sampler, told so, reads none (infra/telemetry/gpu.py)."""
    return (
        "#!/bin/sh\n"
        "# Written by Atlas's local environment: the GPUs of this Slurm node are mock.\n"
        f"echo 'export {MOCK_ENV}={MOCK_VALUE}'\n"
    )


def render_gres_conf(node: str) -> str:
    last = GPU_COUNT - 1
    return (
        "# Written by Atlas's local environment. The devices are aliases of /dev/null:\n"
        "# Slurm needs device files to count GPUs, nothing reads them.\n"
        "AutoDetect=off\n"
        f"NodeName={node} Name=gpu Type={GPU_TYPE} File=/dev/fakegpu[0-{last}]\n"
    )
