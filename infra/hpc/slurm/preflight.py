"""What `atlas doctor` asks Slurm before the first `pulumi up`, and how it reads the answers: the
partitions (`sinfo -h -o '%P|%a'`) and each step's request (`sbatch --test-only`, which checks a
job against the partition's nodes and limits and submits nothing). Pure: answers in, findings out.

Formats from Slurm's documentation (sinfo's `%P` marks the default partition with `*`, `%a` is its
availability: up, down, drain, inact) and Debian bookworm's slurm-wlm 22.05.8: `sbatch --test-only`
prints `sbatch: Job <id> to start at <time> using <n> processors on nodes <nodes> in partition
<partition>` on stderr and exits 0, or `sbatch: error: Batch job submission failed: <reason>` and
exits 1.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from infra.doctor import Finding, Status
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import JobSpec, StepRequest

PARTITIONS_QUERY = "sinfo -h -o '%P|%a'"
WOULD_START = re.compile(r"Job \d+ to start at (\S+) using (\d+) processors on nodes (\S+) in partition (\S+)")
# Slurm's reason: after "Batch job submission failed:", else after "error:".
FAILED = (re.compile(r"Batch job submission failed:\s*(.+)$"), re.compile(r"error:\s*(.+)$"))
# The end of the heredoc that hands sbatch the job script (a line no rendered script holds).
SCRIPT_END = "ATLAS_DOCTOR_JOB_SCRIPT"
SECTION, EXIT = "@@atlas-step", "@@atlas-exit"
MAX_LISTED = 12


def partitions(stdout: str) -> dict[str, tuple[str, bool]]:
    """`sinfo -h -o '%P|%a'`: each partition's availability and whether it is the default."""
    found: dict[str, tuple[str, bool]] = {}
    for line in stdout.splitlines():
        name, sep, available = line.strip().partition("|")
        if sep and name:
            found[name.rstrip("*")] = (available.strip(), name.endswith("*"))
    return found


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def judge_partition(queue: str | None, key: str, result: RemoteResult) -> Finding:
    """The target's partition exists and is up (None: the cluster has a default partition)."""
    if result.exit_code != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        return Finding.fail(
            f"`{PARTITIONS_QUERY}` exited {result.exit_code}: {said[-1] if said else 'no output'}",
            "check that slurmctld answers from the login node (`sinfo`), or ask the site",
        )
    found = partitions(result.stdout)
    names = sorted(found)
    if queue is None:
        default = next((name for name, (_a, is_default) in found.items() if is_default), None)
        if default is None:
            return Finding.fail(
                f"no queue named, and Slurm has no default partition (sinfo lists {_listing(names) or 'none'})",
                f"set {key}.queue to the partition to run in",
            )
        queue = default
    if queue not in found:
        return Finding.fail(
            f"partition {queue!r} does not exist (sinfo lists {_listing(names) or 'none'})",
            f"set {key}.queue to one of them",
        )
    available, is_default = found[queue]
    if available != "up":
        return Finding.fail(
            f"partition {queue!r} is {available}: it takes no jobs now",
            f"choose another partition for {key}.queue ({_listing([n for n in names if found[n][0] == 'up'])}), "
            "or ask the site when it is up again",
        )
    default_note = " (the default)" if is_default else ""
    return Finding.ok(f"partition {queue!r}{default_note} is up")


def dry_run_command(steps: Sequence[StepRequest]) -> str:
    """`sbatch --test-only` for each step, reading its whole job script (its directives, the
    site's among them) from a heredoc: what `pulumi up` will submit, asked about and not
    submitted; each answer in a section of its own (`@@atlas-step <name>`, then its exit status)."""
    parts = []
    for step in steps:
        if SCRIPT_END in step.script:
            raise ValueError(f"a job script holds {SCRIPT_END!r}, the end of its heredoc")
        body = step.script if step.script.endswith("\n") else step.script + "\n"
        parts.append(
            f"echo {shlex.quote(SECTION + ' ' + step.spec.step)}\n"
            f"sbatch --test-only 2>&1 <<'{SCRIPT_END}'\n{body}{SCRIPT_END}\n"
            f'echo "{EXIT} $?"'
        )
    return "\n".join(parts)


def dry_run_sections(stdout: str) -> dict[str, tuple[int | None, str]]:
    """The answer of `dry_run_command` by step: its exit status (None: the section ended early) and text."""
    found: dict[str, tuple[int | None, str]] = {}
    step: str | None = None
    lines: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(SECTION + " "):
            step, lines = line[len(SECTION) + 1 :].strip(), []
            found[step] = (None, "")
        elif line.startswith(EXIT + " ") and step is not None:
            code = line[len(EXIT) + 1 :].strip()
            found[step] = (int(code) if code.isdigit() else None, "\n".join(lines))
            step = None
        elif step is not None:
            lines.append(line)
            found[step] = (None, "\n".join(lines))
    return found


def describe_request(spec: JobSpec) -> str:
    """What a step asks for, as a message names it: `train (1 node x 2 GPUs, 8 CPUs, 16384M, 01:00:00)`."""
    parts = [f"{spec.nodes} node{'s' if spec.nodes != 1 else ''}"]
    if spec.gpus_per_node:
        parts[0] += f" x {spec.gpus_per_node} GPU{'s' if spec.gpus_per_node != 1 else ''}"
    parts.append(f"{spec.cpus_per_task} CPU{'s' if spec.cpus_per_task != 1 else ''}")
    if spec.memory_mib is not None:
        parts.append(f"{spec.memory_mib}M")
    if spec.walltime_seconds:
        hours, rest = divmod(spec.walltime_seconds, 3600)
        parts.append(f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}")
    return f"{spec.step} ({', '.join(parts)})"


def judge_dry_run(steps: Sequence[StepRequest], key: str, environment: str, result: RemoteResult) -> Finding:
    """`dry_run_command`'s answer: the first step Slurm refuses, with its reason and the fix; else
    where the step asking for the most GPUs would start."""
    sections = dry_run_sections(result.stdout)
    findings = []
    for step in steps:
        code, text = sections.get(step.spec.step, (None, ""))
        if code is None:
            said = (result.stderr or text or result.stdout).strip().splitlines()
            return Finding.fail(
                f"`sbatch --test-only` gave no answer for step {step.spec.step} (exit {result.exit_code}: "
                f"{said[-1] if said else 'no output'})",
                "check that sbatch runs on the login node (`sbatch --version`)",
            )
        finding = judge_test_only(step, key, environment, code, text)
        if finding.status is not Status.OK:
            return finding
        findings.append((step.spec, finding))
    if not findings:
        return Finding.ok("the workload has no step")
    _spec, finding = max(findings, key=lambda pair: pair[0].gpus_per_node * pair[0].nodes)
    others = f"; the other {len(findings) - 1} step(s) too" if len(findings) > 1 else ""
    return Finding.ok(f"{finding.detail}{others} (sbatch --test-only)")


def judge_test_only(step: StepRequest, key: str, environment: str, code: int, text: str) -> Finding:
    """`sbatch --test-only`'s answer for one step: where it would start, or Slurm's reason and the fix."""
    spec = step.spec
    where = describe_request(spec)
    started = WOULD_START.search(text)
    if code == 0 and started:
        when, _cpus, nodes, partition = started.groups()
        return Finding.ok(f"{where} would start at {when} on {nodes} in partition {partition}")
    if code == 0:
        return Finding.ok(f"{where} accepted ({text.strip()[:200] or 'no output'})")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [m.group(1) for pattern in FAILED for line in lines if (m := pattern.search(line))]
    reason = said[0] if said else lines[-1] if lines else "no output"
    resources = f"overrides.{environment}.{spec.step}.resources in the workload definition"
    low = reason.lower()
    if "node configuration is not available" in low:
        fix = (
            f"no node of the partition has what {spec.step} asks: lower it ({resources}) or choose a partition "
            f"whose nodes have it for {key}.queue (`sinfo -o '%P %D %c %m %G'`)"
        )
    elif "time limit" in low:
        fix = f"lower the step's walltime ({resources}) or choose a partition with a longer MaxTime (sinfo -o '%P %l')"
    elif "generic resource" in low or "gres" in low:
        fix = f"the partition's nodes have no such GPUs (gres): choose a GPU partition for {key}.queue"
    elif "account" in low or "qos" in low or "association" in low:
        fix = (
            f"set {key}.account (or the QOS in {key}.extra_directives) to one the site gave you "
            "(`sacctmgr show assoc user=$USER`)"
        )
    elif "partition" in low:
        fix = f"set {key}.queue to a partition `sinfo` lists"
    else:
        fix = f"change what the step asks ({resources}) or the site's directives ({key}.extra_directives)"
    return Finding.fail(f"{where}: Slurm refuses it: {reason}", fix)
