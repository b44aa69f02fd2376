"""Atlas's one Pulumi program: load config -> validate -> build each enabled environment ->
export the outputs contract (docs/architecture.md).

Everything that can be wrong with the configuration or the workload is found before the
first resource is registered, so `pulumi preview` fails cleanly, naming the key: its one error
line is the message (`stop`), with no traceback and no second line of the engine's.
"""

import dataclasses
import sys
from pathlib import Path
from typing import NoReturn

import pulumi

from infra.config import AtlasConfigError, check_wait_for, load_stack_config
from infra.errors import ActionableError
from infra.hpc.components import HpcEnvironment, workload_source_files
from infra.hpc.registry import scheduler_class
from infra.image_check import stack_build_warnings
from infra.kinds import BuildContext, build_environments, stages_source
from infra.openshift.environment import OpenShiftEnvironment
from infra.outputs import RunOutputs
from infra.workload.load import load_workload
from infra.workload.model import GitSource, WorkloadError
from infra.workload.render import report_output
from infra.workload_source import SourceError, check_local

# Workloads live beside Pulumi.yaml: the project's own folder, wherever it is checked out.
PROJECT_ROOT = Path(pulumi.get_root_directory())
# pulumi-language-python-exec's exit code for "the error was shown to the user": the language host
# then ends the run as failed without adding its own "Program exited with non-zero exit code"
# line, which a pulumi.RunError (exit code 1) gets after the message.
ERROR_SHOWN = 32


def stop(message: str) -> NoReturn:
    """End the program before any resource with `message` as the run's one error line."""
    pulumi.log.error(message)  # sent at once (no resource to wait for), before the exit
    sys.exit(ERROR_SHOWN)


try:
    config = load_stack_config()
    workload = load_workload(config.workload_file, PROJECT_ROOT)
    check_wait_for(config, [step.name for step in workload.steps])
    if config.workload_source is not None:
        if not isinstance(workload.source, GitSource):
            raise AtlasConfigError(
                f"atlas:workloadSource: workload {workload.name!r} is not pinned to a Git repository; remove the key"
            )
        # Before any resource: a clone or bundle without the pinned commit stops preview here.
        check_local(config.workload_source, workload.source.commit)
    # Staged where a batch side runs the steps, and on Kubernetes for a workload that runs in
    # Atlas's runtime image (its code in a ConfigMap); an image of its own carries its code.
    # Listed here, so a missing or oversized folder stops preview before any resource.
    source_files = (
        workload_source_files(workload, PROJECT_ROOT, config.workload_source)
        if stages_source(config, workload)
        else ()
    )
    # What `scripts/workload check` warns of, for the build this stack makes: a base image the
    # build cannot pull, files the BuildConfig will not see (it builds Git as committed). Said
    # before any resource, so it leads preview's diagnostics; warnings, as a build may still
    # succeed where the check cannot see (a cluster that mirrors a public image).
    for warning in stack_build_warnings(config, workload, PROJECT_ROOT):
        pulumi.log.warn(f"image build: {warning}")
    # Every kind's components, each built by its own module of infra.kinds; each checks what it
    # is given before it registers anything of its own.
    built = build_environments(BuildContext(config, workload, source_files))
except (AtlasConfigError, WorkloadError, SourceError) as bad:
    stop(f"invalid stack configuration: {bad}")
except ActionableError as refused:
    # Not the config's fault (credentials the cluster refuses, say): the message, and its fix, alone.
    stop(str(refused))

environments: dict[str, pulumi.Input[object]] = {name: env.outputs for name, env in built.items()}
# What backfill reuses of the run: the OpenShift side's image, the batch sides' run folders.
openshift = next((e.component for e in built.values() if isinstance(e.component, OpenShiftEnvironment)), None)
hpc_components = {name: env.component for name, env in built.items() if isinstance(env.component, HpcEnvironment)}

if config.backfill is not None:
    from infra.nodes.backfill import BackfillError, work_for
    from infra.nodes.component import Backfill, BackfillArgs, HpcBackfillTarget

    wanted = config.backfill.environments
    try:
        backfill_workload = (
            load_workload(config.backfill_workload_file, PROJECT_ROOT)
            if config.backfill_workload_file is not None and config.backfill_workload_file != config.workload_file
            else workload
        )
    except WorkloadError as bad:
        stop(f"invalid stack configuration: atlas:backfill.workload: {bad}")
    kubernetes = config.openshift if wanted is None or "openshift" in wanted else None
    settings = config.openshift_settings
    try:
        work = work_for(
            backfill_workload,
            "openshift",
            (settings.image.reference or "") if settings is not None else "",
            settings.gpu.product if settings is not None else None,
        )
    except BackfillError as bad:
        stop(f"invalid stack configuration: atlas:backfill.workload: {bad}")
    if settings is not None:
        # The run's placement: backfill copies land where the run's pods may, as the run's UID.
        work = dataclasses.replace(
            work,
            node_selector=settings.placement.node_selector,
            tolerations=settings.placement.tolerations,
            run_as_uid=settings.run_as_uid,
        )
    backfill = Backfill(
        "backfill",
        BackfillArgs(
            settings=config.backfill,
            work=work,
            stack=config.stack,
            kubernetes=kubernetes,
            # The image the run built (its digest, on a cluster that builds), when it is the same workload.
            image=openshift.image.image if openshift is not None and backfill_workload is workload else None,
            # In the environment's own run folder, after its preparation steps: the data is there.
            hpc=tuple(
                HpcBackfillTarget(h.name, h.target, hpc_components[h.name].run_dir, (hpc_components[h.name],))
                if backfill_workload is workload
                else HpcBackfillTarget(h.name, h.target)
                for h in config.hpc
                if not scheduler_class(h.target.scheduler).backfill_unsupported and (wanted is None or h.name in wanted)
            ),
        ),
    )
    pulumi.export("backfill", backfill.outputs)

pulumi.export(
    "atlas",
    dataclasses.asdict(
        RunOutputs(
            stack=config.stack,
            workload=workload.name,
            run_id=config.run_id,
            # Where the definition was read (scripts/monitor and scripts/nodes load it from there).
            definition=str(config.workload_file),
            # What scripts/compare measures, so the outputs alone are enough to compare the sides.
            report=report_output(workload),
        )
    ),
)
pulumi.export("environments", environments)
