"""`atlas doctor`'s model: a check, its status, the checklist that runs them, their text and JSON.

Each kind of environment runs its own checks (infra/hpc/doctor.py, infra/openshift/doctor.py,
infra/aws/doctor.py, through the kinds router's `doctor` operation); what they share is here:
- `Finding`: what one check found, `ok`, `fail` (with the fix) or `skip` (with why);
- `Check`: a finding with its name and how long it took;
- `Checklist`: runs a kind's checks in order; a check whose `needs` did not pass is skipped
  naming them (`skip satori  queue: not checked (needs: ssh)`), and an error of the kinds the
  caller names (a refusal the lower layers raise, one line naming the fix) is a `fail` whose
  message is split into what is wrong and the fix (`split_fix`);
- `render_text` (one line per check, aligned, a summary last) and `to_json` (one object for
  scripts): pure, golden-tested.
Nothing here runs a command or opens a connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    FAIL = "fail"
    SKIP = "skip"


# How each status starts a text line: a failure stands out.
LABELS = {Status.OK: "ok", Status.FAIL: "FAIL", Status.SKIP: "skip"}


@dataclass(frozen=True)
class Finding:
    """What one check found: the detail (what was seen), and for a failure the fix."""

    status: Status
    detail: str
    fix: str = ""

    @classmethod
    def ok(cls, detail: str) -> Finding:
        return cls(Status.OK, detail)

    @classmethod
    def fail(cls, detail: str, fix: str) -> Finding:
        return cls(Status.FAIL, detail, fix)

    @classmethod
    def skip(cls, detail: str) -> Finding:
        return cls(Status.SKIP, detail)


@dataclass(frozen=True)
class Check:
    """One line of `atlas doctor`: a check's name, what it found and how long it took."""

    name: str
    status: Status
    detail: str
    fix: str = ""
    seconds: float = 0.0
    ran: bool = True  # False: skipped before it ran (a check it needs did not pass)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "fix": self.fix,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class EnvironmentChecks:
    """Every check of one environment the stack declares, in the order they ran."""

    name: str
    kind: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status is not Status.FAIL for c in self.checks)


@dataclass(frozen=True)
class DoctorReport:
    stack: str
    environments: tuple[EnvironmentChecks, ...]

    @property
    def ok(self) -> bool:
        return all(e.ok for e in self.environments)


# --- a message into what is wrong and the fix --------------------------------------------------

_OPENERS = {"(": ")", "[": "]", "{": "}"}


def _top_level_positions(text: str, mark: str) -> list[int]:
    """Where `mark` occurs outside brackets and backquotes."""
    found, depth, quoted = [], [], False
    for i, ch in enumerate(text):
        if ch == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in _OPENERS:
            depth.append(_OPENERS[ch])
        elif depth and ch == depth[-1]:
            depth.pop()
        elif not depth and text.startswith(mark, i):
            found.append(i)
    return found


def split_fix(message: str, fallback: str = "") -> tuple[str, str]:
    """A refusal's one line (`<what is wrong>; <the fix>`, or `<what>. <Fix>.`, as Atlas's errors
    write them) as (detail, fix); `fallback` is the fix where the message names none."""
    text = " ".join(message.split())
    for at in _top_level_positions(text, "; "):
        return text[:at].rstrip(), text[at + 2 :].strip()
    for at in _top_level_positions(text, ". "):
        rest = text[at + 2 :]
        if rest[:1].isupper():
            return text[:at].rstrip(), rest.strip().removesuffix(".")
    return text, fallback


def from_error(error: BaseException, fallback_fix: str = "") -> Finding:
    detail, fix = split_fix(str(error) or type(error).__name__, fallback_fix)
    return Finding.fail(detail, fix)


# --- running a kind's checks in order ----------------------------------------------------------


@dataclass
class Checklist:
    """Runs checks one after another. A check names the checks it needs: when one of them did
    not pass, it is skipped saying so. An error of the `expected` kinds (a refusal of the layer
    below, whose one line names the fix) fails the check; any other propagates."""

    expected: tuple[type[BaseException], ...]
    clock: Callable[[], float] = time.monotonic
    checks: list[Check] = field(default_factory=list)

    def passed(self, name: str) -> bool:
        return any(c.name == name and c.status is Status.OK for c in self.checks)

    def run(
        self, name: str, judge: Callable[[], Finding], needs: Sequence[str] = (), fallback_fix: str = ""
    ) -> Check:
        missing = [n for n in needs if not self.passed(n)]
        if missing:
            check = Check(name, Status.SKIP, f"not checked (needs: {', '.join(missing)})", ran=False)
        else:
            started = self.clock()
            try:
                finding = judge()
            except self.expected as error:
                finding = from_error(error, fallback_fix)
            if finding.status is Status.FAIL and not finding.fix:
                finding = Finding.fail(finding.detail, fallback_fix)
            check = Check(name, finding.status, finding.detail, finding.fix, max(0.0, self.clock() - started))
        self.checks.append(check)
        return check

    def result(self, environment: str, kind: str) -> EnvironmentChecks:
        return EnvironmentChecks(environment, kind, tuple(self.checks))


# --- rendering ---------------------------------------------------------------------------------


def check_line(environment: str, check: Check, width: int) -> str:
    """`ok   satori  ssh: logged in to ... (0.4 s)`, `FAIL openshift  quota: ... (0.1 s); fix: ...`."""
    line = f"{LABELS[check.status]:<4} {environment:<{width}}  {check.name}: {check.detail}"
    if check.ran:
        line += f" ({check.seconds:.1f} s)"
    if check.status is Status.FAIL and check.fix:
        line += f"; fix: {check.fix}"
    return line


def _counts(checks: Iterable[Check]) -> Mapping[Status, int]:
    counted = dict.fromkeys(Status, 0)
    for check in checks:
        counted[check.status] += 1
    return counted


def render_text(report: DoctorReport) -> str:
    """Every check of every environment, one line each, then the summary line."""
    width = max((len(e.name) for e in report.environments), default=0)
    lines = [check_line(e.name, c, width) for e in report.environments for c in e.checks]
    counted = _counts(c for e in report.environments for c in e.checks)
    verdict = "ready for `pulumi up`" if report.ok else "fix the FAIL lines, then run it again"
    lines.append(
        f"stack {report.stack}: {len(report.environments)} environment(s), {counted[Status.OK]} ok, "
        f"{counted[Status.FAIL]} failed, {counted[Status.SKIP]} skipped: {verdict}"
    )
    return "\n".join(lines) + "\n"


def to_json(report: DoctorReport) -> dict[str, Any]:
    """`{"stack", "environments": {name: {"kind", "checks": [...]}}, "ok"}`, for scripts."""
    return {
        "stack": report.stack,
        "environments": {
            e.name: {"kind": e.kind, "checks": [c.to_json() for c in e.checks]} for e in report.environments
        },
        "ok": report.ok,
    }
