"""The LSF commands that read or end jobs and hosts: bjobs, bkill, bhist, bqueues, bhosts, lsload.

Each reads Slurm through slurm.py and prints what job_views.py formats. LSF job ids are Slurm's
job ids (array elements: the array's id plus [index]). Stdlib only: it runs on the login node.
"""

from __future__ import annotations

import os
import re
import sys
import time

from .bsub_options import slurm_job_ref
from .errors import LsfError
from .job_views import (
    LsfJob,
    bkill_message,
    format_bhist_long,
    format_bhist_short,
    format_bjobs_default,
    format_bjobs_json,
    format_bjobs_text,
    parse_output_spec,
)
from .slurm import count_gpus, gpu_model, listed_by_default, lsf_jobs, node_usage, queues, run_slurm, select_jobs

# --- bjobs ----------------------------------------------------------------------------------------


def parse_flags(
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
    flags, values, ids = parse_flags(
        argv,
        {"-a", "-d", "-p", "-r", "-s", "-w", "-l", "-json", "-noheader", "-hms", "-A", "-W", "-X"},
        {"-o", "-u", "-q", "-J", "-m", "-P", "-g"},
        "bjobs",
    )
    if "-json" in flags and "-o" not in values:
        raise LsfError("-json must be used with -o")
    if "-json" in flags and "-noheader" in flags:
        raise LsfError("-json and -noheader cannot be used together")
    spec = parse_output_spec(values["-o"]) if "-o" in values else None
    all_users = values.get("-u") == "all"
    jobs = lsf_jobs(all_users=all_users)
    now = time.time()
    errors: list[str] = []
    selected: list[LsfJob] = []
    if ids:
        for wanted in ids:
            found = select_jobs(jobs, wanted)
            if found:
                selected.extend(found)
            else:
                errors.append(f"Job <{wanted}> is not found")
    else:
        selected = listed_by_default(jobs, flags)
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
        print(format_bjobs_json(spec, selected, errors, now, hms))
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
            format_bjobs_text(
                spec, selected, now, header="-noheader" not in flags, hms=hms, wide="-w" in flags
            )
        )
    elif "-l" in flags:
        print("\n".join(format_bhist_long(j, now) for j in selected))
    else:
        text = format_bjobs_default(selected, wide="-w" in flags)
        if "-noheader" in flags:
            text = "\n".join(text.splitlines()[1:])
        print(text)
    return 255 if errors and len(ids) > 1 else 0


# --- bkill ----------------------------------------------------------------------------------------


def bkill(argv: list[str]) -> int:
    _flags, values, ids = parse_flags(argv, {"-r", "-d", "-l"}, {"-s", "-J", "-q", "-u", "-m"}, "bkill")
    jobs = lsf_jobs()
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
        found = select_jobs(jobs, wanted)
        if not found:
            outcome = "unknown"
        elif all(j.finished for j in found):
            outcome = "finished"
        else:
            ref = slurm_job_ref(wanted.strip())
            cmd = (
                ["scancel", ref] if not signal else ["scancel", f"--signal={signal.removeprefix('SIG')}", ref]
            )
            result = run_slurm(cmd)
            outcome = "killed" if result.returncode == 0 else "unknown"
        out, err, code = bkill_message(wanted.strip(), outcome)
        if out:
            print(out)
        if err:
            print(err, file=sys.stderr)
        status = max(status, code)
    return status


# --- bhist, bqueues, bhosts, lsload ---------------------------------------------------------------


def bhist(argv: list[str]) -> int:
    flags, values, ids = parse_flags(
        argv,
        {"-a", "-d", "-l", "-w", "-b", "-p", "-r", "-s"},
        {"-J", "-q", "-u", "-n", "-S", "-C", "-D", "-T"},
        "bhist",
    )
    jobs = lsf_jobs(all_users=values.get("-u") == "all")
    now = time.time()
    selected: list[LsfJob] = []
    if ids:
        for wanted in ids:
            found = select_jobs(jobs, wanted)
            if not found:
                print(f"{wanted}: No matching job found", file=sys.stderr)
            selected.extend(found)
    else:
        selected = listed_by_default(jobs, flags)
        if "-J" in values:
            selected = [j for j in selected if re.sub(r"\[\d+\]$", "", j.name) == values["-J"]]
    if not selected:
        if not ids:
            print("No matching job found", file=sys.stderr)
        return 255 if ids else 0
    if "-l" in flags:
        print(("\n" + "-" * 78 + "\n\n").join(format_bhist_long(j, now) for j in selected))
    else:
        print(format_bhist_short(selected, now))
    return 0


def bqueues(argv: list[str]) -> int:
    _flags, _values, names = parse_flags(
        argv, {"-w", "-l", "-r", "-noheader"}, {"-u", "-m", "-o"}, "bqueues"
    )
    known_queues = queues()
    jobs = [j for j, _ in lsf_jobs(all_users=True)]
    for name in names:
        if name not in known_queues:
            print(f"{name}: No such queue", file=sys.stderr)
            return 255
    lines = ["QUEUE_NAME      PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP "]
    for q in known_queues.values():
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


def bhosts(argv: list[str]) -> int:
    parse_flags(argv, {"-w", "-l", "-noheader", "-gpu"}, set(), "bhosts")
    jobs = [j for j, _ in lsf_jobs(all_users=True)]
    lines = ["HOST_NAME          STATUS       JL/U    MAX  NJOBS    RUN  SSUSP  USUSP    RSV "]
    for node in node_usage():
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
    flags, _values, _hosts = parse_flags(argv, {"-gpu", "-gpuload", "-w", "-l"}, {"-R", "-I"}, "lsload")
    nodes = node_usage()
    # The local Satori's GPUs are mock: nothing measures their use or memory, so every such load
    # index is "-", as LSF prints an index it has no value for (never a made-up 0%).
    if "-gpu" in flags:
        lines = ["HOST_NAME       status  ngpus  gpu_shared_avg_mut  gpu_shared_avg_ut  ngpus_physical"]
        for n in nodes:
            gpus = count_gpus(n["gres"])
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
            used = count_gpus(n["gres_used"].split("(")[0])
            for g in range(count_gpus(n["gres"])):
                lines.append(
                    f"{n['name']:<15} {g:>5} {gpu_model(n['gres']):>12} {'0.0':>9} {'-':>9} {'-':>9} "
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
