"""Index lists as range strings (`3-5,17`): written and read in one place for every side.

One syntax, three readers: Slurm's `--array=` and LSF's `name[...]` take it, a sweep's retried
points are kept in state in it (infra/hpc/providers/sweep_job.py), and Kubernetes writes an Indexed
Job's `status.completedIndexes` and `failedIndexes` in it (infra/openshift/sweep_completion.py,
infra/compare/sweep_records.py). Runs are comma-separated, each `N` or `N-M` with N <= M; no
spaces, no empty runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_RUN = re.compile(r"(\d+)(?:-(\d+))?")


def index_ranges(indices: Iterable[int], *, empty_ok: bool = False) -> str:
    """`[3, 4, 5, 17]` as `3-5,17`, sorted and without repeats. An empty list is a ValueError (a
    scheduler takes no empty array) unless `empty_ok`, which writes it as `` as Kubernetes does."""
    given = list(indices)
    ordered = sorted(set(given))
    if (not ordered and not empty_ok) or (ordered and ordered[0] < 0):
        raise ValueError(f"an index list needs at least one index, none negative, found {given!r}")
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(runs)


def parse_index_ranges(
    text: str | None,
    *,
    size: int | None = None,
    where: str = "",
    empty_ok: bool = False,
    lenient: bool = False,
) -> tuple[int, ...]:
    """`index_ranges`' inverse: the indices in the order the text lists them.

    Strict by default: text not of the syntax is a ValueError (naming `where`, e.g.
    `status.completedIndexes`, where given), as is an index at or past `size` where given. `empty_ok`:
    None or `` is no index (Kubernetes leaves the field out, or empty, while no index is in it);
    otherwise it is refused, as a scheduler's array is never empty. `lenient` (the report, which
    reads what it can and never fails on an odd answer): None or `` is no index and a run that is
    not of the syntax, or past `size`, is left out.
    """
    prefix = f"{where}: " if where else ""
    if not text and (empty_ok or lenient):
        return ()
    indices: list[int] = []
    for run in str(text or "").split(","):
        match = _RUN.fullmatch(run)
        first = int(match.group(1)) if match else 0
        last = int(match.group(2) or first) if match else -1
        if match is None or last < first:
            if lenient:
                continue
            raise ValueError(f"{prefix}{text!r} is not an index list (e.g. 0-5,7)")
        if size is not None and last >= size:
            if lenient:
                continue
            raise ValueError(f"{prefix}{run!r} in {text!r} is not a range of indexes below {size}")
        indices.extend(range(first, last + 1))
    return tuple(indices)
