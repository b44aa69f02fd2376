"""The LSF commands (bsub, bjobs, bkill, bhist, bqueues, bhosts, lsload) on top of Slurm.

Installed for the login user by satori.up() as /opt/atlas-lsf/10.1/bin/<command>, each a
two-line wrapper calling main(<command>, argv). This module talks to Slurm (sbatch,
squeue --json, scancel, sinfo); the LSF syntax and formats live in core.py. LSF job ids
are Slurm's job ids (array elements: the array's id plus [index]).
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import re
import shlex
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from . import core
from .core import LsfError, LsfJob

SLURM_TIMEOUT_S = 30


class SlurmError(Exception):
    pass


def _slurm(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if not os.environ.get("SLURM_CONF"):
        raise LsfError(
            "LSF is not configured for this session: SLURM_CONF is unset. Log in through the "
            "local Satori's sshd (it sets SLURM_CONF), or export SLURM_CONF=<satori_dir>/slurm.conf."
        )
    try:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LsfError(f"Cannot connect to LSF. Please wait ... ({argv[0]}: {exc})") from exc


def _host() -> str:
    return socket.gethostname().split(".")[0]


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


# --- Slurm facts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Queue:
    name: str
    cpus_per_node: int
    gpus_per_node: int
    nodes: int
    default: bool
    up: bool


def _queues() -> dict[str, Queue]:
    result = _slurm(["sinfo", "-h", "-o", "%P|%c|%G|%D|%a"])
    if result.returncode != 0:
        raise LsfError(f"Cannot connect to LSF. Please wait ... (sinfo: {result.stderr.strip()})")
    queues: dict[str, Queue] = {}
    for line in result.stdout.splitlines():
        part, cpus, gres, nodes, avail = line.split("|")
        default = part.endswith("*")
        name = part.rstrip("*")
        gpus = sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres))
        queues[name] = Queue(
            name, int(re.sub(r"\D", "", cpus) or 0), gpus, int(nodes or 0), default, avail == "up"
        )
    return queues


def _slurm_records() -> list[dict[str, Any]]:
    result = _slurm(["squeue", "--json", "-t", "all"])
    if result.returncode != 0:
        raise LsfError(f"Cannot connect to LSF. Please wait ... (squeue: {result.stderr.strip()})")
    document = json.loads(result.stdout)
    if document.get("errors") and not document.get("jobs"):
        # Slurm 22.05's squeue --json exits 0 with an "errors" list when slurmctld is down.
        detail = "; ".join(str(e.get("error") or e.get("description")) for e in document["errors"])
        raise LsfError(f"Cannot connect to LSF. Please wait ... (squeue: {detail})")
    return list(document.get("jobs", []))


def _lsf_jobs(all_users: bool = False) -> list[tuple[LsfJob, dict[str, Any]]]:
    host, user = _host(), _user()
    jobs: list[tuple[LsfJob, dict[str, Any]]] = []
    for rec in _slurm_records():
        if not all_users and rec.get("user_name") != user:
            continue
        job = core.lsf_job_from_slurm(rec, host)
        jobs.extend((j, rec) for j in core.expand_pending_array(job, rec))
    jobs.sort(key=lambda jr: (int(jr[0].jobid), jr[0].index))
    return jobs


def _select(jobs: list[tuple[LsfJob, dict[str, Any]]], wanted: str) -> list[LsfJob]:
    """Jobs matching an LSF id: `12` (all elements of array 12) or `12[3]`."""
    m = re.fullmatch(r"(\d+)(?:\[(\d+)\])?", wanted.strip())
    if not m:
        return []
    return [
        j for j, _ in jobs if j.jobid == m.group(1) and (m.group(2) is None or j.index == int(m.group(2)))
    ]



def _listed_by_default(jobs: list[tuple[LsfJob, dict[str, Any]]], flags: set[str]) -> list[LsfJob]:
    """What bjobs and bhist show when no job is named: unfinished jobs, finished ones with -d, all with -a."""
    if "-d" in flags:
        return [j for j, _ in jobs if j.finished]
    if "-a" in flags:
        return [j for j, _ in jobs]
    return [j for j, _ in jobs if not j.finished]

# --- bsub -----------------------------------------------------------------------------------------


def _wrapper_script(
    user_script: str, opts: dict[str, list[str]], queue: str, job_name: core.JobName, slots: int, report: bool
) -> str:
    """The sbatch script: LSF's job environment, the user's script run as LSF runs it, a job report."""
    host = _host()
    login_shell = core.single(opts, "-L")
    marker = f"ATLAS_LSF_USER_SCRIPT_{uuid.uuid4().hex}"
    if not user_script.endswith("\n"):
        user_script += "\n"
    # -L: the job's environment is set up by the login shell, then the job runs.
    run = f'{shlex.quote(login_shell)} -l -c "\\"$jobfile\\""' if login_shell else '"$jobfile"'
    lines = [
        "#!/bin/sh",
        "# Written by the local LSF stand-in's bsub (localenv/lsf); runs one LSF job on Slurm.",
        'LSB_JOBID="${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}"',
        'LSB_JOBINDEX="${SLURM_ARRAY_TASK_ID:-0}"',
        f"LSB_QUEUE={shlex.quote(queue)}",
        f"LSB_JOBNAME={shlex.quote(job_name.name)}",
        'if [ "$LSB_JOBINDEX" != 0 ]; then LSB_JOBNAME="$LSB_JOBNAME[$LSB_JOBINDEX]"; fi',
        f"LSB_SUB_HOST={shlex.quote(host)}",
        f"LS_SUBCWD={shlex.quote(os.getcwd())}",
        f"LSB_DJOB_NUMPROC={slots}",
        f"LSB_MAX_NUM_PROCESSORS={slots}",
        f"LSB_MCPU_HOSTS={shlex.quote(f'{host} {slots}')}",
        f"LSB_HOSTS={shlex.quote(' '.join([host] * slots))}",
        "LSB_EXEC_CLUSTER=atlas-local",
        "LSF_VERSION=10.1",
        "export LSB_JOBID LSB_JOBINDEX LSB_QUEUE LSB_JOBNAME LSB_SUB_HOST LS_SUBCWD LSB_DJOB_NUMPROC",
        "export LSB_MAX_NUM_PROCESSORS LSB_MCPU_HOSTS LSB_HOSTS LSB_EXEC_CLUSTER LSF_VERSION",
        'mkdir -p "$HOME/.lsbatch"',
        'jobfile="$HOME/.lsbatch/$LSB_JOBID.$LSB_JOBINDEX.shell"',
        # base64, not a here-document: sbatch reads #BSUB and #PBS lines anywhere in the
        # script it is given and would take the user's #BSUB lines as its own options.
        f"base64 -d > \"$jobfile\" <<'{marker}'",
        base64.encodebytes(user_script.encode()).decode() + marker,
        'chmod 700 "$jobfile"',
        "started=$(date)",
        run,
        "status=$?",
        'rm -f "$jobfile"',
    ]
    if report:
        # LSF appends its job report to the -o file (here: after the output, as with
        # LSB_STDOUT_DIRECT=Y). Tools grep its last lines.
        lines += [
            "{",
            "echo",
            "echo '------------------------------------------------------------'",
            'echo "Sender: LSF System <lsfadmin@$LSB_SUB_HOST>"',
            'if [ "$status" = 0 ]; then word=Done; else word=Exited; fi',
            'echo "Subject: Job $LSB_JOBID: <$LSB_JOBNAME> in cluster <$LSB_EXEC_CLUSTER> $word"',
            "echo",
            'echo "Job <$LSB_JOBNAME> was submitted from host <$LSB_SUB_HOST> by user <$(id -un)> '
            'in cluster <$LSB_EXEC_CLUSTER>."',
            'echo "Job was executed on host(s) <$LSB_SUB_HOST>, in queue <$LSB_QUEUE>, as user <$(id -un)> '
            'in cluster <$LSB_EXEC_CLUSTER> at $started"',
            'echo "Terminated at $(date)"',
            "echo",
            'if [ "$status" = 0 ]; then echo "Successfully completed."; '
            'else echo "Exited with exit code $status."; fi',
            "}",
        ]
    lines.append('exit "$status"')
    return "\n".join(lines) + "\n"


def _resolve_dependencies(dep: core.Dependency) -> dict[str, list[str]]:
    jobs = _lsf_jobs()
    resolved: dict[str, list[str]] = {}
    for cond in dep.conditions:
        if cond.by_name:
            pattern = re.escape(cond.job).replace(r"\*", ".*")
            ids = sorted(
                {j.jobid for j, _ in jobs if re.fullmatch(pattern, re.sub(r"\[\d+\]$", "", j.name))}, key=int
            )
        else:
            matching = _select(jobs, cond.job)
            ids = [core.slurm_job_ref(cond.job)] if matching else []
        resolved[cond.job] = ids
    return resolved


def build_sbatch_argv(
    opts: dict[str, list[str]], queue: str, job_name: core.JobName, slots: int, gpus: int, dependency: str
) -> list[str]:
    argv = [
        "sbatch",
        "--parsable",
        f"--partition={queue}",
        f"--job-name={job_name.name}",
        f"--ntasks={slots}",
        "--nodes=1",
    ]
    if job_name.array:
        argv.append(f"--array={job_name.array}")
    is_array = job_name.array is not None
    out = core.single(opts, "-oo") or core.single(opts, "-o")
    err = core.single(opts, "-eo") or core.single(opts, "-e")
    if out:
        argv.append(f"--output={core.slurm_output_pattern(out, is_array)}")
    else:
        # LSF would mail the output to the user; there is no mail here.
        argv.append("--output=/dev/null")
    if err:
        argv.append(f"--error={core.slurm_output_pattern(err, is_array)}")
    # -o/-e append (LSF); -oo/-eo overwrite.
    argv.append("--open-mode=truncate" if core.single(opts, "-oo") else "--open-mode=append")
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    if "-x" in opts:
        argv.append("--exclusive")
    if "-H" in opts:
        argv.append("--hold")
    limit = core.single(opts, "-W")
    if limit:
        argv.append(f"--time={core.parse_run_limit(limit)}")
    mem = core.single(opts, "-M")
    if mem:
        if not re.fullmatch(r"\d+", mem):
            raise core.not_submitted(f"{mem}: Bad argument for option -M")
        argv.append(f"--mem={mem}M")  # LSF_UNIT_FOR_LIMITS=MB in this cluster's lsf.conf
    cwd = core.single(opts, "-cwd")
    if cwd:
        argv.append(f"--chdir={cwd}")
    if dependency:
        argv.append(f"--dependency={dependency}")
    return argv


def bsub(argv: list[str]) -> int:
    if argv in (["-V"], ["-h"]):
        print("IBM Spectrum LSF 10.1 (local stand-in: Atlas localenv/lsf)", file=sys.stderr)
        return 0
    cmd_opts, command = core.parse_bsub_args(argv)
    if command:
        script = core.job_command_from_args(command)
        opts = cmd_opts
    else:
        script = sys.stdin.read()
        embedded, _ = core.parse_bsub_args(core.embedded_bsub_argv(script))
        opts = core.merge_options(cmd_opts, embedded)
        if not script.strip() or all(not x.strip() or x.strip().startswith("#") for x in script.splitlines()):
            raise LsfError(
                f"No command is specified in the script file. {core.NOT_SUBMITTED}"
                if not sys.stdin.isatty()
                else f"No command is specified. {core.NOT_SUBMITTED}"
            )
    for name in core.UNSUPPORTED_OPTIONS:
        if name in opts:
            raise LsfError(
                f"bsub: option {name} is not supported by the local LSF stand-in "
                f"(see localenv/lsf/README.md). {core.NOT_SUBMITTED}"
            )
    for name, values in opts.items():
        if len(values) > 1 and name not in core.REPEATABLE_OPTIONS:
            opts[name] = values[-1:]

    # Syntax first, as LSF checks the request before it asks the cluster.
    job_name = core.parse_job_name(core.single(opts, "-J") or script.splitlines()[0].strip()[:4094])
    low, _high = core.parse_slots(core.single(opts, "-n") or "1")
    resreqs = [core.parse_resreq(r) for r in opts.get("-R", [])]
    gpu_text = core.single(opts, "-gpu")
    gpu_req = core.parse_gpu_req(gpu_text) if gpu_text is not None else None
    dep_text = core.single(opts, "-w")
    dep = core.parse_dependency(dep_text) if dep_text else None
    if core.single(opts, "-W"):
        core.parse_run_limit(core.single(opts, "-W") or "")
    login_shell = core.single(opts, "-L")
    if login_shell and not (login_shell.startswith("/") and os.access(login_shell, os.X_OK)):
        raise core.not_submitted(f"{login_shell}: Bad login shell")

    queues = _queues()
    queue_name = core.single(opts, "-q")
    if queue_name is not None:
        queue_name = queue_name.split()[0] if queue_name.split() else queue_name
        if queue_name not in queues:
            raise LsfError(f"{queue_name}: No such queue. {core.NOT_SUBMITTED}")
    else:
        queue_name = next((q.name for q in queues.values() if q.default), "normal")
    queue = queues[queue_name]
    if low > queue.cpus_per_node * max(queue.nodes, 1):
        raise LsfError(f"Too many processors requested. {core.NOT_SUBMITTED}")
    gpus = 0
    if gpu_req is not None:
        gpus = gpu_req.num * (low if gpu_req.per_task else 1)
    else:
        for r in resreqs:
            if "ngpus_physical" in r.rusage:
                gpus = int(float(r.rusage["ngpus_physical"]))
    if gpus > queue.gpus_per_node:
        raise LsfError(f"Too many GPUs requested. {core.NOT_SUBMITTED}")
    dependency = core.slurm_dependency(dep, _resolve_dependencies(dep)) if dep else ""

    out = core.single(opts, "-oo") or core.single(opts, "-o")
    sbatch_argv = build_sbatch_argv(opts, queue_name, job_name, low, gpus, dependency)
    wrapper = _wrapper_script(script, opts, queue_name, job_name, low, report=bool(out))
    result = _slurm(sbatch_argv, stdin=wrapper)
    if result.returncode != 0:
        reason = result.stderr.strip().replace("sbatch: error: ", "")
        raise LsfError(f"{reason}. {core.NOT_SUBMITTED}")
    job_id = result.stdout.strip().split(";")[0]
    where = "queue" if core.single(opts, "-q") else "default queue"
    print(f"Job <{job_id}> is submitted to {where} <{queue_name}>.")
    return 0


# --- bjobs ----------------------------------------------------------------------------------------


def _parse_flags(
    argv: list[str], flags: set[str], valued: set[str], command: str
) -> tuple[set[str], dict[str, str], list[str]]:
    seen: set[str] = set()
    values: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in flags:
            seen.add(word)
        elif word in valued:
            if i + 1 >= len(argv):
                raise LsfError(f"{command}: option {word} requires an argument")
            values[word] = argv[i + 1]
            i += 1
        elif word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-\d+", word):
            raise LsfError(f"{command}: illegal option -- {word.lstrip('-')}")
        else:
            rest.append(word)
        i += 1
    return seen, values, rest


def bjobs(argv: list[str]) -> int:
    flags, values, ids = _parse_flags(
        argv,
        {"-a", "-d", "-p", "-r", "-s", "-w", "-l", "-json", "-noheader", "-hms", "-A", "-W", "-X"},
        {"-o", "-u", "-q", "-J", "-m", "-P", "-g"},
        "bjobs",
    )
    if "-json" in flags and "-o" not in values:
        raise LsfError("-json must be used with -o")
    if "-json" in flags and "-noheader" in flags:
        raise LsfError("-json and -noheader cannot be used together")
    spec = core.parse_output_spec(values["-o"]) if "-o" in values else None
    all_users = values.get("-u") == "all"
    jobs = _lsf_jobs(all_users=all_users)
    now = time.time()
    errors: list[str] = []
    selected: list[LsfJob] = []
    if ids:
        for wanted in ids:
            found = _select(jobs, wanted)
            if found:
                selected.extend(found)
            else:
                errors.append(f"Job <{wanted}> is not found")
    else:
        selected = _listed_by_default(jobs, flags)
        if "-p" in flags:
            selected = [j for j in selected if j.stat in ("PEND", "PSUSP")]
        if "-r" in flags:
            selected = [j for j in selected if j.stat == "RUN"]
        if "-q" in values:
            selected = [j for j in selected if j.queue == values["-q"]]
        if "-J" in values:
            pattern = re.escape(values["-J"]).replace(r"\*", ".*")
            selected = [j for j in selected if re.fullmatch(pattern, re.sub(r"\[\d+\]$", "", j.name))]
    hms = "-hms" in flags
    if spec is not None and "-json" in flags:
        print(core.format_bjobs_json(spec, selected, errors, now, hms))
        return 255 if errors and len(ids) > 1 else 0
    for err in errors:
        print(err, file=sys.stderr)
    if not selected:
        if not ids:
            word = "job" if ("-a" in flags or "-d" in flags) else "unfinished job"
            print(f"No {word} found", file=sys.stderr)
        return 255 if errors and len(ids) > 1 else 0
    if spec is not None:
        print(
            core.format_bjobs_text(
                spec, selected, now, header="-noheader" not in flags, hms=hms, wide="-w" in flags
            )
        )
    elif "-l" in flags:
        print("\n".join(core.format_bhist_long(j, now) for j in selected))
    else:
        text = core.format_bjobs_default(selected, wide="-w" in flags)
        if "-noheader" in flags:
            text = "\n".join(text.splitlines()[1:])
        print(text)
    return 255 if errors and len(ids) > 1 else 0


# --- bkill ----------------------------------------------------------------------------------------


def bkill(argv: list[str]) -> int:
    _flags, values, ids = _parse_flags(argv, {"-r", "-d", "-l"}, {"-s", "-J", "-q", "-u", "-m"}, "bkill")
    jobs = _lsf_jobs()
    if "-J" in values or "-q" in values or ids == ["0"]:
        targets = [j for j, _ in jobs if not j.finished]
        if "-J" in values:
            pattern = re.escape(values["-J"]).replace(r"\*", ".*")
            targets = [j for j in targets if re.fullmatch(pattern, re.sub(r"\[\d+\]$", "", j.name))]
        if "-q" in values:
            targets = [j for j in targets if j.queue == values["-q"]]
        if not targets:
            print("No unfinished job found", file=sys.stderr)
            return 255
        ids = sorted({j.display_id for j in targets}, key=lambda x: [int(n) for n in re.findall(r"\d+", x)])
    if not ids:
        raise LsfError('Usage: bkill [-s signal] [-q queue] [-J job_name] [jobId | "jobId[index_list]" ...]')
    status = 0
    signal = values.get("-s")
    for wanted in ids:
        found = _select(jobs, wanted)
        if not found:
            outcome = "unknown"
        elif all(j.finished for j in found):
            outcome = "finished"
        else:
            ref = core.slurm_job_ref(wanted.strip())
            cmd = (
                ["scancel", ref] if not signal else ["scancel", f"--signal={signal.removeprefix('SIG')}", ref]
            )
            result = _slurm(cmd)
            outcome = "killed" if result.returncode == 0 else "unknown"
        out, err, code = core.bkill_message(wanted.strip(), outcome)
        if out:
            print(out)
        if err:
            print(err, file=sys.stderr)
        status = max(status, code)
    return status


# --- bhist, bqueues, bhosts, lsload ---------------------------------------------------------------


def bhist(argv: list[str]) -> int:
    flags, values, ids = _parse_flags(
        argv,
        {"-a", "-d", "-l", "-w", "-b", "-p", "-r", "-s"},
        {"-J", "-q", "-u", "-n", "-S", "-C", "-D", "-T"},
        "bhist",
    )
    jobs = _lsf_jobs(all_users=values.get("-u") == "all")
    now = time.time()
    selected: list[LsfJob] = []
    if ids:
        for wanted in ids:
            found = _select(jobs, wanted)
            if not found:
                print(f"{wanted}: No matching job found", file=sys.stderr)
            selected.extend(found)
    else:
        selected = _listed_by_default(jobs, flags)
        if "-J" in values:
            selected = [j for j in selected if re.sub(r"\[\d+\]$", "", j.name) == values["-J"]]
    if not selected:
        if not ids:
            print("No matching job found", file=sys.stderr)
        return 255 if ids else 0
    if "-l" in flags:
        print(("\n" + "-" * 78 + "\n\n").join(core.format_bhist_long(j, now) for j in selected))
    else:
        print(core.format_bhist_short(selected, now))
    return 0


def bqueues(argv: list[str]) -> int:
    _flags, _values, names = _parse_flags(
        argv, {"-w", "-l", "-r", "-noheader"}, {"-u", "-m", "-o"}, "bqueues"
    )
    queues = _queues()
    jobs = [j for j, _ in _lsf_jobs(all_users=True)]
    for name in names:
        if name not in queues:
            print(f"{name}: No such queue", file=sys.stderr)
            return 255
    lines = ["QUEUE_NAME      PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP "]
    for q in queues.values():
        if names and q.name not in names:
            continue
        mine = [j for j in jobs if j.queue == q.name and not j.finished]
        pend = sum(j.slots for j in mine if j.stat in ("PEND", "PSUSP"))
        run = sum(j.slots for j in mine if j.stat == "RUN")
        susp = sum(j.slots for j in mine if j.stat in ("USUSP", "SSUSP"))
        prio = 30 if q.default else 20
        status = "Open:Active" if q.up else "Closed:Inact"
        lines.append(
            f"{q.name:<15} {prio:>4} {status:<15} {'-':>4} {'-':>4} {'-':>4} {'-':>4} "
            f"{pend + run + susp:>5} {pend:>5} {run:>5} {susp:>5}"
        )
    print("\n".join(lines))
    return 0


def _node_usage() -> list[dict[str, str]]:
    result = _slurm(["sinfo", "-h", "-N", "-O", "NodeList:|,StateLong:|,CPUsState:|,Gres:|,GresUsed:"])
    if result.returncode != 0:
        raise LsfError(f"Cannot connect to LSF. Please wait ... (sinfo: {result.stderr.strip()})")
    nodes: dict[str, dict[str, str]] = {}
    for line in result.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 5:
            nodes[parts[0]] = {
                "name": parts[0],
                "state": parts[1],
                "cpus": parts[2],
                "gres": parts[3],
                "gres_used": parts[4],
            }
    return list(nodes.values())


def _count_gpus(gres: str) -> int:
    return sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres))


def bhosts(argv: list[str]) -> int:
    _parse_flags(argv, {"-w", "-l", "-noheader", "-gpu"}, set(), "bhosts")
    jobs = [j for j, _ in _lsf_jobs(all_users=True)]
    lines = ["HOST_NAME          STATUS       JL/U    MAX  NJOBS    RUN  SSUSP  USUSP    RSV "]
    for node in _node_usage():
        alloc, _idle, _other, total = (int(x) for x in node["cpus"].split("/"))
        state = node["state"].rstrip("*~#")
        status = "ok" if state in ("idle", "mixed") else ("closed" if state == "allocated" else "unavail")
        run = sum(j.slots for j in jobs if j.stat == "RUN")
        lines.append(
            f"{node['name']:<18} {status:<10} {'-':>6} {total:>6} {alloc:>6} {run:>6} {0:>6} {0:>6} {0:>6}"
        )
    print("\n".join(lines))
    return 0


def lsload(argv: list[str]) -> int:
    flags, _values, _hosts = _parse_flags(argv, {"-gpu", "-gpuload", "-w", "-l"}, {"-R", "-I"}, "lsload")
    nodes = _node_usage()
    # The local Satori's GPUs are mock: nothing measures their use or memory, so every such load
    # index is "-", as LSF prints an index it has no value for (never a made-up 0%).
    if "-gpu" in flags:
        lines = ["HOST_NAME       status  ngpus  gpu_shared_avg_mut  gpu_shared_avg_ut  ngpus_physical"]
        for n in nodes:
            gpus = _count_gpus(n["gres"])
            status = "ok" if not n["state"].startswith(("down", "drain", "fail")) else "unavail"
            lines.append(f"{n['name']:<15} {status:>6} {gpus:>6} {'-':>19} {'-':>18} {gpus:>15}")
        print("\n".join(lines))
        return 0
    if "-gpuload" in flags:
        lines = [
            "HOST_NAME       gpuid   gpu_model   gpu_mode  gpu_temp   gpu_ecc  gpu_ut  gpu_mut gpu_mtotal "
            "gpu_mused   gpu_pstate   gpu_status   gpu_error"
        ]
        for n in nodes:
            used = _count_gpus(n["gres_used"].split("(")[0])
            for g in range(_count_gpus(n["gres"])):
                lines.append(
                    f"{n['name']:<15} {g:>5} {'TeslaV100_SXM2_32GB':>12} {'0.0':>9} {'-':>9} {'-':>9} "
                    f"{'-':>7} {'-':>8} {'32G':>10} {'-':>9} {'-':>12} "
                    f"{'busy' if g < used else 'ok':>12} {'-':>11}"
                )
        print("\n".join(lines))
        return 0
    lines = ["HOST_NAME       status  r15s   r1m  r15m   ut    pg  ls    it   tmp   swp   mem"]
    load = os.getloadavg()
    for n in nodes:
        lines.append(
            f"{n['name']:<15} {'ok':>6} {load[0]:>5.1f} {load[1]:>5.1f} {load[2]:>5.1f}   0%   0.0   0"
            "     0    0M    0M    0M"
        )
    print("\n".join(lines))
    return 0


COMMANDS = {
    "bsub": bsub,
    "bjobs": bjobs,
    "bkill": bkill,
    "bhist": bhist,
    "bqueues": bqueues,
    "bhosts": bhosts,
    "lsload": lsload,
}


def main(command: str, argv: list[str]) -> int:
    try:
        return COMMANDS[command](argv)
    except LsfError as exc:
        print(exc.message, file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 141
