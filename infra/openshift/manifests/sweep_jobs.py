"""A swept step as one Kubernetes Indexed Job: `completions` points, `parallelism` at once, retried per index.

Each pod's completion index (`JOB_COMPLETION_INDEX`, the `batch.kubernetes.io/job-completion-index`
annotation) picks its point from the table of points (infra/workload/sweep.py's `points_table`, the
same text the HPC side stages beside its array scripts) in a ConfigMap mounted at `SWEEP_DIR`: a
POSIX shell exports the point's values and runs the step's program with the sweep's arguments, under
the telemetry sampler, which writes the point's own file. Pure; nothing here creates anything.
"""

from __future__ import annotations

import shlex

import pulumi

from infra.openshift.manifests.labels import Manifest
from infra.openshift.manifests.pods import PodContext
from infra.openshift.manifests.step_jobs import step_job
from infra.openshift.settings import OpenShiftSettings
from infra.workload.model import Sweep, Workload
from infra.workload.render import RenderedStep
from infra.workload.sweep import INDEX_ENV, point_count, points_table, selector_lines, shell_words

# Where the table of points is mounted (read-only) in a swept step's pods.
SWEEP_DIR = "/opt/atlas/sweep"
POINTS_KEY = "points"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def points_config_map_data(sweep: Sweep) -> dict[str, str]:
    """The ConfigMap's `data`: the table of points under one key."""
    return {POINTS_KEY: points_table(sweep)}


def kubernetes_literal(text: str) -> str:
    """Text Kubernetes passes on as written: it expands `$(NAME)` in a container's args, and
    reads `$$` as one `$`, so every `$` of a shell script is doubled."""
    return text.replace("$", "$$")


def point_program(rendered: RenderedStep, sweep: Sweep) -> list[str]:
    """The container's program for every index: a POSIX shell that picks the point by
    JOB_COMPLETION_INDEX and execs the step's argv with the sweep's arguments (same as the HPC
    array script's lines, infra/workload/sweep.py's `selector_lines` and `shell_words`)."""
    lines = selector_lines(sweep, f"{SWEEP_DIR}/{POINTS_KEY}", "JOB_COMPLETION_INDEX")
    lines.append(" ".join(["exec", shlex.join(rendered.argv), *shell_words(sweep)]))
    return ["sh", "-c", kubernetes_literal("\n".join(lines)), "sh"]


def parallelism(sweep: Sweep) -> int:
    """How many points run at once: the sweep's `parallel`, else all of them."""
    size = point_count(sweep)
    return min(sweep.parallel or size, size)


def sweep_widths(workload: Workload) -> dict[str, int]:
    """Each swept step's pods at once (its `parallelism`), for the quota (settings.required_quota)."""
    return {step.name: parallelism(step.sweep) for step in workload.steps if step.sweep is not None}


def indexed_step_job(
    rendered: RenderedStep,
    sweep: Sweep,
    workload: Workload,
    settings: OpenShiftSettings,
    context: PodContext,
    points_config_map: pulumi.Input[str],
    max_attempts: int = 1,
) -> Manifest:
    """A swept step's Indexed Job: the step's Job (step_jobs.py) with one completion per point.

    `backoffLimitPerIndex` (`max_attempts` - 1: the stack's `atlas:sweep.max_attempts`) retries a
    failed point alone, and the other points run on; the step's walltime bounds each pod
    (`activeDeadlineSeconds` on the pod, not the Job, which holds every point); `parallelism` is
    the sweep's (default: all at once)."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1 (one run of each point), found {max_attempts}")
    size = point_count(sweep)
    telemetry_out = f"{workload.telemetry.root}/{rendered.name}/point-$({INDEX_ENV}).jsonl"
    job = step_job(rendered, workload, settings, context, point_program(rendered, sweep), telemetry_out)
    deadline = job["spec"]["activeDeadlineSeconds"]
    spec = job["spec"] = {
        "completionMode": "Indexed",
        "completions": size,
        "parallelism": parallelism(sweep),
        "backoffLimitPerIndex": max_attempts - 1,
        "template": job["spec"]["template"],
    }
    pod = spec["template"]["spec"]
    pod["activeDeadlineSeconds"] = deadline
    pod["volumes"].append(
        {
            "name": "atlas-sweep",
            "configMap": {"name": points_config_map, "items": [{"key": POINTS_KEY, "path": POINTS_KEY}]},
        }
    )
    container = pod["containers"][0]
    container["volumeMounts"].append({"name": "atlas-sweep", "mountPath": SWEEP_DIR, "readOnly": True})
    # Defined in the pod's own env, so Kubernetes expands $(ATLAS_SWEEP_INDEX) in the sampler's --out.
    index = {"name": INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}}
    container["env"].insert(0, index)
    return job
