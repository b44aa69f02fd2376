"""The local Satori: a login node over real OpenSSH, a real Slurm with GPUs, and LSF commands.

What `up` runs, as root, on loopback only:
- `sshd` on 127.0.0.1:<ports.sshd>, its own config and host key under `satori_dir`, key
  login only, for the non-root login user `atlas` (home /home/atlas);
- `munged` with its own key and socket under `satori_dir` (Slurm's authentication);
- `slurmctld` and `slurmd`: one node, 4 mock GPUs (GRES type mock_v100) backed by /dev/fakegpu0..3,
  partitions `normal` (default) and `debug`, a job completion log;
- the LSF command set of localenv/lsf, installed into /opt/atlas-lsf the way LSF
  is installed (bin/ plus conf/profile.lsf, which the login user's `bash -l` sources).

How the login user finds this Slurm: sshd's `SetEnv SLURM_CONF=<satori_dir>/slurm.conf`.
Every session of this sshd, login shell or plain command, gets it, and two local
environments on one machine (the default one and a test's, on another port base) do
not overwrite each other's setting, as a shared ~/.bash_profile or /etc/profile.d file
would.

`down` stops exactly the four daemons `up` recorded (pid files with start times, see
procs.py), after cancelling this Slurm's jobs so no job process outlives it.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.toolchain.pins import REPO_ROOT
from localenv import records
from localenv.layout import LOOPBACK, Layout
from localenv.procs import Daemon, LocalEnvError, port_open, require_free_ports, wait_for
from localenv.satori_config import (
    BACKFILL_PARTITION,
    FAKE_GPU_DEVICES,
    GPU_COUNT,
    GPU_TYPE,
    LOGIN_HOME,
    LOGIN_USER,
    NODE_CPUS,
    PARTITIONS,
    SatoriPaths,
    cluster_name,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
    render_sshd_config,
    render_task_prolog,
)
from localenv.system import ensure_key_login_account, ensure_packages

LSF_TOP = Path("/opt/atlas-lsf")
# Apptainer as a site installs it for every user (its `module load apptainer`): the toolchain's
# build, copied out of root's cache (which the login user cannot reach). An unprivileged build
# (--without-suid) is relocatable: it finds its configuration and helpers relative to itself.
APPTAINER_TOP = Path("/opt/atlas-apptainer")
LSF_VERSION = "10.1"
LSF_SOURCE = Path(__file__).resolve().parent / "lsf"
LSF_COMMANDS = ("bsub", "bjobs", "bkill", "bhist", "bqueues", "bhosts", "lsload")
# The login user's python: the system interpreter, stdlib only (no venv on a login node).
SYSTEM_PYTHON = "/usr/bin/python3"


def _paths(layout: Layout) -> SatoriPaths:
    return SatoriPaths(layout.satori_dir)


def _daemons(layout: Layout) -> dict[str, Daemon]:
    names = ("munged", "slurmctld", "slurmd", "sshd")
    return {n: Daemon(f"satori-{n}", layout.pids_dir, layout.logs_dir) for n in names}


def _node_name() -> str:
    # Slurm node names are host names without the domain; the short name also keeps
    # EXEC_HOST in bjobs output the way LSF prints it.
    return socket.gethostname().split(".")[0] or "localhost"


def _run(argv: Sequence[str], what: str, env: dict[str, str] | None = None, timeout: float = 60) -> str:
    """Run a setup command; raise with the command, exit code and output when it fails."""
    try:
        result = subprocess.run(
            list(argv), capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise LocalEnvError(
            f"{what}: `{argv[0]}` is not installed ({exc}); run `scripts/localenv up` "
            "as root so it can install the Debian packages"
        ) from exc
    if result.returncode != 0:
        raise LocalEnvError(
            f"{what}: `{' '.join(argv)}` exited with {result.returncode}:\n"
            f"{(result.stdout + result.stderr).strip()}"
        )
    return result.stdout


def _slurm_env(paths: SatoriPaths) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(paths.slurm_conf)}


# --- the login user ---------------------------------------------------------------------------


def _ensure_login_user() -> pwd.struct_passwd:
    return ensure_key_login_account(LOGIN_USER, LOGIN_HOME, "/bin/bash", "login user", _run)


def _write_login_profile(user: pwd.struct_passwd) -> None:
    """~/.bash_profile sources LSF's profile.lsf, as LSF sites set up their users."""
    profile = LOGIN_HOME / ".bash_profile"
    text = (
        "# Written by Atlas's local environment (localenv/satori.py).\n"
        "[ -f ~/.profile ] && . ~/.profile\n"
        f"[ -f {LSF_TOP}/conf/profile.lsf ] && . {LSF_TOP}/conf/profile.lsf\n"
        f"[ -f {APPTAINER_TOP}/profile.sh ] && . {APPTAINER_TOP}/profile.sh\n"
    )
    if not profile.exists() or profile.read_text() != text:
        profile.write_text(text)
        os.chown(profile, user.pw_uid, user.pw_gid)


# --- SSH ----------------------------------------------------------------------------------------


def _ensure_keys(paths: SatoriPaths) -> None:
    # Keys are kept across down/up, so a known_hosts file handed out once stays valid.
    for key, comment, what in (
        (paths.host_key, "atlas-localenv-satori-host", "generating the sshd host key"),
        (paths.user_key, f"{LOGIN_USER}@atlas-localenv", "generating the login user's key"),
    ):
        if not key.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)], what)
    for key in (paths.host_key, paths.user_key):
        key.chmod(0o600)


def _authorized_key_marker(paths: SatoriPaths) -> str:
    return f"atlas-localenv:{paths.root}"


def _authorize_user_key(paths: SatoriPaths, user: pwd.struct_passwd) -> None:
    """Add this environment's key to ~atlas/.ssh/authorized_keys (one line, tagged with its path)."""
    ssh_dir = LOGIN_HOME / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    os.chown(ssh_dir, user.pw_uid, user.pw_gid)
    ssh_dir.chmod(0o700)
    auth = ssh_dir / "authorized_keys"
    marker = _authorized_key_marker(paths)
    key_type, key_b64 = paths.user_key.with_suffix(".pub").read_text().split()[:2]
    line = f"{key_type} {key_b64} {marker}"
    lines = auth.read_text().splitlines() if auth.exists() else []
    kept = [x for x in lines if not x.endswith(" " + marker)]
    if [*kept, line] != lines:
        auth.write_text("\n".join([*kept, line]) + "\n")
    os.chown(auth, user.pw_uid, user.pw_gid)
    auth.chmod(0o600)


def _unauthorize_user_key(paths: SatoriPaths) -> None:
    auth = LOGIN_HOME / ".ssh" / "authorized_keys"
    if not auth.exists():
        return
    marker = " " + _authorized_key_marker(paths)
    lines = auth.read_text().splitlines()
    kept = [x for x in lines if not x.endswith(marker)]
    if kept != lines:
        auth.write_text("".join(x + "\n" for x in kept))


def _write_known_hosts(paths: SatoriPaths, port: int) -> None:
    key_type, key_b64 = paths.host_key.with_suffix(".pub").read_text().split()[:2]
    paths.known_hosts.write_text(f"[{LOOPBACK}]:{port} {key_type} {key_b64}\n")
    paths.known_hosts.chmod(0o644)


# --- munge and Slurm ----------------------------------------------------------------------------


def _ensure_fake_gpus() -> None:
    """Slurm only schedules GPUs it can see as device files; these are aliases of /dev/null."""
    for dev in FAKE_GPU_DEVICES:
        if dev.exists():
            if not stat.S_ISCHR(dev.stat().st_mode):
                raise LocalEnvError(f"{dev} exists but is not a character device; remove it and run up again")
            continue
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))


def _ensure_munge_key(paths: SatoriPaths) -> None:
    paths.munge_dir.mkdir(mode=0o755, exist_ok=True)
    paths.munge_dir.chmod(0o755)  # the socket's directory must be reachable by every user
    if not paths.munge_key.exists():
        paths.munge_key.write_bytes(os.urandom(1024))
    paths.munge_key.chmod(0o400)


def _node_state(paths: SatoriPaths, node: str) -> str:
    result = subprocess.run(
        ["sinfo", "-h", "-N", "-n", node, "-o", "%T"],
        capture_output=True,
        text=True,
        env=_slurm_env(paths),
        timeout=15,
        check=False,
    )
    return result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else ""


def _wait_node_ready(paths: SatoriPaths, node: str, slurmctld: Daemon, slurmd: Daemon) -> None:
    deadline = time.monotonic() + 60
    resumed = False
    state = ""
    while time.monotonic() < deadline:
        for daemon in (slurmctld, slurmd):
            if not daemon.running():
                raise LocalEnvError(
                    f"{daemon.name} exited during start-up; its log ends:\n{daemon.log_tail()}"
                )
        state = _node_state(paths, node)
        if state.rstrip("*~#") in ("idle", "mixed", "allocated", "completing"):
            return
        if state.rstrip("*~#") in ("down", "drained", "draining", "inval") and not resumed:
            subprocess.run(
                ["scontrol", "update", f"nodename={node}", "state=resume"],
                env=_slurm_env(paths),
                capture_output=True,
                timeout=15,
                check=False,
            )
            resumed = True
        time.sleep(0.3)
    raise LocalEnvError(
        f"Slurm node {node} did not become ready within 60 s (state: {state or 'unknown'}).\n"
        f"slurmctld's log ends:\n{slurmctld.log_tail(15)}\nslurmd's log ends:\n{slurmd.log_tail(15)}"
    )


# --- LSF command set ----------------------------------------------------------------------------


def lsf_bin_dir() -> Path:
    return LSF_TOP / LSF_VERSION / "bin"


def _install_lsf() -> None:
    """Install the LSF command set like an LSF tree: <top>/10.1/{bin,lib}, <top>/conf/profile.lsf."""
    lib = LSF_TOP / LSF_VERSION / "lib" / "atlas_lsf"
    bin_dir = lsf_bin_dir()
    conf = LSF_TOP / "conf"
    for d in (lib, bin_dir, conf):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    for src in sorted(LSF_SOURCE.glob("*.py")):
        dst = lib / src.name
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copyfile(src, dst)
        dst.chmod(0o644)
    for command in LSF_COMMANDS:
        wrapper = bin_dir / command
        text = (
            f"#!{SYSTEM_PYTHON} -I\n"
            "# The LSF-compatible command set of Atlas's local environment (localenv/lsf).\n"
            "import sys\n"
            f"sys.path.insert(0, {str(lib.parent)!r})\n"
            "from atlas_lsf.cli import main\n"
            f"sys.exit(main({command!r}, sys.argv[1:]))\n"
        )
        if not wrapper.exists() or wrapper.read_text() != text:
            wrapper.write_text(text)
        wrapper.chmod(0o755)
    (conf / "lsf.conf").write_text(
        "# LSF configuration of Atlas's local environment (read by its LSF command set).\n"
        f"LSF_TOP={LSF_TOP}\n"
        f"LSF_VERSION={LSF_VERSION}\n"
        "LSF_UNIT_FOR_LIMITS=MB\n"
        "LSB_GPU_NEW_SYNTAX=extend\n"
    )
    (conf / "profile.lsf").write_text(
        "# Sourced by login shells, as IBM LSF's conf/profile.lsf is.\n"
        f"LSF_ENVDIR={conf}\n"
        f"LSF_BINDIR={bin_dir}\n"
        f"LSF_SERVERDIR={LSF_TOP / LSF_VERSION / 'etc'}\n"
        f"LSF_LIBDIR={lib.parent}\n"
        "export LSF_ENVDIR LSF_BINDIR LSF_SERVERDIR LSF_LIBDIR\n"
        'case ":$PATH:" in *":$LSF_BINDIR:"*) ;; *) PATH="$LSF_BINDIR:$PATH"; export PATH ;; esac\n'
    )
    for name in ("lsf.conf", "profile.lsf"):
        (conf / name).chmod(0o644)


# --- Apptainer -------------------------------------------------------------------------------


def _install_apptainer() -> str | None:
    """Copy the toolchain's Apptainer (`scripts/bootstrap --with apptainer`) to APPTAINER_TOP and
    put it on the login shell's PATH; without one built, the site has no Apptainer (and a stack
    asking for runtime apptainer is told so). Its version, or None."""
    from infra.toolchain.apptainer import apptainer_prefix
    from infra.toolchain.pins import load_pins

    built = apptainer_prefix(load_pins())
    profile = APPTAINER_TOP / "profile.sh"
    if not (built / "bin" / "apptainer").is_file():
        profile.unlink(missing_ok=True)
        return None
    installed = APPTAINER_TOP / built.name
    if not (installed / "bin" / "apptainer").is_file():
        partial = APPTAINER_TOP / f".{built.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(built, partial, symlinks=True)
        for path in (partial, *partial.rglob("*")):
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | (0o055 if path.is_dir() else 0o044))
        partial.rename(installed)
    APPTAINER_TOP.chmod(0o755)
    _open_fuse_device()
    text = (
        "# Apptainer for every login (Atlas's local environment, localenv/satori.py), as a site's module.\n"
        f'case ":$PATH:" in *":{installed}/bin:"*) ;; *) PATH="{installed}/bin:$PATH"; export PATH ;; esac\n'
    )
    if not profile.exists() or profile.read_text() != text:
        profile.write_text(text)
    profile.chmod(0o644)
    return built.name


FUSE_DEVICE = Path("/dev/fuse")


def _open_fuse_device() -> None:
    """Apptainer without setuid mounts a SIF with squashfuse, as the job's user: it opens /dev/fuse.
    A distribution's udev rule makes that device 0666 (Debian's fuse3: `KERNEL=="fuse", MODE="0666"`);
    a machine without udev (a container, this CI's) leaves the kernel's 0600, and every step then
    fails with `fuse: failed to open /dev/fuse: Permission denied`. Do what the rule does."""
    try:
        mode = FUSE_DEVICE.stat().st_mode
    except OSError:
        return  # no FUSE at all: Apptainer says so itself, naming the device
    if stat.S_ISCHR(mode) and (mode & 0o666) != 0o666:
        FUSE_DEVICE.chmod(0o666)


# --- up / down / status -------------------------------------------------------------------------


def _check_reachable_by_login_user(path: Path) -> None:
    """Job scripts, slurm.conf and the munge socket live here; the login user must reach them."""
    blocked = [p for p in (path, *path.parents) if p.exists() and not (p.stat().st_mode & stat.S_IXOTH)]
    if blocked:
        raise LocalEnvError(
            f"the login user {LOGIN_USER} cannot reach {path}: {blocked[-1]} is not world-executable. "
            f"Run `chmod o+x {blocked[-1]}`, or point ATLAS_LOCALENV_DIR at a directory under /tmp or /srv."
        )


def _ports(layout: Layout) -> dict[str, int]:
    return {
        "satori sshd": layout.ports.sshd,
        "slurmctld": layout.ports.slurmctld,
        "slurmd": layout.ports.slurmd,
    }


def up(layout: Layout) -> dict[str, Any]:
    """Start the local Satori (or finish starting it); a second call only checks it."""
    records.write_record(layout, REPO_ROOT)  # before any daemon: findable even if its folder goes
    paths = _paths(layout)
    daemons = _daemons(layout)
    if all(d.running() for d in daemons.values()) and port_open(layout.ports.sshd):
        if os.geteuid() == 0:
            _install_lsf()  # cheap (compares files); keeps the commands in step with the repo
            _install_apptainer()  # cheap once copied; picks up a build made since
        return status(layout)
    if os.geteuid() != 0:
        raise LocalEnvError(
            "the local Satori runs sshd, munged and Slurm's daemons as root: "
            "run `scripts/localenv up` as root (CI does)"
        )
    ensure_packages()
    port_of = {"sshd": layout.ports.sshd, "slurmctld": layout.ports.slurmctld, "slurmd": layout.ports.slurmd}
    require_free_ports({f"satori {n}": p for n, p in port_of.items() if not daemons[n].running()})

    for d in (layout.state_dir, paths.root):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(d.stat().st_mode | 0o055)
    for d in (layout.pids_dir, layout.logs_dir, paths.slurmctld_state, paths.slurmd_spool):
        d.mkdir(parents=True, exist_ok=True)
    paths.slurmd_spool.chmod(0o755)
    _check_reachable_by_login_user(paths.root)

    user = _ensure_login_user()
    _install_lsf()
    _install_apptainer()
    _write_login_profile(user)
    _ensure_keys(paths)
    _authorize_user_key(paths, user)
    _write_known_hosts(paths, layout.ports.sshd)
    _ensure_fake_gpus()
    _ensure_munge_key(paths)

    node = _node_name()
    paths.slurm_conf.write_text(render_slurm_conf(paths, layout, node))
    paths.gres_conf.write_text(render_gres_conf(node))
    paths.cgroup_conf.write_text(render_cgroup_conf())
    paths.task_prolog.write_text(render_task_prolog())
    paths.sshd_config.write_text(render_sshd_config(paths, layout.ports.sshd))
    for f in (paths.slurm_conf, paths.gres_conf, paths.cgroup_conf, paths.sshd_config):
        f.chmod(0o644)
    paths.task_prolog.chmod(0o755)

    munged = daemons["munged"]
    if not munged.running():
        # --force: munged refuses to start when it finds a stale socket from a killed run.
        munged.start(
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={paths.munge_socket}",
                f"--key-file={paths.munge_key}",
                f"--pid-file={paths.munge_dir / 'munged.pid'}",
                f"--seed-file={paths.munge_dir / 'munged.seed'}",
                "--log-file=/dev/stderr",
            ]
        )
        wait_for(lambda: paths.munge_socket.exists(), "munged's socket", 15, munged)
    env = _slurm_env(paths)
    slurmctld, slurmd = daemons["slurmctld"], daemons["slurmd"]
    if not slurmctld.running():
        slurmctld.start(["slurmctld", "-D", "-f", str(paths.slurm_conf)], env=env)
        wait_for(lambda: port_open(layout.ports.slurmctld), "slurmctld's port", 30, slurmctld)
    if not slurmd.running():
        slurmd.start(["slurmd", "-D", "-f", str(paths.slurm_conf), "-N", node], env=env)
        wait_for(lambda: port_open(layout.ports.slurmd), "slurmd's port", 30, slurmd)
    _wait_node_ready(paths, node, slurmctld, slurmd)
    # `sacct -c` runs as the login user, and Slurm's jobcomp/filetxt plugin opens the log
    # for appending even when sacct only reads it: group-writable by the login user's group.
    # After slurmctld's start, which creates the file 0644.
    if paths.jobcomp_log.exists():
        os.chown(paths.jobcomp_log, 0, user.pw_gid)
        paths.jobcomp_log.chmod(0o664)

    sshd = daemons["sshd"]
    if not sshd.running():
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        _run(["/usr/sbin/sshd", "-t", "-f", str(paths.sshd_config)], "checking the sshd configuration")
        sshd.start(["/usr/sbin/sshd", "-D", "-e", "-f", str(paths.sshd_config)])
        wait_for(lambda: port_open(layout.ports.sshd), "sshd's port", 15, sshd)
    return status(layout)


def _cancel_all_jobs(paths: SatoriPaths) -> None:
    """Cancel this Slurm's jobs and wait for them to end, so no job process outlives `down`."""
    env = _slurm_env(paths)
    subprocess.run(
        ["scancel", "--full", "--user", LOGIN_USER], env=env, capture_output=True, timeout=15, check=False
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        result = subprocess.run(
            ["squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "-o", "%i"],
            env=env,
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
        if result.returncode != 0 or not result.stdout.strip():
            return
        time.sleep(0.3)


def down(layout: Layout) -> list[str]:
    """Stop the daemons `up` started (and only those); return the names of those stopped."""
    paths = _paths(layout)
    daemons = _daemons(layout)
    stopped: list[str] = []
    if daemons["slurmctld"].running() and daemons["slurmd"].running() and daemons["munged"].running():
        _cancel_all_jobs(paths)
    for name in ("sshd", "slurmd", "slurmctld", "munged"):
        if daemons[name].stop():
            stopped.append(name)
    _unauthorize_user_key(paths)
    paths.munge_socket.unlink(missing_ok=True)
    still_open = {n: p for n, p in _ports(layout).items() if port_open(p)}
    if still_open:
        listing = ", ".join(f"{n} on {LOOPBACK}:{p}" for n, p in sorted(still_open.items()))
        raise LocalEnvError(
            f"after stopping the local Satori something still listens: {listing}. "
            "It was not started by this environment (no pid file); find it with `ss -ltnp`."
        )
    return stopped


def status(layout: Layout) -> dict[str, Any]:
    paths = _paths(layout)
    daemons = _daemons(layout)
    running = {name: d.running() for name, d in daemons.items()}
    return {
        "running": all(running.values()),
        "daemons": {
            name: {"running": r, "pid": daemons[name].pid(), "log": str(daemons[name].log_file)}
            for name, r in running.items()
        },
        "ssh": {
            "host": LOOPBACK,
            "port": layout.ports.sshd,
            "user": LOGIN_USER,
            "key_file": str(paths.user_key),
            "known_hosts_file": str(paths.known_hosts),
            "running": running["sshd"],
        },
        "slurm": {
            "conf": str(paths.slurm_conf),
            "cluster": cluster_name(layout),
            "node": _node_name(),
            "partitions": list(PARTITIONS),
            "default_partition": "normal",
            "backfill_partition": BACKFILL_PARTITION,
            "gpus": GPU_COUNT,
            "gpu_type": GPU_TYPE,
            "cpus": NODE_CPUS,
            "jobcomp_log": str(paths.jobcomp_log),
            "slurmctld_port": layout.ports.slurmctld,
            "slurmd_port": layout.ports.slurmd,
            "running": running["slurmctld"] and running["slurmd"] and running["munged"],
        },
        "lsf": {
            "top": str(LSF_TOP),
            "version": LSF_VERSION,
            "bin_dir": str(lsf_bin_dir()),
            "profile": str(LSF_TOP / "conf" / "profile.lsf"),
            "queues": list(PARTITIONS),
            "default_queue": "normal",
            "installed": all((lsf_bin_dir() / c).exists() for c in LSF_COMMANDS),
        },
    }


def ssh_client_argv(ssh_info: dict[str, Any], remote_command: str) -> list[str]:
    """The OpenSSH client command line for the login node of `status()["ssh"]`: key login,
    host key checked against the generated known_hosts, a login shell (so the LSF profile
    and SLURM_CONF apply), never a prompt."""
    return [
        "ssh", "-i", str(ssh_info["key_file"]), "-p", str(ssh_info["port"]),
        "-o", f"UserKnownHostsFile={ssh_info['known_hosts_file']}", "-o", "StrictHostKeyChecking=yes",
        "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10",
        f"{ssh_info['user']}@{ssh_info['host']}", f"bash -lc {shlex.quote(remote_command)}",
    ]
