"""Capability tokens, permission_denied, attenuation, and risk tiers at run setup."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import orjson

from mother.capabilities import assess_risk, attenuate, denial, load_risk_policy
from tests.conftest import start_pipeline, stop_pipeline
from tests.test_pipeline import example


def test_attenuation_is_an_intersection() -> None:
    """A child gets only what both the parent holds and the child declares."""
    parent = ["tool.read_file", "tool.write_file", "model.*"]
    child = ["tool.*", "model.scripted", "library.docs"]
    assert attenuate(parent, child) == ["model.scripted", "tool.read_file", "tool.write_file"]
    assert attenuate(["tool.read_file"], ["tool.write_file"]) == []


def test_permission_denied_payload() -> None:
    """The event names missing, granted and required exactly (as the SafetyHarness's permission_denied event does)."""
    assert denial(["tool.read_file"], ["tool.write_file"]) == {
        "name": "error",
        "code": "permission_denied",
        "detail": {
            "missing": ["tool.write_file"],
            "granted": ["tool.read_file"],
            "required": ["tool.write_file"],
        },
    }
    assert denial(["tool.*"], ["tool.write_file"]) is None


def test_risk_tiers_block_warn_and_acknowledge() -> None:
    """'*' is unrestricted (block) unless acknowledged; 'tool.*' is elevated and warned about as broad."""
    policy = load_risk_policy(None)
    report = assess_risk(policy, ["*", "tool.*", "tool.read_file"], [])
    assert report.tiers == {"*": "unrestricted", "tool.*": "elevated", "tool.read_file": "safe"}
    assert report.blocked == [
        "capability '*' is classified 'unrestricted' (policy block); acknowledge 'unrestricted' in the role to allow it"
    ]
    assert any(
        "capability 'tool.*' classified as 'elevated' — Broad tool grant" in w
        for w in report.warnings
    )
    assert assess_risk(policy, ["*"], ["unrestricted"]).blocked == []
    # classifications remembered per policy
    again = assess_risk(policy, ["tool.read_file", "tool.*", "*"], [])
    assert again.tiers == report.tiers and again.blocked == report.blocked


def test_risk_policy_file_edit_reclassifies(tmp_path: Path) -> None:
    """A new version of the policy file is read again: what a capability was classified as before is not kept."""
    path = tmp_path / "risk.yaml"
    path.write_text(
        "tiers: {safe: allow, write: acknowledge_required}\n"
        "classifications: [{pattern: 'tool.*', tier: safe}]\n"
    )
    assert assess_risk(load_risk_policy(path), ["tool.write_file"], []).tiers == {
        "tool.write_file": "safe"
    }
    path.write_text(
        "tiers: {safe: allow, write: acknowledge_required}\n"
        "classifications: [{pattern: 'tool.*', tier: safe}, {pattern: 'tool.write_file', tier: write}]\n"
    )
    # a new version even on a coarse clock
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000_000))
    report = assess_risk(load_risk_policy(path), ["tool.write_file"], [])
    assert (
        report.tiers == {"tool.write_file": "write"}
        and "needs acknowledgement" in report.warnings[0]
    )


def test_tokens_enforced_end_to_end(tmp_path: Path) -> None:
    """A read-only role's write is denied (event exact, the model sees it, the run goes on); a '*' role is refused at setup."""
    roles = {
        "reader": {"permissions": ["tool.read_file", "tool.list_dir", "model.*"]},
        "root": {"permissions": ["*"]},
    }
    p = start_pipeline(tmp_path, workers=1, env={"MOTHER_HARNESS__ROLES": json.dumps(roles)})
    try:
        from mother.client import MotherClient
        from mother.config import load_settings

        client = MotherClient(settings=load_settings(redis_url=p.url))
        reader = client.submit(
            example(
                "three-phase",
                pipeline=[{"name": "look", "role": "reader", "model": "scripted"}],
                scripts={
                    "reader": [
                        {
                            "tool_calls": [
                                {"name": "write_file", "arguments": {"path": "x", "content": "y"}}
                            ]
                        },
                        {"text": "could not write, as expected"},
                    ]
                },
            )
        )
        root = client.submit(
            example(
                "three-phase",
                pipeline=[{"name": "all", "role": "root", "model": "scripted"}],
                scripts={"root": [{"text": "never runs"}]},
            )
        )
        read_env = client.wait(reader, timeout=60)
        root_env = client.wait(root, timeout=60)
        events = [
            orjson.loads(f["data"])
            for _, f in p.redis.xrange("activity")
            if f["type"] == "permission_denied" and f.get("run_id") == reader
        ]
        # which host said it, Mother adds
        events = [{k: v for k, v in e.items() if k != "host"} for e in events]
        dispatched = [
            f
            for _, f in p.redis.xrange("activity")
            if f["type"] == "phase_dispatched" and f.get("run_id") == root
        ]
    finally:
        stop_pipeline(p)
    assert (
        read_env.termination.reason == "success"
        and read_env.output == "could not write, as expected"
    )
    assert events == [
        {
            "missing": ["tool.write_file"],
            "granted": ["model.*", "tool.list_dir", "tool.read_file"],
            "required": ["tool.write_file"],
        }
    ]
    assert not (tmp_path / "workspaces" / reader / "x").exists()
    assert root_env.termination.reason == "policyViolation"
    assert root_env.termination.details.startswith(
        "capability '*' is classified 'unrestricted' (policy block)"
    )
    # refused before its first model call
    assert dispatched == []


def test_a_roles_risk_warning_is_logged_once_not_once_per_run(r: object) -> None:
    """The same broad grant warns the same way for every run of a role: the first run's warning is
    logged at warning level, the next runs' at debug (30,330 warnings were logged for 10,110 runs
    when each warning named its run)."""
    from structlog.testing import capture_logs

    from mother import intake
    from mother.config import Settings
    from mother.runtime import Runtime
    from schemas import RunSpec

    rt = Runtime(settings=Settings(), redis=r)  # type: ignore[arg-type]
    intake._RISK_WARNED.clear()
    with capture_logs() as logs:
        for n in range(5):
            spec = RunSpec.model_validate(
                {
                    "run_id": f"risk-{n}",
                    "user_id": "u",
                    "task": "t",
                    "pipeline": [{"name": "a", "role": "coder", "model": "scripted"}],
                }
            )
            intake._assess(rt, spec, ["tool.*", "model.*"])
    warned = [e for e in logs if e["event"] == "capability_risk" and e["log_level"] == "warning"]
    assert warned and len(warned) == len({e["warning"] for e in warned})
    assert {e["run_id"] for e in warned} == {"risk-0"}
