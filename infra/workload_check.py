"""`scripts/workload check PATH`: a workload definition checked and shown as each side would run
it, before any cluster is touched.

Reads the definition the way `atlas:workload` does (a shipped name, a workload.yaml, or a folder
holding one), validates it, lists what a folder source stages (against its limits), then prints
each step as the LSF job script, the Slurm job script and the Kubernetes Job that `pulumi up`
would create, and what the comparison report will be able to measure. A swept step shows its
expansion (how many points, the first and last, parallel, metric, the arrays each scheduler
splits it into), its array script with the head of its table of points, and its Indexed Job. It warns (on stderr, exit
status 0) of what keeps the Kubernetes side's image from building on the local environment or
from Git (infra/image_check.py): a fixed `FROM`, no `ARG BASE_IMAGE`, the build's files not
committed. Nothing is submitted, built or connected to; exit status 1 with the key and the fix
when the definition is refused.

    scripts/workload check workloads/wordfreq
    scripts/workload check ../my-pipeline --environment satori --step count
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import yaml

from infra.hpc.job_script import SubmissionKey, step_scripts, sweep_scripts
from infra.hpc.registry import SCHEDULER_NAMES, scheduler_for
from infra.image_check import build_warnings
from infra.openshift.manifests import labels
from infra.openshift.manifests.pods import PodContext
from infra.openshift.manifests.step_jobs import step_job
from infra.openshift.manifests.sweep_jobs import indexed_step_job
from infra.openshift.manifests.volumes import Claims, SourceVolume, source_config_map_data
from infra.openshift.settings import OpenShiftSettings
from infra.openshift.settings_parser import parse_openshift_settings
from infra.workload.load import REPO_ROOT, SHIPPED, FolderFile, folder_files, load_workload, locate_workload
from infra.workload.model import (
    FOLDER_LIMITS,
    RUNTIME_BUILD,
    FolderSource,
    GitSource,
    InTreeSource,
    Workload,
    WorkloadError,
)
from infra.workload.render import render_step
from infra.workload.sweep import env_name, point_args, point_at, point_count, point_folder, split_points

# What the printed Job stands on: the objects `pulumi up` creates beside it, by role.
PLACEHOLDER_CLAIMS = Claims(data="<data PVC>", results="<results PVC>", logs="<logs PVC>")


def source_lines(workload: Workload, files: tuple[FolderFile, ...]) -> list[str]:
    source = workload.source
    if isinstance(source, FolderSource):
        total = sum(f.size for f in files)
        lines = [
            f"source: folder {source.folder} (beside the definition): {len(files)} files, {total:,} bytes "
            f"(limit {FOLDER_LIMITS.max_files} files, {FOLDER_LIMITS.max_bytes:,} bytes), staged as they are"
        ]
        lines += [f"  {f.path}  {f.size:,} bytes  mode {f.mode:o}" for f in files]
        return lines
    if isinstance(source, GitSource):
        patch = f", patch {source.patch}" if source.patch else ""
        return [f"source: {source.repository} at {source.commit} ({source.branch}){patch}"]
    if isinstance(source, InTreeSource):
        return [f"source: the Python package {source.path} inside Atlas (its *.py files)"]
    return [f"source: {source!r}"]


def image_lines(workload: Workload) -> list[str]:
    """Where the Kubernetes side's image comes from, when the stack builds it (`image.build`)."""
    what = "Atlas's runtime image" if workload.build == RUNTIME_BUILD else "the workload's own image"
    return [
        f"image: {what}, from {workload.build.containerfile} (build context {workload.build.context} of "
        "Atlas's repository), where the stack builds it (image.build): a BuildConfig builds image.build.git_uri "
        "at image.build.git_ref, as committed, with image.build.base_image as the BASE_IMAGE build argument"
    ]


def report_lines(workload: Workload) -> list[str]:
    lines = [f"report: measures step {workload.measured_step!r} (its time, CPU, memory and GPU use)"]
    lines.append(
        f"report: reads the BigGAN-style training log {workload.logs.jsonl}"
        if workload.logs.experiment is not None
        else "report: iterations, images/s and losses will say \"not measured (the workload writes no training "
        "log Atlas reads)\""
    )
    throughput = workload.report.throughput if workload.report is not None else None
    lines.append(
        f"report: its own throughput: the last line of {throughput.file} matching {throughput.pattern!r}, in "
        f"{throughput.unit}"
        if throughput is not None
        else "report: no throughput line of its own (add report.throughput to compare one)"
    )
    return lines


def sweep_lines(workload: Workload, steps: list[str]) -> list[str]:
    """Each swept step's expansion: its size, first and last points, throttle, metric, folders."""
    lines = []
    for name in steps:
        sweep = workload.step(name).sweep
        if sweep is None:
            continue
        size = point_count(sweep)
        first, last = point_at(sweep, 0), point_at(sweep, size - 1)
        plural = "" if size == 1 else "s"
        lines.append(f"sweep: step {name!r}: {size} point{plural} ({sweep.kind} of {', '.join(sweep.names)})")
        lines.append(f"  first: point 0: {first.describe()}: appends {shlex.join(point_args(sweep, first))}")
        if size > 1:
            lines.append(f"  last:  point {size - 1}: {last.describe()}: appends {shlex.join(point_args(sweep, last))}")
        lines.append(f"  parallel: {sweep.parallel if sweep.parallel is not None else f'all ({size})'} at once")
        metric = sweep.metric
        if metric is None:
            lines.append("  metric: none (the points are not ranked)")
        elif metric.pattern is not None:
            lines.append(f"  metric: {metric.goal} of the last match of {metric.pattern!r} in the point's log")
        else:
            lines.append(f"  metric: {metric.goal} of the number in {point_folder(sweep, '<index>')}/{metric.file}")
        lines.append(
            f"  each point: {point_folder(sweep, '<index>')} (ATLAS_SWEEP_DIR), ATLAS_SWEEP_INDEX, ATLAS_SWEEP_SIZE, "
            + ", ".join(env_name(n) for n in sweep.names)
        )
        for scheduler_name in SCHEDULER_NAMES:
            scheduler = scheduler_for(scheduler_name)
            chunks = split_points(size, scheduler.array_size_limit, sweep.parallel)
            lines.append(
                f"  {scheduler_name}: {len(chunks)} array{'' if len(chunks) == 1 else 's'} at its default limit of "
                f"{scheduler.array_size_limit:,} ("
                + ", ".join(f"points {c.offset}-{c.offset + c.count - 1}" for c in chunks)
                + ")"
            )
    return lines


def kubernetes_context(workload: Workload, files: tuple[FolderFile, ...]) -> tuple[OpenShiftSettings, PodContext]:
    """The settings and pod context a check renders Jobs under: placeholders where `pulumi up` names objects."""
    section = {"namespace": "atlas-check", "image": {"reference": "example.org/atlas/runtime:check"}}
    settings = parse_openshift_settings(section, "atlas:openshift", "kubernetes")
    source = None
    if files:
        _, items = source_config_map_data([(f.path, b"", f.mode) for f in files])
        source = SourceVolume("<source ConfigMap>", items)
    context = PodContext(
        identity=labels.RunIdentity("<stack>", "1", workload.name),
        namespace="<namespace>",
        image="<the run's image>",
        service_account="<service account>",
        claims=PLACEHOLDER_CLAIMS,
        workdir="/work",
        openshift=False,
        source=source,
    )
    return settings, context


def kubernetes_jobs(workload: Workload, steps: list[str], files: tuple[FolderFile, ...], environment: str) -> list[str]:
    """Each step's Job as YAML, as `pulumi up` would create it (placeholders where it names objects);
    a swept step's Indexed Job."""
    settings, context = kubernetes_context(workload, files)
    jobs = []
    for step in steps:
        rendered, sweep = render_step(workload, step, environment), workload.step(step).sweep
        if sweep is None:
            jobs.append(step_job(rendered, workload, settings, context))
        else:
            jobs.append(indexed_step_job(rendered, sweep, workload, settings, context, "<points ConfigMap>"))
    return [yaml.safe_dump(job, sort_keys=False, width=120) for job in jobs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a definition and print every step as each side runs it")
    check.add_argument("path", help="a shipped workload's name, a workload.yaml, or the folder holding one")
    check.add_argument("--environment", default="satori",
                       help="whose overrides to apply (an HPC environment's name, `openshift`, `aws`)")
    check.add_argument("--step", action="append", help="only this step (repeat for more)")
    check.add_argument("--quiet", action="store_true", help="validate only: print no scripts")
    args = parser.parse_args(argv)
    try:
        workload = load_workload(locate_workload(args.path, Path.cwd(), "PATH", SHIPPED), REPO_ROOT)
        # The folder is walked once: its listing and the Jobs' source volume both come from it.
        files = folder_files(workload) if isinstance(workload.source, FolderSource) else ()
        for line in source_lines(workload, files):
            print(line)
        steps = args.step or [s.name for s in workload.steps]
        for name in steps:
            workload.step(name)
        names = ", ".join(s.name for s in workload.steps)
        summary = [f"workload {workload.name!r}: {len(workload.steps)} steps ({names})", *image_lines(workload)]
        for line in [*summary, *report_lines(workload), *sweep_lines(workload, steps)]:
            print(line)
        warnings = build_warnings(workload, REPO_ROOT)
        for warning in warnings:
            print(f"workload check: warning: {warning}", file=sys.stderr)
        print(
            f"image: {len(warnings)} warning{'' if len(warnings) == 1 else 's'} (on stderr): the build may fail or "
            "leave files out"
            if warnings
            else "image: builds as it is: every FROM through BASE_IMAGE (or an earlier stage), what it reads committed"
        )
        if args.quiet:
            return 0
        run = SubmissionKey("atlas", "<stack>", args.environment, "1", "<run directory>")
        for scheduler_name in SCHEDULER_NAMES:
            scripts = step_scripts(workload, scheduler_for(scheduler_name), run, "<queue>")
            arrays = sweep_scripts(workload, scheduler_for(scheduler_name), run, "<queue>")
            for name in steps:
                if name in arrays:
                    swept = arrays[name]
                    table = swept.table.splitlines()
                    print(f"\n===== step {name}: {scheduler_name} array script ({swept.scripts[0].path}, "
                          f"1 of {len(swept.scripts)}) =====")
                    print(swept.scripts[0].script, end="")
                    print(f"----- its table of points ({swept.table_path}, {len(table)} lines; the first) -----")
                    print("\n".join(table[:3]))
                    continue
                print(f"\n===== step {name}: {scheduler_name} job script ({scripts[name].path}) =====")
                print(scripts[name].script, end="")
        for name, job in zip(steps, kubernetes_jobs(workload, steps, files, "openshift"), strict=True):
            kind = "Indexed Job" if workload.step(name).sweep is not None else "Job"
            print(f"\n===== step {name}: Kubernetes {kind} (environment openshift) =====")
            print(job, end="")
    except WorkloadError as error:
        print(f"workload check: refused: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
