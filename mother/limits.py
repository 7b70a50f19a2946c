"""The four-layer limit resolution, and the check at the start of every turn.

    defaults (config harness.limits; the run's budget profile sets tokens and duration_seconds)
    → the role's declared limits → limit_overrides → the parent's values as upper bounds (min)

Depth decrements instead: ``depth = min(own or 10, parent depth - 1)``; a child whose
depth would be ≤ 0 is refused with "Depth limit exhausted".
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from mother.config import Settings
from mother.errors import DepthExhausted
from mother.roles import role_settings
from schemas import RunSpec

__all__ = [
    "LIMIT_NAMES",
    "check_limits",
    "layer_sources",
    "profile_limits",
    "resolve_for_spec",
    "resolve_limits",
    "run_defaults",
]

LIMIT_NAMES = ("turns", "tokens", "spend", "duration_seconds", "spawns", "depth")
CAPPED = ("turns", "tokens", "spend", "spawns", "duration_seconds")


def _declared(values: Any) -> dict[str, Any]:
    if values is None:
        return {}
    data = values if isinstance(values, dict) else values.model_dump()
    found = {k: v for k, v in data.items() if k in LIMIT_NAMES and v is not None}
    if "spend" in found:
        found["spend"] = Decimal(str(found["spend"]))
    return found


def resolve_limits(
    defaults: Any, role: Any = None, overrides: Any = None, parent: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Merge the layers; the parent caps every value and decrements depth."""
    resolved: dict[str, Any] = {}
    for layer in (defaults, role, overrides):
        resolved.update(_declared(layer))
    parent = _declared(parent) if parent else None
    if parent:
        for key in CAPPED:
            if key in parent and key in resolved:
                resolved[key] = min(resolved[key], parent[key])
        if "depth" in parent:
            resolved["depth"] = min(resolved.get("depth", 10), parent["depth"] - 1)
            if resolved["depth"] <= 0:
                raise DepthExhausted(
                    "Depth limit exhausted",
                    limit_code="depth_exhausted",
                    current=resolved["depth"],
                    max=parent["depth"],
                )
    return resolved


def profile_limits(settings: Settings, spec: RunSpec) -> dict[str, Any]:
    """What the run's budget profile sets of these limits: its wall clock (``duration_seconds``) and its
    token estimate (``tokens``)."""
    profile = settings.budget.profiles[spec.budget_profile]
    return {"tokens": profile.token_estimate, "duration_seconds": profile.wall_clock_seconds}


def run_defaults(settings: Settings, spec: RunSpec) -> dict[str, Any]:
    """The first layer of a run's limits: the resilience defaults (``harness.limits``) for what its
    budget profile does not set, the profile for what it does."""
    return {**_declared(settings.harness.limits), **profile_limits(settings, spec)}


def resolve_for_spec(
    settings: Settings, spec: RunSpec, parent: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A run's limits: its first phase's role is the run's directive."""
    role = role_settings(settings, spec.pipeline[0].role)
    return resolve_limits(
        run_defaults(settings, spec), role.limits if role else None, spec.limit_overrides, parent
    )


def layer_sources(settings: Settings, spec: RunSpec, resolved: dict[str, Any]) -> dict[str, str]:
    """Which layer set each resolved limit: ``limit_overrides``, ``role <name>``, the budget profile
    (``budget.profiles.<name>``), ``harness.limits`` (the defaults), or ``parent run <id>`` where the
    parent's value capped it."""
    role_name = spec.pipeline[0].role
    role = role_settings(settings, role_name)
    layers = [
        ("harness.limits", _declared(settings.harness.limits)),
        (f"budget.profiles.{spec.budget_profile}", profile_limits(settings, spec)),
        (f"role {role_name}", _declared(role.limits if role else None)),
        ("limit_overrides", _declared(spec.limit_overrides)),
    ]
    out = {}
    for key, value in resolved.items():
        named = [(name, v[key]) for name, v in layers if key in v]
        if named and named[-1][1] == value:
            out[key] = named[-1][0]
        else:
            out[key] = f"parent run {spec.parent_run_id}" if spec.parent_run_id else "default"
    return out


def check_limits(limits: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any] | None:
    """The check at the start of a turn: the first exceeded limit, or None."""
    checks = (
        ("turns", cost.get("turns", 0)),
        ("tokens", cost.get("input_tokens", 0) + cost.get("output_tokens", 0)),
        ("spend", cost.get("spend", 0)),
        ("duration_seconds", cost.get("elapsed_seconds", 0)),
    )
    for code, current in checks:
        maximum = limits.get(code)
        if maximum is not None and current >= maximum:
            return {
                "limit_code": f"{code}_exceeded",
                "current_value": current,
                "current_max": maximum,
            }
    return None


def fail_safe_message(event: dict[str, Any]) -> str:
    """The message a run ends with when no hook handles a limit event."""
    return f"Limit exceeded: {event['limit_code']} ({_num(event['current_value'])}/{_num(event['current_max'])})"


def _num(value: Any) -> str:
    if isinstance(value, Decimal | float):
        return f"{Decimal(str(value)).normalize():f}"
    return str(value)
