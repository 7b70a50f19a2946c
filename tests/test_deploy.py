"""deploy/users.acl loaded into the real server: workers can do their job and cannot write run fate."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from mother import keys
from mother.connection import connect
from mother.functions import call, load_functions
from mother.server import EmbeddedRedis

ACL = Path(__file__).resolve().parents[1] / "deploy" / "users.acl"


def test_worker_acl(tmp_path: Path) -> None:
    """A worker may read runs, heartbeat, append events and artifacts; writing termination/run/policy is NOPERM."""
    with EmbeddedRedis(dir=tmp_path, extra_args=["--aclfile", str(ACL)], start_timeout=15) as server:
        pass_url = server.url.replace("redis://", "redis://{}@")
        mother = connect(pass_url.format("mother:CHANGE-ME-mother"))
        load_functions(mother)
        mother.execute_command("JSON.SET", keys.run_key("r1"), "$", '{"status":"running"}')
        worker = connect(pass_url.format("worker:CHANGE-ME-worker"))  # includes the JSON-module check
        assert worker.execute_command("JSON.GET", keys.run_key("r1"), "$.status") == '["running"]'
        assert call(worker, "mh_heartbeat", [keys.HEARTBEATS], ["r1 0 1"]) == 1
        stamped = mother.zscore(keys.HEARTBEATS, "r1 0 1")
        time.sleep(0.01)
        assert call(worker, "mh_heartbeat", [keys.HEARTBEATS], ["r1 0 1", "XX"]) == 1  # still there: stamped again
        assert mother.zscore(keys.HEARTBEATS, "r1 0 1") > stamped
        assert call(worker, "mh_heartbeat", [keys.HEARTBEATS], ["r9 0 1", "XX"]) == 0  # taken away: not brought back
        assert mother.zscore(keys.HEARTBEATS, "r9 0 1") is None
        worker.xadd(keys.EVENTS_STREAM, {"type": "phase_result", "payload": "{}"})
        worker.execute_command("JSON.SET", keys.artifact_key("a1"), "$", '{"x":1}')
        for command in (
            ("JSON.SET", keys.termination_key("r1"), "$", '{"reason":"success"}'),
            ("JSON.SET", keys.run_key("r1"), "$.status", '"terminated"'),
            ("JSON.SET", keys.library_policy_key("lib"), "$", "{}"),
            ("FLUSHALL",),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.execute_command(*command)
        with pytest.raises(redis.exceptions.NoPermissionError):  # a function cannot write past the ACL either
            call(worker, "mh_terminate", [keys.termination_key("r1"), "terminations:reason:x", keys.run_key("r1"),
                                          keys.result_key("r1"), keys.PHASE_DEADLINES, keys.RUN_DEADLINES],
                 ["{}", "r1", "{}", "t", "success", "{}"])
        assert mother.execute_command("JSON.GET", keys.termination_key("r1")) is None
