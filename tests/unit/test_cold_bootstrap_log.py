"""bench.cold_bootstrap --record: a bootstrap's printed log read into its phases."""

from __future__ import annotations

import pytest

from bench.cold_bootstrap import parse_log

LOG = """bootstrap   0m00s go version go1.26.8 linux/amd64
bootstrap   0m00s [1/3] venv: Python virtual environment in /x/.venv
bootstrap   5m20s     apptainer (compile): still running, 5m20s, 32 lines of output so far
bootstrap  32m29s done; toolchain in /c/bin (venv 66s, pulumi fetch 113s, python-plugins fetch 0s, \
pulumi-resource-kubernetes compile 551s, cni-plugins compile 6s, total 1950s)
"""


def test_every_phase_and_the_total_are_read() -> None:
    assert parse_log(LOG) == {
        "venv": 66.0, "pulumi fetch": 113.0, "python-plugins fetch": 0.0,
        "pulumi-resource-kubernetes compile": 551.0, "cni-plugins compile": 6.0, "total": 1950.0,
    }


@pytest.mark.parametrize(("log", "message"), [
    (LOG.rsplit("\n", 2)[0], "did not finish"),  # stopped before its last line
    ("bootstrap  1m00s done; toolchain in /c/bin (venv 66s)\n", "no total"),
])
def test_a_log_without_a_finished_bootstrap_is_refused(log: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_log(log)
