"""Putting documents into a library: text and Markdown as UTF-8, PDF through ``pypdf``; cut into chunks
of at most ``CHUNK_CHARS`` characters that overlap by ``OVERLAP_CHARS`` (cut at a paragraph, else a
sentence, else a space, near the end of the window), each a RedisJSON document indexed by
``idx:chunks``. A document ingested again replaces its chunks."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from mother import keys
from mother.errors import InvalidSpec
from mother.records.libraries import read_library

__all__ = ["CHUNK_CHARS", "OVERLAP_CHARS", "chunks_of", "document_id", "ingest", "read_text"]

CHUNK_CHARS = 1200
OVERLAP_CHARS = 200
MAX_DOCUMENT_BYTES = 50 * 1024 * 1024
TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".csv", ".json", ".yaml", ".yml"}


def read_text(path: Path) -> str:
    if not path.is_file():
        raise InvalidSpec(f"no file {path}")
    if path.stat().st_size > MAX_DOCUMENT_BYTES:
        raise InvalidSpec(
            f"{path} is {path.stat().st_size} bytes; a document is at most {MAX_DOCUMENT_BYTES}"
        )
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError

        try:
            reader = PdfReader(str(path))
            return "\n\n".join((page.extract_text() or "") for page in reader.pages)
        except (PdfReadError, ValueError, OSError) as exc:
            raise InvalidSpec(f"{path} is not a PDF pypdf can read: {exc}") from None
    if suffix not in TEXT_SUFFIXES:
        raise InvalidSpec(
            f"{path}: ingest reads {', '.join(sorted(TEXT_SUFFIXES | {'.pdf'}))} files, not {suffix or 'this'}"
        )
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidSpec(f"{path} is not UTF-8 text (byte {exc.start})") from None


_BREAKS = (re.compile(r"\n\s*\n"), re.compile(r"[.!?]\s"), re.compile(r"\s"))


def chunks_of(text: str, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS) -> list[str]:
    """The text in chunks of at most ``size`` characters, each starting ``overlap`` before the last one's end."""
    text = text.strip()
    out: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            window = text[start:end]
            floor = len(window) // 2
            for pattern in _BREAKS:
                cuts = [m.end() for m in pattern.finditer(window) if m.end() > floor]
                if cuts:
                    end = start + cuts[-1]
                    break
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return out


def document_id(path: Path, text: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-")[:80] or "doc"
    return f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Ingested:
    document_id: str
    chunks: int
    characters: int


def ingest(client: Any, library_id: str, path: Path, ingested_at: str) -> Ingested:
    """Put one document into the library (its earlier chunks, if any, replaced), in one transaction."""
    library = read_library(client, library_id)
    text = read_text(path)
    if not text.strip():
        raise InvalidSpec(
            f"{path} has no text to ingest (a scanned PDF needs OCR first: ocr_extract)"
        )
    doc_id = document_id(path, text)
    pieces = chunks_of(text)
    old = (library.get("documents") or {}).get(doc_id, {}).get("chunks", 0)
    pipe = client.pipeline(transaction=True)
    for i in range(len(pieces), old):
        pipe.delete(keys.chunk_key(library_id, doc_id, i))
    for i, piece in enumerate(pieces):
        pipe.execute_command(
            "JSON.SET",
            keys.chunk_key(library_id, doc_id, i),
            "$",
            orjson.dumps(
                {
                    "library_id": library_id,
                    "document_id": doc_id,
                    "chunk_id": f"{doc_id}:{i}",
                    "position": i,
                    "source": path.name,
                    "text": piece,
                }
            ),
        )
    pipe.execute_command(
        "JSON.SET",
        keys.library_key(library_id),
        f'$.documents["{doc_id}"]',
        orjson.dumps(
            {
                "source": path.name,
                "chunks": len(pieces),
                "characters": len(text),
                "ingested_at": ingested_at,
            }
        ),
    )
    pipe.execute_command(
        "JSON.NUMINCRBY", keys.library_key(library_id), "$.chunk_count", len(pieces) - old
    )
    pipe.execute()
    return Ingested(doc_id, len(pieces), len(text))


def files_under(paths: list[Path]) -> list[Path]:
    """The files named, and those under the directories named (sorted)."""
    return [
        f
        for p in paths
        for f in (sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p])
    ]


def create_library(
    client: Any, policy_file: Path, documents: list[Path], now_iso: str
) -> list[Ingested]:
    """Create (or re-police) the library ``policy_file`` describes and ingest ``documents`` into it."""
    from mother.libraries.policy import load_policy
    from mother.records.libraries import ensure_indexes, write_policy

    policy = load_policy(policy_file)
    ensure_indexes(client)
    write_policy(client, policy, now_iso)
    return [ingest(client, policy.library_id, path, now_iso) for path in files_under(documents)]


# the spec's three example libraries (examples/libraries: policies and fake documents)
EXAMPLE_LIBRARIES = ("public_research", "financials", "personal")


def examples_dir() -> Path | None:
    """``examples/libraries`` of a source checkout (an installed package has none), or None."""
    found = Path(__file__).resolve().parents[2] / "examples" / "libraries"
    return found if found.is_dir() else None


def create_example_libraries(client: Any, now_iso: str) -> dict[str, list[Ingested]]:
    """Make (or re-police) the example libraries the library examples name; {} without a checkout."""
    root = examples_dir()
    if root is None:
        return {}
    return {
        name: create_library(client, root / f"{name}.yaml", [root / "docs" / name], now_iso)
        for name in EXAMPLE_LIBRARIES
    }
