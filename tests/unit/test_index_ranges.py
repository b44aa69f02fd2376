"""Unit tests of infra.index_ranges' modes beyond the schedulers' and Kubernetes' own tests.

The round trip and the strict refusals are tested where each side uses them
(tests/unit/test_sweep_job.py, tests/unit/test_openshift_sweep.py).
"""

from __future__ import annotations

import pytest

from infra.index_ranges import index_ranges, parse_index_ranges


def test_the_report_reads_what_it_can_of_an_odd_answer() -> None:
    assert parse_index_ranges("0-2,x,5,3-1,,7-", lenient=True) == (0, 1, 2, 5)
    assert parse_index_ranges(None, lenient=True) == ()
    assert parse_index_ranges("", lenient=True) == ()
    assert parse_index_ranges("1,9,2-3", size=4, lenient=True) == (1, 2, 3)


@pytest.mark.parametrize("text", [None, ""])
def test_no_index_is_refused_unless_said(text: str | None) -> None:
    with pytest.raises(ValueError, match="is not an index list"):
        parse_index_ranges(text)
    assert parse_index_ranges(text, empty_ok=True) == ()


def test_an_index_past_the_size_is_refused_naming_where() -> None:
    with pytest.raises(ValueError, match=r"status\.failedIndexes: '4-6' in '0,4-6' is not a range of indexes below 6"):
        parse_index_ranges("0,4-6", size=6, where="status.failedIndexes")


def test_an_empty_or_negative_list_is_written_only_where_said() -> None:
    with pytest.raises(ValueError, match="at least one index"):
        index_ranges([])
    with pytest.raises(ValueError, match="none negative"):
        index_ranges([-1, 2], empty_ok=True)
    assert index_ranges([], empty_ok=True) == ""
