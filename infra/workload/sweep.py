"""A step's sweep expanded: its points in a stable order, each value's text, the arguments and environment a point gets.

Pure: parse_sweep.py validates a `sweep:` section into `model.Sweep`; the schedulers' array scripts
(infra/hpc/array_script.py) and the Indexed Job (infra/openshift/manifests/sweep_jobs.py) are
rendered from what is here, so every side runs the same points under the same indices.

The order (documented in docs/workloads.md, and pinned by tests/unit/test_sweep.py):
- `grid`: every combination, the first name varying slowest and the last fastest, as nested loops
  written top to bottom (`lr: [a, b]`, `seed: [1, 2]` is a1, a2, b1, b2);
- `zip`: the i-th value of every name;
- `points`: as written.

A point's values reach its program as options appended to the step's args (`--<name> <value>`),
or through the sweep's own `args` template (`{name}`, and `{index}`, `{size}`, `{dir}`); and always
as environment variables: `ATLAS_SWEEP_INDEX` (0-based), `ATLAS_SWEEP_SIZE`, `ATLAS_SWEEP_DIR` (the
point's results folder, `<sweep results>/point-<index>`) and `ATLAS_SWEEP_<NAME>` per value.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import shlex
import string
from dataclasses import dataclass

from infra.workload.model import Sweep, SweepValue

# A sweep is one scheduler object whose per-element state lives in one Pulumi resource: 10,000
# points keep that state near 10 KB (a byte or two per element), the table of points within half a
# ConfigMap at ~50 bytes a point, and the split within ten LSF arrays at the default
# MAX_JOB_ARRAY_SIZE (1,000); a Kubernetes Indexed Job with backoffLimitPerIndex takes at most
# 100,000 completions. A larger study is several sweeps (or several steps).
MAX_SWEEP_POINTS = 10_000
# The table of points travels in a ConfigMap on Kubernetes (the API caps one at 1 MiB) and is
# staged beside the array script on HPC: half a ConfigMap, as for a folder source.
MAX_SWEEP_TABLE_BYTES = 512 * 1024
ENV_PREFIX = "ATLAS_SWEEP_"
# What every point has besides its values: its index, the sweep's size and its results folder.
# A value may not take these names (its variable would be one of them), and `args` may use them.
BUILT_IN = ("index", "size", "dir")
INDEX_ENV = f"{ENV_PREFIX}INDEX"
SIZE_ENV = f"{ENV_PREFIX}SIZE"
DIR_ENV = f"{ENV_PREFIX}DIR"


def env_name(name: str) -> str:
    """The environment variable that carries a value (or a built-in) to the point: `ATLAS_SWEEP_LR`."""
    return ENV_PREFIX + name.upper()


def value_text(value: SweepValue) -> str:
    """A value as the program reads it: a string as written, a whole number in decimal, a boolean
    as YAML writes it (`true`), a float as Python's shortest text that reads back the same
    (`0.0001`, `1e-05`); quote a value in the YAML to keep it exactly as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def point_count(sweep: Sweep) -> int:
    """How many points the sweep has, without expanding them."""
    if sweep.kind == "grid":
        return math.prod(len(values) for _, values in sweep.axes)
    if sweep.kind == "zip":
        return len(sweep.axes[0][1]) if sweep.axes else 0
    return len(sweep.points)


@dataclass(frozen=True)
class SweepPoint:
    """One point: its 0-based index and its values, in the sweep's `names` order."""

    index: int
    values: tuple[tuple[str, SweepValue], ...]

    def text(self) -> tuple[tuple[str, str], ...]:
        return tuple((name, value_text(value)) for name, value in self.values)

    def describe(self) -> str:
        """`lr=0.001 seed=1`, for a person reading `scripts/workload check`."""
        return " ".join(f"{name}={text}" for name, text in self.text())


def point_at(sweep: Sweep, index: int) -> SweepPoint:
    """The point at `index`, computed directly (a grid's index is a mixed-radix number, the last
    name its lowest digit), so the first and last of 10,000 points need no expansion."""
    size = point_count(sweep)
    if not 0 <= index < size:
        raise IndexError(f"point {index} of a sweep of {size}")
    if sweep.kind == "points":
        return SweepPoint(index, tuple(zip(sweep.names, sweep.points[index], strict=True)))
    if sweep.kind == "zip":
        return SweepPoint(index, tuple((name, values[index]) for name, values in sweep.axes))
    digits: list[tuple[str, SweepValue]] = []
    rest = index
    for name, values in reversed(sweep.axes):
        rest, digit = divmod(rest, len(values))
        digits.append((name, values[digit]))
    return SweepPoint(index, tuple(reversed(digits)))


def expand_sweep(sweep: Sweep) -> tuple[SweepPoint, ...]:
    """Every point, in the stable order the module docstring gives."""
    if sweep.kind == "grid":
        names = [name for name, _ in sweep.axes]
        combos = itertools.product(*(values for _, values in sweep.axes))
        return tuple(SweepPoint(i, tuple(zip(names, combo, strict=True))) for i, combo in enumerate(combos))
    return tuple(point_at(sweep, i) for i in range(point_count(sweep)))


def point_folder(sweep: Sweep, index: int | str) -> str:
    """A point's results folder, relative to the step's working directory."""
    return f"{sweep.results}/point-{index}"


def argument_template(sweep: Sweep) -> tuple[str, ...]:
    """The tokens appended to the step's args for each point: the sweep's own `args`, or
    `--<name> {name}` for each name in order."""
    if sweep.args is not None:
        return sweep.args
    return tuple(token for name in sweep.names for token in (f"--{name}", f"{{{name}}}"))


def template_fields(token: str) -> list[tuple[str, str | None, str | None, str | None]]:
    """A token's pieces as `string.Formatter` reads them: (literal, field, spec, conversion).
    parse_sweep.py refuses what is not a plain `{name}`; `{{` and `}}` are literal braces."""
    return list(string.Formatter().parse(token))


def _point_text(sweep: Sweep, point: SweepPoint) -> dict[str, str]:
    return {
        **dict(point.text()),
        "index": str(point.index),
        "size": str(point_count(sweep)),
        "dir": point_folder(sweep, point.index),
    }


def point_args(sweep: Sweep, point: SweepPoint) -> tuple[str, ...]:
    """The tokens one point appends to the step's args, its values written in."""
    values = _point_text(sweep, point)
    return tuple(
        "".join(
            literal + (values[field] if field is not None else "") for literal, field, _, _ in template_fields(token)
        )
        for token in argument_template(sweep)
    )


def point_env(sweep: Sweep, point: SweepPoint) -> tuple[tuple[str, str], ...]:
    """The environment one point gets beside the step's: its index, the size, its folder, its values."""
    values = _point_text(sweep, point)
    return tuple(sorted((env_name(name), text) for name, text in values.items()))


def shell_words(sweep: Sweep) -> list[str]:
    """The appended tokens as words of a POSIX shell line, each value read from its variable
    (`--lr "$ATLAS_SWEEP_LR"`, `'--out='"$ATLAS_SWEEP_DIR"/counts.tsv`): the same script runs
    every point, the table (`points_table`) sets the variables."""
    words = []
    for token in argument_template(sweep):
        word = ""
        for literal, field, _, _ in template_fields(token):
            if literal:
                word += shlex.quote(literal)
            if field is not None:
                word += f'"${env_name(field)}"'
        words.append(word)
    return words


def table_line(point: SweepPoint) -> str:
    """One line of the table: the point's values as shell assignments (`ATLAS_SWEEP_LR=0.001`)."""
    return " ".join(f"{env_name(name)}={shlex.quote(text)}" for name, text in point.text())


def points_table(sweep: Sweep) -> str:
    """The table of points staged beside an array script (HPC) and in a ConfigMap (Kubernetes):
    line i + 1 holds point i's values as shell assignments, which the element's selector exports
    (`sed -n "$((ATLAS_SWEEP_INDEX + 1))p"`, then `eval "export $line"`; every value is
    shell-quoted, so the eval runs assignments only). Why a table and not a `case` in the script:
    the script is in the BatchJob's Pulumi state (and `sbatch --test-only` reads it whole), so it
    stays the same size for 10 points or 1,000; the table (~30 bytes a point, 30 KB for 1,000) is
    staged like any file, checked by its digest, which the script names."""
    return "".join(table_line(point) + "\n" for point in expand_sweep(sweep))


def table_digest(table: str) -> str:
    return hashlib.sha256(table.encode()).hexdigest()


@dataclass(frozen=True)
class ArrayChunk:
    """One scheduler array of a sweep split at the site's array limit: points `offset` to
    `offset + count - 1`, under indices that restart at the scheduler's base (0 on Slurm, 1 on LSF).

    `parallel` is this array's throttle (`%P`; None: none); `after` is the chunk whose end it
    waits for, where the sweep's `parallel` is smaller than the number of chunks (each chunk then
    runs one element at a time, `parallel` lanes of chunks one after another)."""

    number: int
    offset: int
    count: int
    parallel: int | None = None
    after: int | None = None


def split_points(size: int, limit: int, parallel: int | None = None) -> tuple[ArrayChunk, ...]:
    """`size` points as arrays of at most `limit` elements, in order, whose throttles add up to at
    most `parallel` (None: no throttle). Both schedulers' limits cap the largest index, not only
    the count (Slurm's MaxArraySize: `--array=1001-2000` is refused at the default), so each chunk
    restarts its indices and carries its offset. The throttle is shared in proportion to the
    chunks' sizes, each at least 1; with fewer than one per chunk, chunks queue in lanes."""
    if size < 1 or limit < 1:
        raise ValueError(f"a split needs at least one point and a limit of at least one, found {size} and {limit}")
    if parallel is not None and parallel < 1:
        raise ValueError(f"parallel must be at least 1, found {parallel}")
    counts = [min(limit, size - offset) for offset in range(0, size, limit)]
    offsets = [i * limit for i in range(len(counts))]
    if parallel is None or parallel >= size:
        return tuple(ArrayChunk(i, offsets[i], count) for i, count in enumerate(counts))
    if parallel < len(counts):
        return tuple(
            ArrayChunk(i, offsets[i], count, 1, i - parallel if i >= parallel else None)
            for i, count in enumerate(counts)
        )
    # Only the last chunk can be below one share (the others hold `limit` points each), and a
    # floor below one leaves room for it: the shares never add up past `parallel`.
    shares = [max(1, parallel * count // size) for count in counts]
    left = parallel - sum(shares)
    for i, count in enumerate(counts):
        extra = min(left, count - shares[i])
        shares[i] += extra
        left -= extra
    return tuple(ArrayChunk(i, offsets[i], count, shares[i]) for i, count in enumerate(counts))


def selector_lines(sweep: Sweep, table: str, index_expression: str) -> list[str]:
    """The POSIX shell lines that make one element a point: ATLAS_SWEEP_INDEX from
    `index_expression` (the scheduler's or Kubernetes' index, as shell arithmetic), the size, the
    point's folder, and its values read from line index + 1 of the table at `table`; then the
    folder is made. An index the table has no line for stops the element before its program runs."""
    quoted = shlex.quote(table)
    return [
        f"{INDEX_ENV}=$(({index_expression}))",
        f"{SIZE_ENV}={point_count(sweep)}",
        f'{DIR_ENV}={shlex.quote(point_folder(sweep, ""))}"${INDEX_ENV}"',
        f"export {INDEX_ENV} {SIZE_ENV} {DIR_ENV}",
        f'atlas_point=$(sed -n "$(({INDEX_ENV} + 1))p" {quoted})',
        f'if [ -z "$atlas_point" ]; then echo "atlas: no point ${INDEX_ENV} in {table}" >&2; exit 1; fi',
        'eval "export $atlas_point"',
        f'mkdir -p -- "${DIR_ENV}"',
        f'echo "atlas: sweep point ${INDEX_ENV} of ${SIZE_ENV}: $atlas_point"',
    ]
