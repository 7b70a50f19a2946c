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
from schemas import describe_validation_error

__all__ = ["role_file", "role_settings", "tool_manifest_error"]


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
