"""The on-premises total-cost model, with the seed's cost table as defaults, and the rate table.

    annual cost  = capital / amortization years
                 + racks x kW per rack x 8760 h x PUE x electricity price
                 + staff salary x (user-support FTE + system-management FTE)
                 + racks x hosting per rack-year
    GPU-hours a year = nodes x GPUs per node x 8760 h x utilization
    cost per GPU-hour = annual cost / GPU-hours a year

Every parameter can be overridden (`apply_overrides`; infra.compare.cost_files reads a YAML/JSON
file or `profile.key=value` flags). Parameters the seed's table does not give are marked as
assumptions in the report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

HOURS_PER_YEAR = 8760.0
SEED_TABLE = "the seed project's cost table (Satori vs MOC, 2020)"


@dataclass(frozen=True)
class CostProfile:
    name: str
    description: str
    capital_usd: float
    amortization_years: float
    racks: float
    kw_per_rack: float
    electricity_usd_per_kwh: float
    pue: float
    staff_usd_per_year: float
    user_support_fte: float
    system_management_fte: float
    hosting_usd_per_rack_year: float
    nodes: float
    gpus_per_node: float
    utilization: float
    # Which parameters are not from the seed's table (shown as assumptions in the report).
    assumptions: tuple[tuple[str, str], ...] = ()
    overridden: tuple[str, ...] = ()

    def annual_cost_usd(self) -> float:
        power = self.racks * self.kw_per_rack * HOURS_PER_YEAR * self.pue * self.electricity_usd_per_kwh
        staff = self.staff_usd_per_year * (self.user_support_fte + self.system_management_fte)
        return self.capital_usd / self.amortization_years + power + staff + self.racks * self.hosting_usd_per_rack_year

    def gpu_hours_per_year(self) -> float:
        return self.nodes * self.gpus_per_node * HOURS_PER_YEAR * self.utilization

    def usd_per_gpu_hour(self) -> float:
        return self.annual_cost_usd() / self.gpu_hours_per_year()


_AMORTIZATION = ("amortization_years", "assumption: 5 years, a usual depreciation period; the seed's table gives none")
_SATORI = CostProfile(
    name="satori",
    description="MIT Satori (IBM AC922, 4 x V100 per node), on premises",
    capital_usd=4.4e6,
    amortization_years=5,
    racks=4.4,
    kw_per_rack=25,
    electricity_usd_per_kwh=0.0839,
    pue=1.2,
    staff_usd_per_year=140e3,
    user_support_fte=0.25,
    system_management_fte=0.25,
    hosting_usd_per_rack_year=3.3e3,
    nodes=64,
    gpus_per_node=4,
    utilization=0.9,
    assumptions=(
        _AMORTIZATION,
        ("racks", "assumption: capital / $1M per rack (the seed's table) = 4.4"),
    ),
)
# The same Power9 nodes: the seed's table gives MOC Satori's rack power, electricity price, PUE,
# hosting, GPUs per node and amortization; these are what differ.
_MOC = dataclasses.replace(
    _SATORI,
    name="moc",
    description="Mass Open Cloud OpenShift on the same Power9 nodes, on premises",
    capital_usd=3.0e6,
    racks=3.0,
    staff_usd_per_year=125e3,
    user_support_fte=0.0,
    system_management_fte=0.5,
    nodes=60,
    utilization=0.6,
    assumptions=(
        _AMORTIZATION,
        ("racks", "assumption: capital / $1M per rack (the seed's table) = 3"),
        ("nodes", "assumption: capital / $50K per node (the seed's table) = 60"),
    ),
)
DEFAULT_PROFILES: dict[str, CostProfile] = {profile.name: profile for profile in (_SATORI, _MOC)}


class CostConfigError(ValueError):
    pass


def _coerce(profile: CostProfile, key: str, value: Any, where: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(CostProfile)}
    if key not in fields or key in ("name", "assumptions", "overridden"):
        numeric = sorted(k for k in fields if k not in ("name", "description", "assumptions", "overridden"))
        raise CostConfigError(f"{where}: unknown cost parameter {key!r} for {profile.name!r}; known: {numeric}")
    if key == "description":
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CostConfigError(f"{where}: {profile.name}.{key} must be a number, found {value!r}") from None
    if number < 0 or (key in ("amortization_years", "nodes", "gpus_per_node", "utilization", "pue") and number == 0):
        raise CostConfigError(f"{where}: {profile.name}.{key} must be positive, found {value!r}")
    return number


def apply_overrides(
    profiles: Mapping[str, CostProfile], overrides: Mapping[str, Mapping[str, Any]], where: str
) -> dict[str, CostProfile]:
    """`{"satori": {"utilization": 0.7}}`; a new profile name starts from a copy of `satori`."""
    result = dict(profiles)
    for name, changes in overrides.items():
        base = result.get(name) or dataclasses.replace(result["satori"], name=name, description=name)
        values = {key: _coerce(base, key, value, where) for key, value in changes.items()}
        # An overridden assumption is the user's number now, no longer our assumption.
        assumptions = tuple(a for a in base.assumptions if a[0] not in values)
        result[name] = dataclasses.replace(
            base, **values, assumptions=assumptions, overridden=tuple(sorted({*base.overridden, *values}))
        )
    return result


@dataclass(frozen=True)
class Rate:
    name: str
    description: str
    per_gpu_hour: float
    source: str
    read_on: str
    assumption: str | None


@dataclass(frozen=True)
class RateTable:
    path: str
    date: str
    currency: str
    rates: tuple[Rate, ...]
