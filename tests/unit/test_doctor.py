"""infra.doctor: a refusal's line split into what is wrong and the fix, the checklist's order and
skips, and `atlas doctor`'s text and JSON pinned by golden files (tests/unit/golden/).

Regenerate after an intended change: ATLAS_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_doctor.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.doctor import (
    Check,
    Checklist,
    DoctorReport,
    EnvironmentChecks,
    Finding,
    Status,
    from_error,
    render_text,
    split_fix,
    to_json,
)
from infra.errors import AtlasConfigError

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize(
    ("message", "detail", "fix"),
    [
        # Atlas's refusals: `<what>; <fix>`.
        (
            "the API server https://h:6443 refused the credentials of context 'c' (401 Unauthorized: expired or "
            "revoked); log in again: `oc login --server=https://h:6443`",
            "the API server https://h:6443 refused the credentials of context 'c' (401 Unauthorized: expired or "
            "revoked)",
            "log in again: `oc login --server=https://h:6443`",
        ),
        # A semicolon inside brackets or backquotes is not the split.
        (
            "refused every key (a; b) and `x; y`; authorize one of them",
            "refused every key (a; b) and `x; y`",
            "authorize one of them",
        ),
        # `<what>. <Fix>.`: a sentence that starts with a capital after the first.
        (
            "the login node asks for keyboard-interactive: a second factor, and Atlas never prompts. Open a master "
            "connection once: `ssh -M -fN site`.",
            "the login node asks for keyboard-interactive: a second factor, and Atlas never prompts",
            "Open a master connection once: `ssh -M -fN site`",
        ),
        # A dotted name is no sentence end; no fix named: the fallback.
        ("cannot read file a.b.c in v1.2", "cannot read file a.b.c in v1.2", "FALLBACK"),
        # Lines folded into one.
        ("one\n  two; three", "one two", "three"),
    ],
)
def test_a_refusal_is_split_into_what_is_wrong_and_the_fix(message: str, detail: str, fix: str) -> None:
    assert split_fix(message, "FALLBACK") == (detail, fix)


def ticking() -> Iterator[float]:
    now = 100.0
    while True:
        yield now
        now += 0.25


def test_the_checklist_runs_in_order_skips_what_needs_a_failed_check_and_times_each() -> None:
    clock = ticking()
    checks = Checklist((AtlasConfigError,), clock=lambda: next(clock))
    checks.run("a", lambda: Finding.ok("fine"))
    checks.run("b", lambda: Finding.fail("broken", "mend it"), needs=("a",))
    checks.run("c", lambda: pytest.fail("c needs b, which failed: it must not run"), needs=("a", "b"))
    checks.run("d", lambda: Finding.skip("not allowed to look"), needs=("a",))
    checks.run("e", lambda: pytest.fail("a skipped check is not a passed one"), needs=("d",))
    assert [(c.name, c.status, c.detail, c.fix) for c in checks.checks] == [
        ("a", Status.OK, "fine", ""),
        ("b", Status.FAIL, "broken", "mend it"),
        ("c", Status.SKIP, "not checked (needs: b)", ""),
        ("d", Status.SKIP, "not allowed to look", ""),
        ("e", Status.SKIP, "not checked (needs: d)", ""),
    ]
    assert [c.seconds for c in checks.checks] == [0.25, 0.25, 0.0, 0.25, 0.0]
    assert [c.ran for c in checks.checks] == [True, True, False, True, False]


def test_an_expected_error_fails_the_check_with_its_fix_and_any_other_propagates() -> None:
    checks = Checklist((AtlasConfigError,))

    def refused() -> Finding:
        raise AtlasConfigError("atlas:hpc.site.host: 'x' is no Host entry; write a Host alias")

    check = checks.run("ssh", refused, fallback_fix="unused")
    assert (check.status, check.detail, check.fix) == (
        Status.FAIL, "atlas:hpc.site.host: 'x' is no Host entry", "write a Host alias"
    )
    # A failure that names no fix gets the check's own.
    assert checks.run("other", lambda: Finding.fail("broken", ""), fallback_fix="try this").fix == "try this"

    def bug() -> Finding:
        raise KeyError("a bug is not a finding")

    with pytest.raises(KeyError):
        checks.run("bug", bug)
    assert from_error(RuntimeError(), "fix").detail == "RuntimeError"


REPORT = DoctorReport(
    "mysite",
    (
        EnvironmentChecks(
            "openshift",
            "kubernetes",
            (
                Check("api", Status.OK, "https://api.c:6443 answers (Kubernetes v1.33.1)", seconds=0.12),
                Check("login", Status.OK, "logged in as alice (token, context 'p/api-c:6443/alice')", seconds=0.05),
                Check(
                    "quota",
                    Status.FAIL,
                    "ResourceQuota q leaves 2 GPUs (requests.nvidia.com/gpu: 2 used of 4); the run needs 4",
                    "ask the project's admins to raise requests.nvidia.com/gpu in q to at least 6",
                    0.08,
                ),
                Check("gpu-label", Status.SKIP, "alice may not list nodes", seconds=0.03),
            ),
        ),
        EnvironmentChecks(
            "satori-slurm",
            "hpc",
            (
                Check("ssh", Status.OK, "logged in to atlas@site through jump host bastion", seconds=0.41),
                Check("queue", Status.SKIP, "not checked (needs: scheduler)", ran=False),
            ),
        ),
    ),
)


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


def test_the_text_is_one_aligned_line_per_check_and_a_summary() -> None:
    text = render_text(REPORT)
    _golden("doctor-report.txt", text)
    lines = text.splitlines()
    assert len(lines) == 7 and all(len(line.split("  ")[0]) for line in lines)
    # The environment column is as wide as the longest name; a failure names its fix; a check that
    # never ran has no time.
    assert lines[0].startswith("ok   openshift     api: ")
    assert lines[2].startswith("FAIL openshift     quota: ") and lines[2].endswith("; fix: ask the project's admins "
                                                                             "to raise requests.nvidia.com/gpu in q "
                                                                             "to at least 6")
    assert lines[5] == "skip satori-slurm  queue: not checked (needs: scheduler)"
    assert lines[-1].startswith("stack mysite: 2 environment(s), 3 ok, 1 failed, 2 skipped")
    assert not REPORT.ok and not REPORT.environments[0].ok and REPORT.environments[1].ok


def test_the_json_is_one_object_for_scripts() -> None:
    document = to_json(REPORT)
    _golden("doctor-report.json", json.dumps(document, indent=2) + "\n")
    assert document["ok"] is False and list(document["environments"]) == ["openshift", "satori-slurm"]
    check = document["environments"]["openshift"]["checks"][2]
    assert set(check) == {"name", "status", "detail", "fix", "seconds"} and check["status"] == "fail"
    passing = DoctorReport("s", (EnvironmentChecks("e", "hpc", (Check("ssh", Status.OK, "ok"),)),))
    assert to_json(passing)["ok"] is True and render_text(passing).endswith("ready for `pulumi up`\n")
