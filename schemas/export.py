"""JSON Schema files for every public record (``python -m schemas DIR``)."""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import BaseModel

from schemas.activity import ActivityEvent
from schemas.artifact import ArtifactMetadata, GCReport
from schemas.conflict import ConflictResolution
from schemas.context import ComposedContext, ContextSummary
from schemas.gate import Gate
from schemas.results import PhaseResult, ResultEnvelope
from schemas.run import RunSpec, RunState
from schemas.termination import TerminationRecord
from schemas.tool import DeterministicTool, ToolRegistry, ToolStats

__all__ = ["MODELS", "export_json_schemas"]

MODELS: dict[str, type[BaseModel]] = {
    "RunSpec": RunSpec,
    "RunState": RunState,
    "TerminationRecord": TerminationRecord,
    "PhaseResult": PhaseResult,
    "ResultEnvelope": ResultEnvelope,
    "ActivityEvent": ActivityEvent,
    "ContextSummary": ContextSummary,
    "ComposedContext": ComposedContext,
    "ConflictResolution": ConflictResolution,
    "Gate": Gate,
    "DeterministicTool": DeterministicTool,
    "ToolRegistry": ToolRegistry,
    "ToolStats": ToolStats,
    "ArtifactMetadata": ArtifactMetadata,
    "GCReport": GCReport,
}


def export_json_schemas(directory: Path) -> list[Path]:
    """Write ``<Model>.schema.json`` per model into ``directory``; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in MODELS.items():
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            **model.model_json_schema(),
        }
        path = directory / f"{name}.schema.json"
        path.write_bytes(
            orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        )
        written.append(path)
    return written
