"""The one reader of a command line's options, used wherever Atlas looks inside an argv.

A workload's override sets and removes options (`parse_sections.py`, `render.py`), the differences
report lists them (`differences.py`), and the comparison report reads the argv each run
recorded (`infra/compare/comparability.py`, `infra/compare/training.py`): all through here, so
`--batch_size=64`, `--batch_size 64`, a bare flag and a repeated option mean the same thing
everywhere.

The rules, as the workloads write their command lines:
- a word starting with `-` is an option (`--batch_size`, `-m`), except `-` alone and a
  negative number (`-1`, `-0.5`), which are values;
- `--name=value` is the option `--name` with the value `value`;
- the words after an option, up to the next option, are its values (none: a bare flag);
- the words before the first option are positionals, kept under the option name "".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# "-1" and "-0.5" are values (negative numbers), not options.
_NEGATIVE_NUMBER = re.compile(r"^-[0-9.]")


def is_option(word: str) -> bool:
    return word.startswith("-") and word != "-" and not _NEGATIVE_NUMBER.match(word)


@dataclass(frozen=True)
class OptionUse:
    """One occurrence of an option in an argv, with the values written after it."""

    option: str  # "--batch_size" for both "--batch_size 64" and "--batch_size=64"; "" for leading positionals
    tokens: tuple[str, ...]  # the words as written, e.g. ("--batch_size=64",) or ("--batch_size", "64")
    values: tuple[str, ...]  # ("64",) either way; () for a bare flag


def split_options(argv: Sequence[str]) -> tuple[OptionUse, ...]:
    """Every occurrence in order; the first is always the leading positionals (option "")."""
    groups: list[tuple[str, list[str], list[str]]] = [("", [], [])]
    for token in argv:
        if is_option(token):
            option, equals, value = token.partition("=")
            groups.append((option, [token], [value] if equals else []))
        else:
            groups[-1][1].append(token)
            groups[-1][2].append(token)
    return tuple(OptionUse(option, tuple(tokens), tuple(values)) for option, tokens, values in groups)


def option_values(argv: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each option with the values of all its occurrences, in order of first appearance;
    the leading positionals under "" (only where there are some). A repeated option keeps
    every value, so two argvs that differ in any occurrence compare unequal."""
    options: dict[str, tuple[str, ...]] = {}
    for use in split_options(argv):
        if use.option or use.values:
            options[use.option] = options.get(use.option, ()) + use.values
    return options


def last_values(argv: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each option with the values of its last occurrence, as argparse reads a repeated option;
    the leading positionals under "" (always present, possibly empty)."""
    return {use.option: use.values for use in split_options(argv)}
