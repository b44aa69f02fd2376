"""A workload definition as typed, frozen dataclasses: what `parse.py` builds and everything reads.

No parsing, no I/O: the YAML is read by `load.py`, validated by `parse.py`, rendered per
environment by `render.py` and compared between environments by `differences.py`.
"""

from __future__ import annotations

from dataclasses import dataclass


class WorkloadError(ValueError):
    """A workload definition that cannot be used; the message names the key path and the fix."""


@dataclass(frozen=True)
class GitSource:
    """The workload's code lives in another repository, pinned to one commit.

    `patch` (relative to this repository's root) is applied to that commit wherever the code is
    materialised (infra/workload_source.py): the container build, the HPC staging and the device
    run, so every environment runs the same tree."""

    repository: str
    branch: str
    commit: str
    patch: str | None = None


@dataclass(frozen=True)
class InTreeSource:
    """The workload's code is a Python package inside Atlas's repository (the probe): staged as
    its `*.py` files under their dotted module path, so `python3 -m workloads.<name>` runs."""

    path: str


@dataclass(frozen=True)
class FolderSource:
    """The workload's code is a folder beside its definition, staged as it is: files of any kind
    (shell, C++, Python, data tables), within the limits of `FOLDER_LIMITS`.

    `folder` is relative to the folder holding workload.yaml; `load.folder_files` lists it."""

    folder: str


Source = GitSource | InTreeSource | FolderSource


@dataclass(frozen=True)
class FolderLimits:
    """How much a folder source may hold. On Kubernetes it travels in one ConfigMap, which the
    API server caps at 1 MiB; half that leaves room for base64 and Pulumi's state stays small.
    Larger code belongs in a Git repository (`source.repository`) or in an image."""

    max_files: int = 256
    max_bytes: int = 512 * 1024


FOLDER_LIMITS = FolderLimits()


@dataclass(frozen=True)
class Build:
    """The container build context; paths are relative to this repository's root."""

    context: str
    containerfile: str
    entrypoint: str


# The image a workload without a `build` section runs in (a folder source): Python 3, a POSIX
# shell and coreutils, the telemetry sampler and the entrypoint; the folder arrives beside it.
RUNTIME_BUILD = Build(
    context=".", containerfile="workloads/runtime/Containerfile", entrypoint="infra/telemetry/entrypoint.sh"
)


@dataclass(frozen=True)
class Resources:
    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    memory: str  # as written (binary units), e.g. "64Gi": Kubernetes takes it unchanged
    memory_bytes: int
    walltime_seconds: int

    @property
    def memory_mib(self) -> int:
        """Whole MiB, rounded up: what `sbatch --mem=<n>M` and LSF's `rusage[mem=<n>]` take."""
        return -(-self.memory_bytes // (1 << 20))

    @property
    def walltime(self) -> str:
        """`[D-]HH:MM:SS`, Slurm's `--time` format; LSF's `-W` takes `HH:MM` (see `walltime_lsf`)."""
        days, rest = divmod(self.walltime_seconds, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, seconds = divmod(rest, 60)
        clock = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
        return f"{days}-{clock}" if days else clock

    @property
    def walltime_lsf(self) -> str:
        """`HH:MM`, rounded up to the minute, for `bsub -W`."""
        minutes = -(-self.walltime_seconds // 60)
        return f"{minutes // 60}:{minutes % 60:02d}"

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class DataPath:
    name: str
    path: str  # relative to the step's working directory
    description: str


# A sweep value as YAML gives it: what a point may hold (infra/workload/sweep.py renders it as text).
SweepValue = str | int | float | bool


@dataclass(frozen=True)
class SweepMetric:
    """How a sweep's points are ranked: the last match of `pattern` in the point's own log (its one
    capture group is the number), or the number `file` holds (relative to the point's results
    folder); `goal` says whether lower or higher is better."""

    goal: str  # "min" or "max"
    pattern: str | None = None
    file: str | None = None


@dataclass(frozen=True)
class Sweep:
    """A step run once per point, as one scheduler object (an array, an Indexed Job).

    `kind` says how the points are declared: `grid` (every combination of `axes`' values),
    `zip` (the i-th value of every axis, all of one length) or `points` (each point written out).
    infra/workload/sweep.py expands them in a stable order, renders each value's text and the
    point's arguments; parse_sweep.py validates them."""

    kind: str  # "grid", "zip" or "points"
    names: tuple[str, ...]  # in the order written (grid, zip) or of the first point (points)
    axes: tuple[tuple[str, tuple[SweepValue, ...]], ...] = ()  # grid, zip: name -> values
    points: tuple[tuple[SweepValue, ...], ...] = ()  # points: each point's values, in `names`' order
    parallel: int | None = None  # how many run at once; None: all
    metric: SweepMetric | None = None
    # How the values reach the program: None appends `--<name> <value>` for each name; otherwise
    # these tokens are appended, each `{name}` replaced by the value (`{index}`, `{size}`, `{dir}`
    # by the point's index, the sweep's size and the point's results folder).
    args: tuple[str, ...] | None = None
    results: str = ""  # the sweep's results folder; each point's is `<results>/point-<index>`


@dataclass(frozen=True)
class Step:
    name: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    resources: Resources
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # sorted by name
    description: str
    # What backfill (infra/nodes/backfill.py) appends so a preempted, restarted copy continues from
    # its own checkpoint. Only for a program whose resume starts afresh where there is no checkpoint
    # yet (the probe's `--resume`); BigGAN-PyTorch's `--resume` fails without weights, so none there.
    # The pipeline's own runs never get these.
    resume_args: tuple[str, ...] = ()
    sweep: Sweep | None = None  # None: one run of the step


@dataclass(frozen=True)
class InputOverride:
    """An environment that reads other data for one of a step's inputs: how it is made, how much."""

    made_by: str  # a script of this repository that writes the input where data.inputs says
    images: int


@dataclass(frozen=True)
class StepOverride:
    """What one environment changes in one step, and why; always reported as a difference."""

    reason: str
    set_args: tuple[tuple[str, tuple[str, ...]], ...]  # option -> values (() for a bare flag)
    remove_args: tuple[str, ...]
    resources: Resources | None  # the step's resources with this environment's changes laid over; None: unchanged
    env: tuple[tuple[str, str], ...]
    data: tuple[tuple[str, InputOverride], ...] = ()  # input name -> what this environment reads instead


@dataclass(frozen=True)
class Logs:
    """Where the steps write their logs. `experiment` names a BigGAN-PyTorch-style training log
    (`<root>/<experiment>_log.jsonl` and `<root>/<experiment>/G_loss.log`, which the probe writes
    too); None: the workload writes no training log Atlas reads, and the report says so."""

    root: str
    experiment: str | None = None

    @property
    def jsonl(self) -> str:
        """BigGAN-PyTorch's evaluation log, one JSON object per `--test_every`."""
        return f"{self.root}/{self.experiment}_log.jsonl"

    @property
    def loss_dir(self) -> str:
        """Where the per-iteration `G_loss.log`, `D_loss_real.log`, `D_loss_fake.log` are."""
        return f"{self.root}/{self.experiment}"


@dataclass(frozen=True)
class Telemetry:
    root: str
    interval_seconds: float


@dataclass(frozen=True)
class Throughput:
    """A workload's own throughput line: the last match of `pattern` in `file` (under logs.root),
    whose group `value` is a rate in `unit` (e.g. "words/s", "samples/s", "tokens/s")."""

    file: str
    pattern: str
    unit: str


@dataclass(frozen=True)
class ReportRequest:
    """What a definition asks the comparison report to measure (its `report` section): `step`'s
    duration (and its telemetry), and the workload's own throughput line where it declares one.
    The computed report is infra/compare/report_model.py's `Report`."""

    step: str
    throughput: Throughput | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    source: Source
    build: Build
    data: tuple[DataPath, ...]
    steps: tuple[Step, ...]
    logs: Logs
    telemetry: Telemetry
    overrides: tuple[tuple[str, tuple[tuple[str, StepOverride], ...]], ...]  # env -> step -> override
    report: ReportRequest | None = None  # None: the last step, no throughput line of its own
    # The folder holding workload.yaml, where `load.load_workload` read it; None for a definition
    # parsed from text alone. A folder source is relative to it.
    definition_dir: str | None = None

    @property
    def runs_in_runtime_image(self) -> bool:
        """No `build`: the steps run in Atlas's runtime image, and the code is staged beside them
        (a ConfigMap on Kubernetes), as on HPC."""
        return self.build == RUNTIME_BUILD

    @property
    def measured_step(self) -> str:
        """The step whose time, telemetry and throughput the report compares."""
        return self.report.step if self.report is not None else self.steps[-1].name

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        names = ", ".join(s.name for s in self.steps)
        raise WorkloadError(f"step {name!r}: not in workload {self.name!r}; use one of {names}")

    def override(self, environment: str, step: str) -> StepOverride | None:
        for env_name, per_step in self.overrides:
            if env_name == environment:
                for step_name, override in per_step:
                    if step_name == step:
                        return override
        return None

    @property
    def environments_with_overrides(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.overrides)

    def depends_on(self, step: str) -> tuple[str, ...]:
        """The earlier steps whose outputs this step reads: the scheduler dependencies."""
        needed = set(self.step(step).inputs)
        return tuple(s.name for s in self.steps if s.name != step and needed & set(s.outputs))


def input_override(workload: Workload, environment: str, step: str, name: str) -> InputOverride | None:
    """What `environment` reads instead of input `name` of `step`, if its overrides say so."""
    override = workload.override(environment, step)
    return dict(override.data).get(name) if override is not None else None
