"""The whole user path against the local site, end to end: a researcher with a project on an
OpenShift cluster and an account on an HPC site behind a bastion stands a stack up, compares,
watches and destroys it with their own SSH setup, their `oc login` context and their own Pulumi
backend, each command run in their shell as they type it.

The user (all of it under a HOME of their own, the local site's: localenv/site.py):
- `~/.ssh/config` names the login node by a `Host` alias behind a bastion (`ProxyJump`), and a
  second login node that asks a code after the key, reached through a master connection opened
  beforehand (`site.open_master`, the code typed through SSH_ASKPASS); the key is only in their
  ssh-agent (no key file named anywhere); the hosts' keys in `~/.ssh/known_hosts`;
- `KUBECONFIG` lists two files, `~/.kube/config` (current context: a dead server) and
  `~/.kube/openshift` (what `oc login` wrote: `atlas-probe/127-0-0-1:<port>/system:serviceaccount:...`),
  whose credential is a ServiceAccount token with only the project's rights (no cluster-admin);
  the project was made beforehand (`project.create: false`, `quota.manage: false`);
- their Pulumi backend is a `file://` folder and their passphrase a file, both outside the
  repository (`PULUMI_BACKEND_URL`, `PULUMI_CONFIG_PASSPHRASE_FILE`), kept by `scripts/activate`,
  which every command of theirs sources first.
The stack is `stacks/Pulumi.local-site.yaml` as checked in (both logins: Slurm through the bastion
with the agent, LSF's commands on the login node that asks a code) plus the OpenShift section that
user writes (`kube_user.openshift_section`). One stack names both logins, so one `pulumi up` and
one `pulumi destroy` carry both SSH variants: cheaper than a second stack, and the second factor
then goes through compare, monitor and nodes too.

Green, in order: `scripts/doctor`, `pulumi preview`, `pulumi up`, `scripts/compare` (the report
written, every side's steps read), `scripts/monitor --once`, `scripts/nodes`, `pulumi destroy`
(nothing of the run left: no job on the site, no object of the run in the project). Then each
broken variant (agent empty, bastion down, alias unknown, context missing, token expired,
backend unreachable) at the first command a user runs (`pulumi preview` and/or `scripts/doctor`),
ending in one line that names the fix, never a traceback; nothing is created by them.

The template for one's own site (`stacks/Pulumi.my-site.yaml`, issue 31), its placeholders filled
with the local site's values (the project, the `oc login` context, the StorageClass, the GPU label,
the Git daemon and base image, Slurm through the bastion's alias) as a user fills them, passes
`pulumi preview` in the same user's shell.

`scripts/doctor` (issue 30, item 5) is tested against its contract: exit 0 when every check is
ok, 1 when any fails; one line per check, `ok|FAIL|skip <env> <check>: <what>[; fix: <fix>]`.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
import time
import urllib.error
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.toolchain.pins import REPO_ROOT, cache_root
from localenv import kube, kube_user, site
from localenv.layout import Layout
from localenv.procs import Daemon
from tests.e2e.pulumi_cli import PulumiProject, bash, local_openshift, satori_ssh, shell_env
from tests.support import ProjectUserSite, closed_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("root")]

STACK = "site-user"
LOGIN, LOGIN_MFA = "satori-site", "satori-site-mfa"
HPC = (LOGIN, LOGIN_MFA)
ENVIRONMENTS = ("openshift", *HPC)
STEPS = ("make-hdf5", "inception-moments", "train")
PASSPHRASE = "the-team-s-passphrase-in-a-file-of-their-own"
# The contract of `scripts/doctor`'s lines (issue 30, item 5), columns padded with spaces; after
# them one summary line, `stack <stack>: ...`.
DOCTOR_LINE = re.compile(r"^(?P<status>ok|FAIL|skip)\s+(?P<env>\S+)\s+(?P<check>[^:\s]+): (?P<text>.+)$")
# The namespaced kinds a run creates in the project (or could): none labelled with the stack after destroy.
RUN_KINDS = (
    "/api/v1/namespaces/{ns}/pods",
    "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    "/api/v1/namespaces/{ns}/configmaps",
    "/api/v1/namespaces/{ns}/services",
    "/api/v1/namespaces/{ns}/serviceaccounts",
    "/api/v1/namespaces/{ns}/secrets",
    "/apis/apps/v1/namespaces/{ns}/deployments",
    "/apis/batch/v1/namespaces/{ns}/jobs",
    "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "/apis/image.openshift.io/v1/namespaces/{ns}/imagestreams",
    "/apis/build.openshift.io/v1/namespaces/{ns}/buildconfigs",
    "/apis/build.openshift.io/v1/namespaces/{ns}/builds",
)

Completed = subprocess.CompletedProcess[str]


@dataclass
class UserSite:
    """The user, their shell and their stack; `started` is when the module's set-up began."""

    layout: Layout
    user: kube_user.ProjectUser
    kubeconfig: kube_user.UserKubeconfig
    home: Path
    project: Path  # the user's Pulumi project (a copy of this repository's: Pulumi.yaml, stacks/, workloads/)
    backend: Path
    env: dict[str, str]  # the user's shell before `source scripts/activate`
    remote: str  # the stack's remote_work_dir on the login node
    started: float = field(default_factory=time.monotonic)

    @property
    def stack_file(self) -> Path:
        return self.project / "stacks" / f"Pulumi.{STACK}.yaml"

    def progress(self, what: str) -> None:
        print(f"user path {time.monotonic() - self.started:7.1f}s  {what}", flush=True)

    def shell(self, command: str, env: dict[str, str] | None = None, timeout: float = 600) -> Completed:
        """`command` typed into the user's shell after `source scripts/activate`, in their project."""
        script = f"source {REPO_ROOT}/scripts/activate >/dev/null 2>&1 && {command}"
        return bash(script, {**self.env, **(env or {})}, cwd=self.project, timeout=timeout)

    def pulumi(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> Completed:
        done = self.shell(f"pulumi {shlex.join(args)} --non-interactive -s {STACK}", env)
        if check and done.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def script(self, name: str, *args: str, env: dict[str, str] | None = None) -> Completed:
        """One of Atlas's commands (scripts/doctor, compare, monitor, nodes) on the stack."""
        return self.shell(f"{REPO_ROOT}/scripts/{name} -s {STACK} {shlex.join(args)}", env)

    @contextlib.contextmanager
    def stack_config_changed(self, change: Callable[[dict[str, Any]], None]) -> Iterator[None]:
        """The stack file with `change` applied to its config (as the user mistyped it), then restored."""
        before = self.stack_file.read_text()
        document = yaml.safe_load(before)
        change(document["config"])
        self.stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
        try:
            yield
        finally:
            self.stack_file.write_text(before)


def admin_get(layout: Layout, path: str) -> dict[str, Any] | None:
    """What the cluster's admin sees (the test's own eyes, not the user's)."""
    try:
        return kube.api_get(layout, path)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def objects_of_the_run(layout: Layout, namespace: str, stack: str = STACK) -> list[str]:
    """Every object in the project labelled with the stack, as kind/name; and any job or pod at all."""
    left = []
    for template in RUN_KINDS:
        path = template.format(ns=namespace)
        labelled = admin_get(layout, f"{path}?labelSelector=atlas.dev/stack%3D{stack}") or {"items": []}
        left += [f"{path.rsplit('/', 1)[1]}/{o['metadata']['name']}" for o in labelled["items"]]
        if path.endswith(("/jobs", "/pods", "/persistentvolumeclaims")):
            everything = admin_get(layout, path) or {"items": []}
            left += [f"{path.rsplit('/', 1)[1]}/{o['metadata']['name']} (unlabelled)" for o in everything["items"]
                     if (o["metadata"].get("labels") or {}).get("atlas.dev/stack") != stack]
    return sorted(set(left))


@pytest.fixture(scope="module")
def user_site(
    kube_env: Layout, site_env: Layout, project_user: ProjectUserSite, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UserSite]:
    assert kube_env.state_dir == site_env.state_dir, "the cluster and the site are one local environment"
    started = time.monotonic()
    layout, user = site_env, project_user.user
    tmp = tmp_path_factory.mktemp("user-path")
    home = Path(site.status(layout)["home"])
    # `oc login` left the project's context in a second file; the first is an older login's.
    kubeconfig = kube_user.write_user_kubeconfig(layout, user, home / ".kube")
    # The team's backend and passphrase: outside the repository, chosen by the user.
    backend = tmp / "team-state"
    backend.mkdir()
    passphrase = tmp / "secrets" / "passphrase"
    passphrase.parent.mkdir(mode=0o700)
    passphrase.write_text(PASSPHRASE + "\n")
    passphrase.chmod(0o600)
    project = PulumiProject.create(tmp).root
    env = shell_env(
        tmp,
        HOME=str(home),
        SSH_AUTH_SOCK=site.status(layout)["env"]["SSH_AUTH_SOCK"],
        KUBECONFIG=kubeconfig.kubeconfig_env,
        PULUMI_BACKEND_URL=f"file://{backend}",
        PULUMI_CONFIG_PASSPHRASE_FILE=str(passphrase),
        ATLAS_CACHE=str(cache_root()),  # the toolchain this machine built (the user's HOME is theirs)
    )
    remote = f"atlas-user-path-{uuid.uuid4().hex[:6]}"
    ctx = UserSite(layout, user, kubeconfig, home, project, backend, env, remote, started)
    ctx.progress(f"set up: HOME {home}, KUBECONFIG {kubeconfig.kubeconfig_env}, backend {backend}")

    activated = bash(f"source {REPO_ROOT}/scripts/activate", env, cwd=project)
    assert activated.returncode == 0, activated.stderr
    assert activated.stderr.splitlines() == [
        f"atlas: Pulumi backend file://{backend} (PULUMI_BACKEND_URL); secrets: the passphrase file {passphrase} "
        "(PULUMI_CONFIG_PASSPHRASE_FILE)"
    ]
    ctx.pulumi("stack", "init")
    # The stack as its user writes it: the checked-in local-site stack (nothing of SSH but the
    # aliases) with a run folder of its own, and the OpenShift section of the project's user.
    written = yaml.safe_load((project / "stacks" / "Pulumi.local-site.yaml").read_text())["config"]
    local = yaml.safe_load((project / "stacks" / "Pulumi.local.yaml").read_text())["config"]
    document = yaml.safe_load(ctx.stack_file.read_text()) or {}
    document["config"] = {
        **written,
        "atlas:hpc": {name: {**section, "remote_work_dir": remote} for name, section in written["atlas:hpc"].items()},
        "atlas:openshift": kube_user.openshift_section(
            local_openshift(local["atlas:openshift"], layout, user.namespace), user, kubeconfig
        ),
    }
    ctx.stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    assert set(document["config"]["atlas:hpc"]) == set(HPC)
    text = ctx.stack_file.read_text()
    assert "kubeconfig" not in text and "private_key" not in text and "known_hosts" not in text
    assert user.token not in text
    # The second factor: the user opened the master connection once, answering the code.
    site.open_master(layout)
    ctx.progress("master connection to the login node that asks a code opened")
    yield ctx
    ctx.progress("tearing down")
    ctx.pulumi("destroy", "--yes", "--skip-preview", check=False)
    ctx.pulumi("stack", "rm", "--yes", check=False)
    site.close_master(layout)
    satori_ssh(layout, f"rm -rf ~/{remote}")


# --- scripts/doctor's lines -----------------------------------------------------------------------


def doctor_lines(done: Completed) -> list[re.Match[str]]:
    """The doctor's lines, each checked against the contract; never a traceback."""
    text = done.stdout + done.stderr
    assert "Traceback" not in text, text
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"scripts/doctor printed nothing (exit {done.returncode}): {done.stderr}"
    if lines[-1].startswith(f"stack {STACK}: "):
        lines.pop()  # the summary
    parsed = [DOCTOR_LINE.match(line) for line in lines]
    assert all(parsed), f"lines outside `ok|FAIL|skip <env> <check>: ...`:\n{text}"
    return [m for m in parsed if m is not None]


def test_doctor_finds_every_check_ok_before_anything_is_made(user_site: UserSite) -> None:
    user_site.progress("scripts/doctor")
    done = user_site.script("doctor")
    lines = doctor_lines(done)
    failed = [m.group(0) for m in lines if m["status"] == "FAIL"]
    assert done.returncode == 0 and not failed, done.stdout + done.stderr
    ok = {m["env"] for m in lines if m["status"] == "ok"}
    assert set(ENVIRONMENTS) <= ok, f"an environment with no check ok: {done.stdout}"
    assert objects_of_the_run(user_site.layout, user_site.user.namespace) == [], "the doctor touches nothing"


# --- the green path ---------------------------------------------------------------------------------


def test_preview_up_compare_monitor_nodes_destroy_as_the_user(user_site: UserSite, tmp_path: Path) -> None:
    layout, ns = user_site.layout, user_site.user.namespace

    user_site.progress("pulumi preview")
    preview = user_site.pulumi("preview", "--diff").stdout
    assert "#SBATCH --job-name=atlas-train-" in preview and "#BSUB -J atlas-train-" in preview, preview
    assert "kubernetes:batch/v1:Job" in preview
    assert objects_of_the_run(layout, ns) == [], "preview must create nothing"

    user_site.progress("pulumi up")
    user_site.pulumi("up", "--yes", "--skip-preview")
    outputs = json.loads(user_site.pulumi("stack", "output", "--json").stdout)
    envs = outputs["environments"]
    assert set(envs) == set(ENVIRONMENTS)
    assert (envs["openshift"]["namespace"], envs["openshift"]["api_url"]) == (ns, layout.api_url)
    for name in HPC:
        assert envs[name]["host"] == name, envs[name]  # the alias, as the user wrote it
        assert [s["name"] for s in envs[name]["steps"]] == list(STEPS)
    # The state is in the user's own backend, and holds no secret of theirs.
    assert (user_site.backend / ".pulumi" / "stacks" / "atlas" / f"{STACK}.json").is_file()
    state = user_site.pulumi("stack", "export").stdout
    assert user_site.user.token not in state and "PRIVATE KEY" not in state
    assert user_site.env["SSH_AUTH_SOCK"] not in state and PASSPHRASE not in state
    # What the sides report is what they hold: the project's Jobs, the scheduler's jobs.
    jobs = admin_get(layout, f"/apis/batch/v1/namespaces/{ns}/jobs") or {"items": []}
    assert {s["job"] for s in envs["openshift"]["steps"]} <= {j["metadata"]["name"] for j in jobs["items"]}
    job_ids = [s["job_id"] for name in HPC for s in envs[name]["steps"]]
    listed = satori_ssh(layout, "squeue -h -t all -o %i -j " + ",".join(job_ids)).split()
    assert sorted(listed) == sorted(job_ids)

    user_site.progress("scripts/compare (waiting for every step at the site's pace)")
    compare = user_site.script("compare", "--wait", "300", "--out", str(tmp_path / "report"))
    assert compare.returncode == 0, compare.stdout + compare.stderr
    assert "Traceback" not in compare.stderr and "still unfinished" not in compare.stderr, compare.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    read = {e["name"]: e for e in report["environments"]}
    assert set(read) == set(ENVIRONMENTS)
    for name, env in read.items():
        assert sorted(s["step"] for s in env["steps"]) == sorted(STEPS), (name, env["notes"])
        assert not any("not collected" in note for note in env["notes"]), (name, env["notes"])
    for name in HPC:
        assert {s["job"] for s in read[name]["steps"]} == {s["job_id"] for s in envs[name]["steps"]}

    user_site.progress("scripts/monitor --once")
    monitor = user_site.script("monitor", "--once", "--json")
    assert monitor.returncode == 0, monitor.stderr
    snapshot = json.loads(monitor.stdout)
    seen = {e["name"]: e for e in snapshot["environments"]}
    assert set(seen) == set(ENVIRONMENTS)
    for name, env in seen.items():
        assert not env["error"], (name, env["error"])
        assert [s["name"] for s in env["steps"]] == list(STEPS), (name, env["steps"])
    for name in HPC:
        assert [s["job"] for s in seen[name]["steps"]] == [s["job_id"] for s in envs[name]["steps"]]
        assert seen[name]["nodes"], name
    assert snapshot["interval_s"] == 2.0  # the site's poll_interval_seconds, not a guess

    user_site.progress("scripts/nodes")
    nodes = user_site.script("nodes", "--json")
    assert nodes.returncode == 0, nodes.stderr
    assert json.loads(nodes.stdout)["summary"]["nodes"] >= 1
    # The project's user may not list the cluster's nodes: the OpenShift side says why it lists
    # none (and nothing else is said); the HPC sides' nodes are listed.
    said = [line for line in nodes.stderr.splitlines() if line.strip()]
    assert said and all(line.startswith("nodes: openshift: ") for line in said), nodes.stderr
    assert "may not list nodes cluster-wide" in said[0] and "ask the cluster's admins" in said[0], said

    user_site.progress("pulumi destroy")
    user_site.pulumi("destroy", "--yes", "--skip-preview")
    wait_until(lambda: objects_of_the_run(layout, ns) == [], "nothing of the run left in the project", 90,
               detail=lambda: objects_of_the_run(layout, ns))
    assert admin_get(layout, f"/api/v1/namespaces/{ns}") is not None, "the project is the admins', not the run's"
    still = satori_ssh(layout, "squeue -h -t pending,running,suspended -o %i -j " + ",".join(job_ids)).split()
    assert still == [], f"jobs of the run still queued or running: {still}"
    staged = satori_ssh(layout, f"find ~/{user_site.remote} -path '*/.atlas/jobs/*' -type f 2>/dev/null | wc -l")
    assert staged.strip() == "0", "the run's job scripts are still staged"
    user_site.progress("green path done")


# --- each broken variant: the first command a user runs ends in one line naming the fix -----------------


@dataclass(frozen=True)
class Broken:
    """A way the user's setup is broken, and what the line that stops them must say."""

    env: str  # the environment it breaks ("" for all of them: the backend)
    says: tuple[str, ...]  # what the line names (the cause and the fix), each in it
    key: str = ""  # the stack's key `pulumi preview`'s line names, where the stack's config is at fault


def preview_line(done: Completed) -> str:
    """`pulumi preview`'s one error line (the program's), checked to be the only one."""
    text = done.stdout + done.stderr
    assert done.returncode != 0, text
    assert "Traceback" not in text, text
    errors = [line.strip() for line in text.splitlines() if line.strip().startswith("error:")]
    assert len(errors) == 1, f"not one error line:\n{text}"
    return errors[0]


def doctor_failure(done: Completed, broken: Broken) -> str:
    """The doctor's one FAIL line for the broken environment (exit 1); none for the others."""
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [m for m in doctor_lines(done) if m["status"] == "FAIL"]
    mine = [m for m in failed if m["env"] == broken.env]
    assert len(mine) == 1, f"not one FAIL line for {broken.env}:\n{done.stdout}"
    others = [m.group(0) for m in failed if m["env"] not in (broken.env, *(HPC if broken.env in HPC else ()))]
    assert others == [], f"other environments failed too:\n{done.stdout}"
    assert "; fix: " in mine[0]["text"], mine[0].group(0)
    return mine[0].group(0)


@contextlib.contextmanager
def agent_empty(user_site: UserSite) -> Iterator[dict[str, str]]:
    """The user's shell has an agent, and they forgot `ssh-add`."""
    yield {"SSH_AUTH_SOCK": site.status(user_site.layout)["empty_agent_socket"]}


@contextlib.contextmanager
def bastion_down(user_site: UserSite) -> Iterator[dict[str, str]]:
    Daemon("site-bastion", user_site.layout.pids_dir, user_site.layout.logs_dir).stop()
    try:
        yield {}
    finally:
        site.up(user_site.layout)
        if not Path(site.status(user_site.layout)["login_mfa"]["control_path"]).exists():
            site.open_master(user_site.layout)


@contextlib.contextmanager
def alias_unknown(user_site: UserSite) -> Iterator[dict[str, str]]:
    def mistype(config: dict[str, Any]) -> None:
        config["atlas:hpc"][LOGIN]["host"] = "satori-sit"

    with user_site.stack_config_changed(mistype):
        yield {}


@contextlib.contextmanager
def context_missing(user_site: UserSite) -> Iterator[dict[str, str]]:
    """A new shell whose KUBECONFIG lists only ~/.kube/config: the stack's context is not there."""
    yield {"KUBECONFIG": str(user_site.kubeconfig.files[0])}


@contextlib.contextmanager
def token_expired(user_site: UserSite) -> Iterator[dict[str, str]]:
    """Yesterday's login: a token of the project's (its own account's), refused since (401)."""
    user = kube_user.ensure_project_user(user_site.layout, service_account="atlas-user-expired")
    folder = user_site.home / ".kube-expired"
    files = kube_user.write_user_kubeconfig(user_site.layout, user, folder)
    kube_user.revoke(user_site.layout, user)

    def expired_context(config: dict[str, Any]) -> None:
        config["atlas:openshift"]["context"] = files.context

    with user_site.stack_config_changed(expired_context):
        yield {"KUBECONFIG": files.kubeconfig_env}


@contextlib.contextmanager
def backend_unreachable(user_site: UserSite) -> Iterator[dict[str, str]]:
    """The team's state service is down (nothing answers at its address)."""
    yield {"PULUMI_BACKEND_URL": f"https://127.0.0.1:{closed_port()}", "PULUMI_ACCESS_TOKEN": "pul-not-a-real-one"}


VARIANTS: dict[str, tuple[Callable[[UserSite], contextlib.AbstractContextManager[dict[str, str]]], Broken]] = {
    "agent empty": (agent_empty, Broken(LOGIN, ("holds no key", "ssh-add"), f"atlas:hpc.{LOGIN}")),
    "bastion down": (bastion_down, Broken(LOGIN, ("cannot reach jump host atlas-bastion", "check that it is up"))),
    "alias unknown": (
        alias_unknown,
        Broken(LOGIN, ("'satori-sit' is no Host entry", "did you mean 'satori-site'?"), f"atlas:hpc.{LOGIN}.host"),
    ),
    "context missing": (
        context_missing, Broken("openshift", ("is not in KUBECONFIG", "oc login --server="), "atlas:openshift.context")
    ),
    "token expired": (token_expired, Broken("openshift", ("expired or revoked", "log in again: `oc login --server="))),
    "backend unreachable": (backend_unreachable, Broken("", ("cannot be reached", "PULUMI_BACKEND_URL"))),
}


@pytest.mark.parametrize(
    ("variant", "command"),
    [
        ("agent empty", "pulumi preview"),
        ("agent empty", "scripts/doctor"),
        # No SSH connection is opened by a preview of a stack not yet up: the doctor is the first to tell.
        ("bastion down", "scripts/doctor"),
        ("alias unknown", "pulumi preview"),
        ("alias unknown", "scripts/doctor"),
        ("context missing", "pulumi preview"),
        ("context missing", "scripts/doctor"),
        ("token expired", "pulumi preview"),
        ("token expired", "scripts/doctor"),
        ("backend unreachable", "scripts/doctor"),
    ],
)
def test_a_broken_setup_ends_in_one_line_naming_the_fix(user_site: UserSite, variant: str, command: str) -> None:
    make, broken = VARIANTS[variant]
    ns = user_site.user.namespace
    with make(user_site) as env:
        user_site.progress(f"{variant}: {command}")
        if command == "pulumi preview":
            line = preview_line(user_site.pulumi("preview", check=False, env=env))
            assert line.startswith("error: ") and broken.key in line, line
        elif broken.env:
            line = doctor_failure(user_site.script("doctor", env=env), broken)
        else:
            done = user_site.script("doctor", env=env)
            text = done.stdout + done.stderr
            assert done.returncode != 0 and "Traceback" not in text, text
            (line,) = [x for x in text.splitlines() if x.strip()]
    for words in broken.says:
        assert words in line, f"{variant}: {words!r} not in {line!r}"
    assert user_site.user.token not in line
    assert objects_of_the_run(user_site.layout, ns) == [], f"{variant}: something was created"


# --- the template for one's own site, filled with the local site's values -------------------------------

TEMPLATE_STACK = "my-site"
PLACEHOLDER = re.compile(r"^<[^<>]+>$")


def fill_placeholders(value: Any, fill: dict[str, str], found: set[str]) -> Any:
    """`value` with each `<...>` string replaced by its entry in `fill` (each one seen goes to `found`)."""
    if isinstance(value, dict):
        return {k: fill_placeholders(v, fill, found) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_placeholders(v, fill, found) for v in value]
    if isinstance(value, str) and PLACEHOLDER.match(value):
        found.add(value)
        return fill.get(value, value)
    return value


def test_the_template_filled_with_the_local_sites_values_passes_preview(user_site: UserSite) -> None:
    """What docs/own-clusters.md tells a user: copy the template, put their site's value in every
    `<...>`, `pulumi preview`. Here the site is the local one, as this module's user reaches it; the
    template's other values (flavour openshift, a BuildConfig built by the cluster's builder, the
    project and quota the admins own) are kept as shipped."""
    layout, user, ns = user_site.layout, user_site.user, user_site.user.namespace
    local = yaml.safe_load((user_site.project / "stacks" / "Pulumi.local.yaml").read_text())["config"]
    build = local_openshift(local["atlas:openshift"], layout, ns)["image"]["build"]
    fill = {
        "<your OpenShift project>": ns,
        "<your oc login context>": user_site.kubeconfig.context,
        "<a ReadWriteMany StorageClass>": local["atlas:openshift"]["storage"]["class"],
        "<your GPU nodes' nvidia.com/gpu.product>": local["atlas:openshift"]["gpu"]["product"],
        "<the Git URL of your Atlas clone>": build["git_uri"],
        "<a commit or branch of that repository>": "HEAD",
        "<a Python 3.11 base image your cluster can pull>": build["base_image"],
        "<slurm or lsf>": "slurm",
        "<the Host alias of your login node>": LOGIN,
        "<your GPU partition or queue>": "normal",
    }
    template = yaml.safe_load((REPO_ROOT / "stacks" / "Pulumi.my-site.yaml").read_text())
    found: set[str] = set()
    config = fill_placeholders(template["config"], fill, found)
    assert found == set(fill), f"the template's placeholders and this test's differ: {sorted(found ^ set(fill))}"
    # What the report says of the environment (the template's `real` is a real site's).
    for section in config["atlas:hpc"].values():
        section["provenance"] = "local stand-in: the local site's login node behind a bastion, Slurm, mock GPUs"
        section["remote_work_dir"] = user_site.remote
    stack_file = user_site.project / "stacks" / f"Pulumi.{TEMPLATE_STACK}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    assert user.token not in stack_file.read_text() and "private_key" not in stack_file.read_text()

    def pulumi(*args: str) -> Completed:
        return user_site.shell(f"pulumi {shlex.join(args)} --non-interactive -s {TEMPLATE_STACK}")

    user_site.progress("the template, filled: pulumi stack init and preview")
    created = pulumi("stack", "init")
    assert created.returncode == 0, created.stdout + created.stderr
    try:
        preview = pulumi("preview", "--diff")
        text = preview.stdout + preview.stderr
        assert preview.returncode == 0 and "Traceback" not in text, text
        assert "#SBATCH --job-name=atlas-train-" in preview.stdout, preview.stdout
        assert "kubernetes:batch/v1:Job" in preview.stdout and "BuildConfig" in preview.stdout, preview.stdout
        assert objects_of_the_run(layout, ns, TEMPLATE_STACK) == [], "preview must create nothing"
    finally:
        pulumi("stack", "rm", "--yes")

