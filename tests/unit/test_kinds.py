"""infra.kinds: every kind of environment the router lists implements every operation the stack
program, the report, the monitor and the node listing ask of it, and nothing outside the router
chooses code by a kind's name."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from infra.kinds import KINDS, EnvironmentKind, kind_named, read_stack_outputs
from infra.kinds.hpc import HpcKind
from infra.outputs import EnvironmentOutputs, OutputsError

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = sorted(
    name for name, member in vars(EnvironmentKind).items() if getattr(member, "__isabstractmethod__", False)
)


def test_the_interface_names_what_each_consumer_needs() -> None:
    # The stack program (build), reading outputs before `pulumi up`, the report (collect,
    # unreachable), the monitor and node listing (monitor_source), the pace of polling
    # (polls_scheduler: compare --wait and the monitor keep to a site's interval), backfill, and
    # the pre-flight check before the first `pulumi up` (doctor).
    assert OPERATIONS == [
        "backfill",
        "build",
        "collect",
        "doctor",
        "monitor_source",
        "outputs_before_up",
        "polls_scheduler",
        "stages_source",
        "unreachable",
    ]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_listed_kind_implements_every_operation_and_its_outputs(name: str) -> None:
    kind = KINDS[name]
    assert not inspect.isabstract(type(kind))
    for operation in OPERATIONS:
        assert getattr(type(kind), operation) is not getattr(EnvironmentKind, operation), (name, operation)
    # The router's key is the outputs' own `kind`, so what a component writes is read back by its kind.
    assert issubclass(kind.outputs_type, EnvironmentOutputs) and kind.outputs_type.kind == kind.name == name


def test_a_kind_that_lacks_an_operation_cannot_be_made() -> None:
    every_but_backfill = {op: getattr(HpcKind, op) for op in OPERATIONS if op != "backfill"}
    lacking = type("Lacking", (EnvironmentKind,), every_but_backfill)
    with pytest.raises(TypeError, match="backfill"):
        lacking()
    complete = type("Complete", (EnvironmentKind,), {op: getattr(HpcKind, op) for op in OPERATIONS})
    assert complete()


def test_an_unknown_kind_is_refused_naming_the_key_and_what_this_atlas_reads() -> None:
    with pytest.raises(OutputsError, match=r"environments\.site\.kind: 'pbs' is not a kind .* kubernetes, hpc, aws"):
        read_stack_outputs({"atlas": {"stack": "s", "workload": "w"}, "environments": {"site": {"kind": "pbs"}}})
    with pytest.raises(OutputsError, match="kind: None"):
        kind_named(None)


# Comparing a kind's name, anywhere but the router and the outputs contract: `kind == "hpc"`,
# `.get("kind") in ("aws", ...)`, `kind != 'kubernetes'`.
KIND_DISPATCH = re.compile(
    r"""kind["'\])]*\s*(==|!=|\bin\b|\bnot in\b)\s*[(\[{]?\s*["'](kubernetes|hpc|aws)["']"""
)


def test_no_code_outside_the_router_chooses_by_a_kinds_name() -> None:
    found = []
    for path in sorted((ROOT / "infra").rglob("*.py")) + sorted((ROOT / "stacks").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("infra/kinds/") or relative == "infra/outputs.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if KIND_DISPATCH.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert found == []


def test_the_dispatch_pattern_finds_what_it_is_for() -> None:
    # So the test above cannot pass by a pattern that matches nothing.
    for line in ('if env.get("kind") == "kubernetes":', "elif outputs.kind != 'aws'", 'if kind in ("hpc", "aws"):'):
        assert KIND_DISPATCH.search(line), line
    assert not KIND_DISPATCH.search('kind="kubernetes",')


@pytest.mark.parametrize("switch", [False, "false", "False", "FALSE"])
def test_a_side_switched_off_has_no_outputs_before_up_as_the_models_read_the_switch(switch: object) -> None:
    """`enabled` as the config models read it (a bool, or the text `pulumi config set` stores, any
    case): a side they skip is no environment of the stack's outputs either."""
    config = {
        "atlas:openshift": {"namespace": "atlas-x", "enabled": switch},
        "atlas:hpc": {"satori": {"host": "login", "scheduler": "lsf", "enabled": switch},
                      "slurm": {"host": "login", "scheduler": "slurm"}},
    }
    assert set(kind_named("kubernetes").outputs_before_up(config, "s")) == set()
    assert set(kind_named("hpc").outputs_before_up(config, "s")) == {"slurm"}
