"""The package as a user installs it: `pip install` of the repository (not editable, with CI's
constraints) into a fresh virtual environment, then examples/slurm-and-kubernetes, a Pulumi
program of a user's own that builds the components' Args by hand, run under Pulumi's mocks by
that environment's Python with nothing of the checkout on sys.path. In the same environment
(the base install, no extra): the components import, AwsEnvironment names its missing extra, the
`atlas` command runs, and the local environment is not part of the distribution."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.toolchain.pins import REPO_ROOT
from tests.e2e.test_clone_alone import copy_of_the_repository

pytestmark = pytest.mark.e2e

EXAMPLE = REPO_ROOT / "examples" / "slurm-and-kubernetes"
RUNNER = Path(__file__).with_name("mocked_program.py")
KNOWN_HOSTS = "login.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk="
CONFIG = {
    "atlas-example:loginHost": "login.example.org",
    "atlas-example:loginUser": "alex",
    "atlas-example:knownHosts": KNOWN_HOSTS,
    "atlas-example:privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n-----END OPENSSH PRIVATE KEY-----\n",
    "atlas-example:image": "quay.io/example/atlas-runtime:1",
}


def _user_env() -> dict[str, str]:
    """A user's shell: no virtual environment, toolchain, Pulumi home or PYTHONPATH of the checkout."""
    keep = ("HOME", "USER", "LANG", "LC_ALL", "PATH", "PIP_CONFIG_FILE", "PIP_INDEX_URL", "PIP_CACHE_DIR",
            "XDG_CACHE_HOME", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if ".venv" not in p and "/toolchain/" not in p)
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=300)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def test_a_users_program_runs_the_components_from_the_installed_package(tmp_path: Path) -> None:
    started = time.monotonic()
    source, venv, program = tmp_path / "atlas", tmp_path / "venv", tmp_path / "program"
    copy_of_the_repository(source)  # what a clone has: tracked files, nothing built
    env = _user_env()
    base_python = getattr(sys, "_base_executable", sys.executable)
    _run([base_python, "-m", "venv", str(venv)], tmp_path, env)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
          "-c", str(source / "constraints.txt"), str(source)], tmp_path, env)
    installed = time.monotonic() - started
    shutil.rmtree(source)  # nothing of a checkout left to import from
    shutil.copytree(EXAMPLE, program)
    shutil.copy(RUNNER, tmp_path / "mocked_program.py")

    # The user's cluster, as `oc login` leaves a kubeconfig (the program resolves it; mocks call no API).
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": "https://api.example.org:6443"}}],
        "users": [{"name": "u", "user": {"token": "sha256~not-a-token"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "atlas-example"}}],
    }))
    config = {**CONFIG, "atlas-example:kubeconfig": str(kubeconfig)}
    done = _run([python, "-I", str(tmp_path / "mocked_program.py"), str(program), "atlas-example", "dev"], tmp_path,
                {**env, "PULUMI_CONFIG": json.dumps(config)})
    header, *lines = done.stdout.splitlines()
    where = json.loads(header)
    site = venv / "lib"
    assert Path(where["infra"]).is_relative_to(site), where["infra"]
    assert not [p for p in where["sys_path"] if p and Path(p).resolve().is_relative_to(REPO_ROOT)]
    registered = [json.loads(line) for line in lines]
    named = {(r["type"], r["name"]) for r in registered}
    assert ("atlas:hpc:HpcEnvironment", "cluster") in named
    assert ("atlas:openshift:OpenShiftEnvironment", "kubernetes") in named
    # The Slurm side: the staged files, one BatchJob per step, a wait on the preparation step.
    assert {("pulumi-python:dynamic/hpc:StagedFiles", "cluster-staged-files"),
            ("pulumi-python:dynamic/hpc:BatchJob", "cluster-make"),
            ("pulumi-python:dynamic/hpc:BatchJob", "cluster-count"),
            ("pulumi-python:dynamic/hpc:JobCompletion", "cluster-make-done")} <= named
    # Kubernetes: the namespace, the code's ConfigMap (runtime image) and one Job per step.
    kinds = sorted(r["kind"] for r in registered if r["type"].startswith("kubernetes:"))
    assert {"Namespace", "ConfigMap", "ResourceQuota", "NetworkPolicy"} <= set(kinds)
    assert ("kubernetes:batch/v1:Job", "kubernetes-pipeline-make") in named
    assert ("kubernetes:batch/v1:Job", "kubernetes-pipeline-count") in named
    assert not [r for r in registered if r["type"].startswith("atlas:aws")]

    # The base install: the components import; AWS says which extra it needs; no local environment.
    imports = _run([python, "-I", "-c", "from infra.openshift import OpenShiftEnvironment\n"
                    "from infra.hpc import HpcEnvironment\nprint('ok')"], tmp_path, env)
    assert imports.stdout.strip() == "ok"
    data = _run([python, "-I", "-c", "import infra.compare.cost_files as c, infra.schemas as s\n"
                 "print(c.RATES_FILE.is_file(), s.OPENSHIFT_DOCUMENT.is_file(), s.KUBERNETES_DOCUMENT.is_file())"],
                tmp_path, env)
    assert data.stdout.split() == ["True", "True", "True"]  # the package's data files came along
    aws = _run([python, "-I", "-c", "from infra.aws import AwsEnvironment"], tmp_path, env, check=False)
    assert aws.returncode == 1
    assert aws.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: infra.aws (AwsEnvironment) needs the `aws` extra (boto3 is not installed): "
        "pip install 'atlas-infra[aws]'"
    )
    local = _run([python, "-I", "-c", "import localenv"], tmp_path, env, check=False)
    assert "No module named 'localenv'" in local.stderr
    atlas = str(venv / "bin" / "atlas")
    listing = _run([atlas, "--help"], tmp_path, env).stdout
    assert all(f"    {name} " in listing for name in ("compare", "monitor", "nodes", "workload"))
    check = _run([atlas, "workload", "check", str(program / "workload.yaml"), "--quiet"], tmp_path, env)
    assert "workload 'hello-count': 2 steps" in check.stdout
    report = _run([atlas, "compare", "--help"], tmp_path, env, check=False)
    assert report.returncode == 2 and "needs the `report` extra" in report.stderr

    took = time.monotonic() - started
    print(f"install {installed:.1f} s, in all {took:.1f} s")
    assert took < 120, f"the test took {took:.0f} s (install {installed:.0f} s); it should stay near a minute"
