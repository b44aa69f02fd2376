"""State written by Atlas before issue 29 (commit 303f827) refreshed, updated and destroyed by this
checkout, with no replacement: the old code stands a stack up, the new code takes it over.

The old tree is `git archive`d out of this repository's history and put first on PYTHONPATH, so
the old stack program and the dynamic provider processes of its `up` import the old `infra`
(checked: the old tree's `infra/__init__.py` is made to log every process that imports it).
Then, with the same backend, Pulumi home, passphrase, stack file and workload definitions and
this checkout's program and `infra` (PYTHONPATH gone), every operation that unpickles a provider
the old `up` wrote into state runs on the new code: `refresh` (`read`), `destroy` (`delete`), and
`preview`/`up` (the engine's `diff` and `update`, with the new program's pickles). The
Kubernetes API and the schedulers say what happened, not Pulumi's own view.
"""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import subprocess
import time
import urllib.error
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from io import BytesIO
from pathlib import Path
from typing import Any

import dill
import pytest

from infra.toolchain.pins import REPO_ROOT
from localenv import kube
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_hpc_sections, local_openshift
from tests.e2e.pulumi_cli import satori_ssh as ssh
from tests.support import wait_until

pytestmark = pytest.mark.e2e

# The last commit before issue 29's changes: its state is what stacks in use hold.
OLD_COMMIT = "303f827"
STACK = "local"
HPC_ENVIRONMENTS = ("satori", "satori-slurm")
# What an upgrade must never do to a resource the old code created.
REPLACING_OPS = {"replace", "create-replacement", "delete-replaced", "delete", "discard", "read-replacement"}
# Replaced by design when Atlas's own code in them changes, as on any upgrade that touches that
# file: pulumi-kubernetes replaces a ConfigMap whose data changes (so the Deployment that mounts it
# by its auto-name rolls, an update), and the monitor's holds its app. Nothing of the run is in it.
CODE_CONFIG_MAPS = {"openshift-monitor-app": "infra/openshift/monitor_app.py"}
# Atlas's helper Jobs before the pipeline (making the volumes' folders, staging data), replaced by
# design when Atlas's rendering of their pod template changes (issue 34 hardened it: read-only root,
# a /tmp scratch volume): a Job's template cannot be changed in place. Each is idempotent (`mkdir -p`;
# stage_data.py's marker), so the new one finds its work done; nothing of the run is in them. The
# pipeline's step Jobs, which are the run, are never replaced.
HELPER_PARENT = "atlas:openshift:DataStaging"
# Resources the new code adds beside the old ones by design, and why: nothing of the run is in them.
# The build's completion (issue 34): `up` waits on the Build, not on the ImageStream's tag; created
# over an old stack it finds the build done and reads the same image, so no Job changes.
ADDED_BY_DESIGN = {"pulumi-python:dynamic/openshift:BuildCompletion"}
# The processes that must import the old tree: the stack program (Pulumi's exec script) and the
# dynamic providers' host (the toolchain's plugin launcher runs infra/toolchain/dynamic_host.py).
PROGRAM = "pulumi-language-python-exec"
PROVIDER_HOST = "infra.toolchain.dynamic_host"
# Appended to the old tree's infra/__init__.py: a line per process that imports the old package.
IMPORT_PROBE = """

# Added by tests/e2e/test_state_compat.py: which processes import this (old) tree.
import os as _os
import sys as _sys

if _os.environ.get("ATLAS_COMPAT_IMPORT_LOG"):
    with open(_os.environ["ATLAS_COMPAT_IMPORT_LOG"], "a") as _log:
        _log.write(f"{__file__}\\t{' '.join(_sys.orig_argv)}\\n")
"""


@dataclass
class Upgrade:
    """One project driven by the old code, then by this checkout's."""

    old: PulumiProject  # PYTHONPATH: the old tree first
    new: PulumiProject  # this checkout, nothing of the old tree on any path
    old_tree: Path
    import_log: Path

    def take_new_program(self) -> None:
        """This checkout's Pulumi.yaml and stack program; the stack files (the old stack's
        encryption salt and config) and the workload definitions stay as the old `up` had them."""
        shutil.copy(REPO_ROOT / "Pulumi.yaml", self.new.root / "Pulumi.yaml")
        for item in (REPO_ROOT / "stacks").iterdir():
            if item.is_file() and not (item.name.startswith("Pulumi.") and item.suffix == ".yaml"):
                shutil.copy(item, self.new.root / "stacks" / item.name)

    def imports(self) -> list[tuple[str, str]]:
        """(command line, infra/__init__.py imported) of every process that imported the old tree."""
        if not self.import_log.exists():
            return []
        lines = self.import_log.read_text().splitlines()
        return [(argv, path) for path, argv in (line.split("\t", 1) for line in lines)]


def extract_old_tree(dest: Path) -> Path:
    """The program, package and definitions of OLD_COMMIT, from this clone's history."""
    found = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "--quiet", f"{OLD_COMMIT}^{{commit}}"],
        capture_output=True, text=True, check=False,
    )
    if found.returncode != 0:
        pytest.fail(
            f"commit {OLD_COMMIT} (the last before issue 29) is not in this clone's history: the test stands a "
            "stack up on it. Fetch the whole history (git fetch --unshallow, or a CI clone with fetch-depth 0)"
        )
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", found.stdout.strip(),
         "Pulumi.yaml", "stacks", "workloads", "infra"],
        capture_output=True, check=True,
    )
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    with (dest / "infra" / "__init__.py").open("a") as init:
        init.write(IMPORT_PROBE)
    return dest


@pytest.fixture
def upgrade(tmp_path: Path) -> Iterator[Upgrade]:
    old_tree = extract_old_tree(tmp_path / "old-tree")
    proj = PulumiProject.create(tmp_path, source=old_tree)
    log = tmp_path / "old-imports.log"
    # The new code is this checkout's (isolated_env's PYTHONPATH), the old one the extracted tree.
    new = replace(proj, env={**proj.env, "ATLAS_COMPAT_IMPORT_LOG": str(log), "PYTHONPATH": str(REPO_ROOT)})
    old = replace(new, env={**new.env, "PYTHONPATH": str(old_tree)})
    yield Upgrade(old, new, old_tree, log)


def api(layout: Layout, path: str) -> dict | None:
    try:
        return kube.api_get(layout, path)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def state_resources(proj: PulumiProject) -> list[dict[str, Any]]:
    return json.loads(proj.run("stack", "export", "--show-secrets", "-s", STACK).stdout)["deployment"]["resources"]


def unpickled_globals(resources: list[dict[str, Any]]) -> set[str]:
    """`module.name` of every global the dynamic providers pickled in state refer to, each imported
    here (this checkout) as the provider host does: dill pickles a provider by reference."""
    found: set[str] = set()

    class Recording(dill.Unpickler):  # type: ignore[misc]
        def find_class(self, module: str, name: str) -> Any:
            found.add(f"{module}.{name}")
            return super().find_class(module, name)

    for resource in resources:
        provider = (resource.get("outputs") or {}).get("__provider")
        if isinstance(provider, dict):  # a secret, shown by `stack export --show-secrets`
            provider = json.loads(provider["plaintext"])
        if isinstance(provider, str):
            Recording(BytesIO(base64.b64decode(provider))).load()
    return found


def job_ids(outputs: dict[str, Any], environment: str) -> dict[str, str]:
    return {s["name"]: s["job_id"] for s in outputs["environments"][environment]["steps"]}


def preview_steps(proj: PulumiProject) -> dict[str, list[dict[str, Any]]]:
    """The steps of `pulumi preview --json`, by URN (a replacement is several steps of one URN)."""
    report = json.loads(proj.run("preview", "--json", "-s", STACK).stdout)
    steps: dict[str, list[dict[str, Any]]] = {}
    for step in report.get("steps", []):
        steps.setdefault(step["urn"], []).append(step)
    return steps


def code_rollout(urn: str, steps: list[dict[str, Any]], old_tree: Path) -> bool:
    """A replacement that is the new version's code rolling out: a ConfigMap of CODE_CONFIG_MAPS,
    for its data alone, where that file differs between the old tree and this checkout."""
    code = CODE_CONFIG_MAPS.get(urn.rpartition("::")[2])
    if code is None or "kubernetes:core/v1:ConfigMap::" not in urn:
        return False
    # Property paths: `data` or `data["monitor_app.py"]`.
    reasons = {reason for step in steps for reason in step.get("replaceReasons") or ()}
    data_alone = all(reason == "data" or reason.startswith("data[") for reason in reasons)
    return data_alone and (old_tree / code).read_bytes() != (REPO_ROOT / code).read_bytes()


def helper_rerun(urn: str, steps: list[dict[str, Any]]) -> bool:
    """A replacement of a helper Job under HELPER_PARENT for its pod template alone (or the
    completion that waits on such a Job, which follows it)."""
    parent, _, name = urn.rpartition("::")
    if not parent.rpartition("$")[0].endswith(HELPER_PARENT):
        return False
    if parent.endswith("$pulumi-python:dynamic/openshift:JobCompletion"):
        return name.endswith("-done")
    reasons = {reason for step in steps for reason in step.get("replaceReasons") or ()}
    return (parent.endswith("$kubernetes:batch/v1:Job") and bool(reasons)
            and all(reason.startswith("spec.template.") for reason in reasons))


def test_old_stack_refreshed_updated_destroyed_by_new_code(upgrade, kube_env, satori_env):
    started = time.monotonic()
    run = uuid.uuid4().hex[:6]
    ns, remote = f"atlas-compat-{run}", f"atlas-compat-{run}"
    config = upgrade.old.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, ns)
    local_hpc_sections(config, satori_env, HPC_ENVIRONMENTS, remote)
    upgrade.old.set_stack_config(STACK, config)
    upgrade.old.run("stack", "init", STACK)
    try:
        # --- the old code stands the stack up.
        upgrade.old.run("up", "--yes", "--skip-preview", "-s", STACK)
        imports = upgrade.imports()
        assert any(PROGRAM in argv for argv, _ in imports), imports
        assert any(PROVIDER_HOST in argv for argv, _ in imports), imports
        assert {path for _, path in imports} == {str(upgrade.old_tree / "infra" / "__init__.py")}, imports
        old_imports = len(imports)
        old_outputs = upgrade.old.outputs(STACK)
        old_jobs = {env: job_ids(old_outputs, env) for env in HPC_ENVIRONMENTS}
        old_state = state_resources(upgrade.old)
        old_urns = {r["urn"] for r in old_state}
        # Every resource type Atlas creates on these sides is in the old state.
        types = {r["type"] for r in old_state}
        for wanted in ("pulumi-python:dynamic/hpc:StagedFiles", "pulumi-python:dynamic/hpc:BatchJob",
                       "pulumi-python:dynamic/hpc:JobCompletion", "pulumi-python:dynamic/openshift:JobCompletion",
                       "kubernetes:batch/v1:Job", "kubernetes:image.openshift.io/v1:ImageStream",
                       "kubernetes:build.openshift.io/v1:BuildConfig", "atlas:hpc:HpcEnvironment",
                       "atlas:openshift:OpenShiftEnvironment"):
            assert wanted in types, (wanted, sorted(types))
        # What the old state's pickles name, each importable from this checkout.
        pickled = unpickled_globals(old_state)
        assert "infra.hpc.providers.BatchJobProvider" in pickled, pickled
        jobs_before = len(ssh(satori_env, "squeue -h -t all -o %i").split())

        # --- this checkout takes it over.
        upgrade.take_new_program()
        new = upgrade.new
        # Refresh reads every resource through the providers the old `up` pickled.
        new.run("refresh", "--yes", "-s", STACK)
        assert {r["urn"] for r in state_resources(new)} == old_urns, "refresh lost or added resources"
        assert job_ids(new.outputs(STACK), "satori") == old_jobs["satori"]

        steps = preview_steps(new)
        ops = {urn: sorted({step["op"] for step in urn_steps}) for urn, urn_steps in steps.items()}
        replacing = {urn: {"ops": op, "why": [{k: v for k, v in step.items() if k.endswith("Reasons")}
                                              for step in steps[urn]]}
                     for urn, op in ops.items()
                     if REPLACING_OPS & set(op) and not code_rollout(urn, steps[urn], upgrade.old_tree)}
        helpers = {urn for urn in replacing if helper_rerun(urn, steps[urn])}
        replacing = {urn: why for urn, why in replacing.items() if urn not in helpers}
        assert not replacing, f"the new code replaces or deletes what the old one made: {replacing}"
        # A replaced helper Job is followed by its completion, and a completion only by its Job.
        helper_jobs = {urn.rpartition("::")[2] for urn in helpers if "$kubernetes:batch/v1:Job::" in urn}
        helper_waits = {urn.rpartition("::")[2].removesuffix("-done") for urn in helpers if urn.endswith("-done")}
        assert helper_waits <= helper_jobs, f"a helper's completion replaced without its Job: {helpers}"
        created = {urn for urn, op in ops.items() if op == ["create"]}
        added = {urn for urn in created if urn.rpartition("::")[0].rpartition("$")[2] in ADDED_BY_DESIGN}
        assert not created - added, f"new resources beside the old ones (a changed type, name or parent?): {created}"
        assert len(added) == len(ADDED_BY_DESIGN), (added, ADDED_BY_DESIGN)

        new.run("up", "--yes", "--skip-preview", "-s", STACK)
        new.run("preview", "--expect-no-changes", "-s", STACK)
        new_outputs = new.outputs(STACK)
        for env in HPC_ENVIRONMENTS:
            assert job_ids(new_outputs, env) == old_jobs[env], f"{env}: jobs resubmitted"
        assert {s["job"] for s in new_outputs["environments"]["openshift"]["steps"]} == {
            s["job"] for s in old_outputs["environments"]["openshift"]["steps"]
        }
        assert len(ssh(satori_env, "squeue -h -t all -o %i").split()) == jobs_before, "nothing resubmitted"
        assert_helpers_found_their_work_done(kube_env, ns, helper_jobs)
        assert {r["urn"] for r in state_resources(new)} == old_urns | added

        staged = staged_paths(old_state) | staged_paths(state_resources(new))
        new.run("destroy", "--yes", "-s", STACK)
        assert len(upgrade.imports()) == old_imports, "the new code imported the old tree"
        wait_until(lambda: api(kube_env, f"/api/v1/namespaces/{ns}") is None, f"namespace {ns} to go", 60)
        assert_hpc_gone(satori_env, remote, old_jobs, staged)
    finally:
        upgrade.new.run("destroy", "--yes", "-s", STACK, check=False)
        upgrade.new.run("stack", "rm", "--yes", "-s", STACK, check=False)
        ssh(satori_env, f"rm -rf ~/{remote}")
    changes = {urn.rpartition("::")[2]: "/".join(op) for urn, op in ops.items() if op != ["same"]}
    print(f"state compatibility, every side: {time.monotonic() - started:.0f} s; the new code's preview: {changes}")


def test_old_hpc_stack_destroyed_by_new_code(upgrade, satori_env):
    """The old pickles' `delete` itself, on the new code: no `up` in between to replace them."""
    started = time.monotonic()
    remote = f"atlas-compat-{uuid.uuid4().hex[:6]}"
    config = upgrade.old.stack_config(STACK)
    config["atlas:openshift"] = {**config["atlas:openshift"], "enabled": False}
    local_hpc_sections(config, satori_env, HPC_ENVIRONMENTS, remote)
    upgrade.old.set_stack_config(STACK, config)
    upgrade.old.run("stack", "init", STACK)
    try:
        upgrade.old.run("up", "--yes", "--skip-preview", "-s", STACK)
        assert any(PROVIDER_HOST in argv for argv, _ in upgrade.imports())
        old_imports = len(upgrade.imports())
        old_jobs = {env: job_ids(upgrade.old.outputs(STACK), env) for env in HPC_ENVIRONMENTS}
        staged = staged_paths(state_resources(upgrade.old))

        upgrade.take_new_program()
        upgrade.new.run("destroy", "--yes", "-s", STACK)
        assert len(upgrade.imports()) == old_imports, "the new code imported the old tree"
        assert_hpc_gone(satori_env, remote, old_jobs, staged)
    finally:
        upgrade.new.run("destroy", "--yes", "-s", STACK, check=False)
        upgrade.new.run("stack", "rm", "--yes", "-s", STACK, check=False)
        ssh(satori_env, f"rm -rf ~/{remote}")
    print(f"state compatibility, old HPC stack destroyed: {time.monotonic() - started:.0f} s")


def assert_helpers_found_their_work_done(kube_env: Layout, ns: str, helper_jobs: set[str]) -> None:
    """Each replaced helper Job ran again and succeeded; a staging one found its data in place
    (stage_data.py's marker) and copied nothing."""
    jobs = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    by_resource = {name: [j for j in jobs if j["metadata"]["name"].startswith(f"{name}-")] for name in helper_jobs}
    for name, found in by_resource.items():
        assert len(found) == 1, f"{name}: the old Job and its replacement both left, or none: {found}"
        (job,) = found
        assert job["status"].get("succeeded"), (name, job["status"])
        if not name.endswith("-volumes"):
            log = kube.kubectl(kube_env, "logs", "-n", ns, f"job/{job['metadata']['name']}")
            assert "already holds" in log, (name, log)


def staged_paths(resources: list[dict[str, Any]]) -> set[str]:
    """What every StagedFiles resource in state put on the login node (relative to the login home)."""
    return {path for r in resources if r["type"] == "pulumi-python:dynamic/hpc:StagedFiles"
            for path in r["outputs"]["staged_paths"]}


def assert_hpc_gone(satori_env: Layout, remote: str, old_jobs: dict[str, dict[str, str]], staged: set[str]) -> None:
    """Every job the old `up` submitted retired by `delete` (none left pending or running) and
    every staged file removed."""
    ids = [job_id for jobs in old_jobs.values() for job_id in jobs.values()]
    live = ssh(satori_env, "squeue -h -t pending,running -o %i -j " + ",".join(ids)).split()
    assert not live, f"jobs left pending or running after destroy: {live}"
    for env, jobs in old_jobs.items():
        retired = ssh(satori_env, f"cat ~/{remote}/{STACK}/{env}/probe/.atlas/retired-jobs")
        assert {line.split()[0] for line in retired.splitlines()} == set(jobs.values()), (env, retired)
    assert staged
    quoted = " ".join(shlex.quote(p) for p in sorted(staged))
    left = ssh(satori_env, f"for p in {quoted}; do test -e \"$p\" && echo \"$p\"; done; true").split()
    assert not left, f"staged files left after destroy: {left}"
