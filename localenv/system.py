"""Debian packages the local environment runs on, installed when missing.

CI starts from a clean clone on a bare Debian bookworm machine, so the project installs
what it needs itself. The check goes through dpkg-query first: when everything is
installed, `ensure_packages()` costs one subprocess and touches no network.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from localenv.procs import LocalEnvError

# The login node (OpenSSH) and a real single-host Slurm with munge authentication.
# slurm-wlm is the metapackage; the daemons and client tools are named too so that a
# partial install (say, slurm-client alone) is completed.
SATORI_PACKAGES: tuple[str, ...] = (
    "openssh-server",
    "openssh-client",
    "munge",
    "slurm-wlm",
    "slurmctld",
    "slurmd",
    "slurm-client",
    # The login node's own Python runs the probe workload's steps, as a site's module
    # environment would (Debian's builds: no pip, no network needed on the node).
    "python3-numpy",
    "python3-h5py",
    "python3-sklearn",
)


def missing_packages(packages: Sequence[str]) -> list[str]:
    """The packages dpkg does not report as `install ok installed`."""
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *packages],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {
        line.split(" ", 1)[0] for line in result.stdout.splitlines() if line.endswith(" install ok installed")
    }
    return [p for p in packages if p not in installed]


APT_LOCK_WAIT_S = 600


def _run_apt(argv: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise LocalEnvError(
            f"`{' '.join(argv)}` failed with exit code {result.returncode}; its output ends:\n{tail}\n"
            "Check that this machine reaches its Debian mirror (see /etc/apt/sources.list*) and that "
            "no other apt/dpkg is running, then run `scripts/localenv up` again."
        )


def ensure_packages(packages: Sequence[str] = SATORI_PACKAGES) -> list[str]:
    """Install the missing ones among `packages`; return what was installed (empty if none)."""
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        raise LocalEnvError(
            "the local Satori needs a Debian-based machine (dpkg and apt-get were not found); "
            f"install {' '.join(packages)} by other means or run on Debian bookworm."
        )
    missing = missing_packages(packages)
    if not missing:
        return []
    if os.geteuid() != 0:
        raise LocalEnvError(
            f"Debian packages missing: {' '.join(missing)}. Installing them needs root: run "
            f"`sudo apt-get install -y {' '.join(missing)}`, or run `scripts/localenv up` as root."
        )
    print(
        f"localenv: installing Debian packages: {' '.join(missing)} (apt-get, about a minute)",
        file=sys.stderr,
        flush=True,
    )
    # Daemons must not be started by the packages' postinst scripts: the local
    # environment starts its own, on its own ports. policy-rc.d exit 101 is Debian's
    # documented way to say "do not start services" (invoke-rc.d honours it); there
    # is no systemd here anyway, but a sysvinit script could still try.
    policy = "/usr/sbin/policy-rc.d"
    wrote_policy = False
    if not os.path.exists(policy):
        with open(policy, "w") as fh:
            fh.write("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)  # noqa: S103 - root-owned script that invoke-rc.d must run
        wrote_policy = True
    try:
        # Another apt (a second local environment, a test installing jq) may hold dpkg's lock:
        # wait for it rather than fail.
        wait = ["-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}"]
        _run_apt(["apt-get", *wait, "update"])
        _run_apt(["apt-get", *wait, "install", "-y", "--no-install-recommends", *missing])
    finally:
        if wrote_policy:
            os.unlink(policy)
    still_missing = missing_packages(packages)
    if still_missing:
        raise LocalEnvError(f"apt-get reported success but these are still not installed: {still_missing}")
    print("localenv: packages installed", file=sys.stderr, flush=True)
    return missing


def ensure_key_login_account(
    name: str, home: Path, shell: str, role: str, run: Callable[[list[str], str], str]
) -> pwd.struct_passwd:
    """The local account `name` (made with `home` and `shell` where missing) that logs in by key
    alone, never root; `role` says what it is for in messages, `run` runs a setup command (the
    caller's, raising LocalEnvError with its output)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        add = ["useradd", "--create-home", "--home-dir", str(home), "--shell", shell, name]
        run(add, f"creating the {role} {name}")
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise LocalEnvError(
            f"user {name} exists with uid 0; the {role} must not be root. Remove or rename that account "
            f"(`userdel {name}`) and run up again."
        )
    # useradd leaves the password field '!' (locked); with UsePAM no, sshd refuses even key
    # logins to a locked account. '*' means "no password can match" without "locked".
    shadow = run(["getent", "shadow", name], f"reading the {role}'s shadow entry")
    if shadow.split(":")[1].startswith("!"):
        run(["usermod", "-p", "*", name], f"unlocking the {role} for key login")
    return entry
