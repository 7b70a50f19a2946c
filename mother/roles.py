"""Where a role's declarations come from: ``harness.roles`` in config, else a role file.

A role file ``{harness.roles_dir}/{role}.yaml`` holds the same fields as a
``harness.roles`` entry (max_tool_calls, max_consecutive_tools, limits, hooks,
permissions, acknowledge). With ``harness.require_signatures`` it must carry a valid
signature (``mother sign``) or loading it raises ``SignatureInvalid`` naming the file.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mother.config import TurnLimits
from mother.errors import ConfigError, SignatureInvalid
from mother.signing import verify_file
from mother.yamlfile import YamlProblem, read_yaml
from schemas import RunSpec, describe_validation_error
from schemas.conflict import RoleKind

__all__ = [
    "approval_tools",
    "phase_kind",
    "phase_needs_approval",
    "reviewed_index",
    "role_file",
    "role_kind",
    "role_settings",
    "tool_manifest_error",
]


def role_file(settings: Any, role: str) -> Path | None:
    directory = settings.harness.roles_dir
    if directory is None:
        return None
    path = Path(directory) / f"{role}.yaml"
    return path if path.is_file() else None


def role_settings(settings: Any, role: str) -> TurnLimits | None:
    """The role's declarations, or None if it declares nothing anywhere. With
    ``harness.require_signatures`` a role must have a signed role file (or an entry in the
    configuration, which is trusted): an unsigned role would run with the default permissions."""
    declared = settings.harness.roles.get(role)
    if declared is not None:
        return declared
    path = role_file(settings, role)
    if path is None:
        if settings.harness.require_signatures:
            where = (
                f"{Path(settings.harness.roles_dir) / f'{role}.yaml'}"
                if settings.harness.roles_dir is not None
                else "harness.roles_dir (not set)"
            )
            raise SignatureInvalid(
                f"no signed role file for role {role} in {where}, and harness.require_signatures "
                "is on: add the role file and sign it (`mother sign`), or declare the role in "
                "harness.roles"
            )
        return None
    trusted = tuple(settings.harness.trusted_keys) if settings.harness.require_signatures else None
    return _load_role_file(path, path.stat().st_mtime_ns, trusted)


@functools.lru_cache(maxsize=128)
def _load_role_file(path: Path, _stamp: int, trusted: tuple[Path, ...] | None) -> TurnLimits:
    """Parsed (and, with ``trusted``, signature-checked) once per file version; a failure is not cached."""
    if trusted is not None:
        verify_file(path, list(trusted))
    try:
        return TurnLimits.model_validate(read_yaml(path) or {})
    except YamlProblem as exc:
        raise ConfigError(f"invalid role file {exc}") from None
    except ValidationError as exc:
        raise ConfigError(
            f"{path}: invalid role file: {describe_validation_error(exc, unknown='unknown setting')}"
        ) from None


def role_kind(settings: Any, role: str) -> RoleKind | None:
    """What a role declares it does (work, review, test): its role file's or harness.roles entry's
    ``kind``, else ``conflicts.role_kinds``; None when it declares nothing."""
    declared = role_settings(settings, role)
    if declared is not None and declared.kind is not None:
        return declared.kind
    kind: RoleKind | None = settings.conflicts.role_kinds.get(role)
    return kind


def phase_kind(settings: Any, spec: RunSpec, index: int) -> RoleKind:
    """What phase ``index`` does: its own ``kind``, else its role's (:func:`role_kind`), else review
    when it names the phase it ``reviews``, else work. A reviewing or testing phase states a verdict."""
    phase = spec.pipeline[index]
    if phase.kind is not None:
        return phase.kind
    declared = role_kind(settings, phase.role)
    if declared is not None:
        return declared
    return "review" if phase.reviews is not None else "work"


def reviewed_index(settings: Any, spec: RunSpec, index: int) -> int | None:
    """The pipeline index of the phase a reviewing phase reviews: its ``reviews``, else the nearest
    earlier phase that produces work; None when there is none."""
    named = spec.pipeline[index].reviews
    if named is not None:
        return next((i for i, p in enumerate(spec.pipeline) if p.name == named), None)
    for i in range(index - 1, -1, -1):
        if phase_kind(settings, spec, i) == "work":
            return i
    return None


def phase_needs_approval(settings: Any, spec: RunSpec, index: int) -> bool:
    """Whether a person approves phase ``index`` before it starts (the phase's or its role's say)."""
    phase = spec.pipeline[index]
    declared = role_settings(settings, phase.role)
    return phase.require_approval or (declared is not None and declared.require_approval)


def approval_tools(settings: Any, spec: RunSpec, role: str) -> set[str]:
    """The tools a phase of ``role`` may call only once a person approved the call."""
    declared = role_settings(settings, role)
    return set(spec.approval_tools) | set(declared.approval_tools if declared is not None else ())


def tool_manifest_error(settings: Any, tool: str) -> str | None:
    """Why ``tool`` may not run (its manifest is missing, unsigned, altered or untrusted), or None.

    Only with ``harness.require_signatures`` and ``harness.tool_manifests_dir`` set.
    """
    directory = settings.harness.tool_manifests_dir
    if not settings.harness.require_signatures or directory is None:
        return None
    path = Path(directory) / f"{tool}.yaml"
    if not path.is_file():
        return f"tool {tool} has no manifest ({path}); add and sign one"
    try:
        verify_file(path, list(settings.harness.trusted_keys))
        manifest = read_yaml(path) or {}
    except SignatureInvalid as exc:
        return exc.message
    except YamlProblem as exc:
        return str(exc)
    if not isinstance(manifest, dict) or manifest.get("name") != tool:
        return f"{path}: the manifest must name the tool it describes (name: {tool})"
    return None
