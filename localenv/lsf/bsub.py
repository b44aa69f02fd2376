"""`bsub` on Slurm: a submission's options read and checked as LSF does, then one sbatch of a wrapper script.

The wrapper gives the job LSF's environment (LSB_JOBID, LSB_HOSTS, ...), runs the user's script as
LSF runs it (`-L`: through a login shell) and appends LSF's job report to the `-o` file. The
syntax lives in bsub_options.py, Slurm in slurm.py. Stdlib only: it runs on the login node.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import sys
import uuid

from .bsub_options import (
    REPEATABLE_OPTIONS,
    UNSUPPORTED_OPTIONS,
    Dependency,
    JobName,
    embedded_bsub_argv,
    job_command_from_args,
    merge_options,
    parse_bsub_args,
    parse_dependency,
    parse_gpu_req,
    parse_job_name,
    parse_resreq,
    parse_run_limit,
    parse_slots,
    single,
    slurm_dependency,
    slurm_job_ref,
    slurm_output_pattern,
)
from .errors import NOT_SUBMITTED, LsfError, not_submitted
from .slurm import host_name, lsf_jobs, queues, run_slurm, select_jobs


def _wrapper_script(
    user_script: str, opts: dict[str, list[str]], queue: str, job_name: JobName, slots: int, report: bool
) -> str:
    """The sbatch script: LSF's job environment, the user's script run as LSF runs it, a job report."""
    host = host_name()
    login_shell = single(opts, "-L")
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


def _resolve_dependencies(dep: Dependency) -> dict[str, list[str]]:
    jobs = lsf_jobs()
    resolved: dict[str, list[str]] = {}
    for cond in dep.conditions:
        if cond.by_name:
            pattern = re.escape(cond.job).replace(r"\*", ".*")
            ids = sorted(
                {j.jobid for j, _ in jobs if re.fullmatch(pattern, re.sub(r"\[\d+\]$", "", j.name))}, key=int
            )
        else:
            matching = select_jobs(jobs, cond.job)
            ids = [slurm_job_ref(cond.job)] if matching else []
        resolved[cond.job] = ids
    return resolved


def build_sbatch_argv(
    opts: dict[str, list[str]], queue: str, job_name: JobName, slots: int, gpus: int, dependency: str
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
    out = single(opts, "-oo") or single(opts, "-o")
    err = single(opts, "-eo") or single(opts, "-e")
    if out:
        argv.append(f"--output={slurm_output_pattern(out, is_array)}")
    else:
        # LSF would mail the output to the user; there is no mail here.
        argv.append("--output=/dev/null")
    if err:
        argv.append(f"--error={slurm_output_pattern(err, is_array)}")
    # -o/-e append (LSF); -oo/-eo overwrite.
    argv.append("--open-mode=truncate" if single(opts, "-oo") else "--open-mode=append")
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    if "-x" in opts:
        argv.append("--exclusive")
    if "-H" in opts:
        argv.append("--hold")
    limit = single(opts, "-W")
    if limit:
        argv.append(f"--time={parse_run_limit(limit)}")
    mem = single(opts, "-M")
    if mem:
        if not re.fullmatch(r"\d+", mem):
            raise not_submitted(f"{mem}: Bad argument for option -M")
        argv.append(f"--mem={mem}M")  # LSF_UNIT_FOR_LIMITS=MB in this cluster's lsf.conf
    cwd = single(opts, "-cwd")
    if cwd:
        argv.append(f"--chdir={cwd}")
    if dependency:
        argv.append(f"--dependency={dependency}")
    return argv


def bsub(argv: list[str]) -> int:
    if argv in (["-V"], ["-h"]):
        print("IBM Spectrum LSF 10.1 (local stand-in: Atlas localenv/lsf)", file=sys.stderr)
        return 0
    cmd_opts, command = parse_bsub_args(argv)
    if command:
        script = job_command_from_args(command)
        opts = cmd_opts
    else:
        script = sys.stdin.read()
        embedded, _ = parse_bsub_args(embedded_bsub_argv(script))
        opts = merge_options(cmd_opts, embedded)
        if not script.strip() or all(not x.strip() or x.strip().startswith("#") for x in script.splitlines()):
            raise LsfError(
                f"No command is specified in the script file. {NOT_SUBMITTED}"
                if not sys.stdin.isatty()
                else f"No command is specified. {NOT_SUBMITTED}"
            )
    for name in UNSUPPORTED_OPTIONS:
        if name in opts:
            raise LsfError(
                f"bsub: option {name} is not supported by the local LSF stand-in "
                f"(see localenv/lsf/README.md). {NOT_SUBMITTED}"
            )
    for name, values in opts.items():
        if len(values) > 1 and name not in REPEATABLE_OPTIONS:
            opts[name] = values[-1:]

    # Syntax first, as LSF checks the request before it asks the cluster.
    job_name = parse_job_name(single(opts, "-J") or script.splitlines()[0].strip()[:4094])
    low, _high = parse_slots(single(opts, "-n") or "1")
    resreqs = [parse_resreq(r) for r in opts.get("-R", [])]
    gpu_text = single(opts, "-gpu")
    gpu_req = parse_gpu_req(gpu_text) if gpu_text is not None else None
    dep_text = single(opts, "-w")
    dep = parse_dependency(dep_text) if dep_text else None
    if single(opts, "-W"):
        parse_run_limit(single(opts, "-W") or "")
    login_shell = single(opts, "-L")
    if login_shell and not (login_shell.startswith("/") and os.access(login_shell, os.X_OK)):
        raise not_submitted(f"{login_shell}: Bad login shell")

    known_queues = queues()
    queue_name = single(opts, "-q")
    if queue_name is not None:
        queue_name = queue_name.split()[0] if queue_name.split() else queue_name
        if queue_name not in known_queues:
            raise LsfError(f"{queue_name}: No such queue. {NOT_SUBMITTED}")
    else:
        queue_name = next((q.name for q in known_queues.values() if q.default), "normal")
    queue = known_queues[queue_name]
    if low > queue.cpus_per_node * max(queue.nodes, 1):
        raise LsfError(f"Too many processors requested. {NOT_SUBMITTED}")
    gpus = 0
    if gpu_req is not None:
        gpus = gpu_req.num * (low if gpu_req.per_task else 1)
    else:
        for r in resreqs:
            if "ngpus_physical" in r.rusage:
                gpus = int(float(r.rusage["ngpus_physical"]))
    if gpus > queue.gpus_per_node:
        raise LsfError(f"Too many GPUs requested. {NOT_SUBMITTED}")
    dependency = slurm_dependency(dep, _resolve_dependencies(dep)) if dep else ""

    out = single(opts, "-oo") or single(opts, "-o")
    sbatch_argv = build_sbatch_argv(opts, queue_name, job_name, low, gpus, dependency)
    wrapper = _wrapper_script(script, opts, queue_name, job_name, low, report=bool(out))
    result = run_slurm(sbatch_argv, stdin=wrapper)
    if result.returncode != 0:
        reason = result.stderr.strip().replace("sbatch: error: ", "")
        raise LsfError(f"{reason}. {NOT_SUBMITTED}")
    job_id = result.stdout.strip().split(";")[0]
    where = "queue" if single(opts, "-q") else "default queue"
    print(f"Job <{job_id}> is submitted to {where} <{queue_name}>.")
    return 0
