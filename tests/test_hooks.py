"""Hooks: layers and precedence, infra always runs, CEL conditions, bad files refused, outcomes changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mother.errors import ConfigError
from mother.hooks import HarnessAction, HookSet, load_hook_file, parse_hooks
from tests.conftest import start_pipeline, stop_pipeline
from tests.test_pipeline import example

LIMIT = {
    "event": {"name": "limit", "code": "turns_exceeded"},
    "cost": {"current": 0.95, "limit": 1},
}


def _hooks(layer: str, *items: dict) -> list:
    return parse_hooks(list(items), layer, f"{layer}.yaml")


def test_first_deciding_hook_wins_and_infra_always_runs() -> None:
    """User (0) beats project (3); a non-matching hook is passed over; infra notices run after the winner."""
    hooks = HookSet(
        _hooks("project", {"id": "p-abort", "event": "limit", "action": {"type": "abort"}})
        + _hooks(
            "user",
            {
                "id": "u-never",
                "event": "limit",
                "condition": "cost.current > 2.0",
                "action": {"type": "fail"},
            },
            {
                "id": "u-retry",
                "event": "limit",
                "condition": "cost.current > cost.limit * 0.9",
                "action": {"type": "retry", "message": "try again"},
            },
        )
        + _hooks(
            "infra",
            {"id": "i-note", "event": "limit", "action": {"type": "notice", "message": "seen"}},
        )
    )
    decision = hooks.run_control("limit", LIMIT)
    assert (decision.action, decision.hook, decision.message) == (
        HarnessAction.RETRY,
        "u-retry",
        "try again",
    )
    assert [h.spec.id for h, _ in decision.side_effects] == ["i-note"]
    assert hooks.run_control("error", LIMIT).action is None


def test_context_hooks_concatenate_in_layer_order() -> None:
    """run_started context hooks: every match's text, user layer first."""
    hooks = HookSet(
        _hooks("project", {"id": "p", "event": "run_started", "context": "Project rules."})
        + _hooks("user", {"id": "u", "event": "run_started", "context": "I am Ada."})
    )
    assert (
        hooks.run_context("run_started", {"event": {"name": "run_started"}})
        == "I am Ada.\n\nProject rules."
    )


def test_bad_hook_files_are_refused_with_file_and_line(tmp_path: Path) -> None:
    """A malformed CEL condition, an unknown event or broken YAML names the file, line and reason."""
    path = tmp_path / "hooks.yaml"
    path.write_text(
        "- id: fine\n  event: limit\n  action: {type: continue}\n- id: broken\n  event: limit\n"
        "  condition: 'cost.current >'\n  action: {type: abort}\n"
    )
    with pytest.raises(ConfigError, match=rf"^{path}:4: bad condition 'cost.current >'"):
        load_hook_file(path, "project")
    path.write_text("hooks:\n  - id: x\n    event: teatime\n    action: {type: abort}\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: event: Input should be"):
        load_hook_file(path, "project")
    path.write_text("- id: x\n  event: [unclosed\n")
    with pytest.raises(
        ConfigError, match=rf"^{path}: not valid YAML: line 3, column 1: expected ',' or ']'"
    ):
        load_hook_file(path, "project")
    # not UTF-8: one line, not a UnicodeDecodeError
    path.write_bytes(b"- id: caf\xe9\n")
    with pytest.raises(
        ConfigError, match=rf"^{path}: not UTF-8 text \(byte 0xe9 at offset 9\); save it as UTF-8$"
    ):
        load_hook_file(path, "project")


def test_limit_hooks_retry_and_abort_change_the_outcome(tmp_path: Path) -> None:
    """Without a hook a turns limit ends budget_exhausted (fail-safe); RETRY makes it retries_exhausted; ABORT names
    the hook; a spawn hook starts child runs."""
    hooks = tmp_path / "project-hooks.yaml"
    hooks.write_text(
        "- id: retry-on-limit\n  event: limit\n  condition: 'run.user_id == \"retry-user\"'\n"
        "  action: {type: retry, message: 'try the phase again'}\n"
        "- id: abort-on-limit\n  event: limit\n  condition: 'run.user_id == \"abort-user\"'\n"
        "  action: {type: abort, message: 'stop everything'}\n"
        "- id: spawn-helper\n  event: after_step\n  condition: 'run.user_id == \"spawn-user\"'\n"
        "  action: {type: spawn, role: helper, task: 'tidy up', budget: '0.01'}\n"
    )
    p = start_pipeline(tmp_path, workers=1, env={"MOTHER_HOOKS__PROJECT_FILE": str(hooks)})
    try:
        script = {
            "planner": [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}] * 3
            + [{"text": "x"}]
        }
        runs = {
            user: p.client.submit(
                example(
                    "three-phase",
                    user_id=user,
                    limit_overrides={"turns": 1},
                    pipeline=[
                        {"name": "plan", "role": "planner", "model": "scripted", "max_retries": 1}
                    ],
                    scripts=script,
                )
            )
            for user in ("plain-user", "retry-user", "abort-user")
        }
        spawner = p.client.submit(
            example(
                "three-phase",
                user_id="spawn-user",
                scripts={
                    "planner": [{"text": "p"}],
                    "coder": [{"text": "c"}],
                    "critic": [{"text": "r"}],
                    "helper": [{"text": "tidied"}],
                },
            )
        )
        plain = p.wait(runs["plain-user"]).termination
        retried = p.wait(runs["retry-user"]).termination
        aborted = p.wait(runs["abort-user"]).termination
        assert p.wait(spawner).termination.reason == "success"
        family = [k.split(":", 1)[1] for k in p.redis.scan_iter(match=f"run:{spawner}.c*")]
        children = [run_id for run_id in family if run_id.count(".c") == 1]
        # one per after_step (one model call in each of the three phases)
        assert len(children) == 3
        # the children are spawn-user's too, so they spawn in turn (until depth runs out)
        assert {p.wait(c).termination.reason for c in children} == {"success"}
    finally:
        stop_pipeline(p)
    assert (plain.reason, plain.details) == (
        "budget_exhausted",
        "Limit exceeded: turns_exceeded (1/1)",
    )
    assert retried.reason == "retries_exhausted"
    assert "hook retry-on-limit decided retry on limit: try the phase again" in retried.details
    assert (aborted.reason, aborted.details) == (
        "budget_exhausted",
        "hook abort-on-limit decided abort on limit: stop everything",
    )


def test_context_limit_reached_fires_once_and_abort_ends_context_budget_exceeded(
    tmp_path: Path,
) -> None:
    """A conversation filling harness.context_limit_ratio (0.9) of the model's window less reserved_for_output
    fires context_limit_reached (nothing fired it): one activity entry per attempt, the run goes on without a
    deciding hook, and a hook's abort ends the run context_budget_exceeded; CEL sees ``context``."""
    from mother.activity import recent

    hooks = tmp_path / "project-hooks.yaml"
    hooks.write_text(
        "- id: hand-off\n  event: context_limit_reached\n"
        "  condition: 'run.user_id == \"abort-user\" && context.ratio >= 0.9'\n"
        "  action: {type: abort, message: 'hand off to a larger model'}\n"
    )
    p = start_pipeline(tmp_path, workers=1, env={"MOTHER_HOOKS__PROJECT_FILE": str(hooks)})
    # the scripted model's window: 8,192 less 1,024 for output; 24,000 bytes estimate at 8,000 tokens
    try:
        script = {
            "planner": [
                {
                    "tool_calls": [
                        {
                            "name": "write_file",
                            "arguments": {"path": "big.txt", "content": "x" * 24_000},
                        }
                    ]
                },
                {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
                {"text": "done"},
            ]
        }
        runs = {
            user: p.client.submit(
                example(
                    "three-phase",
                    user_id=user,
                    scripts=script,
                    pipeline=[{"name": "plan", "role": "planner", "model": "scripted"}],
                )
            )
            for user in ("plain-user", "abort-user")
        }
        plain, aborted = (p.wait(runs[u]).termination for u in ("plain-user", "abort-user"))
        fired = [
            e.data
            for e in recent(p.redis, 500, run_id=runs["plain-user"])
            if e.type == "context_limit_reached"
        ]
    finally:
        stop_pipeline(p)
    assert plain.reason == "success"
    # before the second call, not again before the third
    assert len(fired) == 1
    assert (
        fired[0]["window"] == 7168
        and fired[0]["tokens"] >= 0.9 * 7168
        and fired[0]["model"] == "scripted"
    )
    assert (aborted.reason, aborted.details) == (
        "context_budget_exceeded",
        "hook hand-off decided abort on context_limit_reached: hand off to a larger model",
    )
