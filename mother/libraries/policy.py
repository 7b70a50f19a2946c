"""A library policy file (YAML), checked: its fields (pydantic), and each redaction pattern compiled
with RE2 (a pattern RE2 cannot run, such as a backreference, is refused here with its reason)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from mother.errors import ConfigError
from mother.libraries.redaction import RedactionEngine
from mother.yamlfile import YamlProblem, read_yaml
from schemas import describe_validation_error
from schemas.library import LibraryAccessPolicy

__all__ = ["load_policy"]


def load_policy(path: Path) -> LibraryAccessPolicy:
    try:
        data = read_yaml(path)
    except YamlProblem as exc:
        raise ConfigError(f"invalid library policy {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a library policy is a mapping of LibraryAccessPolicy's fields")
    try:
        policy = LibraryAccessPolicy.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{path}: invalid library policy: {describe_validation_error(exc, unknown='unknown field')}"
        ) from None
    # compiles every pattern (and checks hash has what it needs but its key, given at use)
    RedactionEngine(policy, key=b"check")
    return policy
