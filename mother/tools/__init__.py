"""The deterministic tool registry (seed 003 §4): manifests synced into ``registry:tools``
(:mod:`mother.tools.registry`), routing a phase's task to a tool before the model
(:mod:`mother.tools.router`), the tools' JSON Schema contracts (:mod:`mother.tools.contracts`) and
their patterns, compiled with RE2 (:mod:`mother.tools.patterns`). The tools themselves, and the one
executor that runs them, are the workers' (:mod:`workers.tools`)."""

from mother.tools.registry import build_registry, load_manifests, registry_with_rates, sync
from mother.tools.router import Routed, ToolRouter, ToolsCache, phase_query

__all__ = [
    "Routed",
    "ToolRouter",
    "ToolsCache",
    "build_registry",
    "load_manifests",
    "phase_query",
    "registry_with_rates",
    "sync",
]
