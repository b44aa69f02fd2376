"""The local site: the local Satori reached as users reach a real HPC site, through a bastion, with the key in an agent.

What `up` runs, as root, on loopback, beside a running local Satori (same layout):
- a bastion sshd on <ports.bastion>: its account `atlas-jump` logs in with the user's key and
  may only forward to the login nodes (ProxyJump); no shell;
- the Satori's login node (its host key, its Slurm and LSF commands) on <ports.site_login>,
  reachable through the bastion only: an iptables rule refuses a new connection to its port from
  any process but the bastion's (owner `atlas-jump`, the user its forwarding runs as);
- the same login node on <ports.site_login_mfa>, asking after the key a code through PAM
  (keyboard-interactive): sshd runs there under its own name, so the PAM stack is its alone;
- an ssh-agent holding the user's key (its private half exists nowhere else: deleted once
  added), and a second agent holding none;
- the user's home: `~/.ssh/config` naming the bastion and the login nodes by alias
  (`satori-site`, `satori-site-mfa`, ProxyJump through `atlas-bastion`; ControlPath for the
  second) and `~/.ssh/known_hosts`; `status()["env"]` is the user's HOME and SSH_AUTH_SOCK.

`open_master` opens the master connection a user of the code-asking login node opens by hand
(OpenSSH answering the prompt through SSH_ASKPASS); `close_master` ends it. `stack_section`
writes the `atlas:hpc.<name>` section of a stack on this site: a Host alias, no key, no host
keys. `down` stops exactly what `up` started and removes its rule, keys and PAM file.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from localenv import satori
from localenv.layout import LOOPBACK, Layout
from localenv.procs import Daemon, LocalEnvError, port_listening, require_free_ports, wait_for
from localenv.satori_config import LOGIN_HOME, LOGIN_USER, SatoriPaths
from localenv.site_config import (
    BASTION_ALIAS,
    BASTION_HOME,
    BASTION_USER,
    LOGIN_ALIAS,
    LOGIN_MFA_ALIAS,
    SitePaths,
    firewall_comment,
    render_askpass,
    render_bastion_config,
    render_code_check,
    render_known_hosts,
    render_login_config,
    render_login_mfa_config,
    render_pam_service,
    render_user_ssh_config,
    sshd_program_name,
)
from localenv.system import ensure_key_login_account, ensure_packages

SITE_PACKAGES = ("openssh-server", "openssh-client", "iptables", "libpam-modules")
PAM_DIR = Path("/etc/pam.d")
SSHD = "/usr/sbin/sshd"


def _paths(layout: Layout) -> SitePaths:
    return SitePaths(layout.site_dir)


def _daemons(layout: Layout) -> dict[str, Daemon]:
    names = ("agent", "empty-agent", "bastion", "login", "login-mfa")
    return {n: Daemon(f"site-{n}", layout.pids_dir, layout.logs_dir) for n in names}


def _run(argv: list[str], what: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    except FileNotFoundError as error:
        raise LocalEnvError(f"{what}: `{argv[0]}` is not installed ({error})") from error
    if check and done.returncode != 0:
        raise LocalEnvError(
            f"{what}: `{' '.join(argv)}` exited with {done.returncode}:\n{(done.stdout + done.stderr).strip()}"
        )
    return done.stdout


def _pam_service(layout: Layout) -> Path:
    return PAM_DIR / sshd_program_name(layout)


def _sshd_link(paths: SitePaths, layout: Layout) -> Path:
    return paths.root / sshd_program_name(layout)


# --- accounts and keys ----------------------------------------------------------------------------


def _ensure_bastion_user() -> pwd.struct_passwd:
    return ensure_key_login_account(BASTION_USER, BASTION_HOME, "/usr/sbin/nologin", "bastion's account", _run)


def _marker(paths: SitePaths) -> str:
    return f"atlas-localenv-site:{paths.root}"


def _authorize(home: Path, owner: pwd.struct_passwd, public_key: str, marker: str) -> None:
    """This site's key in `home`/.ssh/authorized_keys, one line tagged with the site's path."""
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    os.chown(ssh_dir, owner.pw_uid, owner.pw_gid)
    auth = ssh_dir / "authorized_keys"
    lines = [x for x in (auth.read_text().splitlines() if auth.exists() else []) if not x.endswith(" " + marker)]
    key_type, key_b64 = public_key.split()[:2]
    auth.write_text("\n".join([*lines, f"{key_type} {key_b64} {marker}"]) + "\n")
    os.chown(auth, owner.pw_uid, owner.pw_gid)
    auth.chmod(0o600)


def _unauthorize(home: Path, marker: str) -> None:
    auth = home / ".ssh" / "authorized_keys"
    if auth.exists():
        lines = auth.read_text().splitlines()
        kept = [x for x in lines if not x.endswith(" " + marker)]
        if kept != lines:
            auth.write_text("".join(x + "\n" for x in kept))


def _agent_env(socket_path: Path) -> dict[str, str]:
    return {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}


def _start_agents(paths: SitePaths, daemons: dict[str, Daemon]) -> None:
    """The user's agent with a fresh key in it (the private half then deleted), and an empty one."""
    for name, sock in (("agent", paths.agent_socket), ("empty-agent", paths.empty_agent_socket)):
        if daemons[name].running():
            continue
        sock.unlink(missing_ok=True)
        daemons[name].start(["ssh-agent", "-D", "-a", str(sock)])
        wait_for(sock.exists, f"the site's {name}", 10, daemons[name])
    listed = subprocess.run(
        ["ssh-add", "-L"], env=_agent_env(paths.agent_socket), capture_output=True, text=True, check=False
    )
    if listed.returncode == 0 and paths.user_public_key.exists():
        held = {line.split()[1] for line in listed.stdout.splitlines() if len(line.split()) > 1}
        if paths.user_public_key.read_text().split()[1] in held:
            return
    private = paths.root / "user_ed25519"
    private.unlink(missing_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "site-user@atlas-localenv", "-f", str(private)],
         "generating the site user's key")
    try:
        _run(["ssh-add", "-q", str(private)], "adding the site user's key to its agent",
             env=_agent_env(paths.agent_socket))
    finally:
        private.unlink(missing_ok=True)  # the agent holds it; no file names it anywhere
    private.with_suffix(".pub").replace(paths.user_public_key)


# --- the firewall: the login node's ports, from the bastion only ------------------------------------


def _rule(paths: SitePaths, port: int) -> list[str]:
    return [
        "OUTPUT", "-o", "lo", "-p", "tcp", "-d", LOOPBACK, "--dport", str(port), "--syn",
        "-m", "owner", "!", "--uid-owner", BASTION_USER,
        "-m", "comment", "--comment", firewall_comment(paths),
        "-j", "REJECT", "--reject-with", "tcp-reset",
    ]


def _add_firewall(paths: SitePaths, layout: Layout) -> None:
    for port in (layout.ports.site_login, layout.ports.site_login_mfa):
        rule = _rule(paths, port)
        if subprocess.run(["iptables", "-C", *rule], capture_output=True, check=False).returncode != 0:
            _run(["iptables", "-I", *rule], f"letting only the bastion reach port {port}")


def _remove_firewall(paths: SitePaths) -> None:
    """Delete this site's rules, found by their comment (as `iptables -S` prints them)."""
    if shutil.which("iptables") is None:
        return
    listed = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        if firewall_comment(paths) in line and line.startswith("-A "):
            _run(["iptables", "-D", *shlex.split(line[3:])], "removing the local site's firewall rule")


# --- up / down / status -----------------------------------------------------------------------------


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def up(layout: Layout) -> dict[str, Any]:
    """Start the local site (or finish starting it) in front of the running local Satori."""
    paths, daemons = _paths(layout), _daemons(layout)
    if all(d.running() for d in daemons.values()):
        return status(layout)
    if os.geteuid() != 0:
        raise LocalEnvError("the local site runs sshd and iptables as root: run it as root (CI does)")
    if not satori.status(layout)["ssh"]["running"]:
        raise LocalEnvError(
            "the local site fronts the local Satori: start it first (`scripts/localenv up --only satori`)"
        )
    ensure_packages(SITE_PACKAGES)
    ports = layout.ports
    wanted = {"bastion": ports.bastion, "login": ports.site_login, "login-mfa": ports.site_login_mfa}
    require_free_ports({f"site {n}": p for n, p in wanted.items() if not daemons[n].running()})
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.root.chmod(0o755)  # pam_exec runs the check from here; the bastion's sshd reads nothing here
    satori_paths = SatoriPaths(layout.satori_dir)

    jump = _ensure_bastion_user()
    if not paths.bastion_host_key.exists():
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "atlas-localenv-bastion", "-f",
              str(paths.bastion_host_key)], "generating the bastion's host key")
    paths.bastion_host_key.chmod(0o600)
    _start_agents(paths, daemons)
    public = paths.user_public_key.read_text()
    _authorize(BASTION_HOME, jump, public, _marker(paths))
    _authorize(LOGIN_HOME, pwd.getpwnam(LOGIN_USER), public, _marker(paths))

    if not paths.code_file.exists():
        _write(paths.code_file, f"{secrets.randbelow(10**6):06d}\n", 0o600)
    _write(paths.code_check, render_code_check(paths), 0o700)
    _write(paths.askpass, render_askpass(paths), 0o700)
    _write(_pam_service(layout), render_pam_service(paths), 0o644)
    link = _sshd_link(paths, layout)
    if not link.is_symlink():
        link.unlink(missing_ok=True)
        link.symlink_to(SSHD)

    bastion_key = " ".join(paths.bastion_host_key.with_suffix(".pub").read_text().split()[:2])
    login_key = " ".join(satori_paths.host_key.with_suffix(".pub").read_text().split()[:2])
    _write(paths.ssh_config, render_user_ssh_config(paths, layout), 0o644)
    _write(paths.known_hosts, render_known_hosts(bastion_key, login_key, layout), 0o644)
    paths.ssh_config.parent.chmod(0o700)
    _write(paths.bastion_config, render_bastion_config(paths, layout), 0o644)
    _write(paths.login_config, render_login_config(satori_paths, paths, layout), 0o644)
    _write(paths.login_mfa_config, render_login_mfa_config(satori_paths, paths, layout), 0o644)

    _add_firewall(paths, layout)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    for name, program, config, port in (
        ("bastion", SSHD, paths.bastion_config, ports.bastion),
        ("login", SSHD, paths.login_config, ports.site_login),
        ("login-mfa", str(link), paths.login_mfa_config, ports.site_login_mfa),
    ):
        daemon = daemons[name]
        if daemon.running():
            continue
        _run([program, "-t", "-f", str(config)], f"checking the site's {name} sshd configuration")
        daemon.start([program, "-D", "-e", "-f", str(config)])
        # Listening, as the kernel says: the firewall keeps this process from connecting to the login ports.
        wait_for(lambda p=port: port_listening(p), f"the site's {name} sshd", 15, daemon)  # type: ignore[misc]
    return status(layout)


def open_master(layout: Layout, timeout: float = 30.0) -> Path:
    """Open the master connection to the login node that asks a code, as its user does by hand
    (`ssh -M -fN satori-site-mfa`, the key from the agent, the code typed at the prompt: here
    OpenSSH reads it from SSH_ASKPASS). Returns the master's socket (ControlPath)."""
    paths = _paths(layout)
    env = {
        **_agent_env(paths.agent_socket),
        "HOME": str(paths.home),
        "SSH_ASKPASS": str(paths.askpass),
        "SSH_ASKPASS_REQUIRE": "force",
        "DISPLAY": os.environ.get("DISPLAY", ":0"),
    }
    argv = ["ssh", "-F", str(paths.ssh_config), "-M", "-S", str(paths.control_path), "-fN", LOGIN_MFA_ALIAS]
    # The master stays in the background (-f) holding what it was given as stdout and stderr: a
    # file, not a pipe, or reading the pipe would wait for the master to end.
    log = layout.logs_dir / "site-master.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                              timeout=timeout, check=False)
    if done.returncode != 0 or not paths.control_path.exists():
        said = log.read_text().strip()
        raise LocalEnvError(f"opening the master connection failed ({done.returncode}): {said}")
    return paths.control_path


def close_master(layout: Layout) -> bool:
    """End the master connection (`ssh -O exit`); True if one was running."""
    paths = _paths(layout)
    if not paths.control_path.exists():
        return False
    done = subprocess.run(
        ["ssh", "-F", "/dev/null", "-S", str(paths.control_path), "-O", "exit", LOGIN_MFA_ALIAS],
        capture_output=True, text=True, timeout=15, check=False,
    )
    wait_for(lambda: not paths.control_path.exists(), "the master connection to end", 10)
    return done.returncode == 0


def down(layout: Layout) -> list[str]:
    """Stop what `up` started (and only that), remove its firewall rules, keys and PAM file."""
    paths, daemons = _paths(layout), _daemons(layout)
    with contextlib.suppress(LocalEnvError, subprocess.TimeoutExpired):
        close_master(layout)
    stopped = [name for name in ("login-mfa", "login", "bastion", "empty-agent", "agent") if daemons[name].stop()]
    _remove_firewall(paths)
    for home in (BASTION_HOME, LOGIN_HOME):
        _unauthorize(home, _marker(paths))
    if _pam_service(layout).exists() and str(paths.code_check) in _pam_service(layout).read_text():
        _pam_service(layout).unlink()
    for path in (paths.agent_socket, paths.empty_agent_socket, paths.user_public_key, _sshd_link(paths, layout)):
        path.unlink(missing_ok=True)
    if paths.home.exists():
        shutil.rmtree(paths.home)
    ports = layout.ports
    still = [p for p in (ports.bastion, ports.site_login, ports.site_login_mfa) if port_listening(p)]
    if still and stopped:
        raise LocalEnvError(
            f"after stopping the local site something still listens on {still}; find it with `ss -ltnp`"
        )
    return stopped


def status(layout: Layout) -> dict[str, Any]:
    paths, daemons = _paths(layout), _daemons(layout)
    running = {name: d.running() for name, d in daemons.items()}
    ports = layout.ports
    return {
        "running": all(running.values()),
        "daemons": {name: {"running": r, "pid": daemons[name].pid()} for name, r in running.items()},
        "bastion": {"alias": BASTION_ALIAS, "host": LOOPBACK, "port": ports.bastion, "user": BASTION_USER},
        "login": {"alias": LOGIN_ALIAS, "host": LOOPBACK, "port": ports.site_login, "user": LOGIN_USER},
        "login_mfa": {
            "alias": LOGIN_MFA_ALIAS, "host": LOOPBACK, "port": ports.site_login_mfa, "user": LOGIN_USER,
            "control_path": str(paths.control_path),
        },
        "home": str(paths.home),
        "ssh_config": str(paths.ssh_config),
        "known_hosts": str(paths.known_hosts),
        "agent_socket": str(paths.agent_socket),
        "empty_agent_socket": str(paths.empty_agent_socket),
        "askpass": str(paths.askpass),
        # What a shell of the site's user has: the stack program and the tools run with it.
        "env": {"HOME": str(paths.home), "SSH_AUTH_SOCK": str(paths.agent_socket)},
    }


def user_env(layout: Layout) -> dict[str, str]:
    """The site user's environment on top of this process's: their HOME and their agent."""
    return {**os.environ, **status(layout)["env"]}


def stack_section(
    layout: Layout, scheduler: str = "slurm", *, mfa: bool = False, named_config: bool = False
) -> dict[str, Any]:
    """The `atlas:hpc.<name>` section of a stack on this site, as its user writes it: the Host
    alias, the scheduler and queue, nothing else of SSH (the user, port, key and host keys come
    from their ssh config and agent). With `named_config`, the section names the ssh config
    (`ssh_config`) instead of relying on HOME."""
    paths = _paths(layout)
    section: dict[str, Any] = {
        "scheduler": scheduler,
        "provenance": "local stand-in: the local Satori behind a bastion, mock GPUs, CPU run",
        "host": LOGIN_MFA_ALIAS if mfa else LOGIN_ALIAS,
        "queue": "normal",
        "poll_interval_seconds": 2,
    }
    if named_config:
        section["ssh_config"] = str(paths.ssh_config)
    return section
