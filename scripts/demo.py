"""The offline demo: embedded Redis, a TerminationRecord written once and read back."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from mother.connection import connect, server_info
from mother.keys import termination_key
from mother.server import EmbeddedRedis
from schemas import TerminationRecord

console = Console()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mother-demo-") as tmp, EmbeddedRedis(dir=Path(tmp)) as server:
        client = connect(server.url)
        info = server_info(client, server.url)
        console.print(f"embedded {info.server} {info.version} at {server.url}; modules: {info.modules}")
        record = TerminationRecord(
            run_id="run-demo-1",
            reason="retries_exhausted",
            phase_at_termination="repair",
            timestamp="2025-12-19T22:30:45.123Z",
            details="Coder agent failed to produce valid CodePatch after 3 repair loops",
            contributing_factors=["Test suite failed with 5 errors", "Critic rejected patch twice"],
            can_retry=True,
            suggested_action="escalate_model",
            final_artifacts=["critic-report-1", "test-results-2"],
        )
        key = termination_key(record.run_id)
        first = client.execute_command("JSON.SET", key, "$", record.to_json(), "NX")
        second = client.execute_command("JSON.SET", key, "$", record.to_json(), "NX")
        back = TerminationRecord.model_validate(orjson.loads(client.execute_command("JSON.GET", key)))
        assert back == record
        table = Table(title="runs and why each stopped")
        for col in ("run", "reason", "phase", "details", "suggested action"):
            table.add_column(col)
        table.add_row(back.run_id, back.reason, back.phase_at_termination, back.details, back.suggested_action)
        console.print(table)
        console.print(f"first JSON.SET NX: {first}; second: {second} (write-once)")
    console.print("embedded server stopped.")


if __name__ == "__main__":
    main()
