"""Drive the real `pulumi` binary in an isolated project copy, home and backend."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.compare.access import Access
from infra.toolchain.pins import REPO_ROOT, load_pins, toolchain_dir
from localenv import images, node, satori
from localenv.layout import Layout


class PulumiFailed(AssertionError):
    pass


# What a user's shell has before `source scripts/activate` (shell_env keeps these of this process's).
KEEP = ("HOME", "USER", "LANG", "LC_ALL", "TERM", "ATLAS_CACHE", "XDG_CACHE_HOME", "SSL_CERT_FILE")


def shell_env(tmp: Path, **extra: str) -> dict[str, str]:
    """A user's shell before activate: no Atlas or Pulumi variables, a Pulumi home of its own (with
    no login in it); `extra` on top (a HOME of the user's own, their KUBECONFIG, their backend)."""
    env = {k: v for k, v in os.environ.items() if k in KEEP}
    path = [p for p in os.environ.get("PATH", "").split(":") if ".venv" not in p and "/toolchain/" not in p]
    env.update(PATH=":".join(path), PULUMI_HOME=str(tmp / "pulumi-home"))
    env.update(extra)
    return env


def bash(
    script: str, env: dict[str, str], cwd: Path = REPO_ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`script` run by bash in `env` from `cwd`, as a user types it into their shell."""
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def isolated_env(tmp: Path, passphrase: str = "e2e-test-passphrase") -> dict[str, str]:
    """The pinned CLI first on PATH, a Pulumi home and file backend under tmp, no plugin
    downloads: a test never touches the user's own Pulumi login or state."""
    bindir = toolchain_dir(load_pins()) / "bin"
    if not (bindir / "pulumi").exists():
        raise PulumiFailed(f"no pulumi CLI in {bindir}: run scripts/bootstrap")
    venv = REPO_ROOT / ".venv"
    env = {
        **os.environ,
        "PATH": f"{bindir}:{venv / 'bin'}:{os.environ.get('PATH', '')}",
        "PULUMI_PYTHON_CMD": str(venv / "bin" / "python"),
        "PULUMI_HOME": str(tmp / "pulumi-home"),
        "PULUMI_BACKEND_URL": f"file://{tmp / 'backend'}",
        "PULUMI_CONFIG_PASSPHRASE": passphrase,
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        # This checkout's `infra` for the program and the dynamic providers, whichever checkout the
        # .venv's editable install names (worktrees that share one .venv would test another's code).
        "PYTHONPATH": str(REPO_ROOT),
    }
    env.pop("PULUMI_CONFIG_PASSPHRASE_FILE", None)
    (tmp / "backend").mkdir(exist_ok=True)
    return env


@dataclass
class PulumiProject:
    """A copy of Pulumi.yaml and stacks/ in a temp folder; the repo's stack files stay untouched."""

    root: Path
    env: dict[str, str]

    @classmethod
    def create(cls, tmp: Path, source: Path = REPO_ROOT) -> PulumiProject:
        """The project of the checkout at `source` (this one, or an older tree extracted by a
        test of state compatibility)."""
        root = tmp / "project"
        (root / "stacks").mkdir(parents=True)
        shutil.copy(source / "Pulumi.yaml", root / "Pulumi.yaml")
        for item in (source / "stacks").iterdir():
            if item.name.startswith("Pulumi.") and item.suffix == ".yaml":
                # The copy gets its own passphrase: drop the salt of the working copy's stack.
                doc = yaml.safe_load(item.read_text()) or {}
                doc.pop("encryptionsalt", None)
                (root / "stacks" / item.name).write_text(yaml.safe_dump(doc, sort_keys=False))
            elif item.is_file():
                shutil.copy(item, root / "stacks" / item.name)
        # The workload definitions travel with the project, so a test may edit its copy.
        shutil.copytree(source / "workloads", root / "workloads",
                        ignore=shutil.ignore_patterns("__pycache__"))
        return cls(root, isolated_env(tmp))

    def stack_config(self, stack: str) -> dict[str, Any]:
        path = self.root / "stacks" / f"Pulumi.{stack}.yaml"
        return yaml.safe_load(path.read_text())["config"]

    def set_stack_config(self, stack: str, config: dict[str, Any]) -> None:
        path = self.root / "stacks" / f"Pulumi.{stack}.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["config"] = config
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["pulumi", *args, "--non-interactive"],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise PulumiFailed(
                f"pulumi {' '.join(args)} exited {proc.returncode}\n"
                f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
            )
        return proc

    def outputs(self, stack: str) -> dict[str, Any]:
        return json.loads(self.run("stack", "output", "--json", "--show-secrets", "-s", stack).stdout)


@contextlib.contextmanager
def project_and_stacks(tmp: Path) -> Iterator[tuple[PulumiProject, list[str]]]:
    """A project and the list the test adds each stack it creates to: on the way out each is
    destroyed and removed, whatever the test's outcome (a failure there is not the test's)."""
    proj = PulumiProject.create(tmp)
    stacks: list[str] = []
    yield proj, stacks
    for stack in stacks:
        proj.run("destroy", "--yes", "-s", stack, check=False)
        proj.run("stack", "rm", "--yes", "-s", stack, check=False)


def satori_ssh(layout: Layout, command: str, timeout: float = 60) -> str:
    """`command` on the local Satori's login node over real OpenSSH (the user's own client); its
    stdout, or AssertionError with both streams when it exits non-zero."""
    argv = satori.ssh_client_argv(satori.status(layout)["ssh"], command)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def local_hpc_sections(config: dict[str, Any], layout: Layout, environments: tuple[str, ...], remote: str) -> None:
    """Point the stack's `atlas:hpc` environments at the local Satori of `layout` (its port, host
    key and key file), each run under `remote` in the login user's home."""
    info = satori.status(layout)["ssh"]
    for name in environments:
        config["atlas:hpc"][name] = {
            **config["atlas:hpc"][name],
            "port": info["port"],
            "known_hosts_file": info["known_hosts_file"],
            "private_key_file": info["key_file"],
            "remote_work_dir": remote,
        }


def run_bare(config: dict[str, Any], environments: tuple[str, ...]) -> None:
    """The stack's `environments` with runtime bare: for a test of something else than the runtime
    whose stack has no OpenShift side (whose image Apptainer would run)."""
    for name in environments:
        section = {k: v for k, v in config["atlas:hpc"][name].items() if k not in ("runtime", "apptainer")}
        config["atlas:hpc"][name] = section


def local_access(kube: Layout, satori_layout: Layout, environments: tuple[str, ...]) -> Access:
    """How scripts/compare reaches the local environment: its kubeconfig, and the local Satori's
    key and host keys for each HPC environment."""
    info = satori.status(satori_layout)["ssh"]
    return Access(
        kubeconfig=kube.kubeconfig,
        ssh_keys={n: Path(info["key_file"]) for n in environments},
        known_hosts={n: Path(info["known_hosts_file"]) for n in environments},
    )


def local_openshift(section: dict[str, Any], layout: Layout, namespace: str) -> dict[str, Any]:
    """The local stack's `atlas:openshift`, pointed at the environment of `layout` (the stack
    file names the default one, on ports from 16000): its kubeconfig, the git daemon serving
    this repository and the base image in its registry."""
    build = dict(section["image"]["build"])
    build["git_uri"] = node.git_uri(layout)
    build["base_image"] = f"{images.registry_host(layout)}/{images.BASE_REPOSITORY}:{images.BASE_TAG}"
    return {**section, "namespace": namespace, "kubeconfig": str(layout.kubeconfig),
            "image": {**section["image"], "build": build}}
