"""Comparability: whether every environment ran each step with the same arguments, and where they differ."""

from __future__ import annotations

from collections.abc import Sequence

from infra.compare.records import EnvironmentRecords, Missing, TelemetryColumns
from infra.compare.report_model import ArgumentDifference, Comparability
from infra.workload.options import split_options


def _options(argv: Sequence[str]) -> dict[str, str]:
    """Each option's value as the program reads it (a repeated option: the last, as argparse does;
    a bare flag: "(flag)"); the words before the program's first long option keyed '(command)'."""
    uses = split_options(argv)
    # The interpreter's own short options (`python3 -m workloads.probe train`) name the program: they
    # belong to the command, not to the arguments being compared.
    first_long = next((i for i, use in enumerate(uses) if use.option.startswith("--")), len(uses))
    result = {"(command)": " ".join(token for use in uses[:first_long] for token in use.tokens)}
    for use in uses[first_long:]:
        result[use.option] = " ".join(use.values) if use.values else "(flag)"
    return result


def comparability(environments: Sequence[EnvironmentRecords]) -> Comparability:
    argvs: dict[str, dict[str, tuple[str, ...]]] = {}
    unknown = []
    for env in environments:
        if isinstance(env.steps, Missing):
            found = {step: c.argv for step, c in env.telemetry.items() if isinstance(c, TelemetryColumns) and c.argv}
        else:
            found = {s.step: s.argv for s in env.steps if s.argv}
        if found:
            argvs[env.name] = found
        else:
            unknown.append(env.name)
    differences = []
    steps = sorted({step for found in argvs.values() for step in found})
    for step in steps:
        have = {name: _options(found[step]) for name, found in argvs.items() if step in found}
        if len(have) < 2:
            continue
        for option in sorted({o for opts in have.values() for o in opts}):
            values = {name: opts.get(option) for name, opts in have.items()}
            if len(set(values.values())) > 1:
                differences.append(ArgumentDifference(step, option, tuple(sorted(values.items()))))
    return Comparability(not differences, tuple(differences), tuple(unknown))
