"""``mother replay export RUN -o bundle.json.gz | show BUNDLE | run BUNDLE [--model M]``: a run exported
whole, told as a story, and run again (:mod:`mother.replay`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from mother.cli._common import console, fail, handle_errors, redis_client, settings
from mother.client import MotherClient
from mother.replay import export, read_bundle, replay, story, write_bundle

__all__ = ["app"]

app = typer.Typer(
    help="Replay bundles: export a run whole, read its story, run it again.", no_args_is_help=True
)


def _client() -> MotherClient:
    cfg = settings()
    return MotherClient(settings=cfg, client=redis_client(cfg))


@app.command("export")
@handle_errors
def export_cmd(
    run_id: Annotated[str, typer.Argument(help="the run")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the bundle file (.json.gz)")],
) -> None:
    """Write the run's bundle: spec, phases and replies, contexts and summaries, conflicts, gates and
    decisions, budget and its timeline, termination, artifact manifest."""
    bundle = export(_client(), run_id)
    size = write_bundle(bundle, output)
    reason = (bundle["termination"] or {}).get("reason") or "not ended"
    console.print(f"wrote {output} ({size:,} bytes): run {run_id}, {reason}", soft_wrap=True)


@app.command("show")
@handle_errors
def show(bundle_file: Annotated[Path, typer.Argument(help="a bundle file")]) -> None:
    """The run's story: why it stopped, what was suggested, which artifacts existed."""
    for line in story(read_bundle(bundle_file)):
        console.print(Text(line), soft_wrap=True)


@app.command("run")
@handle_errors
def run(
    bundle_file: Annotated[Path, typer.Argument(help="a bundle file")],
    model: Annotated[
        str | None, typer.Option(help="run every phase on this catalogue model instead")
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the replay's end")] = 300.0,
) -> None:
    """Run it again: with the recorded replies through the scripted model (the same termination and
    counters must come out), or on --model M; recorded decisions are made again."""
    client = _client()
    bundle = read_bundle(bundle_file)
    if model is not None and model not in client.settings.models:
        fail(
            f"unknown model {model!r}; the catalogue has {', '.join(sorted(client.settings.models))}",
            "usage",
        )
    outcome = replay(
        client, bundle, model=model, timeout=timeout, on_event=lambda t: console.print(t)
    )
    console.print(
        f"replay {outcome.run_id} ended {outcome.reason}; the original ended {outcome.expected}"
    )
    for key in outcome.counters:
        mark = "" if outcome.counters[key] == outcome.recorded.get(key, 0) else "  (differs)"
        console.print(
            f"  {key}: {outcome.counters[key]} (original {outcome.recorded.get(key, 0)}){mark}"
        )
    if model is None and not (outcome.same_reason and outcome.same_counters):
        fail("the replay did not come out as the original", "replay_differs", exit_code=1)
