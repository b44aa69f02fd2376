"""The interface every kind of environment implements: what the stack program, the report, the
monitor, the node listing and the pre-flight check need from it.

One subclass per kind (kubernetes.py, hpc.py, aws.py), listed once by the router
(`infra.kinds`). Every operation is abstract, so a kind that lacks one cannot be
instantiated, and tests/unit/test_kinds.py instantiates every listed kind. Nothing outside
the router chooses code by a kind's name.

The kinds' modules import the heavy parts they drive (a component's Pulumi providers, the
report's NumPy) inside the methods that need them: `scripts/compare` never imports
pulumi_kubernetes, and the stack program never imports the report.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from infra.outputs import EnvironmentOutputs

if TYPE_CHECKING:
    import pulumi

    from infra.compare.access import Access
    from infra.compare.records import EnvironmentRecords, ReportContract
    from infra.doctor import EnvironmentChecks
    from infra.hpc.pipeline import StagedFile
    from infra.monitor.sources import EnvironmentSource
    from infra.nodes.backfill import BackfillWork
    from infra.stack_config import StackConfig
    from infra.workload.model import Workload

Out = TypeVar("Out", bound=EnvironmentOutputs)


@dataclass(frozen=True)
class BuildContext:
    """What the stack program has validated once, for every kind's components."""

    config: StackConfig
    workload: Workload
    # The workload's code, where some side stages it (batch sides; Kubernetes in the runtime image).
    source_files: tuple[StagedFile, ...]
    # The image the stack's Kubernetes side runs (set once that kind is built): what an HPC side
    # with runtime apptainer runs too, so both sides run one image.
    image: pulumi.Output[str] | None = None


@dataclass(frozen=True)
class DoctorContext:
    """What `atlas doctor` has read before checking: the stack's config parsed as `pulumi up`
    parses it (secrets included), its workload, and how to reach each environment (the command
    line's --kubeconfig and --context over the config's)."""

    config: StackConfig
    workload: Workload
    access: Access


class Built:
    """One environment's component, as the stack program keeps it: its outputs are exported under
    its name; `component` is there for what spans kinds (backfill reuses a run's run folder)."""

    def __init__(
        self,
        component: pulumi.ComponentResource,
        outputs: pulumi.Output[dict[str, Any]],
        image: pulumi.Output[str] | None = None,
    ) -> None:
        self.component = component
        self.outputs = outputs
        self.image = image  # the image its steps run in, where the kind builds or names one


@dataclass(frozen=True)
class BackfillRequest:
    """`scripts/nodes --backfill WORKLOAD` (or `--backfill-stop`) for one environment."""

    environment: str
    source: EnvironmentSource
    access: Access
    project: Path
    workload: str  # as --backfill names it: a shipped workload or a definition's path
    run_workload: str  # the stack's own workload (its run folder holds that one's data)
    slots: int
    partition: str  # Slurm: the preemptible partition
    stop: bool


def backfill_work(request: BackfillRequest, image: str = "", gpu_product: str | None = None) -> BackfillWork:
    """The GPU step of the workload `--backfill` names, as backfill (infra.nodes.backfill.work_for)."""
    from infra.nodes.backfill import BackfillError, work_for
    from infra.workload.load import load_workload, locate_workload
    from infra.workload.model import WorkloadError

    try:
        workload = load_workload(locate_workload(request.workload, request.project, "--backfill"))
    except WorkloadError as error:
        raise BackfillError(f"--backfill {request.workload}: {error}") from None
    return work_for(workload, request.environment, image, gpu_product)


class EnvironmentKind(ABC, Generic[Out]):
    """One kind of environment, every operation the rest of Atlas asks of it."""

    name: ClassVar[str]  # the outputs' `kind`
    outputs_type: ClassVar[type[EnvironmentOutputs]]

    # --- the stack program ---------------------------------------------------------------------

    @abstractmethod
    def stages_source(self, config: StackConfig, workload: Workload) -> bool:
        """Whether this kind's environments of the stack need the workload's code staged."""

    @abstractmethod
    def build(self, context: BuildContext) -> dict[str, Built]:
        """The components of this kind the stack config enables, by environment name."""

    # --- reading outputs -----------------------------------------------------------------------

    @abstractmethod
    def outputs_before_up(self, config: Mapping[str, Any], stack: str) -> dict[str, Out]:
        """Before the first `pulumi up`: the environments of this kind a stack file names, as
        outputs with no steps (where to reach their scheduler or API), for the node listing."""

    # --- the report ----------------------------------------------------------------------------

    @abstractmethod
    def collect(
        self, name: str, outputs: Out, access: Access, raw_dir: Path, contract: ReportContract
    ) -> EnvironmentRecords:
        """The environment's own records (scheduler or API, telemetry, logs) for the report."""

    @abstractmethod
    def unreachable(self, name: str, outputs: Out, reason: str) -> EnvironmentRecords:
        """Records of an environment that could not be read: every block missing, with why."""

    # --- the monitor and the node listing ------------------------------------------------------

    @abstractmethod
    def monitor_source(self, name: str, outputs: Out, access: Access, interval_s: float) -> EnvironmentSource:
        """What the monitor reads this environment through (watches, rate-limited polls); a
        polled one asks its scheduler at most every `interval_s`."""

    @abstractmethod
    def polls_scheduler(self, outputs: Out) -> bool:
        """Whether reading this environment asks a batch scheduler, which its site allows only so
        often (`atlas compare --wait` and the monitor keep to the site's poll interval)."""

    @abstractmethod
    def backfill(self, request: BackfillRequest, outputs: Out, echo: Callable[[str], None]) -> None:
        """Start or stop backfill that yields here (or say why there is none); raises
        infra.nodes.backfill.BackfillError when it cannot."""

    # --- the pre-flight check ------------------------------------------------------------------

    @abstractmethod
    def doctor(self, context: DoctorContext) -> dict[str, EnvironmentChecks]:
        """Before the first `pulumi up` (`atlas doctor`): each environment of this kind the
        stack's config declares, checked as `pulumi up` will use it (reached, logged in to, the
        queue or project, what the workload asks), without creating or submitting anything; by
        environment name. A check that fails is a line with its fix, never an exception."""
