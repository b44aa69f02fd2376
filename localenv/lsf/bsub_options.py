"""What bsub accepts and what it means on Slurm: options, `#BSUB` lines, -n, -W, -R, -gpu, -J arrays, -w.

Pure: no subprocess, no clock, no files; table-tested (tests/unit/test_lsf_commands.py). bsub.py
parses a submission with it and turns the result into sbatch's options (`slurm_dependency`,
`slurm_job_ref`, `slurm_output_pattern`). Stdlib only: the commands run with the login node's
system python.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from .errors import NOT_SUBMITTED, LsfError, not_submitted

# --- bsub options ---------------------------------------------------------------------------------

# Options bsub 10.1 knows but the stand-in refuses, naming the first one given in this order
# (interactive and remote execution, checkpoints, file transfer, other schedulers' features).
UNSUPPORTED_FLAGS = ("-I", "-Is", "-Ip", "-IS", "-ISs", "-ISp", "-IX", "-K", "-Zs")
UNSUPPORTED_VALUE_OPTIONS = (
    "-b", "-t", "-E", "-Ep", "-We", "-m", "-i", "-outdir", "-a", "-C", "-c", "-D", "-F", "-S", "-T", "-v", "-p",
    "-k", "-f", "-X", "-s", "-sla",
)
UNSUPPORTED_OPTIONS = UNSUPPORTED_FLAGS + UNSUPPORTED_VALUE_OPTIONS
# Options that take a value, and flags, as bsub 10.1 knows them (a subset; see README.md).
VALUE_OPTIONS = frozenset({
    "-J", "-o", "-oo", "-e", "-eo", "-n", "-R", "-gpu", "-q", "-W", "-w", "-L", "-P", "-G", "-M", "-cwd", "-u",
    "-Jd", "-sp", "-app", "-g", "-Lp", *UNSUPPORTED_VALUE_OPTIONS,
})
FLAG_OPTIONS = frozenset({"-x", "-H", "-B", "-N", "-r", "-rn", "-h", "-V", *UNSUPPORTED_FLAGS})
# Accepted and recorded but without effect here; everything else not handled is refused.
IGNORED_OPTIONS = frozenset({"-P", "-G", "-u", "-Jd", "-sp", "-B", "-N", "-r", "-rn", "-g", "-Lp", "-app"})
REPEATABLE_OPTIONS = frozenset({"-R", "-f"})
# The single-letter value options LSF also accepts glued to their value (`-n4`, `-qnormal`).
_GLUED = tuple(sorted((o for o in VALUE_OPTIONS if len(o) == 2), key=len, reverse=True))


def parse_bsub_args(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Split bsub's argv into {option: [values]} and the command words (empty: read stdin).

    Options come first; the first word that is not an option starts the command, as in LSF.
    """
    options: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word in FLAG_OPTIONS:
            options.setdefault(word, []).append("")
            i += 1
            continue
        if word in VALUE_OPTIONS:
            if i + 1 >= len(argv):
                raise LsfError(f"bsub: option {word} requires an argument. {NOT_SUBMITTED}")
            options.setdefault(word, []).append(argv[i + 1])
            i += 2
            continue
        glued = next((o for o in _GLUED if word.startswith(o) and len(word) > len(o)), None)
        if glued is not None and word not in VALUE_OPTIONS:
            options.setdefault(glued, []).append(word[len(glued) :])
            i += 1
            continue
        raise LsfError(f"bsub: illegal option -- {word.lstrip('-')}\n{BSUB_USAGE}")
    return options, argv[i:]


BSUB_USAGE = "Usage: bsub [options] command [arguments]\n       bsub [options] < job_script"


def embedded_bsub_argv(script: str) -> list[str]:
    """The options of a script's `#BSUB` lines, in order (LSF reads them anywhere in the script)."""
    words: list[str] = []
    pending = ""
    for raw in script.splitlines():
        line = pending + raw
        pending = ""
        stripped = line.strip()
        if not stripped.startswith("#"):
            continue
        body = stripped[1:].lstrip()
        if not body.startswith("BSUB"):
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        rest = body[len("BSUB") :].strip()
        if not rest.startswith("-"):
            continue
        try:
            words.extend(shlex.split(rest, comments=True))
        except ValueError as exc:
            raise LsfError(
                f"bsub: cannot parse the script line `{raw.strip()}`: {exc}. {NOT_SUBMITTED}"
            ) from exc
    return words


def merge_options(command_line: dict[str, list[str]], embedded: dict[str, list[str]]) -> dict[str, list[str]]:
    """Command-line options win over `#BSUB` ones, option by option."""
    merged = dict(embedded)
    merged.update(command_line)
    return merged


def single(options: dict[str, list[str]], name: str) -> str | None:
    """The value of a non-repeatable option; given twice, the last one counts, as in LSF."""
    values = options.get(name)
    return values[-1] if values else None


def job_command_from_args(words: list[str]) -> str:
    """Join command words the way bsub does: quote only words that hold spaces."""
    parts = [words[0]]
    for word in words[1:]:
        if " " in word:
            quote = "'" if ('"' in word or "$" in word) else '"'
            parts.append(f"{quote}{word}{quote}")
        else:
            parts.append(word)
    return " ".join(parts)


# --- -n, -W ---------------------------------------------------------------------------------------


def parse_slots(value: str) -> tuple[int, int]:
    """`-n min[,max]`."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:,\s*(\d+)\s*)?", value)
    if not m or int(m.group(1)) < 1:
        raise not_submitted(f"{value}: Bad argument for option -n")
    low = int(m.group(1))
    high = int(m.group(2)) if m.group(2) else low
    if high < low:
        raise not_submitted(f"{value}: Bad argument for option -n")
    return low, high


def parse_run_limit(value: str) -> int:
    """`-W [hour:]minute[/host_spec]` in minutes."""
    spec = value.split("/", 1)[0].strip()
    m = re.fullmatch(r"(?:(\d+):)?(\d+)", spec)
    if not m:
        raise not_submitted(f"{value}: Bad RUNLIMIT specification")
    hours = int(m.group(1)) if m.group(1) else 0
    minutes = hours * 60 + int(m.group(2))
    if minutes < 1:
        raise not_submitted(f"{value}: Bad RUNLIMIT specification")
    return minutes


# --- -R -------------------------------------------------------------------------------------------

RESREQ_SECTIONS = ("select", "order", "rusage", "span", "same", "cu", "affinity")
BAD_RESREQ = "Bad resource requirement syntax"


@dataclass
class ResReq:
    select: str = ""
    ptile: int | None = None
    span_hosts: int | None = None
    rusage: dict[str, str] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)


def parse_resreq(text: str) -> ResReq:
    """Parse an `-R` string: an optional leading select string, then `name[...]` sections."""
    sections: dict[str, str] = {}
    pos = 0
    text = text.strip()
    if text.count("[") != text.count("]"):
        raise not_submitted(BAD_RESREQ)
    # A leading bare select string (`-R "mem>100 span[ptile=1]"`) runs up to the first section.
    first = re.search(r"\b(" + "|".join(RESREQ_SECTIONS) + r")\s*\[", text)
    lead = text[: first.start()] if first else text
    if "[" in lead or "]" in lead:
        raise not_submitted(BAD_RESREQ)  # an unknown section name
    if lead.strip():
        sections["select"] = lead.strip()
    pos = len(lead)
    while pos < len(text):
        m = re.compile(r"\s*([A-Za-z_]+)\s*\[").match(text, pos)
        if not m:
            if text[pos:].strip():
                raise not_submitted(BAD_RESREQ)
            break
        name = m.group(1)
        if name not in RESREQ_SECTIONS:
            raise not_submitted(BAD_RESREQ)
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"[": 1, "]": -1}.get(text[j], 0)
            j += 1
        if depth:
            raise not_submitted(BAD_RESREQ)
        if name in sections:
            raise LsfError(f'Error near "{name}" : duplicate section. {NOT_SUBMITTED}')
        sections[name] = text[m.end() : j - 1].strip()
        pos = j
    req = ResReq(select=sections.get("select", ""), sections=sections)
    if "span" in sections:
        _parse_span(sections["span"], req)
    if "rusage" in sections:
        req.rusage = _parse_rusage(sections["rusage"])
    return req


def _parse_span(body: str, req: ResReq) -> None:
    error = not_submitted("Error in span section")
    for item in filter(None, (x.strip() for x in body.split(":"))):
        key, sep, value = item.partition("=")
        if not sep:
            raise error
        key = key.strip()
        value = value.strip()
        if key == "ptile":
            if not re.fullmatch(r"[1-9]\d*", value):
                raise error
            req.ptile = int(value)
        elif key == "hosts":
            if not re.fullmatch(r"-?[1-9]\d*", value):
                raise error
            req.span_hosts = int(value)
        elif key not in ("block", "gtile", "stripe"):
            raise error


def _parse_rusage(body: str) -> dict[str, str]:
    usage: dict[str, str] = {}
    # Alternatives (`||`) and per-resource durations are kept as text; only names are checked.
    for item in re.split(r"[:,](?![^()]*\))", body.split("||")[0]):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9.]+[A-Za-z]*|\([^()]*\))", item)
        if not m:
            raise not_submitted("Error in rusage section")
        usage[m.group(1)] = m.group(2)
    return usage


# --- -gpu -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuReq:
    num: int = 1
    per_task: bool = False
    mode: str = "shared"
    mps: str = "no"
    j_exclusive: str = "no"
    gmodel: str = ""
    gmem: str = ""


_YES_NO = ("yes", "no")
_GPU_KEYS = {
    "mode": ("shared", "exclusive_process"),
    "j_exclusive": _YES_NO,
    "aff": _YES_NO,
    "block": _YES_NO,
    "gpack": _YES_NO,
    "glink": ("yes",),
    "nvlink": ("yes",),
    "gvendor": ("amd", "nvidia"),
}


def parse_gpu_req(text: str) -> GpuReq | None:
    """Parse `-gpu`; `-` means "no job-level requirement" (None)."""
    text = text.strip()
    if text == "-":
        return None
    error = not_submitted(BAD_RESREQ)
    values: dict[str, str] = {}
    for item in text.split(":"):
        key, sep, value = item.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value or key in values:
            raise error
        values[key] = value
    num, per_task = 1, False
    if "num" in values:
        m = re.fullmatch(r"([1-9]\d*)(?:/(task|host))?", values["num"])
        if not m:
            raise error
        num, per_task = int(m.group(1)), m.group(2) == "task"
    for key, value in values.items():
        if key in ("num", "gmodel", "gmem", "gtile"):
            continue
        if key == "mps":
            if not re.fullmatch(r"(yes|per_socket|per_gpu)(,(shared|nocvd))*|no", value):
                raise error
        elif key in _GPU_KEYS:
            if value not in _GPU_KEYS[key]:
                raise error
        else:
            raise error
    if "gmem" in values and not re.fullmatch(r"\d+[KMGT]?B?", values["gmem"], re.IGNORECASE):
        raise error
    return GpuReq(
        num=num,
        per_task=per_task,
        mode=values.get("mode", "shared"),
        mps=values.get("mps", "no"),
        j_exclusive=values.get("j_exclusive", "no"),
        gmodel=values.get("gmodel", ""),
        gmem=values.get("gmem", ""),
    )


# --- -J name[array] -------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobName:
    name: str
    array: str | None = None  # Slurm --array syntax: "1-10:2,15%3"
    indices: tuple[int, ...] = ()


MAX_ARRAY_SIZE = 1000  # LSF's default MAX_JOB_ARRAY_SIZE


def parse_job_name(text: str) -> JobName:
    m = re.fullmatch(r"(.*?)\[([^\[\]]*)\](?:%(\d+))?", text.strip())
    if not m:
        if "[" in text or "]" in text:
            raise not_submitted(f"{text}: Bad job array index list")
        return JobName(text)
    name, spec, limit = m.group(1), m.group(2), m.group(3)
    indices: list[int] = []
    parts: list[str] = []
    for item in spec.split(","):
        r = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*(?::\s*(\d+)\s*)?)?", item)
        if not r:
            raise not_submitted(f"{text}: Bad job array index list")
        start = int(r.group(1))
        end = int(r.group(2)) if r.group(2) else start
        step = int(r.group(3)) if r.group(3) else 1
        if start < 1 or end < start or step < 1:
            raise not_submitted(f"{text}: Bad job array index list")
        indices.extend(range(start, end + 1, step))
        parts.append(
            f"{start}-{end}:{step}" if step != 1 else (f"{start}-{end}" if end != start else str(start))
        )
    if len(indices) > MAX_ARRAY_SIZE or max(indices) > 2**31 - 2:
        raise not_submitted(f"{text}: The job array is too large")
    array = ",".join(parts) + (f"%{limit}" if limit else "")
    return JobName(name, array, tuple(sorted(set(indices))))


# --- -w dependency expressions --------------------------------------------------------------------


@dataclass(frozen=True)
class DepCondition:
    kind: str  # done | ended | exit | started
    job: str  # an id ("12", "12[3]") or a name
    by_name: bool
    exit_test: str = ""  # "op code" text of exit(job, op code), not evaluated by Slurm


@dataclass(frozen=True)
class Dependency:
    conditions: tuple[DepCondition, ...]
    any_of: bool  # True: "||" between all conditions; False: "&&"


_DEP_TOKEN = re.compile(
    r"\s*(?:(&&|\|\||!|\(|\))|([A-Za-z_]+)\s*\(([^()]*)\)|(\"[^\"]*\"|'[^']*'|[^\s()&|!]+))"
)


def parse_dependency(expr: str) -> Dependency:
    """Parse a `-w` expression into conditions joined all by && or all by ||.

    Slurm's --dependency can say "all of" (,) or "any of" (?), not a mix and not "not":
    those are refused with a message that says so (see README.md).
    """
    syntax = LsfError(f"{expr}: Dependency condition syntax error. {NOT_SUBMITTED}")
    conditions: list[DepCondition] = []
    operators: set[str] = set()
    pos, depth, expect_operand = 0, 0, True
    text = expr.strip()
    if not text:
        raise syntax
    while pos < len(text):
        m = _DEP_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise syntax
        pos = m.end()
        op, func, args, bare = m.group(1), m.group(2), m.group(3), m.group(4)
        if op in ("&&", "||"):
            if expect_operand:
                raise syntax
            operators.add(op)
            expect_operand = True
        elif op == "!":
            raise LsfError(
                f"{expr}: the local LSF stand-in cannot express `!` on Slurm "
                f"(localenv/lsf/README.md). {NOT_SUBMITTED}"
            )
        elif op == "(":
            if not expect_operand:
                raise syntax
            depth += 1
        elif op == ")":
            if expect_operand or depth == 0:
                raise syntax
            depth -= 1
        elif func is not None:
            if not expect_operand:
                raise syntax
            conditions.append(_dep_condition(func, args, syntax))
            expect_operand = False
        else:
            if not expect_operand:
                raise syntax
            conditions.append(_dep_condition("done", bare, syntax))
            expect_operand = False
    if depth or expect_operand:
        raise syntax
    if len(operators) > 1:
        raise LsfError(
            f"{expr}: the local LSF stand-in cannot mix && and || on Slurm "
            f"(localenv/lsf/README.md). {NOT_SUBMITTED}"
        )
    return Dependency(tuple(conditions), any_of=operators == {"||"})


def _dep_condition(func: str, args: str, syntax: LsfError) -> DepCondition:
    kinds = {"done": "done", "ended": "ended", "exit": "exit", "started": "started"}
    if func not in kinds:
        if func in (
            "external",
            "post_done",
            "post_err",
            "numdone",
            "numended",
            "numexit",
            "numhold",
            "numpend",
            "numrun",
            "numstart",
        ):
            raise LsfError(
                f"{func}(): not supported by the local LSF stand-in "
                f"(localenv/lsf/README.md). {NOT_SUBMITTED}"
            )
        raise syntax
    target, _, test = args.partition(",")
    target = target.strip()
    test = test.strip()
    if not target or (test and func != "exit"):
        raise syntax
    if test and not re.fullmatch(r"(==|!=|>=|<=|>|<)?\s*-?\d+", test):
        raise syntax
    if target[0] in "\"'":
        if len(target) < 2 or target[-1] != target[0]:
            raise syntax
        return DepCondition(kinds[func], target[1:-1], by_name=True, exit_test=test)
    by_name = not re.fullmatch(r"\d+(\[\d+\])?", target)
    return DepCondition(kinds[func], target, by_name=by_name, exit_test=test)


SLURM_DEPENDENCY_TYPE = {"done": "afterok", "ended": "afterany", "exit": "afternotok", "started": "after"}


def slurm_dependency(dep: Dependency, resolve: dict[str, list[str]]) -> str:
    """Render a Dependency as --dependency; `resolve` maps each condition's job to Slurm ids.

    A name stands for all of the user's jobs with that name (LSF's default, without
    JOB_DEP_LAST_SUB): all of them must satisfy the condition.
    """
    parts = []
    for cond in dep.conditions:
        ids = resolve.get(cond.job, [])
        if not ids:
            raise LsfError(f"{cond.job}: No matching job found. {NOT_SUBMITTED}")
        parts.append(SLURM_DEPENDENCY_TYPE[cond.kind] + ":" + ":".join(ids))
    return ("?" if dep.any_of else ",").join(parts)


def slurm_job_ref(lsf_id: str) -> str:
    """`12` -> `12`; `12[3]` -> `12_3` (Slurm's array element syntax)."""
    m = re.fullmatch(r"(\d+)\[(\d+)\]", lsf_id)
    return f"{m.group(1)}_{m.group(2)}" if m else lsf_id


# --- output file names ----------------------------------------------------------------------------


def slurm_output_pattern(path: str, is_array: bool) -> str:
    """LSF's %J and %I in -o/-e names, as Slurm file-name patterns; other % kept literal."""
    out = []
    i = 0
    while i < len(path):
        two = path[i : i + 2]
        if two == "%J":
            out.append("%A" if is_array else "%j")
            i += 2
        elif two == "%I":
            out.append("%a" if is_array else "0")
            i += 2
        elif path[i] == "%":
            out.append("%%")
            i += 1
        else:
            out.append(path[i])
            i += 1
    return "".join(out)
