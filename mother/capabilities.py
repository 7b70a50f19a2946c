"""Capability tokens and their risk tiers.

A run's capability token is minted at intake from its role's declared permissions
(``harness.roles.{role}.permissions``, else ``harness.default_permissions``): a list
of patterns such as ``tool.read_file``, ``tool.*``, ``model.scripted``,
``library.docs``. A child's token is the intersection of its parent's and its own.
Every tool call is checked (``tool.{name}``); a denial is the ``permission_denied``
event with ``missing``, ``granted`` and ``required``, and the model sees the error.

Risk tiers come from ``capability_risk.yaml``: each granted pattern is classified by
the most specific matching entry into ``safe`` / ``write`` / ``elevated`` /
``unrestricted``, whose policy is ``allow`` / ``acknowledge_required`` / ``block``.
Checked once at run setup: a ``block``-ed capability the role does not acknowledge
ends the run ``policyViolation`` before its first model call; broad patterns and
unacknowledged ``acknowledge_required`` tiers log a warning.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path
from typing import Any

from mother.errors import ConfigError
from mother.roles import role_settings
from mother.yamlfile import YamlProblem, read_yaml

__all__ = [
    "RiskReport",
    "assess_risk",
    "attenuate",
    "denial",
    "granted_for",
    "load_risk_policy",
    "permits",
]

POLICIES = {"allow", "acknowledge_required", "block"}


def permits(granted: list[str], required: str) -> bool:
    return any(fnmatchcase(required, pattern) for pattern in granted)


def denial(granted: list[str], required: list[str]) -> dict[str, Any] | None:
    """The SafetyHarness's permission_denied event for ``required``, or None when all are granted."""
    missing = [r for r in required if not permits(granted, r)]
    if not missing:
        return None
    return {
        "name": "error",
        "code": "permission_denied",
        "detail": {"missing": missing, "granted": list(granted), "required": list(required)},
    }


def attenuate(parent: list[str], child: list[str]) -> list[str]:
    """The intersection of two pattern sets: what both the parent holds and the child declares."""
    kept = [c for c in child if any(fnmatchcase(c, p) for p in parent)]
    kept += [p for p in parent if p not in kept and any(fnmatchcase(p, c) for c in child)]
    return sorted(set(kept))


def granted_for(settings: Any, role: str, parent: list[str] | None = None) -> list[str]:
    declared = role_settings(settings, role)
    own = (
        list(declared.permissions)
        if declared is not None and declared.permissions is not None
        else list(settings.harness.default_permissions)
    )
    return attenuate(parent, own) if parent is not None else sorted(set(own))


CLASSIFIED_CACHE_SIZE = 1024


@dataclass
class RiskPolicy:
    tiers: dict[str, str]
    classifications: list[dict[str, str]]
    # capability -> its classification: a pure function of the (immutable, per file version) policy,
    # worked out once instead of matching every pattern for every run
    classified: dict[str, dict[str, str]] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class RiskReport:
    blocked: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tiers: dict[str, str] = field(default_factory=dict)


def load_risk_policy(path: Path | None) -> RiskPolicy:
    """The policy file (default: the shipped one), parsed once per file version."""
    source = (
        Path(str(resources.files("mother").joinpath("capability_risk.yaml")))
        if path is None
        else path
    )
    try:
        stamp = source.stat().st_mtime_ns
    except OSError as exc:
        raise ConfigError(
            f"{source}: cannot read the capability risk policy: {exc.strerror}"
        ) from None
    return _load_risk_policy(source, stamp)


@functools.lru_cache(maxsize=16)
def _load_risk_policy(source: Path, _stamp: int) -> RiskPolicy:
    try:
        data = read_yaml(source)
    except YamlProblem as exc:
        raise ConfigError(f"cannot read the capability risk policy {exc}") from None
    tiers = data.get("tiers") if isinstance(data, dict) else None
    entries = data.get("classifications") if isinstance(data, dict) else None
    if not isinstance(tiers, dict) or not isinstance(entries, list):
        raise ConfigError(
            f"{source}: needs 'tiers' (tier: policy) and 'classifications' (list of pattern, tier)"
        )
    for tier, policy in tiers.items():
        if policy not in POLICIES:
            raise ConfigError(
                f"{source}: tier {tier}: policy must be one of {sorted(POLICIES)}, not {policy!r}"
            )
    for i, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or entry.get("tier") not in tiers
            or not isinstance(entry.get("pattern"), str)
        ):
            raise ConfigError(f"{source}: classifications[{i}] needs a pattern and a known tier")
    return RiskPolicy(tiers=tiers, classifications=entries)


def _specificity(pattern: str) -> tuple[int, int]:
    literal = sum(ch not in "*?[]" for ch in pattern)
    return (0 if any(ch in pattern for ch in "*?[") else 1, literal)


def _classify(policy: RiskPolicy, capability: str) -> dict[str, str]:
    known = policy.classified.get(capability)
    if known is not None:
        return known
    matches = [e for e in policy.classifications if fnmatchcase(capability, e["pattern"])]
    if matches:
        entry = max(matches, key=lambda e: _specificity(e["pattern"]))
    else:
        entry = {"pattern": "*", "tier": "unrestricted", "note": "no classification matched"}
    if len(policy.classified) >= CLASSIFIED_CACHE_SIZE:
        policy.classified.clear()
    policy.classified[capability] = entry
    return entry


def assess_risk(policy: RiskPolicy, granted: list[str], acknowledged: list[str]) -> RiskReport:
    """Classify every granted capability; collect blocks and warnings (the spec's _assess_capability_risk).
    A warning names the capability, not the run (the same grant warns the same way for every run of
    a role: its log line says which run)."""
    report = RiskReport()
    for capability in granted:
        entry = _classify(policy, capability)
        tier = entry["tier"]
        rule = policy.tiers.get(tier, "block")
        report.tiers[capability] = tier
        if rule == "block" and tier not in acknowledged:
            report.blocked.append(
                f"capability '{capability}' is classified '{tier}' (policy block); "
                f"acknowledge '{tier}' in the role to allow it"
            )
        elif rule == "acknowledge_required" and tier not in acknowledged:
            report.warnings.append(
                f"capability '{capability}' classified as '{tier}' needs acknowledgement"
            )
        if any(ch in capability for ch in "*?["):
            note = entry.get("note") or "a broad grant"
            report.warnings.append(
                f"capability '{capability}' classified as '{tier}' — {note}. "
                f"Consider acknowledging risk '{tier}' or narrowing it."
            )
    return report
