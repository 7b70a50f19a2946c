"""``mother library check | redact``: library policies, the parts built so far (checking a policy file,
trying its redaction on a text). Libraries with documents, retrieval and the audit report are not built
yet (README: What is built)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from mother.cli._common import console, data_console, handle_errors
from mother.libraries import RedactionEngine, load_policy
from mother.libraries.redaction import library_key, policy_patterns

__all__ = ["app"]

app = typer.Typer(
    help="Library policies: check a policy file, try its redaction on a text.", no_args_is_help=True
)
PolicyArg = Annotated[Path, typer.Argument(help="a policy file (YAML, LibraryAccessPolicy)")]


@app.command("check")
@handle_errors
def check(policy: PolicyArg) -> None:
    """Check a policy file: its fields, and each redaction pattern compiled with RE2."""
    loaded = load_policy(policy)
    patterns = ", ".join(p.pattern_id for p in policy_patterns(loaded)) or "none"
    console.print(
        f"{policy}: library {loaded.library_id} ({loaded.sensitivity}) is valid; redaction "
        f"{loaded.redaction_rules.redaction_method} with {patterns}"
    )


@app.command("redact")
@handle_errors
def redact(
    policy: PolicyArg,
    text: Annotated[str | None, typer.Option(help="the text (default: standard input)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the redactions too, as JSON")] = False,
) -> None:
    """Apply a policy's redaction to a text, as retrieval will before a chunk reaches a model (hash
    uses a throwaway key here)."""
    loaded = load_policy(policy)
    engine = RedactionEngine(loaded, library_key(b"mother library redact", loaded.library_id))
    redacted = engine.apply(text if text is not None else sys.stdin.read())
    if as_json:
        data_console().print_json(
            orjson.dumps(
                {
                    "text": redacted.text,
                    "redactions": [r.model_dump(mode="json") for r in redacted.redactions],
                }
            ).decode()
        )
    else:
        data_console().print(redacted.text)
