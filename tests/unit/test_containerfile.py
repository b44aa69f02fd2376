"""The Containerfile parser and its base-image warnings (infra/workload/containerfile.py), table by table."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.workload.containerfile import (
    Arg,
    BuildSite,
    Containerfile,
    ContainerfileError,
    ContextPath,
    Instruction,
    Stage,
    base_image_warnings,
    expand,
    instructions,
    is_loopback,
    parse_containerfile,
    registry_host,
    repository_and_tag,
)

REPO = Path(__file__).resolve().parents[2]
SERVED = frozenset({"atlas/debian-python:bookworm"})
UNKNOWN = BuildSite(SERVED)  # scripts/workload check: no stack
LOCAL = BuildSite(SERVED, local=True, base_image="127.0.0.1:16510/atlas/debian-python:bookworm")
CLUSTER = BuildSite(SERVED, local=False, base_image="quay.io/example/torch:2")
CLUSTER_NO_BASE = BuildSite(SERVED, local=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("FROM a\nRUN b\n", [(1, "FROM", "a"), (2, "RUN", "b")]),
        ("from a as b\n", [(1, "FROM", "a as b")]),
        ("FROM\ta\n", [(1, "FROM", "a")]),
        # comments and blank lines are not instructions; the line is where the instruction starts
        ("# one\n\n  # two\nFROM a\n", [(4, "FROM", "a")]),
        # a continuation joins lines; a comment or blank line inside it neither ends nor joins it
        ("RUN a \\\n  # note\n\n  && b \\\n  && c\nUSER 1\n", [(1, "RUN", "a && b && c"), (6, "USER", "1")]),
        # the escape directive changes the continuation character (Windows-style Containerfiles)
        ("# escape=`\nFROM a\nRUN b `\n  c\n", [(2, "FROM", "a"), (3, "RUN", "b c")]),
        # a directive after an instruction is a comment: the backslash still continues
        ("FROM a\n# escape=`\nRUN b \\\n c\n", [(1, "FROM", "a"), (3, "RUN", "b c")]),
        ("# syntax=docker/dockerfile:1\nFROM a\n", [(2, "FROM", "a")]),
        # a heredoc's body is not read as instructions, even where a line says FROM
        ("FROM a\nRUN <<EOF\nFROM b\nEOF\nCOPY <<-'X' /f\n\tFROM c\n\tX\nUSER 1\n",
         [(1, "FROM", "a"), (2, "RUN", "<<EOF"), (5, "COPY", "<<-'X' /f"), (8, "USER", "1")]),
        # a continuation at the end of the file ends the instruction
        ("FROM a \\\n", [(1, "FROM", "a")]),
        ("", []),
    ],
)
def test_instructions(text: str, expected: list[tuple[int, str, str]]) -> None:
    assert [(i.line, i.keyword, i.arguments) for i in instructions(text)] == expected
    assert all(isinstance(i, Instruction) for i in instructions(text))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "ARG BASE_IMAGE=docker.io/library/python:3.11-slim\nFROM ${BASE_IMAGE}\n",
            Containerfile((Arg(1, "BASE_IMAGE", "docker.io/library/python:3.11-slim"),), (Stage(2, "${BASE_IMAGE}"),),
                          (), ()),
        ),
        (  # several ARGs in one line, quoted and empty defaults, one without; an ARG after FROM is the stage's
            'ARG A=1 B="two words" C= D\nFROM x\nARG E=5\n',
            Containerfile((Arg(1, "A", "1"), Arg(1, "B", "two words"), Arg(1, "C", ""), Arg(1, "D", None)),
                          (Stage(2, "x"),), (), ()),
        ),
        (  # --platform=, AS in any case, a stage of a stage
            "FROM --platform=$BUILDPLATFORM golang:1.22 As build\nFROM build AS final\n",
            Containerfile((), (Stage(1, "golang:1.22", "build", "$BUILDPLATFORM"), Stage(2, "build", "final")), (), ()),
        ),
        (  # COPY --from a stage (by name or index) reads no image; of an image, it pulls one
            "FROM a AS one\nCOPY --from=one /x /x\nCOPY --from=0 /y /y\nCOPY --from=alpine:3 /bin/sh /sh\n",
            Containerfile((), (Stage(1, "a", "one"),), (Stage(4, "alpine:3"),), ()),
        ),
        (  # what COPY and ADD read from the context: flags, the JSON form, URLs and inline files left out
            "FROM a\nCOPY --chown=1001:0 --chmod=0755 infra/x.py infra/y/ /opt/\nADD [\"a b.txt\", \"/d/\"]\n"
            "ADD https://example.org/f.tgz /f\nCOPY <<EOF /etc/x\nhello\nEOF\nCOPY . /src\n",
            Containerfile((), (Stage(1, "a"),), (), (ContextPath(2, "infra/x.py"), ContextPath(2, "infra/y/"),
                                                     ContextPath(3, "a b.txt"), ContextPath(8, "."))),
        ),
        (  # a FROM inside a continuation and after comments keeps the line it starts on
            "# c\nARG BASE_IMAGE\nFROM \\\n  ${BASE_IMAGE} \\\n  AS base\n",
            Containerfile((Arg(2, "BASE_IMAGE", None),), (Stage(3, "${BASE_IMAGE}", "base"),), (), ()),
        ),
    ],
)
def test_parse_containerfile(text: str, expected: Containerfile) -> None:
    assert parse_containerfile(text) == expected


def test_a_from_without_an_image_is_refused_with_its_line() -> None:
    with pytest.raises(ContainerfileError, match="line 2: FROM names no image"):
        parse_containerfile("ARG X\nFROM --platform=linux/amd64\n")


@pytest.mark.parametrize(
    ("value", "variables", "expected"),
    [
        ("${A}/b", {"A": "x"}, "x/b"),
        ("$A/b", {"A": "x"}, "x/b"),
        ("${A:-d}", {}, "d"),
        ("${A:-d}", {"A": ""}, "d"),
        ("${A:-d}", {"A": "x"}, "x"),
        ("${A:+alt}", {"A": "x"}, "alt"),
        ("${A:+alt}", {"A": None}, ""),
        ("${MISSING}", {}, ""),
        ("${A:-${B}}", {"B": "nested"}, "nested"),
    ],
)
def test_expand(value: str, variables: dict[str, str | None], expected: str) -> None:
    assert expand(value, variables) == expected


@pytest.mark.parametrize(
    ("image", "host", "repository", "loopback"),
    [
        ("python:3.11-slim", None, "python:3.11-slim", False),
        ("library/debian", None, "library/debian:latest", False),
        ("docker.io/library/python:3.11-slim", "docker.io", "library/python:3.11-slim", False),
        ("127.0.0.1:16510/atlas/debian-python:bookworm", "127.0.0.1:16510", "atlas/debian-python:bookworm", True),
        ("localhost:5000/x", "localhost:5000", "x:latest", True),
        ("localhost/x:1", "localhost", "x:1", True),
        ("[::1]:5000/x:1", "[::1]:5000", "x:1", True),
        ("quay.io/x/y@sha256:abc", "quay.io", "x/y@sha256:abc", False),
        # a loopback name as a prefix of a remote registry's is not loopback (infra/loopback.py)
        ("localhost.example.com/x:1", "localhost.example.com", "x:1", False),
        ("127.0.0.1.nip.io:5000/x:1", "127.0.0.1.nip.io:5000", "x:1", False),
    ],
)
def test_image_references(image: str, host: str | None, repository: str, loopback: bool) -> None:
    assert registry_host(image) == host
    assert repository_and_tag(image) == repository
    assert is_loopback(host) is loopback


def warnings_of(text: str, site: BuildSite) -> list[str]:
    return [w.text() for w in base_image_warnings(parse_containerfile(text), "workloads/x/Containerfile", site)]


GOOD = "ARG BASE_IMAGE=docker.io/library/python:3.11-slim\nFROM ${BASE_IMAGE}\nRUN true\n"


@pytest.mark.parametrize("site", [UNKNOWN, LOCAL, CLUSTER, CLUSTER_NO_BASE])
@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        # a builder stage and the final one, both through BASE_IMAGE; a stage of a stage; scratch
        "ARG BASE_IMAGE=x\nFROM ${BASE_IMAGE} AS build\nFROM build AS test\nFROM scratch\nCOPY --from=build /a /a\n",
        # BASE_IMAGE through another ARG, and with a default in the FROM itself
        "ARG BASE_IMAGE=x\nARG IMAGE=${BASE_IMAGE}\nFROM $IMAGE\n",
        "ARG BASE_IMAGE=x\nFROM ${BASE_IMAGE:-python:3.11-slim}\n",
    ],
)
def test_a_containerfile_through_base_image_has_no_warning(text: str, site: BuildSite) -> None:
    assert warnings_of(text, site) == []


@pytest.mark.parametrize("name", ["probe", "biggan", "runtime"])
@pytest.mark.parametrize("site", [UNKNOWN, LOCAL, CLUSTER, CLUSTER_NO_BASE])
def test_the_shipped_containerfiles_have_no_warning(name: str, site: BuildSite) -> None:
    assert warnings_of((REPO / "workloads" / name / "Containerfile").read_text(), site) == []


# (Containerfile, site, the one warning: its line and words in it)
FIXED = "FROM python:3.11-slim\n"
WARNED = [
    (FIXED, UNKNOWN, [(1, "no `ARG BASE_IMAGE` before the first FROM"),
                      (1, "FROM python:3.11-slim is a fixed image: the stack's image.build.base_image cannot "
                          "replace it, and the local environment cannot pull it")]),
    (FIXED, LOCAL, [(1, "no `ARG BASE_IMAGE`"), (1, "is a fixed image the local environment cannot pull")]),
    (FIXED, CLUSTER, [(1, "no `ARG BASE_IMAGE`"),
                      (1, "the stack's image.build.base_image (quay.io/example/torch:2) does not reach it")]),
    # on a cluster, with no base image in the stack, a fixed FROM builds as it says
    (FIXED, CLUSTER_NO_BASE, [(1, "no `ARG BASE_IMAGE`")]),
    # declared, but a stage goes around it (the ARG's value is what the FROM resolves to)
    ("ARG BASE_IMAGE=x\nARG REG=docker.io\nFROM ${REG}/library/golang:1.22 AS build\nFROM ${BASE_IMAGE}\n", UNKNOWN,
     [(3, "FROM ${REG}/library/golang:1.22 (that is, docker.io/library/golang:1.22) is a fixed image")]),
    # declared after the first FROM: a FROM cannot use it, and it expands to nothing
    ("FROM ${BASE_IMAGE}\nARG BASE_IMAGE=x\n", UNKNOWN,
     [(1, "no `ARG BASE_IMAGE` before the first FROM"), (1, "FROM ${BASE_IMAGE} is empty")]),
    # the local registry: an image it does not serve, and one it serves but fixed to this machine
    (GOOD + "FROM 127.0.0.1:16510/atlas/other:1\n", LOCAL,
     [(4, "FROM 127.0.0.1:16510/atlas/other:1 is not served by the local environment's registry "
          "(it serves atlas/debian-python:bookworm")]),
    (GOOD + "FROM 127.0.0.1:16510/atlas/debian-python:bookworm\n", UNKNOWN,
     [(4, "is fixed to this machine's local registry: a real cluster's build cannot pull it")]),
    (GOOD + "FROM localhost:5000/atlas/other:1\n", CLUSTER,
     [(4, "is this machine's local registry, which a cluster's build cannot reach")]),
    (GOOD + "FROM 127.0.0.1:16510/atlas/debian-python:bookworm\n", LOCAL, []),
    # COPY --from an image pulls it too
    (GOOD + "COPY --from=alpine:3 /bin/sh /sh\n", LOCAL,
     [(4, "COPY --from alpine:3 is a fixed image the local environment cannot pull")]),
    # no default: a stack without base_image builds FROM an empty name (the local builder always gives one)
    ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", UNKNOWN, [(1, "`ARG BASE_IMAGE` has no default")]),
    ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", CLUSTER_NO_BASE, [(1, "`ARG BASE_IMAGE` has no default")]),
    ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", CLUSTER, []),
    ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", BuildSite(SERVED, local=True), []),
    # the local builder with a base image its registry does not serve
    (GOOD, BuildSite(SERVED, local=True, base_image="docker.io/library/python:3.11-slim"),
     [(1, "the stack's image.build.base_image docker.io/library/python:3.11-slim is not an image the local "
          "environment's registry serves")]),
    (GOOD, BuildSite(SERVED, local=True, base_image="127.0.0.1:16510/atlas/python:3"), [(1, "is not an image")]),
]


@pytest.mark.parametrize(("text", "site", "expected"), WARNED)
def test_what_cannot_build_is_warned_with_its_line_and_fix(
    text: str, site: BuildSite, expected: list[tuple[int, str]]
) -> None:
    found = base_image_warnings(parse_containerfile(text), "workloads/x/Containerfile", site)
    assert [w.line for w in found] == [line for line, _ in expected]
    for warning, (_, words) in zip(found, expected, strict=True):
        assert words in warning.problem
        assert warning.fix  # every warning says what to do
        assert warning.text().startswith(f"workloads/x/Containerfile:{warning.line}: ")


def test_the_fix_for_a_fixed_from_names_base_image_and_the_stack_key() -> None:
    (_, fixed) = warnings_of(FIXED, UNKNOWN)
    assert fixed.endswith("; write `FROM ${BASE_IMAGE}` (with `ARG BASE_IMAGE=<default image>` above the first "
                          "FROM) and set the image in the stack's image.build.base_image")


def test_no_from_at_all() -> None:
    assert warnings_of("RUN true\n", UNKNOWN) == [
        "workloads/x/Containerfile: has no FROM; start it with `ARG BASE_IMAGE=<default image>` and "
        "`FROM ${BASE_IMAGE}`"
    ]
