"""Logging is configured once per process and applies to loggers created at import time."""

from __future__ import annotations

import json
import subprocess
import sys


def test_module_level_logger_renders_json_lines() -> None:
    """A logger made before configure_logging still renders orjson JSON lines with ISO UTC time."""
    code = (
        "from mother.logs import get_logger, configure_logging\n"
        "log = get_logger('early', run_id='r1')\n"
        "configure_logging('INFO', 'json')\n"
        "log.info('hello', phase='plan')\n"
        "log.debug('hidden')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert {k: record[k] for k in ("event", "component", "run_id", "phase", "level")} == {
        "event": "hello",
        "component": "early",
        "run_id": "r1",
        "phase": "plan",
        "level": "info",
    }
    assert record["timestamp"].endswith("Z") and "T" in record["timestamp"]
