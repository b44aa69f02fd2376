"""`atlas doctor` against the local environment: the `local` and `local-hybrid` stacks (the local
Satori under Slurm and the LSF stand-in over SSH, the local Kubernetes node, moto) all `ok`; each
broken variant one FAIL line naming its fix (a queue that does not exist, a GPU request larger than
any node, a storage class that does not exist, an instance type the region does not offer, a
namespace the user may not create, a login expired); and the local site as a researcher reaches it (a bastion, the
key in an agent, a login node that asks a code used through a master connection, a project's
ServiceAccount through an `oc login` context of a merged KUBECONFIG): what the lead's end-to-end
test runs. Nothing is created: no namespace, no job.

The command runs as users run it (`python -m infra.cli doctor`, what scripts/doctor calls), with
the real pulumi CLI reading the stack's config from a file backend of the test's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.kubeapi import KubeAuthError
from infra.toolchain.pins import REPO_ROOT
from localenv import kube, kube_user, satori, site
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_hpc_sections, local_openshift, satori_ssh
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]

HPC = ("satori", "satori-slurm")
# An instance type moto offers in us-east-1 (its offerings are AWS's own, and AWS offers no
# p3.8xlarge there any more: the broken variant below).
OFFERED_TYPE = "p4d.24xlarge"


def doctor(proj: PulumiProject, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`atlas doctor` as scripts/doctor runs it, in the project's folder."""
    return subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "python"), "-m", "infra.cli", "doctor", *args],
        cwd=proj.root, env={**proj.env, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        capture_output=True, text=True, timeout=300, check=False,
    )


def lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return done.stdout.splitlines()


def fails(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in lines(done) if line.startswith("FAIL ")]


def namespace_exists(layout: Layout, name: str) -> bool:
    try:
        kube.api_get(layout, f"/api/v1/namespaces/{name}")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise
    return True


@pytest.fixture
def project(
    tmp_path: Path, kube_env: Layout, satori_env: Layout, moto_env: Layout
) -> Iterator[tuple[PulumiProject, str, str]]:
    """A copy of the project whose `local` and `local-hybrid` stacks point at this local
    environment; local-hybrid in the backend with its AWS keys as secrets, local not (read as
    written: doctor runs before `pulumi stack init` too)."""
    proj = PulumiProject.create(tmp_path)
    run = uuid.uuid4().hex[:6]
    for stack in ("local", "local-hybrid"):
        config = proj.stack_config(stack)
        config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, f"atlas-doctor-{run}")
        local_hpc_sections(config, satori_env, HPC, f"atlas-doctor-{run}")
        if "atlas:aws" in config:
            config["atlas:aws"] = {**config["atlas:aws"], "endpoint_url": moto_env.moto_url,
                                   "instance_type": OFFERED_TYPE}
        proj.set_stack_config(stack, config)
    proj.run("stack", "init", "local-hybrid")
    key_id = "AKIAIOSFODNN7EXAMPLE"
    proj.run("config", "set", "--secret", "--path", "atlas:aws.access_key_id", key_id, "-s", "local-hybrid")
    secret = "doctor-secret-" + uuid.uuid4().hex
    proj.run("config", "set", "--secret", "--path", "atlas:aws.secret_access_key", secret, "-s", "local-hybrid")
    yield proj, secret, run
    proj.run("stack", "rm", "--yes", "-s", "local-hybrid", check=False)


def test_the_local_stacks_are_all_ok_and_nothing_is_created(
    project: tuple[PulumiProject, str, str], kube_env: Layout, satori_env: Layout
) -> None:
    proj, secret, run = project
    jobs_before = satori_ssh(satori_env, "squeue -h -u atlas -o %i | sort")
    done = doctor(proj, "-s", "local-hybrid")
    print(done.stdout, done.stderr)  # docs/troubleshooting.md's example is taken from this run
    assert done.returncode == 0, done.stdout + done.stderr
    body = lines(done)[:-1]
    assert body and all(line.startswith("ok   ") for line in body), done.stdout
    checks = {(line.split()[1], line.split()[2].rstrip(":")) for line in body}
    assert checks == {
        *{(env, c) for env in HPC for c in ("ssh", "scheduler", "queue", "gpu-request", "work-dir")},
        *{("openshift", c) for c in ("api", "login", "namespace", "quota", "storage-class", "gpu-label", "registry")},
        *{("aws", c) for c in ("credentials", "region", "instance-type")},
    }
    text = done.stdout
    port = satori.status(satori_env)["ssh"]["port"]
    assert f"satori-slurm  ssh: logged in to atlas@127.0.0.1 directly (atlas@127.0.0.1:{port})" in text
    assert "satori-slurm  gpu-request: train (1 node x 1 GPU, 1 CPU, 2048M, 00:30:00) would start at " in text
    assert "satori        gpu-request: step train asks for 1 node(s) x 1 GPUs: " in text
    assert "satori        queue: queue 'normal' is Open:Active" in text
    assert "openshift     storage-class: the claims' StorageClasses exist (data: atlas-local;" in text
    assert "openshift     registry: image.openshift.io/v1 and build.openshift.io/v1 served" in text
    assert "aws           credentials: accepted at " in text and "(from secret config atlas:aws.access_key_id" in text
    assert lines(done)[-1].startswith("stack local-hybrid: 4 environment(s), 20 ok, 0 failed, 0 skipped")
    assert secret not in done.stdout + done.stderr
    # Nothing was made: no namespace, no job (sbatch --test-only submits none), no run folder.
    assert not namespace_exists(kube_env, f"atlas-doctor-{run}")
    assert satori_ssh(satori_env, "squeue -h -u atlas -o %i | sort") == jobs_before
    assert satori_ssh(satori_env, f"ls -d atlas-doctor-{run} 2>/dev/null || true").strip() == ""

    # The local stack, not yet in the backend: read as written, the same checks less AWS's.
    plain = doctor(proj, "-s", "local", "--json")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "reading " in plain.stderr and "as written" in plain.stderr
    report = json.loads(plain.stdout)
    assert report["ok"] is True and set(report["environments"]) == {"openshift", *HPC}
    assert all(c["status"] == "ok" for e in report["environments"].values() for c in e["checks"])


def test_each_broken_variant_is_one_fail_line_naming_its_fix(project: tuple[PulumiProject, str, str]) -> None:
    proj, _secret, _run = project
    config = proj.stack_config("local-hybrid")
    broken = json.loads(json.dumps(config))
    broken["atlas:hpc"]["satori-slurm"]["queue"] = "nosuch"
    broken["atlas:openshift"]["storage"] = {**broken["atlas:openshift"]["storage"], "class": "gold"}
    broken["atlas:aws"]["instance_type"] = "p3.8xlarge"
    proj.set_stack_config("local-hybrid", broken)
    done = doctor(proj, "-s", "local-hybrid")
    assert done.returncode == 1, done.stdout + done.stderr
    assert sorted(line.split()[1] + " " + line.split()[2] for line in fails(done)) == [
        "aws instance-type:", "openshift storage-class:", "satori-slurm queue:"
    ], done.stdout
    text = done.stdout
    assert "partition 'nosuch' does not exist (sinfo lists " in text
    assert "fix: set atlas:hpc.satori-slurm.queue to one of them" in text
    assert "skip satori-slurm  gpu-request: not checked (needs: queue)" in text
    assert "StorageClass 'gold' (atlas:openshift.storage.class) does not exist (the cluster has " in text
    assert "p3.8xlarge is not offered in us-east-1" in text and "or another atlas:aws.instance_type" in text

    # A GPU request larger than any node: the train step asking 8 GPUs (the local nodes have 4).
    proj.set_stack_config("local-hybrid", config)
    definition = proj.root / "workloads" / "probe" / "workload.yaml"
    workload = yaml.safe_load(definition.read_text())
    for step in workload["steps"]:
        if step["name"] == "train":
            step["resources"]["gpus_per_node"] = 8
    definition.write_text(yaml.safe_dump(workload, sort_keys=False))
    greedy = doctor(proj, "-s", "local-hybrid")
    assert greedy.returncode == 1
    assert sorted(line.split()[1] + " " + line.split()[2] for line in fails(greedy)) == [
        "openshift gpu-label:", "satori gpu-request:", "satori-slurm gpu-request:"
    ], greedy.stdout
    text = greedy.stdout
    # Slurm 22.05's own words for --test-only: `sbatch: error: allocation failure: Requested node configuration ...`.
    assert "Slurm refuses it: allocation failure: Requested node configuration is not available" in text
    assert "fix: no node of the partition has what train asks: lower it (overrides.satori-slurm.train.resources" in text
    assert "no available host offers 8 GPUs (the most: 4," in text
    assert "but the most GPUs one offers is 4; step train asks for 8" in text


# --- the local site, as a researcher reaches it ------------------------------------------------------


@pytest.fixture
def local_site(site_env: Layout) -> Iterator[dict[str, Any]]:
    """The bastion, the agent, the ssh config (localenv/site.py, tests/conftest.py's `site_env`)
    beside this local Satori, and the master connection to the login node that asks a code, opened
    as its user opens it."""
    site.open_master(site_env)
    try:
        yield site.status(site_env)
    finally:
        site.close_master(site_env)


def test_through_the_local_site_with_a_projects_user(
    tmp_path: Path, kube_env: Layout, satori_env: Layout, local_site: dict[str, Any]
) -> None:
    user = kube_user.ensure_project_user(kube_env)
    kubeconfig = kube_user.write_user_kubeconfig(kube_env, user, tmp_path / "kube")
    proj = PulumiProject.create(tmp_path)
    local = proj.stack_config("local")
    config = {
        "atlas:workload": "probe",
        "atlas:runId": "1",
        "atlas:hpc": {
            "satori-site": site.stack_section(satori_env, "slurm"),
            "satori-site-mfa": site.stack_section(satori_env, "lsf", mfa=True),
        },
        "atlas:openshift": kube_user.openshift_section(
            local_openshift(local["atlas:openshift"], kube_env, user.namespace), user, kubeconfig
        ),
    }
    proj.set_stack_config("local-site", config)
    env = {**local_site["env"], "KUBECONFIG": kubeconfig.kubeconfig_env}
    done = doctor(proj, "-s", "local-site", env=env)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    assert "satori-site      ssh: logged in to atlas@satori-site through jump host atlas-bastion (" in text
    mastered = "satori-site-mfa  ssh: logged in to atlas@satori-site-mfa through the master connection (ControlPath) "
    assert mastered in text
    assert f"openshift        login: logged in as {user.username} (token, context '{kubeconfig.context}')" in text
    assert f"openshift        namespace: namespace '{user.namespace}' " in text
    # What a project's user may not read is skipped, saying why, never failed.
    assert f"skip openshift        gpu-label: {user.username} may not list nodes (cluster-wide)" in text
    assert f"skip openshift        storage-class: {user.username} may not list StorageClasses" in text
    assert not fails(done)

    # Broken: a namespace the user may not create; the agent empty; a context that is not there.
    created = {**config, "atlas:openshift": {**config["atlas:openshift"], "namespace": "atlas-doctor-new",
                                             "project": {"create": True}, "quota": {"manage": True}}}
    proj.set_stack_config("local-site", created)
    refused = doctor(proj, "-s", "local-site", env=env)
    assert refused.returncode == 1
    (line,) = fails(refused)
    assert line.startswith(f"FAIL openshift        namespace: {user.username} may not create namespaces cluster-wide")
    assert "fix: atlas:openshift.project.create: set it to false and `namespace` to the project made for you" in line
    proj.set_stack_config("local-site", config)
    empty = doctor(proj, "-s", "local-site", env={**env, "SSH_AUTH_SOCK": local_site["empty_agent_socket"]})
    (line,) = fails(empty)  # the code-asking node still answers through its master connection
    assert line.startswith("FAIL satori-site      ssh: atlas:hpc.satori-site: no key to log in to jump host ")
    assert "ssh-add" in line
    missing = doctor(proj, "-s", "local-site", "--context", "nope/api:6443/me", env=env)
    (line,) = fails(missing)
    assert line.startswith("FAIL openshift        api: --context: context 'nope/api:6443/me' is not in KUBECONFIG")
    # The login expired (the token revoked, as an expired or logged-out one is refused): one line saying to log in.
    kube_user.revoke(kube_env, user)

    def refused() -> bool:
        try:
            kube_user.user_api(kube_env, user).whoami()
        except KubeAuthError:
            return True
        return False

    try:
        # The API server may accept a token it has just accepted a few seconds more (its token cache).
        wait_until(refused, "the API server to refuse the revoked token", 30)
        expired = doctor(proj, "-s", "local-site", env=env)
    finally:
        kube_user.ensure_project_user(kube_env)
    assert len(fails(expired)) == 1, expired.stdout
    (line,) = fails(expired)
    assert line.startswith(f"FAIL openshift        login: the API server {kube_env.api_url} refused the credentials")
    assert line.endswith(f"; fix: log in again: `oc login --server={kube_env.api_url}`")
    assert "skip openshift        namespace: not checked (needs: login)" in expired.stdout
    assert not namespace_exists(kube_env, "atlas-doctor-new")
    assert os.environ.get("SSH_AUTH_SOCK") != local_site["agent_socket"]  # this process's agent never changed
