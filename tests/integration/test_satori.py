"""The local Satori over real SSH: sshd, Slurm with fake GPUs, the LSF command set.

Starts its own Satori (state in a temporary directory, ports from base 17000, so a running
`scripts/localenv` on the default base is not disturbed) and stops it at the end.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest

from localenv import satori
from localenv.cli import forget_if_stopped
from localenv.layout import Layout, Ports
from localenv.procs import LocalEnvError, port_open
from tests.support import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("root"),
]

PORT_BASE = int(os.environ.get("ATLAS_TEST_SATORI_PORT_BASE", "17000"))


@dataclass
class Result:
    rc: int
    out: str
    err: str


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    state = Path(tempfile.mkdtemp(prefix="atlas-satori-test-", dir="/tmp"))
    state.chmod(0o755)  # the login user reaches slurm.conf and the munge socket in here
    lay = Layout(state_dir=state, ports=Ports(PORT_BASE))
    satori.up(lay)
    yield lay
    try:
        satori.down(lay)
        for port in (lay.ports.sshd, lay.ports.slurmctld, lay.ports.slurmd):
            assert not port_open(port), f"port {port} still open after down"
    finally:
        forget_if_stopped(lay)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def ssh(layout: Layout) -> Iterator[paramiko.SSHClient]:
    info = satori.status(layout)["ssh"]
    client = paramiko.SSHClient()
    client.load_host_keys(info["known_hosts_file"])
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        info["host"],
        port=info["port"],
        username=info["user"],
        key_filename=info["key_file"],
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
        banner_timeout=10,
        auth_timeout=10,
    )
    transport = client.get_transport()
    assert transport is not None
    transport.set_keepalive(15)
    run(client, "rm -rf ~/t && mkdir -p ~/t")
    yield client
    client.close()


def run(client: paramiko.SSHClient, command: str, stdin: str | None = None) -> Result:
    """`bash -lc` so that profile.lsf is loaded, as on a real login node."""
    chan_in, chan_out, chan_err = client.exec_command(
        f"bash -lc {shlex.quote('cd ~/t 2>/dev/null; ' + command)}", timeout=60
    )
    if stdin is not None:
        chan_in.write(stdin)
    chan_in.channel.shutdown_write()
    out = chan_out.read().decode()
    err = chan_err.read().decode()
    return Result(chan_out.channel.recv_exit_status(), out, err)


def submit(client: paramiko.SSHClient, script: str, args: str = "") -> str:
    res = run(client, f"bsub {args}", stdin=script)
    m = re.search(r"Job <(\d+)> is submitted to (?:default )?queue <(\w+)>\.", res.out)
    assert res.rc == 0 and m, res
    return m.group(1)


def bjobs_records(client: paramiko.SSHClient, ids: str, fields: str = "") -> list[dict[str, str]]:
    res = run(client, f'bjobs -o "jobid jobindex stat queue exit_code job_name finish_time {fields}" -json {ids}')
    assert res.rc == 0, res
    return list(json.loads(res.out)["RECORDS"])


def wait_finished(client: paramiko.SSHClient, job_id: str, timeout: float = 40) -> list[dict[str, str]]:
    def finished() -> list[dict[str, str]] | None:
        records = bjobs_records(client, job_id)
        return records if records and all(r["STAT"] in ("DONE", "EXIT") for r in records) else None

    return wait_until(
        finished, f"job {job_id} to finish", timeout, detail=lambda: bjobs_records(client, job_id)
    )


def satori_script(name: str, gpus: int, body: str, slots: int = 1) -> str:
    return (
        "#!/bin/bash\n"
        "#BSUB -L /bin/bash\n"
        f"#BSUB -J {name}\n"
        f"#BSUB -o {name}.%J\n"
        f"#BSUB -n {slots}\n"
        '#BSUB -R "span[ptile=1]"\n'
        f'#BSUB -gpu "num={gpus}"\n'
        "#BSUB -q normal\n"
        f"{body}\n"
    )


# --- the login node ---------------------------------------------------------------------------------


def test_key_login_as_the_non_root_user(ssh: paramiko.SSHClient) -> None:
    res = run(ssh, "id -un; id -u; echo $HOME; echo $SLURM_CONF; command -v bsub")
    user, uid, home, conf, bsub = res.out.split()
    assert (user, home) == ("atlas", "/home/atlas") and int(uid) != 0
    assert conf.endswith("/satori/slurm.conf")
    assert bsub == "/opt/atlas-lsf/10.1/bin/bsub"


def test_password_login_is_refused(layout: Layout) -> None:
    client = paramiko.SSHClient()
    client.load_host_keys(satori.status(layout)["ssh"]["known_hosts_file"])
    with pytest.raises(paramiko.AuthenticationException):
        client.connect(
            "127.0.0.1",
            port=layout.ports.sshd,
            username="atlas",
            password="atlas",
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
    client.close()


def test_root_login_is_refused_even_with_the_key(layout: Layout) -> None:
    info = satori.status(layout)["ssh"]
    client = paramiko.SSHClient()
    client.load_host_keys(info["known_hosts_file"])
    with pytest.raises(paramiko.AuthenticationException):
        client.connect(
            "127.0.0.1",
            port=layout.ports.sshd,
            username="root",
            key_filename=info["key_file"],
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
    client.close()


def test_unknown_host_key_is_refused(layout: Layout) -> None:
    info = satori.status(layout)["ssh"]
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        client.connect(
            "127.0.0.1",
            port=layout.ports.sshd,
            username="atlas",
            key_filename=info["key_file"],
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
    client.close()


def test_a_changed_host_key_is_refused(layout: Layout) -> None:
    info = satori.status(layout)["ssh"]
    client = paramiko.SSHClient()
    client.get_host_keys().add(
        f"[127.0.0.1]:{layout.ports.sshd}",
        "ssh-ed25519",
        paramiko.Ed25519Key.from_private_key_file(info["key_file"]),
    )
    with pytest.raises(paramiko.BadHostKeyException):
        client.connect(
            "127.0.0.1",
            port=layout.ports.sshd,
            username="atlas",
            key_filename=info["key_file"],
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
    client.close()


def test_second_up_is_harmless_and_fast(layout: Layout) -> None:
    before = {n: d["pid"] for n, d in satori.status(layout)["daemons"].items()}
    started = time.monotonic()
    status = satori.up(layout)
    assert time.monotonic() - started < 3
    assert {n: d["pid"] for n, d in status["daemons"].items()} == before
    assert status["running"] and status["ssh"]["port"] == layout.ports.sshd


def test_a_taken_port_is_a_clear_error() -> None:
    state = Path(tempfile.mkdtemp(prefix="atlas-satori-port-", dir="/tmp"))
    other = Layout(state_dir=state, ports=Ports(PORT_BASE + 150))
    try:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", other.ports.sshd))
            sock.listen()
            with pytest.raises(
                LocalEnvError,
                match=rf"port already in use: satori sshd on 127.0.0.1:"
                rf"{other.ports.sshd}.*ATLAS_LOCALENV_PORT_BASE",
            ):
                satori.up(other)
        assert not satori.status(other)["slurm"]["running"]
    finally:
        forget_if_stopped(other)
        shutil.rmtree(state, ignore_errors=True)


# --- LSF jobs on Slurm ------------------------------------------------------------------------------


def test_satori_style_jobs_report_done_and_exit_with_their_exit_code(ssh: paramiko.SSHClient) -> None:
    body = 'echo "JOB=$LSB_JOBID IDX=$LSB_JOBINDEX Q=$LSB_QUEUE GPUS=$CUDA_VISIBLE_DEVICES"'
    ok = submit(ssh, satori_script("ok", 2, body + "\nexit 0"))
    bad = submit(ssh, satori_script("bad", 1, body + "\nexit 3"))
    assert [(r["STAT"], r["EXIT_CODE"]) for r in wait_finished(ssh, ok)] == [("DONE", "")]
    assert [(r["STAT"], r["EXIT_CODE"]) for r in wait_finished(ssh, bad)] == [("EXIT", "3")]
    ok_out = run(ssh, f"cat ok.{ok}").out
    assert f"JOB={ok} IDX=0 Q=normal GPUS=0,1" in ok_out and "Successfully completed." in ok_out
    bad_out = run(ssh, f"cat bad.{bad}").out
    # One GPU, whichever the scheduler picked (the other job may hold 0 and 1).
    assert (
        re.search(rf"JOB={bad} IDX=0 Q=normal GPUS=\d\n", bad_out) and "Exited with exit code 3." in bad_out
    )
    text = run(ssh, f"bjobs -noheader -o \"jobid stat exit_code delimiter='^'\" {ok} {bad}")
    assert text.out.splitlines() == [f"{ok}^DONE^-", f"{bad}^EXIT^3"]
    finish = next(r["FINISH_TIME"] for r in bjobs_records(ssh, ok))
    assert re.fullmatch(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d L", finish)
    # Finished jobs stay listed by bjobs -a, and bhist summarises them.
    listed = run(ssh, "bjobs -a -noheader -o 'jobid stat'").out.split()
    assert ok in listed and bad in listed
    hist = run(ssh, f"bhist {ok}")
    assert hist.out.splitlines()[0] == "Summary of time in seconds spent in various states:"
    assert hist.out.splitlines()[2].split()[0] == ok


def test_command_line_options_win_over_bsub_lines(ssh: paramiko.SSHClient) -> None:
    job = submit(ssh, satori_script("winner", 1, "echo queue=$LSB_QUEUE"), args="-q debug -J cli_name")
    records = wait_finished(ssh, job)
    assert [(r["QUEUE"], r["JOB_NAME"]) for r in records] == [("debug", "cli_name")]
    assert "queue=debug" in run(ssh, f"cat winner.{job}").out


def test_dependencies(ssh: paramiko.SSHClient) -> None:
    first = submit(ssh, "sleep 2\nexit 0\n", args="-J dep_first -o dep_first.%J")
    by_id = submit(ssh, "echo after\n", args=f"-w 'done({first})' -J dep_by_id -o dep_by_id.%J")
    by_name = submit(ssh, "echo after\n", args="-w 'ended(\"dep_first\")' -o dep_by_name.%J")
    on_exit = submit(ssh, "echo never\n", args=f"-w 'exit({first})' -o dep_on_exit.%J")
    assert bjobs_records(ssh, by_id)[0]["STAT"] == "PEND"
    wait_finished(ssh, first)
    assert wait_finished(ssh, by_id)[0]["STAT"] == "DONE"
    assert wait_finished(ssh, by_name)[0]["STAT"] == "DONE"
    # exit(first) can never hold now: the job stays pending, as in LSF, until killed. Awaited as
    # the scheduler's verdict on the dependency (its pending reason), not as a pause.
    never = "Dependency condition invalid or never satisfied"

    def verdict() -> dict[str, str] | None:
        (record,) = bjobs_records(ssh, on_exit, "pend_reason")
        return record if record["STAT"] != "PEND" or record["PEND_REASON"] == never else None

    record = wait_until(verdict, f"the scheduler to find job {on_exit}'s dependency never satisfied", 40)
    assert (record["STAT"], record["PEND_REASON"]) == ("PEND", never), record
    killed = run(ssh, f"bkill {on_exit}")
    assert (killed.rc, killed.out.strip()) == (0, f"Job <{on_exit}> is being terminated")
    assert wait_finished(ssh, on_exit)[0]["STAT"] == "EXIT"


def test_job_arrays(ssh: paramiko.SSHClient) -> None:
    job = submit(ssh, 'echo "index=$LSB_JOBINDEX id=$LSB_JOBID"\n', args="-J 'sweep[1-3]' -o sweep.%J.%I")
    records = wait_finished(ssh, job)
    assert sorted((r["JOBINDEX"], r["JOB_NAME"], r["STAT"]) for r in records) == [
        ("1", "sweep[1]", "DONE"),
        ("2", "sweep[2]", "DONE"),
        ("3", "sweep[3]", "DONE"),
    ]
    for i in (1, 2, 3):
        assert f"index={i} id={job}" in run(ssh, f"cat sweep.{job}.{i}").out
    element = bjobs_records(ssh, f"'{job}[2]'")
    assert [r["JOBINDEX"] for r in element] == ["2"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("-q nosuch", "nosuch: No such queue. Job not submitted."),
        ('-gpu "num=5"', "Too many GPUs requested. Job not submitted."),
        ("-n 9", "Too many processors requested. Job not submitted."),
        ('-R "span[ptile=x]"', "Error in span section. Job not submitted."),
        ('-R "select[a] select[b]"', 'Error near "select" : duplicate section. Job not submitted.'),
        ('-R "rusage[mem=]"', "Error in rusage section. Job not submitted."),
        ('-gpu "num=two"', "Bad resource requirement syntax. Job not submitted."),
        ('-gpu "num=1:mode=fast"', "Bad resource requirement syntax. Job not submitted."),
        ("-w 'done(424242)'", "424242: No matching job found. Job not submitted."),
        ("-w 'done(1'", "done(1: Dependency condition syntax error. Job not submitted."),
    ],
)
def test_documented_submission_errors(ssh: paramiko.SSHClient, args: str, message: str) -> None:
    res = run(ssh, f"bsub {args}", stdin=satori_script("rejected", 1, "true"))
    assert (res.rc, res.err.strip(), res.out) == (255, message, "")


def test_bkill_running_finished_and_unknown(ssh: paramiko.SSHClient) -> None:
    job = submit(ssh, "sleep 60\n", args="-J killme -o killme.%J")
    wait_until(lambda: bjobs_records(ssh, job)[0]["STAT"] == "RUN", f"job {job} to run", 20, pause=0.3)
    res = run(ssh, f"bkill {job}")
    assert (res.rc, res.out.strip(), res.err) == (0, f"Job <{job}> is being terminated", "")
    assert wait_finished(ssh, job)[0]["STAT"] == "EXIT"
    again = run(ssh, f"bkill {job}")
    assert (again.rc, again.err.strip()) == (255, f"Job <{job}>: Job has already finished")
    unknown = run(ssh, "bkill 424242")
    assert (unknown.rc, unknown.err.strip()) == (255, "Job <424242>: No matching job found")


def test_bjobs_unknown_ids(ssh: paramiko.SSHClient) -> None:
    one = run(ssh, "bjobs 424242")
    assert (one.rc, one.err.strip()) == (0, "Job <424242> is not found")
    several = run(ssh, "bjobs 424242 424243")
    assert several.rc == 255


def test_queue_host_and_gpu_views(ssh: paramiko.SSHClient) -> None:
    queues = run(ssh, "bqueues").out.splitlines()
    assert queues[0].split()[0] == "QUEUE_NAME" and {q.split()[0] for q in queues[1:]} == {"normal", "debug"}
    gpu = run(ssh, "lsload -gpu").out.splitlines()
    assert gpu[0].split() == [
        "HOST_NAME",
        "status",
        "ngpus",
        "gpu_shared_avg_mut",
        "gpu_shared_avg_ut",
        "ngpus_physical",
    ]
    assert gpu[1].split()[2] == "4"
    # Mock GPUs: no use or memory reading, so "-" as LSF prints an index it has no value for, never 0%.
    assert gpu[1].split()[3:5] == ["-", "-"]
    per_gpu = run(ssh, "lsload -gpuload").out.splitlines()
    assert all(line.split()[-7:-5] == ["-", "-"] for line in per_gpu[1:]), per_gpu
    assert run(ssh, "bhosts").out.splitlines()[1].split()[3] == "8"


def test_several_small_jobs_run_at_once(ssh: paramiko.SSHClient) -> None:
    ids = [submit(ssh, "sleep 4\n", args=f"-J conc{i} -o /dev/null") for i in range(3)]
    wait_until(
        lambda: [bjobs_records(ssh, i)[0]["STAT"] for i in ids] == ["RUN"] * 3, "three jobs running at once", 15,
        pause=0.3,
    )


# --- the same jobs through sbatch -------------------------------------------------------------------


def slurm_state(ssh: paramiko.SSHClient, job_id: str, timeout: float = 40) -> tuple[str, str]:
    def finished() -> tuple[str, str] | None:
        res = run(ssh, f"scontrol show job {job_id} -o")
        state = re.search(r"JobState=(\S+)", res.out)
        code = re.search(r" ExitCode=(\S+)", res.out)
        if state and code and state.group(1) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            return state.group(1), code.group(1)
        return None

    return wait_until(finished, f"slurm job {job_id} to finish", timeout)


def test_the_same_jobs_through_sbatch(ssh: paramiko.SSHClient) -> None:
    script = (
        "#!/bin/bash\n#SBATCH -J sb\n#SBATCH -o sb.%j\n#SBATCH -n 1\n#SBATCH --gres=gpu:2\n"
        "#SBATCH -p normal\necho GPUS=$CUDA_VISIBLE_DEVICES\nexit {code}\n"
    )
    ok = run(ssh, "sbatch --parsable", stdin=script.format(code=0))
    bad = run(ssh, "sbatch", stdin=script.format(code=3))
    assert ok.rc == 0 and re.fullmatch(r"\d+", ok.out.strip()), ok
    bad_id = re.fullmatch(r"Submitted batch job (\d+)", bad.out.strip())
    assert bad.rc == 0 and bad_id, bad
    assert slurm_state(ssh, ok.out.strip()) == ("COMPLETED", "0:0")
    assert slurm_state(ssh, bad_id.group(1)) == ("FAILED", "3:0")
    assert "GPUS=0,1" in run(ssh, f"cat sb.{ok.out.strip()}").out
    nosuch = run(ssh, "sbatch -p nosuch", stdin=script.format(code=0))
    assert nosuch.rc == 1 and "invalid partition specified: nosuch" in nosuch.err
    too_many = run(ssh, "sbatch --gres=gpu:5", stdin=script.format(code=0))
    assert too_many.rc == 1 and "Requested node configuration is not available" in too_many.err
    dep_first = run(ssh, "sbatch --parsable", stdin="#!/bin/sh\nsleep 1\n").out.strip()
    dep = run(
        ssh, f"sbatch --parsable --dependency=afterok:{dep_first}", stdin="#!/bin/sh\ntrue\n"
    ).out.strip()
    assert slurm_state(ssh, dep) == ("COMPLETED", "0:0")
    array = run(
        ssh, "sbatch --parsable --array=1-3 -o arr.%A.%a", stdin="#!/bin/sh\necho i=$SLURM_ARRAY_TASK_ID\n"
    )
    array_id = array.out.strip()
    for i in (1, 2, 3):
        assert slurm_state(ssh, f"{array_id}_{i}") == ("COMPLETED", "0:0")
        assert f"i={i}" in run(ssh, f"cat arr.{array_id}.{i}").out


# --- mock GPUs say so: to the scheduler's readers, and to every job (issue 34, labels from facts) ----


def test_the_mock_gpus_say_so_to_atlas_s_readers_and_to_each_job(ssh: paramiko.SSHClient) -> None:
    """What Atlas reads of this Slurm and its LSF command set names the GPUs mock (their GRES
    type, lsload's gpu_model), and a job on them, through sbatch or bsub, is told so by the
    TaskProlog: the sampler then reads no GPU of the host as the job's own."""
    from infra.hpc.lsf.hosts import parse_lsload_gpu
    from infra.hpc.slurm.nodes import SINFO_FORMAT, parse_sinfo_nodes
    from infra.provenance import MOCK_GPUS
    from infra.telemetry.gpu import MOCK_ENV, MOCK_VALUE

    sinfo = run(ssh, f"sinfo -N -h -O {shlex.quote(SINFO_FORMAT)}")
    assert sinfo.rc == 0, sinfo
    (node,) = parse_sinfo_nodes(sinfo.out)
    assert node.gpu_fact is not None and node.gpu_fact.kind == MOCK_GPUS, node
    assert node.gpu_fact.what == "mock GPUs (Slurm GRES type mock_v100)"
    (host,) = parse_lsload_gpu(run(ssh, "lsload -gpu").out, run(ssh, "lsload -gpuload").out)
    assert host.gpu_fact is not None and host.gpu_fact.what == "mock GPUs (LSF gpu_model Mock_TeslaV100_SXM2_32GB)"

    script = (
        "#!/bin/bash\n#SBATCH -J mark\n#SBATCH -o mark.%j\n#SBATCH -n 1\n#SBATCH --gres=gpu:1\n"
        f'echo "mark=${MOCK_ENV}" gpus=$CUDA_VISIBLE_DEVICES\n'
    )
    job = run(ssh, "sbatch --parsable", stdin=script).out.strip()
    assert slurm_state(ssh, job) == ("COMPLETED", "0:0")
    assert f"mark={MOCK_VALUE} gpus=0" in run(ssh, f"cat mark.{job}").out
    lsf_job = submit(ssh, satori_script("lsfmark", 1, f'echo "mark=${MOCK_ENV}"'))
    assert wait_finished(ssh, lsf_job)[0]["STAT"] == "DONE"
    assert f"mark={MOCK_VALUE}" in run(ssh, f"cat lsfmark.{lsf_job}").out
