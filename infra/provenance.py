"""What an environment is, as every output labels it, derived from what Atlas observes.

A label says `real` only where nothing Atlas observed says otherwise: a login node, jump host or
API reached on loopback, a node of Atlas's local environment, KWOK's simulated nodes, mock GPUs
(a scheduler's GPU type or a node label says so), moto, a step that never ran. Each observation
is a `Fact` of one class; the label's class is the most telling fact's. What a stack says of
an environment (`atlas:hpc.<name>.provenance`) may only narrow a label: its words are shown
beside the facts, and `real` said of an environment where a fact is observed is refused when
the stack is read (`refusal`), and never shown by the readers (`label`).

Pure and stdlib only: the config models, the components, the report, the monitor and the node
listing share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from infra.loopback import reaches_loopback_host, reaches_loopback_url

REAL = "real"
# What an environment is when its stack did not say (never "real" by default).
NOT_STATED = "provenance not stated"
# What an environment is when it could not be reached to see.
NOT_REACHED = "not reached: what it is could not be observed"

# The classes of what stands in, the most telling first: a label is named after its first.
EMULATED = "moto, an AWS API stand-in"
SIMULATED = "simulated nodes"
NOT_EXECUTED = "not executed"
LOCAL_STAND_IN = "local stand-in"
MOCK_GPUS = "mock GPUs"
DEVICE_RUN = "device run"
CLASSES = (EMULATED, SIMULATED, NOT_EXECUTED, LOCAL_STAND_IN, MOCK_GPUS, DEVICE_RUN)

# A GPU type (Slurm's GRES type, LSF's gpu_model) whose name starts with this is a mock GPU: the
# local environment declares its GPUs so (`gpu:mock_v100`), so the scheduler itself says it.
MOCK_GPU_TYPE_PREFIX = "mock"


@dataclass(frozen=True)
class Fact:
    """One observation that makes an environment less than real: its class (one of CLASSES)
    and what was seen, in words that name where it was seen."""

    kind: str
    what: str

    def __post_init__(self) -> None:
        if self.kind not in CLASSES:
            raise ValueError(f"unknown provenance class {self.kind!r}; use one of {', '.join(CLASSES)}")


def claims_real(stated: str) -> bool:
    """Whether a stack's words say `real` (any case, any spaces around it)."""
    return stated.strip().lower() == REAL


def label(stated: str, facts: Iterable[Fact | None]) -> str:
    """The label an output shows. Without facts: what the stack says (`real` stays real, a
    stack that said nothing reads NOT_STATED). With facts: the class of the most telling one,
    the stack's own words where they narrow, and every fact observed, e.g.
    "local stand-in: LSF commands on Slurm (observed: login node on loopback (127.0.0.1))"."""
    found = _ordered(facts)
    own = stated.strip()
    if not found:
        return REAL if claims_real(own) else own or NOT_STATED
    head = found[0].kind
    body = "; ".join(f.what for f in found)
    if claims_real(own) or own in ("", NOT_STATED):
        return body if body.startswith(head) else f"{head}: {body}"
    prefix = f"{head}:"
    if own.lower().startswith(prefix.lower()):
        own = own[len(prefix) :].strip()
    return f"{head}: {own} (observed: {body})"


def refusal(stated: str, facts: Iterable[Fact | None]) -> str:
    """Why a stack's `real` cannot stand ("" where it can): a stack may narrow a label, never
    make a stand-in real."""
    found = _ordered(facts)
    if not claims_real(stated) or not found:
        return ""
    return (
        f"`real` is refused: Atlas observes a {found[0].kind} here ({'; '.join(f.what for f in found)}); "
        "a stack may narrow a label, never make a stand-in real"
    )


def is_real(text: str) -> bool:
    """Whether a label (as `label` made it) says real."""
    return text == REAL


def loopback_host_fact(role: str, host: str) -> Fact | None:
    """`role` ("login node", "jump host bastion") reached at `host`: a local stand-in where the
    host is this machine's loopback."""
    if not reaches_loopback_host(host):
        return None
    return Fact(LOCAL_STAND_IN, f"{role} on loopback ({host})")


def loopback_url_fact(role: str, url: str | None) -> Fact | None:
    """`role` ("Kubernetes API") at `url`: a local stand-in where its host is loopback."""
    if not url or not reaches_loopback_url(url):
        return None
    return Fact(LOCAL_STAND_IN, f"{role} on loopback ({url})")


def is_mock_gpu_type(name: str) -> bool:
    return name.strip().lower().startswith(MOCK_GPU_TYPE_PREFIX)


def mock_gpu_fact(types: Iterable[str], where: str) -> Fact | None:
    """The mock GPUs among the GPU `types` a scheduler lists (`where`: "Slurm GRES type")."""
    mock = sorted({t for t in types if is_mock_gpu_type(t)})
    if not mock:
        return None
    return Fact(MOCK_GPUS, f"mock GPUs ({where} {', '.join(mock)})")


def _ordered(facts: Iterable[Fact | None]) -> list[Fact]:
    """The facts without repeats, the most telling class first (the order seen within a class)."""
    unique: list[Fact] = []
    for fact in facts:
        if fact is not None and fact not in unique:
            unique.append(fact)
    return sorted(unique, key=lambda f: CLASSES.index(f.kind))
