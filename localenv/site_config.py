"""The local site's files rendered: the bastion's and login nodes' sshd_config, PAM's code, the user's ssh config.

Also where they live: the bastion's and login nodes' sshd_config, the PAM stack that asks a code,
the user's ~/.ssh/config and known_hosts.

Pure: ports, paths and names in, text out; localenv/site.py writes the files and runs the
daemons. The site is the local Satori as users of a real HPC site reach it: a bastion in front,
the login node reachable through the bastion only, the user's key in an agent, a `Host` alias in
their ssh config, and (on a second port of the same login node) a second factor after the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localenv.layout import LOOPBACK, Layout
from localenv.satori_config import LOGIN_USER, SatoriPaths, render_sshd_config

# The bastion's own account: its shell logs nobody in, it only forwards (ProxyJump).
BASTION_USER = "atlas-jump"
BASTION_HOME = Path("/home") / BASTION_USER
# The names the user's ssh config gives the hosts, as users name their site's.
BASTION_ALIAS = "atlas-bastion"
LOGIN_ALIAS = "satori-site"
LOGIN_MFA_ALIAS = "satori-site-mfa"


@dataclass(frozen=True)
class SitePaths:
    root: Path

    @property
    def bastion_host_key(self) -> Path:
        return self.root / "bastion_host_ed25519_key"

    @property
    def bastion_config(self) -> Path:
        return self.root / "bastion_sshd_config"

    @property
    def login_config(self) -> Path:
        return self.root / "login_sshd_config"

    @property
    def login_mfa_config(self) -> Path:
        return self.root / "login_mfa_sshd_config"

    def pid_file(self, name: str) -> Path:
        return self.root / f"{name}.pid"

    @property
    def user_public_key(self) -> Path:
        """The public half of the user's key; the private half lives in the agent alone."""
        return self.root / "user_ed25519.pub"

    @property
    def agent_socket(self) -> Path:
        return self.root / "agent.sock"

    @property
    def empty_agent_socket(self) -> Path:
        """An agent holding no key: the user who forgot `ssh-add`."""
        return self.root / "empty-agent.sock"

    @property
    def code_file(self) -> Path:
        """The second factor's code (root only), as a token app would show it."""
        return self.root / "second-factor-code"

    @property
    def code_check(self) -> Path:
        """What the PAM stack runs to check the code typed (pam_exec)."""
        return self.root / "check-second-factor"

    @property
    def askpass(self) -> Path:
        """SSH_ASKPASS for the user opening the master connection: prints the code."""
        return self.root / "askpass"

    @property
    def home(self) -> Path:
        """The site user's home: ~/.ssh/config and ~/.ssh/known_hosts, as theirs would be."""
        return self.root / "home"

    @property
    def ssh_config(self) -> Path:
        return self.home / ".ssh" / "config"

    @property
    def known_hosts(self) -> Path:
        return self.home / ".ssh" / "known_hosts"

    @property
    def control_path(self) -> Path:
        """Where the master connection to the login node that asks a code lives (ControlPath)."""
        return self.root / "cm-mfa"


def sshd_program_name(layout: Layout) -> str:
    """The login node's sshd that asks a code runs under this name (a link to sshd): sshd names
    its PAM service after its program, so the code's PAM stack is this one sshd's alone."""
    return f"atlas-site-sshd-{layout.ports.base}"


def firewall_comment(paths: SitePaths) -> str:
    """The comment on this site's iptables rules, by which `down` finds exactly them."""
    return f"atlas-site:{paths.root}"


def render_bastion_config(paths: SitePaths, layout: Layout) -> str:
    ports = layout.ports
    return "\n".join(
        [
            "# Written by Atlas's local environment: the local site's bastion (a jump host only).",
            f"Port {ports.bastion}",
            f"ListenAddress {LOOPBACK}",
            f"HostKey {paths.bastion_host_key}",
            f"PidFile {paths.pid_file('bastion')}",
            "AuthorizedKeysFile .ssh/authorized_keys",
            "AuthenticationMethods publickey",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PermitRootLogin no",
            f"AllowUsers {BASTION_USER}",
            # What ProxyJump asks of it (direct-tcpip), to the login nodes and nowhere else.
            "AllowTcpForwarding local",
            f"PermitOpen {LOOPBACK}:{ports.site_login} {LOOPBACK}:{ports.site_login_mfa}",
            "PermitTTY no",
            "X11Forwarding no",
            "AllowAgentForwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxStartups 100:30:200",
            "",
        ]
    )


def render_login_config(satori: SatoriPaths, paths: SitePaths, layout: Layout) -> str:
    """The Satori's login node (its host key, its Slurm) on the site's port, keys only."""
    return render_sshd_config(satori, layout.ports.site_login, paths.pid_file("login"))


def render_login_mfa_config(satori: SatoriPaths, paths: SitePaths, layout: Layout) -> str:
    """The same login node asking, after the key, a code through PAM (keyboard-interactive)."""
    text = render_sshd_config(satori, layout.ports.site_login_mfa, paths.pid_file("login-mfa"))
    replaced = {
        "AuthenticationMethods publickey": "AuthenticationMethods publickey,keyboard-interactive",
        "KbdInteractiveAuthentication no": "KbdInteractiveAuthentication yes",
        "UsePAM no": "UsePAM yes",
    }
    lines = [replaced.get(line, line) for line in text.splitlines()]
    missing = [old for old in replaced if old not in text.splitlines()]
    if missing:  # pragma: no cover - render_sshd_config changed under us
        raise ValueError(f"the login node's sshd_config no longer has {missing}")
    return "\n".join(lines) + "\n"


def render_pam_service(paths: SitePaths) -> str:
    """The PAM stack of the sshd that asks a code: the code (pam_exec, which prompts "Password:"
    through keyboard-interactive and hands the answer to the check on stdin); no password, no
    account or session rules of the machine's."""
    return "\n".join(
        [
            "# Written by Atlas's local environment (localenv/site.py): the local site's second factor.",
            f"auth required pam_exec.so expose_authtok quiet {paths.code_check}",
            # pam_exec answers setcred with PAM_IGNORE; sshd needs one module to grant it.
            "auth required pam_permit.so",
            "account required pam_permit.so",
            "session required pam_permit.so",
            "password required pam_deny.so",
            "",
        ]
    )


def render_code_check(paths: SitePaths) -> str:
    return (
        "#!/bin/sh\n"
        "# The local site's second factor: the code typed must be the one in the code file.\n"
        "read -r typed\n"
        f'[ "$typed" = "$(cat {paths.code_file})" ]\n'
    )


def render_askpass(paths: SitePaths) -> str:
    return f"#!/bin/sh\n# SSH_ASKPASS of the local site's user: the code their token shows.\ncat {paths.code_file}\n"


def render_user_ssh_config(paths: SitePaths, layout: Layout) -> str:
    """The site user's ~/.ssh/config: the bastion, the login node behind it, and the login node
    that asks a code, reached through a master connection the user opens. Host keys in the
    user's own known_hosts (StrictHostKeyChecking no here would not make Atlas accept one that
    is not); no IdentityFile: the key is in the agent."""
    ports = layout.ports
    return "\n".join(
        [
            "# Written by Atlas's local environment: the local site's user's ~/.ssh/config.",
            f"Host {BASTION_ALIAS}",
            f"    HostName {LOOPBACK}",
            f"    Port {ports.bastion}",
            f"    User {BASTION_USER}",
            "",
            f"Host {LOGIN_ALIAS}",
            f"    HostName {LOOPBACK}",
            f"    Port {ports.site_login}",
            f"    User {LOGIN_USER}",
            f"    ProxyJump {BASTION_ALIAS}",
            "",
            f"Host {LOGIN_MFA_ALIAS}",
            f"    HostName {LOOPBACK}",
            f"    Port {ports.site_login_mfa}",
            f"    User {LOGIN_USER}",
            f"    ProxyJump {BASTION_ALIAS}",
            "    ControlMaster auto",
            f"    ControlPath {paths.control_path}",
            "",
            "Host *",
            f"    UserKnownHostsFile {paths.known_hosts}",
            "    StrictHostKeyChecking yes",
            "",
        ]
    )


def render_known_hosts(bastion_key: str, login_key: str, layout: Layout) -> str:
    """The site user's known_hosts: the bastion's key, and the login node's under both its ports."""
    ports = layout.ports
    return "".join(
        [
            f"[{LOOPBACK}]:{ports.bastion} {bastion_key}\n",
            f"[{LOOPBACK}]:{ports.site_login} {login_key}\n",
            f"[{LOOPBACK}]:{ports.site_login_mfa} {login_key}\n",
        ]
    )
