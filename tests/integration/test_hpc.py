"""The HPC providers against the local Satori over real SSH: LSF (the command set) and Slurm.

Starts its own Satori (ports from base 17200, state in a temporary directory), as
test_satori.py does, and drives the providers' create/read/diff/delete the way the Pulumi
engine calls them.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from infra.hpc import polling, providers, ssh
from infra.hpc.job_script import render_job_script
from infra.hpc.polling import lookup_by_name
from infra.hpc.providers import BatchJobCompletionProvider, BatchJobProvider, HpcProviderError, StagedFilesProvider
from infra.hpc.registry import scheduler_for
from infra.hpc.scheduler import NO_SITE_DIRECTIVES, JobSpec, SchedulerError, SiteDirectives
from infra.hpc.ssh import output
from localenv import satori
from localenv.layout import Layout
from localenv.procs import port_open
from localenv.satori_config import SatoriPaths
from tests.integration.satori_fixtures import satori_layout, satori_target
from tests.support import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("root"),
]

PORT_BASE = int(os.environ.get("ATLAS_TEST_HPC_PORT_BASE", "17200"))
POLL_S = 1.0
SCHEDULERS = ("lsf", "slurm")


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    with satori_layout(PORT_BASE, "atlas-hpc-test-") as lay:
        yield lay


@pytest.fixture(scope="module")
def target(layout: Layout) -> dict[str, Any]:
    return satori_target(layout)


@pytest.fixture
def conn(target: dict[str, Any]) -> ssh.PooledConnection:
    return ssh.connection(providers.endpoint_from(target))


@pytest.fixture(scope="module", autouse=True)
def clean_remote_runs(target: dict[str, Any]) -> None:
    """The login user's home outlives each test Satori: start from an empty run directory."""
    ssh.run_remote(ssh.connection(providers.endpoint_from(target)), "rm -rf -- atlas-it")


_counter = iter(range(10_000))


def make_job(
    target: dict[str, Any],
    scheduler: str,
    body: tuple[str, ...],
    after: list[str] | None = None,
    site: SiteDirectives = NO_SITE_DIRECTIVES,
    **extra: Any,
) -> dict[str, Any]:
    """Stage a script for `body` and return the BatchJob inputs for it."""
    n = next(_counter)
    step = f"s{n}"
    run_dir = f"atlas-it/{scheduler}"
    sched = scheduler_for(scheduler)
    name = f"atlas-it-{scheduler}-{n}-{int(time.time())}"
    spec = JobSpec(job_name=name, step=step, workdir=run_dir, log_dir="logs", command=body, queue="normal", site=site)
    script = render_job_script(sched, spec)
    script_path = f".atlas/jobs/{step}{sched.script_suffix}"
    StagedFilesProvider().create(
        {
            **target,
            "run_dir": run_dir,
            "files": [{"path": script_path, "content": script, "sha256": ssh.sha256_hex(script.encode())}],
            "directories": ["logs"],
        }
    )
    return {
        **target,
        "provider_version": providers.PROVIDER_VERSION,
        "scheduler": scheduler,
        "step": step,
        "job_name": name,
        "run_dir": run_dir,
        "script_path": script_path,
        "script": script,
        "script_sha256": ssh.sha256_hex(script.encode()),
        "log_pattern": f"logs/{step}.{sched.log_placeholder}",
        "requested_queue": "normal",
        "after_job_ids": after or [],
        "wait": False,
        "poll_interval_s": POLL_S,
        **extra,
    }


def read_until(props: dict[str, Any], job_id: str, states: set[str], timeout: float = 40) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        seen.clear()
        seen.update(BatchJobProvider().read(job_id, props).outs or {})
        return dict(seen) if seen.get("state") in states else None

    return wait_until(
        reached, f"job {job_id} to reach {sorted(states)}", timeout, pause=POLL_S,
        detail=lambda: f"last read: {seen.get('state')} {seen.get('native_state')}",
    )


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_submit_status_and_dependencies(target: dict[str, Any], scheduler: str) -> None:
    provider = BatchJobProvider()
    first_props = make_job(target, scheduler, ("bash", "-c", "sleep 2; echo first"))
    first = provider.create(first_props)
    second_props = make_job(target, scheduler, ("echo", "second; $(not expanded)"), after=[str(first.id)])
    second = provider.create(second_props)
    assert second.outs and second.outs["state"] == "unknown"  # not waited for: read tells
    early = provider.read(str(second.id), second_props).outs or {}
    assert early["state"] == "pending", early
    done_first = read_until(first_props, str(first.id), {"succeeded"})
    assert done_first["exit_code"] == 0 and done_first["queue"] == "normal"
    done_second = read_until(second_props, str(second.id), {"succeeded"})
    assert done_second["log_file"].endswith(f"logs/{second_props['step']}.{second.id}")
    log = ssh.run_remote(ssh.connection(providers.endpoint_from(target)), f"cat {done_second['log_file']}").stdout
    assert "second; $(not expanded)" in log


# What each scheduler shows of a site's account and extra directive. The LSF stand-in accepts
# and ignores -P, as it documents (localenv/lsf/core.py IGNORED_OPTIONS); Slurm keeps both.
SITE = {
    "lsf": SiteDirectives(account="atlas-lab", extra=('-Jd "atlas site check"',), skip=("-R",)),
    "slurm": SiteDirectives(account="atlas-lab", extra=("--comment=atlas-site-check",), skip=("--ntasks-per-node",)),
}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_sites_directives_reach_the_scheduler(target: dict[str, Any], scheduler: str) -> None:
    props = make_job(target, scheduler, ("echo", "site"), site=SITE[scheduler])
    prefix = scheduler_for(scheduler).directive_prefix
    lines = props["script"].splitlines()
    assert f"{prefix} {SITE[scheduler].extra[0]}" in lines
    assert not [line for line in lines if line.startswith(f"{prefix} {SITE[scheduler].skip[0]}")]
    job = BatchJobProvider().create(props)
    done = read_until(props, str(job.id), {"succeeded"})
    assert done["exit_code"] == 0
    if scheduler == "slurm":
        shown = ssh.run_remote(ssh.connection(providers.endpoint_from(target)), f"scontrol show job {job.id}").stdout
        assert "Account=atlas-lab" in shown and "Comment=atlas-site-check" in shown, shown


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_delete_cancels_a_running_job_and_a_later_create_submits_afresh(target: dict[str, Any], scheduler: str) -> None:
    provider = BatchJobProvider()
    props = make_job(target, scheduler, ("sleep", "120"))
    created = provider.create(props)
    read_until(props, str(created.id), {"running"})
    provider.delete(str(created.id), props)
    assert read_until(props, str(created.id), {"cancelled"})["state"] == "cancelled"
    provider.delete(str(created.id), props)  # already gone: still fine
    # Same resource, same name (destroy then up): the retired job is not adopted.
    again = provider.create(props)
    assert again.id != created.id
    provider.delete(str(again.id), props)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_refresh_sees_a_job_killed_outside_atlas(
    target: dict[str, Any], conn: ssh.PooledConnection, scheduler: str
) -> None:
    provider = BatchJobProvider()
    props = make_job(target, scheduler, ("sleep", "120"))
    created = provider.create(props)
    outs = read_until(props, str(created.id), {"running"})
    kill = {"lsf": "bkill", "slurm": "scancel"}[scheduler]
    ssh.run_remote(conn, f"{kill} {created.id}")
    outs = read_until(props, str(created.id), {"cancelled"})
    assert outs["native_state"] in ("EXIT", "CANCELLED")
    # The next `up` replaces it: the desired state is a job that runs.
    diff = provider.diff(str(created.id), outs, props)
    assert diff.changes and diff.replaces == ["state"]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_failed_job_fails_create_with_its_exit_code_and_log(target: dict[str, Any], scheduler: str) -> None:
    props = make_job(
        target, scheduler, ("bash", "-c", "echo preparing; echo boom >&2; exit 3"), wait=True, wait_timeout_s=60
    )
    with pytest.raises(HpcProviderError) as caught:
        BatchJobProvider().create(props)
    message = str(caught.value)
    assert "exit code 3" in message and ("EXIT" in message or "FAILED" in message), message
    assert f"log: atlas-it/{scheduler}/logs/{props['step']}." in message and "boom" in message
    # A re-run submits afresh (the failed job is not adopted).
    with pytest.raises(HpcProviderError):
        BatchJobProvider().create(props)
    states = lookup_by_name(
        scheduler_for(scheduler),
        lambda c: ssh.run_remote(ssh.connection(providers.endpoint_from(target)), c, check=False),
        props["job_name"],
    )
    assert len(states) == 2


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_waited_job_that_succeeds(target: dict[str, Any], scheduler: str) -> None:
    props = make_job(target, scheduler, ("true",), wait=True, wait_timeout_s=60)
    created = BatchJobProvider().create(props)
    assert created.outs and (created.outs["state"], created.outs["exit_code"]) == ("succeeded", 0)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_pipeline_submitted_whole_then_awaited(target: dict[str, Any], scheduler: str) -> None:
    """HpcEnvironment's order: every step submitted at once, chained by the scheduler; the
    preparation step awaited afterwards by a BatchJobCompletion; its failure names the job and the fix."""
    provider = BatchJobProvider()
    prep_props = make_job(target, scheduler, ("bash", "-c", "sleep 1; echo broken input >&2; exit 4"))
    prep = provider.create(prep_props)
    later_props = make_job(target, scheduler, ("echo", "never runs"), after=[str(prep.id)])
    later = provider.create(later_props)
    assert (later.outs or {})["state"] == "unknown"  # submitted at once, not after prep finished
    urn = "urn:pulumi:unit::atlas::pulumi-python:dynamic/hpc:BatchJob::satori-make-hdf5"
    completion = {**prep_props, "job_id": str(prep.id), "job_urn": urn, "wait_timeout_s": 60}
    with pytest.raises(HpcProviderError) as caught:
        BatchJobCompletionProvider().create(completion)
    message = str(caught.value)
    assert f"job {prep.id}" in message and "exit code 4" in message and "broken input" in message, message
    assert f"pulumi up --replace '{urn}'" in message
    # The scheduler, not Atlas, holds the later step back: it never starts after a failed dependency.
    outs = provider.read(str(later.id), later_props).outs or {}
    assert outs["state"] in ("pending", "cancelled"), outs
    provider.delete(str(later.id), later_props)
    ok_props = make_job(target, scheduler, ("true",))
    ok = provider.create(ok_props)
    done = BatchJobCompletionProvider().create({**ok_props, "job_id": str(ok.id), "wait_timeout_s": 60})
    assert done.id == f"{ok.id}-done" and (done.outs or {})["state"] == "succeeded"


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_create_after_a_dropped_connection_does_not_submit_twice(
    target: dict[str, Any], monkeypatch: pytest.MonkeyPatch, scheduler: str
) -> None:
    props = make_job(target, scheduler, ("sleep", "30"))
    real_run_remote = ssh.run_remote
    dropped: list[str] = []

    def run_remote_dropping_after_submit(conn: ssh.PooledConnection, command: str, **kwargs: Any) -> ssh.RemoteResult:
        result = real_run_remote(conn, command, **kwargs)
        if (" bsub " in command or " sbatch " in command) and not dropped:
            # The submission reached the scheduler; the answer is lost with the connection.
            dropped.append(command)
            conn.transport().close()
            raise ssh.ConnectionLostError("simulated drop after submission", command)
        return result

    monkeypatch.setattr(ssh, "run_remote", run_remote_dropping_after_submit)
    opened_before = sum(ssh.CONNECTIONS_OPENED.values())
    created = BatchJobProvider().create(props)
    monkeypatch.undo()
    assert dropped, "the drop was not simulated"
    assert sum(ssh.CONNECTIONS_OPENED.values()) == opened_before + 1  # one reconnect
    conn = ssh.connection(providers.endpoint_from(target))
    same_name = lookup_by_name(
        scheduler_for(scheduler), lambda c: ssh.run_remote(conn, c, check=False), props["job_name"]
    )
    assert [s.job_id for s in same_name] == [created.id]
    BatchJobProvider().delete(str(created.id), props)


def test_a_script_changed_on_the_cluster_is_not_submitted(target: dict[str, Any], conn: ssh.PooledConnection) -> None:
    props = make_job(target, "slurm", ("true",))
    ssh.run_remote(conn, f"echo 'echo tampered' >> {props['run_dir']}/{props['script_path']}")
    with pytest.raises(HpcProviderError, match="not the one previewed"):
        BatchJobProvider().create(props)


def test_staged_files_checked_refreshed_and_removed(target: dict[str, Any], conn: ssh.PooledConnection) -> None:
    provider = StagedFilesProvider()
    content = "data with 'quotes' and $(dollars)\n"
    props = {
        **target,
        "run_dir": "atlas-it/staged",
        "files": [
            {"path": "inputs/a.txt", "content": content, "sha256": ssh.sha256_hex(content.encode())},
            {"path": "b.bin", "content_base64": "AAEC", "sha256": ssh.sha256_hex(b"\x00\x01\x02")},
        ],
        "directories": ["logs"],
    }
    created = provider.create(props)
    outs = created.outs or {}
    assert ssh.run_remote(conn, "cat atlas-it/staged/inputs/a.txt").stdout == content
    assert provider.diff(str(created.id), outs, props).changes is False
    ssh.run_remote(conn, "rm atlas-it/staged/b.bin")
    refreshed = provider.read(str(created.id), outs).outs or {}
    assert refreshed["remote_sha256"]["b.bin"] == "missing"
    assert provider.diff(str(created.id), refreshed, props).changes is True
    updated = provider.update(str(created.id), refreshed, {**props, "files": props["files"][:1]}).outs or {}
    assert ssh.remote_sha256(conn, ["atlas-it/staged/b.bin"])["atlas-it/staged/b.bin"] is None
    provider.delete(str(created.id), updated)
    listing = ssh.run_remote(conn, "find atlas-it/staged -type f").stdout
    assert listing == ""


def test_unknown_and_changed_host_keys_are_refused(target: dict[str, Any], layout: Layout) -> None:
    info = satori.status(layout)["ssh"]
    other_key = Path(info["key_file"]).with_suffix(".pub").read_text().split()
    wrong = f"[127.0.0.1]:{layout.ports.sshd} {other_key[0]} {other_key[1]}\n"
    unrelated = f"[other.example.org]:22 {other_key[0]} {other_key[1]}\n"
    for known_hosts, message in ((wrong, "CHANGED"), (unrelated, "is not in")):
        endpoint = providers.endpoint_from(
            {
                **target,
                "ssh": {
                    **target["ssh"],
                    "port": layout.ports.sshd,
                    "known_hosts": known_hosts,
                    "known_hosts_source": "config atlas:test.known_hosts",
                },
            }
        )
        pooled = ssh.PooledConnection(endpoint)
        with pytest.raises(ssh.HostKeyError, match=message) as caught:
            ssh.run_remote(pooled, "true")
        assert "config atlas:test.known_hosts" in str(caught.value) and "127.0.0.1" in str(caught.value)


def test_remote_command_errors_carry_everything(conn: ssh.PooledConnection) -> None:
    with pytest.raises(ssh.RemoteCommandError) as caught:
        ssh.run_remote(conn, "echo out; echo err >&2; exit 7")
    error = caught.value
    assert (error.exit_code, error.stdout, error.stderr) == (7, "out\n", "err\n")
    assert error.command == "echo out; echo err >&2; exit 7"
    big = ssh.run_remote(conn, "head -c 3000000 /dev/zero | tr '\\0' x; head -c 3000000 /dev/zero | tr '\\0' y >&2")
    assert (len(big.stdout), len(big.stderr)) == (3_000_000, 3_000_000)


# --- Hostile output from the other side ----------------------------------------------------------


@pytest.fixture
def login_profile(layout: Layout) -> Iterator[Callable[[str], None]]:
    """What this Satori's login shells run from /etc/profile.d, as a site's banner or module
    wrappers do; only sessions of this test's sshd (its SLURM_CONF) run it."""
    conf = satori.status(layout)["slurm"]["conf"]
    path = Path("/etc/profile.d") / f"zz-atlas-test-{os.getpid()}.sh"

    def install(text: str) -> None:
        path.write_text(f'if [ "${{SLURM_CONF:-}}" = {shlex.quote(conf)} ]; then\n{text}\nfi\n')
        polling.reset_boards()  # the next status read asks the scheduler, not the board's memory

    try:
        yield install
    finally:
        path.unlink(missing_ok=True)
        polling.reset_boards()


# A site's login banner with lines a parser could take for an answer: a submission of either
# scheduler, a job id alone, a status line; and a notice on stderr.
BANNER = """
echo '*** Welcome to Satori (POWER9 + V100). Maintenance Friday 08:00. ***'
echo 'Submitted batch job 999999'
echo 424242
echo 'Job <31337> is submitted to queue <normal>.'
echo '777|RUNNING|normal|atlas-it-slurm-0|None'
echo 'quota: 92% of /home used' >&2
"""
BANNER_IDS = {"999999", "424242", "31337", "777"}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_login_banner_is_never_read_as_an_answer(
    target: dict[str, Any], conn: ssh.PooledConnection, login_profile: Callable[[str], None], scheduler: str
) -> None:
    login_profile(BANNER)
    # The banner is there: a login shell inside the command prints it.
    assert "Submitted batch job 999999" in ssh.run_remote(conn, "bash -lc true").stdout
    provider = BatchJobProvider()
    props = make_job(target, scheduler, ("echo", "hello"), wait=True, wait_timeout_s=60)  # staged, sha256 checked
    created = provider.create(props)
    assert str(created.id) not in BANNER_IDS
    assert created.outs and (created.outs["state"], created.outs["exit_code"]) == ("succeeded", 0)
    found = lookup_by_name(scheduler_for(scheduler), lambda c: ssh.run_remote(conn, c, check=False), props["job_name"])
    assert [s.job_id for s in found] == [str(created.id)]
    assert (provider.read(str(created.id), props).outs or {})["state"] == "succeeded"
    assert ssh.run_remote(conn, "echo out; echo err >&2").stderr == "err\n"  # the notice is cut too
    provider.delete(str(created.id), props)


def test_another_users_job_of_the_same_name_is_not_adopted(
    target: dict[str, Any], layout: Layout, conn: ssh.PooledConnection
) -> None:
    """A colleague's clone of the same stack names its jobs as this one does; squeue lists
    every user's jobs by default. Theirs, held in the queue, must be neither adopted nor touched."""
    colleague = "atlas-colleague"
    if subprocess.run(["id", colleague], capture_output=True, check=False).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", colleague], check=True)
    env = {**os.environ, "SLURM_CONF": satori.status(layout)["slurm"]["conf"]}

    def slurm(*argv: str) -> str:
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout

    props = make_job(target, "slurm", ("echo", "mine"))
    name = props["job_name"]
    theirs = slurm(
        "runuser", "-u", colleague, "--", "sbatch", "--parsable", f"--job-name={name}", "--chdir=/tmp",
        "--output=/dev/null", "--hold", "--wrap", "sleep 300",
    ).strip()  # fmt: skip
    try:
        # Visible to every user, as on a real cluster.
        assert f"{theirs} {colleague}" in slurm("squeue", "-h", "-t", "all", f"--name={name}", "-o", "%i %u")
        provider = BatchJobProvider()
        created = provider.create(props)
        assert str(created.id) != theirs
        assert read_until(props, str(created.id), {"succeeded"})["exit_code"] == 0
        provider.delete(str(created.id), props)
        # Theirs untouched by Atlas's delete.
        assert slurm("squeue", "-h", "-j", theirs, "-o", "%T %u").split() == ["PENDING", colleague]
    finally:
        subprocess.run(["scancel", theirs], env=env, check=False)


GARBAGE = {
    "slurm": "squeue() { echo '<html><body>502 Bad Gateway</body></html>'; }\n"
    "sacct() { echo 'Traceback (most recent call last):'; }",
    "lsf": "bjobs() { echo '<html><body>502 Bad Gateway</body></html>'; }\nbhist() { echo '<html>'; }",
}
# More than output.MAX_OUTPUT_BYTES (64 MiB) from the live query.
HUGE = {
    "slurm": "squeue() { head -c 80000000 /dev/zero | tr '\\\\0' x; }",
    "lsf": "bjobs() { head -c 80000000 /dev/zero | tr '\\\\0' x; }",
}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_answering_garbage_or_too_much_stops_atlas_without_a_wrong_state(
    target: dict[str, Any], conn: ssh.PooledConnection, login_profile: Callable[[str], None], scheduler: str
) -> None:
    provider = BatchJobProvider()
    props = make_job(target, scheduler, ("true",))
    created = provider.create(props)
    done = read_until(props, str(created.id), {"succeeded"})
    unsubmitted = make_job(target, scheduler, ("true",))

    login_profile(GARBAGE[scheduler])
    # A refresh fails (Pulumi keeps the state it had) instead of reading the job as gone.
    with pytest.raises(SchedulerError, match="did not answer a status query"):
        provider.read(str(created.id), done)
    # An up submits nothing it cannot check is not already there.
    with pytest.raises(SchedulerError, match="nothing was submitted"):
        provider.create(unsubmitted)

    login_profile(HUGE[scheduler])
    with pytest.raises(ssh.RemoteOutputTooLargeError, match="printed more than 64 MiB"):
        provider.read(str(created.id), done)

    login_profile("")
    # The same connection answers again, and the scheduler tells the same story as before.
    assert (provider.read(str(created.id), done).outs or {})["state"] == "succeeded"
    runner = lambda c: ssh.run_remote(conn, c, check=False)  # noqa: E731
    assert lookup_by_name(scheduler_for(scheduler), runner, unsubmitted["job_name"]) == []


def test_commands_abandoned_while_output_streams_leave_the_login_up(
    conn: ssh.PooledConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Atlas closes a channel the server is still writing to (too much output, a deadline): paramiko
    goes on feeding that channel from its transport thread. Waking the reader through an OS pipe
    that close() shuts under the feeder killed the whole login at random (EBADF on the transport,
    in two CI runs of five); every command on it was cut. Fails within 200 tries without the fix."""
    monkeypatch.setattr(output, "MAX_OUTPUT_BYTES", 2**16)
    opened = sum(ssh.CONNECTIONS_OPENED.values())
    for _ in range(200):
        # Line by line, as a scheduler writes: the reader keeps up, so each packet wakes it.
        with pytest.raises(ssh.RemoteOutputTooLargeError):
            ssh.run_remote(conn, "while :; do echo atlas-abandoned-output; done")
    assert ssh.run_remote(conn, "echo still here").stdout == "still here\n"
    assert sum(ssh.CONNECTIONS_OPENED.values()) == opened, ssh.CONNECTIONS_DROPPED


def run_at_once(conn: ssh.PooledConnection, count: int) -> list[ssh.RemoteResult]:
    """`count` commands on one pooled connection at the same time, each holding its session
    open for half a second, as the engine's parallel resource operations do."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda i: ssh.run_remote(conn, f"sleep 0.5; echo {i}"), range(count)))


def test_more_commands_at_once_than_sshd_allows_sessions_share_one_login(conn: ssh.PooledConnection) -> None:
    """This sshd keeps OpenSSH's default MaxSessions (10): an eleventh session on one connection
    is refused. Atlas keeps to MAX_COMMAND_SESSIONS at once instead of losing the connection under
    every command running on it."""
    opened = sum(ssh.CONNECTIONS_OPENED.values())
    results = run_at_once(conn, 30)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(30)]
    assert sum(ssh.CONNECTIONS_OPENED.values()) == opened, ssh.CONNECTIONS_DROPPED


@pytest.fixture
def strict_login(layout: Layout, target: dict[str, Any]) -> Iterator[ssh.PooledConnection]:
    """The same login node behind a second sshd that allows 2 sessions a connection, as a site
    may set MaxSessions; same host key, users and Slurm."""
    paths = SatoriPaths(layout.satori_dir)
    port = PORT_BASE + 23
    config = paths.root / "sshd_config.strict"
    text = paths.sshd_config.read_text()
    text = text.replace(f"Port {layout.ports.sshd}\n", f"Port {port}\n").replace("sshd.pid", "sshd-strict.pid")
    config.write_text(text + "\nMaxSessions 2\n")
    daemon = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: port_open(port), f"the strict sshd on {port}", 10)
        known = target["ssh"]["known_hosts"].replace(f"[127.0.0.1]:{layout.ports.sshd}", f"[127.0.0.1]:{port}")
        strict = {**target, "ssh": {**target["ssh"], "port": port, "known_hosts": known}}
        yield ssh.connection(providers.endpoint_from(strict))
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)
        config.unlink()


def test_a_site_allowing_fewer_sessions_than_atlas_runs_at_once_is_waited_on(
    strict_login: ssh.PooledConnection,
) -> None:
    """A refused session is not a lost connection: the command waits for one of its neighbours to
    end, on the same login, and nothing running is cut."""
    results = run_at_once(strict_login, 6)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
    assert ssh.CONNECTIONS_OPENED[strict_login.endpoint.pool_key] == 1, ssh.CONNECTIONS_DROPPED


def test_one_connection_per_host_for_everything() -> None:
    """Every test above went through the pool: one login (plus the simulated drops' reconnects)."""
    opened = [count for key, count in ssh.CONNECTIONS_OPENED.items() if key[1] == PORT_BASE + 22]
    assert opened and opened[0] <= 1 + len(SCHEDULERS), (ssh.CONNECTIONS_OPENED, ssh.CONNECTIONS_DROPPED)
    polling.reset_boards()
