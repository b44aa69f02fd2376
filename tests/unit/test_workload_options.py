"""infra/workload/options.py, the one command-line option reader, and its users in the comparison
report (infra/compare/comparability.py, infra/compare/training.py), table-driven."""

from __future__ import annotations

import pytest

from infra.compare import comparability
from infra.compare.records import EnvironmentRecords, Missing, StepRecord
from infra.compare.training import batch_size_of
from infra.workload.options import OptionUse, is_option, last_values, option_values, split_options


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("--batch_size", True),
        ("--batch_size=64", True),
        ("-m", True),  # python3 -m workloads.probe
        ("--", True),  # the sampler's separator
        ("-", False),  # stdin
        ("-1", False),  # a negative number is a value
        ("-0.5", False),
        ("-.5", False),
        ("64", False),
        ("main.py", False),
    ],
)
def test_which_words_are_options(word: str, expected: bool) -> None:
    assert is_option(word) is expected


SPLIT_CASES = [
    pytest.param(
        ["--x=y"],
        [OptionUse("", (), ()), OptionUse("--x", ("--x=y",), ("y",))],
        id="--x=y",
    ),
    pytest.param(
        ["--x", "y"],
        [OptionUse("", (), ()), OptionUse("--x", ("--x", "y"), ("y",))],
        id="--x y",
    ),
    pytest.param(
        ["--x="],
        [OptionUse("", (), ()), OptionUse("--x", ("--x=",), ("",))],
        id="--x= (an empty value)",
    ),
    pytest.param(
        ["--x=a=b"],
        [OptionUse("", (), ()), OptionUse("--x", ("--x=a=b",), ("a=b",))],
        id="--x=a=b (only the first = splits)",
    ),
    pytest.param(
        ["--shuffle", "--x", "1"],
        [OptionUse("", (), ()), OptionUse("--shuffle", ("--shuffle",), ()), OptionUse("--x", ("--x", "1"), ("1",))],
        id="a bare flag",
    ),
    pytest.param(
        ["--x", "1", "--x", "2"],
        [OptionUse("", (), ()), OptionUse("--x", ("--x", "1"), ("1",)), OptionUse("--x", ("--x", "2"), ("2",))],
        id="a repeated option",
    ),
    pytest.param(
        ["--betas", "0.0", "0.999"],
        [OptionUse("", (), ()), OptionUse("--betas", ("--betas", "0.0", "0.999"), ("0.0", "0.999"))],
        id="several values",
    ),
    pytest.param(
        ["--offset", "-1"],
        [OptionUse("", (), ()), OptionUse("--offset", ("--offset", "-1"), ("-1",))],
        id="a negative value",
    ),
    pytest.param(
        ["python3", "-m", "workloads.probe", "train", "--batch_size", "8"],
        [
            OptionUse("", ("python3",), ("python3",)),
            OptionUse("-m", ("-m", "workloads.probe", "train"), ("workloads.probe", "train")),
            OptionUse("--batch_size", ("--batch_size", "8"), ("8",)),
        ],
        id="a short option as the probe's command uses it",
    ),
    pytest.param(
        ["python", "main.py", "--G_lr", "1e-4"],
        [
            OptionUse("", ("python", "main.py"), ("python", "main.py")),
            OptionUse("--G_lr", ("--G_lr", "1e-4"), ("1e-4",)),
        ],
        id="leading positionals",
    ),
    pytest.param([], [OptionUse("", (), ())], id="nothing"),
]


@pytest.mark.parametrize(("argv", "expected"), SPLIT_CASES)
def test_split_options(argv: list[str], expected: list[OptionUse]) -> None:
    uses = split_options(argv)
    assert list(uses) == expected
    # Nothing is lost: the tokens put back together are the argv.
    assert [token for use in uses for token in use.tokens] == argv


@pytest.mark.parametrize(
    ("argv", "every", "last"),
    [
        (["--x=y"], {"--x": ("y",)}, {"": (), "--x": ("y",)}),
        (["--x", "y"], {"--x": ("y",)}, {"": (), "--x": ("y",)}),
        (["--fast"], {"--fast": ()}, {"": (), "--fast": ()}),
        (["--x", "1", "--x=2"], {"--x": ("1", "2")}, {"": (), "--x": ("2",)}),
        (["--fast", "--fast"], {"--fast": ()}, {"": (), "--fast": ()}),
        (["a", "-n", "4"], {"": ("a",), "-n": ("4",)}, {"": ("a",), "-n": ("4",)}),
    ],
    ids=["--x=y", "--x y", "flag", "repeated", "repeated flag", "short option"],
)
def test_every_value_and_the_last_value(
    argv: list[str], every: dict[str, tuple[str, ...]], last: dict[str, tuple[str, ...]]
) -> None:
    assert option_values(argv) == every
    assert last_values(argv) == last


def test_both_spellings_of_an_option_read_the_same() -> None:
    assert option_values(["--batch_size=64", "--shuffle"]) == option_values(["--batch_size", "64", "--shuffle"])


# --- the comparison report's readers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "main.py", "--x=y"], {"(command)": "python main.py", "--x": "y"}),
        (["python", "main.py", "--x", "y"], {"(command)": "python main.py", "--x": "y"}),
        (["python", "main.py", "--fast"], {"(command)": "python main.py", "--fast": "(flag)"}),
        (["python", "main.py", "--x", "1", "--x", "2"], {"(command)": "python main.py", "--x": "2"}),
        (
            ["python3", "-m", "workloads.probe", "train", "--seed", "-1"],
            {"(command)": "python3 -m workloads.probe train", "--seed": "-1"},
        ),
        (["python", "main.py", "--x", "1", "-n", "4"], {"(command)": "python main.py", "--x": "1", "-n": "4"}),
    ],
    ids=["--x=y", "--x y", "flag", "repeated: the last wins", "interpreter's -m is the command", "short option"],
)
def test_the_report_reads_options_with_the_shared_parser(argv: list[str], expected: dict[str, str]) -> None:
    assert comparability._options(argv) == expected


def _records(name: str, argv: tuple[str, ...]) -> EnvironmentRecords:
    step = StepRecord(
        step="train",
        job=f"{name}-train",
        state="Complete",
        requested_at=None,
        scheduled_at=None,
        started_at=None,
        finished_at=None,
        exit_code=0,
        pending_reason="",
        gpus_requested=1,
        gpus_allocated=1,
        node="node-0",
        simulated=False,
        argv=argv,
        source="test",
    )
    missing = Missing("not measured: test")
    return EnvironmentRecords(name, "kubernetes", "test", 1, None, (step,), {}, missing, missing)


def test_metrics_reads_an_equals_sign_as_the_option_and_its_value() -> None:
    """`--batch_size=64` and `--batch_size 64` are the same run; the report used to key the first
    as a flag named `--batch_size=64` and call the runs incomparable."""
    same = comparability.comparability(
        [
            _records("a", ("python", "main.py", "--batch_size=64")),
            _records("b", ("python", "main.py", "--batch_size", "64")),
        ]
    )
    assert same.comparable and same.differences == ()
    other = comparability.comparability(
        [
            _records("a", ("python", "main.py", "--batch_size=64")),
            _records("b", ("python", "main.py", "--batch_size", "32")),
        ]
    )
    assert [(d.step, d.argument, dict(d.values)) for d in other.differences] == [
        ("train", "--batch_size", {"a": "64", "b": "32"})
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("python", "main.py", "--batch_size", "64"), 64),
        (("python", "main.py", "--batch_size=64"), 64),
        (("python", "main.py", "--batch_size", "64", "--batch_size", "32"), 32),  # argparse: the last wins
        (("python", "main.py", "--batch_size", "--shuffle"), None),
        (("python", "main.py", "--batch_size", "large"), None),
        (("python", "main.py"), None),
        (None, None),
    ],
)
def test_batch_size_from_argv(argv: tuple[str, ...] | None, expected: int | None) -> None:
    assert batch_size_of(argv, None) == expected
