"""The failure every LSF command reports: its message on stderr and LSF's exit code. Stdlib only."""

from __future__ import annotations

NOT_SUBMITTED = "Job not submitted."


class LsfError(Exception):
    """A failure the command reports on stderr and exits with (LSF uses 255)."""

    def __init__(self, message: str, exit_code: int = 255) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def not_submitted(reason: str) -> LsfError:
    return LsfError(f"{reason}. {NOT_SUBMITTED}")
