"""A library policy file (YAML), checked: its fields (pydantic), and each redaction pattern compiled
with RE2 (a pattern RE2 cannot run, such as a backreference, is refused here with its reason)."""

from __future__ import annotations

from pathlib import Path

from mother.libraries.redaction import RedactionEngine
from mother.yamlfile import read_model
from schemas.library import LibraryAccessPolicy

__all__ = ["load_policy"]


def load_policy(path: Path) -> LibraryAccessPolicy:
    policy = read_model(path, LibraryAccessPolicy, "library policy")
    # compiles every pattern (hash's key is given at use)
    RedactionEngine(policy, key=b"check")
    return policy
