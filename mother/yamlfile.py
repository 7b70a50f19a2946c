"""Reading the YAML files people write (run specs, config, hooks, role files, manifests, the risk policy)
with one-line reasons when they are wrong: cannot be read, not UTF-8 (which byte, where), not YAML
(which line and column, and what the parser expected). Callers wrap the reason in their own error."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mother.errors import not_utf8

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

__all__ = [
    "MAX_YAML_DEPTH",
    "MAX_YAML_VALUES",
    "YamlProblem",
    "describe",
    "file_text",
    "parse_yaml",
    "read_model",
    "read_yaml",
]

# A document's values counted with every alias (*name) written out, as JSON will write them: 400 bytes
# of nested aliases can stand for 10^9 strings, which hung the CLI while it built the JSON.
MAX_YAML_VALUES = 1_000_000
# nesting levels; JSON encoders stop near 1,000 and nothing we read nests past a dozen
MAX_YAML_DEPTH = 200


class YamlProblem(ValueError):
    """A file or text that is not a YAML document; ``str()`` is one line that starts with its source."""


def describe(exc: Exception) -> str:
    """A parser error in one line: 'line L, column C: what was wrong'."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    return (
        f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
        if mark is not None
        else str(problem)
    )


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


@cache
def _loader() -> Any:
    """YAML's safe loader that refuses a mapping naming one key twice: the plain loader keeps the last
    value, so ``budget: 5`` written again further down silently replaces the first. (Made at first use:
    a command that reads no YAML does not load the parser.)"""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, Any] = {}
            for key_node, _value in node.value:
                # `<<: *base`: its keys may be given again
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.get(key)
                # an unhashable key: the base loader says so
                except TypeError:
                    break
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} appears twice (first on line {first.line + 1}); keep one",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def parse_yaml(text: str | bytes, source: str) -> Any:
    """The YAML document in ``text`` (``source`` names it in the reason)."""
    if isinstance(text, bytes):
        text = _decoded(text, source)
    import yaml

    try:
        data = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        raise YamlProblem(f"{source}: not valid YAML: {describe(exc)}") from None
    except RecursionError:
        raise YamlProblem(
            f"{source}: nested too deeply to read (more than {MAX_YAML_DEPTH} levels); flatten it"
        ) from None
    _check_expansion(data, source)
    return data


def _check_expansion(data: Any, source: str) -> None:
    """Refuse a document that refers to itself, nests past MAX_YAML_DEPTH, or whose aliases expand past
    MAX_YAML_VALUES values. Each shared list or mapping is sized once, so this costs what was parsed."""
    _expanded(data, source, {}, set(), 0)


def _expanded(node: Any, source: str, sizes: dict[int, int], open_: set[int], depth: int) -> int:
    if not isinstance(node, dict | list):
        return 1
    known = sizes.get(id(node))
    if known is not None:
        return known
    if id(node) in open_:
        raise YamlProblem(
            f"{source}: an alias (*name) refers to a value that contains it; "
            "a document that contains itself cannot be sent as JSON"
        )
    if depth >= MAX_YAML_DEPTH:
        raise YamlProblem(
            f"{source}: nested too deeply (more than {MAX_YAML_DEPTH} levels); flatten it"
        )
    open_.add(id(node))
    total = 1
    for child in node.values() if isinstance(node, dict) else node:
        total += _expanded(child, source, sizes, open_, depth + 1)
        if total > MAX_YAML_VALUES:
            raise YamlProblem(
                f"{source}: its aliases (*name) expand to more than {MAX_YAML_VALUES:,} values; "
                "write the values out, or use fewer aliases"
            )
    open_.discard(id(node))
    sizes[id(node)] = total
    return total


def read_yaml(path: Path) -> Any:
    """The YAML document in the file at ``path``."""
    return parse_yaml(file_text(path), str(path))


def read_model(path: Path, model: type[M], what: str) -> M:
    """The file at ``path`` as ``model`` (a mapping of its fields), or ConfigError in one line naming the
    file and what is wrong (``what``: e.g. "tool manifest")."""
    from pydantic import ValidationError

    from mother.errors import ConfigError
    from schemas import describe_validation_error

    try:
        data = read_yaml(path)
    except YamlProblem as exc:
        raise ConfigError(f"invalid {what} {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} is a mapping of {model.__name__}'s fields")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{path}: invalid {what}: {describe_validation_error(exc, unknown='unknown field')}"
        ) from None
