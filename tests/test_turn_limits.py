"""Per-turn tool limits: tool calls per turn and consecutive tool calls, on the real loop and pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from mother.config import load_settings
from mother.errors import ConfigError
from mother.roles import role_settings
from schemas import ScriptedReply
from tests.conftest import Pipeline
from tests.test_pipeline import example
from workers.agent import TurnLimits, run_loop
from workers.providers import ScriptedProvider
from workers.tools import ToolBox


def _calls(n: int) -> dict:
    return {"tool_calls": [{"name": "list_dir", "arguments": {}}] * n}


def _loop(tmp_path: Path, replies: list[dict], limits: TurnLimits):
    provider = ScriptedProvider("r", [ScriptedReply.model_validate(x) for x in replies], attempt=1)
    return run_loop(
        provider, ToolBox(tmp_path), [], max_calls=50, check_alive=lambda: None, limits=limits
    )


def test_max_20_with_25_requested_runs_exactly_20(tmp_path: Path) -> None:
    """25 tool calls requested in one reply with max_tool_calls=20: exactly 20 run, then the loop stops and says so."""
    outcome = _loop(
        tmp_path,
        [_calls(25), {"text": "never reached"}],
        TurnLimits(max_tool_calls=20, max_consecutive_tools=100),
    )
    assert outcome.usage.tool_calls == 20
    assert outcome.notices == ["Limit reached: max_tool_calls per turn (20/20)"]
    assert outcome.text.startswith("Limit reached: max_tool_calls per turn (20/20); stopped.")


def test_10_consecutive_tools_stop_and_text_resets(tmp_path: Path) -> None:
    """10 tool calls without text stop the loop; a text reply in between resets the count."""
    stopped = _loop(
        tmp_path,
        [_calls(4)] * 3 + [{"text": "done"}],
        TurnLimits(max_tool_calls=100, max_consecutive_tools=10),
    )
    assert stopped.usage.tool_calls == 10
    assert stopped.notices == ["Limit reached: max_consecutive_tools without a text reply (10/10)"]
    with_text = [_calls(6), {"text": "halfway", **_calls(6)}, _calls(3), {"text": "done"}]
    finished = _loop(tmp_path, with_text, TurnLimits(max_tool_calls=100, max_consecutive_tools=10))
    assert (finished.usage.tool_calls, finished.notices, finished.text) == (15, [], "done")


def test_turn_limit_reaches_the_user(pipeline: Pipeline) -> None:
    """Through Mother and a worker: the PhaseResult notice, a turn_limit_hit activity entry and the record's factors."""
    spec = example(
        "three-phase",
        max_tool_calls=3,
        scripts={
            "planner": [_calls(5), {"text": "unused"}],
            "coder": [{"text": "x"}],
            "critic": [{"text": "y"}],
        },
    )
    run_id = pipeline.client.submit(spec)
    envelope = pipeline.wait(run_id)
    plan = envelope.phases[0]
    assert plan.usage.tool_calls == 3 and plan.notices == [
        "Limit reached: max_tool_calls per turn (3/3)"
    ]
    assert (
        "plan: Limit reached: max_tool_calls per turn (3/3)"
        in envelope.termination.contributing_factors
    )
    events = [
        f
        for _, f in pipeline.redis.xrange("activity")
        if f["type"] == "turn_limit_hit" and f.get("run_id") == run_id
    ]
    assert len(events) == 1


def test_a_bad_role_file_says_what_is_wrong(tmp_path: Path) -> None:
    """A role file's bad settings are named one by one (it said only '2 validation errors for TurnLimits')."""
    (tmp_path / "coder.yaml").write_text("max_tool_calls: 0\nbogus: 1\n")
    settings = load_settings()
    settings.harness.roles_dir = tmp_path
    with pytest.raises(ConfigError) as caught:
        role_settings(settings, "coder")
    assert caught.value.message == (
        f"{tmp_path / 'coder.yaml'}: invalid role file: max_tool_calls: Input should be "
        "greater than or equal to 1; bogus: unknown setting"
    )
