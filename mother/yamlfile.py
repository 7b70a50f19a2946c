"""Reading the YAML files people write (run specs, config, hooks, role files, manifests, the risk policy)
with one-line reasons when they are wrong: cannot be read, not UTF-8 (which byte, where), not YAML
(which line and column, and what the parser expected). Callers wrap the reason in their own error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mother.errors import not_utf8

__all__ = ["YamlProblem", "describe", "file_text", "parse_yaml", "read_yaml"]


class YamlProblem(ValueError):
    """A file or text that is not a YAML document; ``str()`` is one line that starts with its source."""


def describe(exc: yaml.YAMLError) -> str:
    """A parser error in one line: 'line L, column C: what was wrong'."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else str(problem)


def _decoded(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlProblem(f"{source}: {not_utf8(raw, exc)}; save it as UTF-8") from None


def file_text(path: Path) -> str:
    """The text of ``path``, which must be readable UTF-8."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise YamlProblem(f"{path}: cannot read it: {exc.strerror or exc}") from None
    return _decoded(raw, str(path))


def parse_yaml(text: str | bytes, source: str) -> Any:
    """The YAML document in ``text`` (``source`` names it in the reason)."""
    if isinstance(text, bytes):
        text = _decoded(text, source)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise YamlProblem(f"{source}: not valid YAML: {describe(exc)}") from None


def read_yaml(path: Path) -> Any:
    """The YAML document in the file at ``path``."""
    return parse_yaml(file_text(path), str(path))
