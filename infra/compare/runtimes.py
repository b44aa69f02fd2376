"""What ran where: each environment's runtime and image digest, whether the sides that ran in an
image ran the same digest, and each SIF conversion once per (site, digest). Pure.

The records come from the stack outputs (an HPC side's `runtime`, written at `pulumi up` from
what its SifImage found on the login node; the Kubernetes side's `image`) and, on Kubernetes,
from the nodes that ran the step pods (`status.nodeInfo.containerRuntimeVersion`). A side that
ran bare runs the site's own Python and libraries: a comparison with it is of the platform and
the software stack together, and the report says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from infra.compare.records import EnvironmentRecords, NodeRecord, RuntimeRecord
from infra.compare.report_model import RuntimeRow, SifConversionRow, Value, WhatRanWhere, missing
from infra.outputs import HpcOutputs, KubernetesOutputs, SifConversion

BARE_NOTE = "the site's own Python and libraries, no image"
NO_CONVERSION_RECORD = (
    "not recorded: the stack outputs carry no conversion record for this SIF (written by an Atlas before it kept one)"
)
NO_CONVERSION_TIME = "not recorded: the SIF's record beside it gives no time (a SIF made by hand, outside Atlas)"


def short_digest(digest: str) -> str:
    """`sha256:` and the first 12 hex digits, as `docker images` shows an id."""
    algorithm, _, hex_part = digest.partition(":")
    return f"{algorithm}:{hex_part[:12]}" if hex_part else digest


def digest_of(image: str) -> str:
    """The digest an image reference pins (`...@sha256:<hex>`), else ""."""
    _, at, digest = image.partition("@")
    return digest if at and digest.startswith("sha256:") else ""


def hpc_runtime(name: str, outputs: HpcOutputs) -> RuntimeRecord:
    """An HPC side's runtime, from its stack outputs; outputs written before Atlas recorded one
    read as bare (HpcOutputs.runtime's default), which is what those stacks ran."""
    runtime = outputs.runtime
    site = f"{outputs.host}:{outputs.port}"
    if runtime.name == "bare":
        return RuntimeRecord(
            "bare",
            note=BARE_NOTE,
            digest_note="none: bare",
            arch_note="not recorded (read only for runtime apptainer)",
            source=f"stack outputs: {name}.runtime (bare, or absent: written before Atlas ran steps in images)",
            site=site,
        )
    digest = runtime.digest or digest_of(runtime.image)
    return RuntimeRecord(
        runtime.name,
        version=runtime.version,
        image=runtime.image,
        digest=digest,
        digest_note="" if digest else "not known: the stack outputs give none",
        arch=runtime.arch,
        arch_note="" if runtime.arch else "not recorded in the stack outputs",
        in_image=True,
        source=f"stack outputs: {name}.runtime (read on {outputs.login} by `pulumi up`: the runtime's version, "
        "the machine, the SIF and its conversion record)",
        site=site,
        sif=runtime.sif,
        conversion=runtime.conversion,
    )


def bare_runtime(name: str, why: str = "") -> RuntimeRecord:
    """A side whose outputs carry no runtime and that runs bare (AWS's one-node Slurm)."""
    return RuntimeRecord(
        "bare",
        note=why or BARE_NOTE,
        digest_note="none: bare",
        arch_note="not recorded: the outputs carry no runtime",
        source=f"stack outputs: {name} (no runtime: its steps run bare)",
    )


def _image_digest(outputs: KubernetesOutputs) -> tuple[str, str]:
    digest = digest_of(outputs.image)
    if digest:
        return digest, ""
    if outputs.image:
        return "", "not known (image by tag)"
    return "", "not known: the stack outputs name no image"


def _split_runtime_version(text: str) -> tuple[str, str]:
    """`containerd://2.0.1` -> ("containerd", "2.0.1"); a value without `://` is all name."""
    name, sep, version = text.partition("://")
    return (name, version) if sep else (text, "")


def kube_runtime(
    name: str, outputs: KubernetesOutputs, used: Sequence[str], nodes: Sequence[NodeRecord], nodes_unread: str = ""
) -> RuntimeRecord:
    """The Kubernetes side's runtime: what the nodes that ran its step pods (`used`) report in
    status.nodeInfo, and its image from the stack outputs (by digest where the build was awaited)."""
    digest, digest_note = _image_digest(outputs)
    nodes_by_name = {n.name: n for n in nodes}
    listed = ", ".join(sorted(used))
    source = (
        f"Kubernetes API {outputs.api_url}: GET /api/v1/nodes/{{{listed}}} (status.nodeInfo.containerRuntimeVersion, "
        f".architecture); the image: stack outputs {name}.image"
    )
    base = RuntimeRecord(
        "",
        image=outputs.image,
        digest=digest,
        digest_note=digest_note,
        source=source if used else f"stack outputs {name}.image",
    )
    if not used:
        return dataclasses.replace(base, note="not run: no step's pod ran on a node", arch_note="not run")
    if nodes_unread:
        return dataclasses.replace(
            base, note=f"not read: {nodes_unread}", arch_note=f"not read: {nodes_unread}", in_image=True
        )
    gone = [n for n in sorted(used) if n not in nodes_by_name]
    if gone:
        why = f"not read: node {', '.join(gone)} is gone from the API"
        return dataclasses.replace(base, note=why, arch_note=why, in_image=True)
    ran = [nodes_by_name[n] for n in sorted(used)]
    if all(n.simulated for n in ran):
        reported = ", ".join(sorted({n.container_runtime for n in ran if n.container_runtime})) or "KWOK"
        return dataclasses.replace(
            base, name="simulated", note=f"simulated nodes ({reported}): no container ran", arch_note="simulated nodes"
        )
    real = [n for n in ran if not n.simulated]
    runtimes = sorted({n.container_runtime for n in real if n.container_runtime})
    arches = sorted({n.architecture for n in real if n.architecture})
    arch = ", ".join(arches)
    if not runtimes:
        why = "not read: the nodes' status.nodeInfo.containerRuntimeVersion is empty"
        return dataclasses.replace(base, note=why, arch=arch, arch_note="" if arch else why, in_image=True)
    parts = [_split_runtime_version(r) for r in runtimes]
    return dataclasses.replace(
        base,
        name=", ".join(dict.fromkeys(p[0] for p in parts)),
        version=", ".join(p[1] for p in parts if p[1]),
        arch=arch,
        arch_note="" if arch else "not read: the nodes' status.nodeInfo.architecture is empty",
        in_image=True,
    )


# --- the report's table ------------------------------------------------------------------------


def runtime_text(record: RuntimeRecord) -> str:
    if not record.name:
        return record.note or "not read"
    if record.name == "simulated":
        return record.note
    label = {"apptainer": "Apptainer", "bare": "bare"}.get(record.name, record.name)
    if record.name == "bare":
        return f"bare ({record.note})" if record.note else "bare"
    return f"{label} {record.version}" if record.version else f"{label} (version not recorded)"


def runtime_row(env: EnvironmentRecords) -> RuntimeRow:
    record = env.runtime
    return RuntimeRow(
        environment=env.name,
        runtime=runtime_text(record),
        image=record.image,
        digest=record.digest,
        digest_text=short_digest(record.digest) if record.digest else (record.digest_note or "not known"),
        arch=record.arch or record.arch_note or "not recorded",
        in_image=record.in_image,
        source=record.source,
    )


def digest_lines(rows: Sequence[RuntimeRow], records: Sequence[RuntimeRecord]) -> tuple[bool | None, tuple[str, ...]]:
    """Whether the sides that ran in an image ran one digest, and the lines that say so: which
    digests differ, which sides' digest is not known, which ran bare or ran nothing."""
    known = [r for r in rows if r.in_image and r.digest]
    groups: dict[str, list[str]] = {}
    for row in known:
        groups.setdefault(row.digest, []).append(row.environment)
    lines = []
    same: bool | None = None
    if len(groups) == 1 and len(known) >= 2:
        same = True
        ((digest, names),) = groups.items()
        lines.append(
            f"Same image on {', '.join(names)}: {short_digest(digest)}; between them the comparison is of platforms."
        )
    elif len(groups) > 1:
        same = False
        found = "; ".join(f"{short_digest(d)} on {', '.join(n)}" for d, n in groups.items())
        lines.append(
            f"Digests differ: {found}. Only sides of one digest compare platforms alone; "
            "across digests the software stack differs too."
        )
    else:
        lines.append(
            f"Only {known[0].environment} ran in an image of known digest: no two sides to compare digests."
            if known
            else "No side ran in an image of known digest: no digests to compare."
        )
    unknown = [r for r in rows if r.in_image and not r.digest]
    if unknown:
        lines.append("Digest not known: " + "; ".join(f"{r.environment} ({r.digest_text})" for r in unknown) + ".")
    bare = [r.environment for r, rec in zip(rows, records, strict=True) if rec.name == "bare"]
    if bare:
        lines.append(
            f"Ran bare (the site's own Python and libraries): {', '.join(bare)}; "
            "a comparison with it is of the platform and the software stack together."
        )
    neither = [r for r, rec in zip(rows, records, strict=True) if not r.in_image and rec.name != "bare"]
    if neither:
        lines.append(
            "Not counted (no step known to have run in its image): "
            + "; ".join(f"{r.environment} ({r.runtime})" for r in neither)
            + "."
        )
    return same, tuple(lines)


def conversion_rows(environments: Sequence[EnvironmentRecords], stack: str) -> tuple[SifConversionRow, ...]:
    """One row per (site, digest) that an Apptainer side ran: the conversion's time, when and by
    which stack, as the record beside the SIF says; "found in the cache" where no environment of
    this report's `up` converted it."""
    grouped: dict[tuple[str, str], list[EnvironmentRecords]] = {}
    for env in environments:
        if env.runtime.name == "apptainer":
            grouped.setdefault((env.runtime.site, env.runtime.digest), []).append(env)
    rows = []
    for (site, digest), envs in grouped.items():
        records = [e.runtime.conversion for e in envs if e.runtime.conversion is not None]
        converted = next((r for r in records if r.converted_now), None)
        record = converted or next(iter(records), None)
        names = tuple(e.name for e in envs)
        sif = envs[0].runtime.sif
        source = f"the conversion record beside {sif or 'the SIF'} on {site} (stack outputs of {', '.join(names)})"
        rows.append(_conversion_row(site, digest, names, sif, record, converted is not None, stack, source))
    return tuple(rows)


def _conversion_row(
    site: str,
    digest: str,
    names: tuple[str, ...],
    sif: str,
    record: SifConversion | None,
    converted_here: bool,
    stack: str,
    source: str,
) -> SifConversionRow:
    digest_text = short_digest(digest) if digest else "not known"
    if record is None:
        return SifConversionRow(
            site, digest, digest_text, names, missing("s", NO_CONVERSION_RECORD), "not recorded", "not recorded",
            "not recorded", sif, source,
        )  # fmt: skip
    seconds = (
        Value(record.seconds, "s", source, kind="measured")
        if record.seconds is not None
        else missing("s", NO_CONVERSION_TIME, source)
    )
    by = record.by or "not recorded"
    if converted_here:
        origin = f"converted by this stack's `up` ({stack})" if stack else "converted by this stack's `up`"
    else:
        earlier = f"converted earlier by {record.by}" if record.by else "who converted it is not recorded"
        origin = f"found in the cache: this `up` did not convert it ({earlier})"
    return SifConversionRow(
        site, digest, digest_text, names, seconds, record.converted_at or "not recorded", by, origin, sif, source
    )


def what_ran_where(environments: Sequence[EnvironmentRecords], stack: str = "") -> WhatRanWhere:
    """The report's "what ran where": a row per environment, the digests line, the conversions."""
    rows = tuple(runtime_row(e) for e in environments)
    same, lines = digest_lines(rows, [e.runtime for e in environments])
    return WhatRanWhere(rows, same, lines, conversion_rows(environments, stack))
