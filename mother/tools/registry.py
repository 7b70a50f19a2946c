"""Tool manifests → ``registry:tools``: read ``*.yaml`` manifests (the shipped ones in
``mother/tools/manifests`` and ``tools.manifests_dir``), check each one (its fields, its JSON Schemas,
its patterns compiled with RE2, its entrypoint's module, its signature when signatures are required)
and write the registry in one step. ``mother tools sync`` calls :func:`sync`; Mother syncs at start when
no registry exists yet, so a fresh install routes with the shipped tools."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mother.config import Settings
from mother.errors import ConfigError, SignatureInvalid
from mother.records.tools import read_registry, read_stats, write_registry
from mother.signing import verify_file
from mother.tools.patterns import compile_pattern
from mother.yamlfile import read_model
from schemas.tool import DeterministicTool, ToolRegistry

__all__ = [
    "build_registry",
    "load_manifest",
    "load_manifests",
    "manifest_paths",
    "registry_with_rates",
    "shipped_dir",
    "sync",
]


def shipped_dir() -> Path:
    """The manifests of the tools Mother-Harness ships (package data)."""
    return Path(str(resources.files("mother").joinpath("tools/manifests")))


def manifest_paths(settings: Settings, extra: Iterable[Path] = ()) -> list[Path]:
    """The manifest files a sync reads, in order: shipped, ``tools.manifests_dir``, then ``extra`` (a
    directory's ``*.yaml`` or a file); a later one with the same tool_id replaces an earlier one."""
    sources: list[Path] = []
    if settings.tools.shipped:
        sources.append(shipped_dir())
    if settings.tools.manifests_dir is not None:
        sources.append(Path(settings.tools.manifests_dir))
    sources.extend(extra)
    paths: list[Path] = []
    for source in sources:
        if source.is_dir():
            paths.extend(sorted(source.glob("*.yaml")))
        elif source.is_file():
            paths.append(source)
        else:
            raise ConfigError(
                f"no tool manifests at {source}: give a directory of *.yaml or a file"
            )
    return paths


def load_manifest(path: Path, trusted: list[Path] | None = None) -> DeterministicTool:
    """One manifest, checked; ``trusted``: the keys one of which must have signed it."""
    if trusted is not None:
        verify_file(path, trusted)
    tool = read_model(path, DeterministicTool, "tool manifest")
    check_tool(tool, str(path))
    return tool


def check_tool(tool: DeterministicTool, where: str) -> None:
    """What pydantic cannot see: valid JSON Schemas, patterns RE2 runs, an entrypoint module that exists."""
    for name in ("input_schema", "output_schema"):
        try:
            Draft202012Validator.check_schema(getattr(tool, name))
        except SchemaError as exc:
            at = "/".join(str(p) for p in exc.path) or "(top)"
            raise ConfigError(
                f"{where}: {name} is not a valid JSON Schema at {at}: {exc.message}"
            ) from None
    for i, pattern in enumerate(tool.handles_patterns):
        compile_pattern(pattern, f"{where}: handles_patterns[{i}]")
    module = tool.entrypoint.split(":", 1)[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise ConfigError(
            f"{where}: entrypoint {tool.entrypoint!r}: no module {module!r} on this Python path"
        )


def load_manifests(settings: Settings, extra: Iterable[Path] = ()) -> list[DeterministicTool]:
    """Every manifest a sync reads (:func:`manifest_paths`), checked; signatures verified when
    ``harness.require_signatures`` is on (the shipped ones too: sign them with `mother sign`)."""
    trusted = list(settings.harness.trusted_keys) if settings.harness.require_signatures else None
    shipped = shipped_dir().resolve()
    tools: dict[str, DeterministicTool] = {}
    # tool_id -> the file it came from
    where: dict[str, Path] = {}
    for path in manifest_paths(settings, extra):
        try:
            tool = load_manifest(path, trusted)
        except SignatureInvalid as exc:
            raise SignatureInvalid(f"tool manifest refused: {exc.message}") from None
        earlier = where.get(tool.tool_id)
        # a deployment's manifest replaces a shipped tool of its id; two of its own with one id is a
        # mistake that would leave one of them silently unused
        if earlier is not None and earlier.resolve().parent != shipped:
            raise ConfigError(
                f"{path}: tool_id {tool.tool_id!r} is already the tool_id of {earlier}; give each "
                "tool its own tool_id"
            )
        tools[tool.tool_id], where[tool.tool_id] = tool, path
    return list(tools.values())


def build_registry(
    settings: Settings, tools: list[DeterministicTool], now_iso: str
) -> ToolRegistry:
    ordered = sorted(tools, key=lambda t: (-t.priority, t.tool_id))
    return ToolRegistry(
        updated_at=now_iso,
        tools=ordered,
        routing_order=[t.tool_id for t in ordered],
        default_timeout_ms=settings.tools.default_timeout_ms,
        allow_fallback_to_llm=settings.tools.allow_fallback_to_llm,
    )


def sync(client: Any, settings: Settings, now_iso: str, extra: Iterable[Path] = ()) -> ToolRegistry:
    """Read and check every manifest, and the tools of the registered MCP servers, then replace
    ``registry:tools`` (with each tool's success rate from its ``tool_stats`` as of now); nothing is
    written if one is wrong."""
    from mother.tools.mcp import read_servers, tools_of

    served = [tool for server in read_servers(client).values() for tool in tools_of(server)]
    registry = build_registry(settings, [*load_manifests(settings, extra), *served], now_iso)
    stats = read_stats(client, [t.tool_id for t in registry.tools])
    registry.tool_success_rates = {tool_id: s.success_rate for tool_id, s in stats.items()}
    write_registry(client, registry)
    return registry


def registry_with_rates(client: Any) -> ToolRegistry | None:
    """``registry:tools`` with ``tool_success_rates`` from each tool's ``tool_stats`` (derived when read:
    the registry is Mother's document, the statistics are written by workers)."""
    registry = read_registry(client)
    if registry is None:
        return None
    stats = read_stats(client, [t.tool_id for t in registry.tools])
    registry.tool_success_rates = {tool_id: s.success_rate for tool_id, s in stats.items()}
    return registry
