"""The typed server calls: one function per server function, and a library gone missing is loaded again."""

from __future__ import annotations

import pytest
import redis

from mother import calls, keys
from mother.functions import call, execute, load_functions


def test_a_call_and_a_pipelined_call_load_a_missing_library(r: redis.Redis) -> None:
    """A server that lost its functions (restarted without persistence, FUNCTION FLUSH) has them loaded again
    by the first call that needs them, on its own or in a pipeline (as redis-py's Script does), and the
    pipeline's other commands are made once."""
    load_functions(r)
    r.execute_command("FUNCTION", "FLUSH")
    assert calls.lease(r, instance="me", ttl_ms=5000) == 2
    r.execute_command("FUNCTION", "FLUSH")
    pipe = r.pipeline(transaction=True)
    pipe.incr("counted")
    call(pipe, "mh_lease", [keys.LEADER_LEASE], ["me", 5000])
    pipe.incr("counted")
    assert execute(pipe)[::2] == [1, 2]
    assert r.get(keys.LEADER_LEASE) == "me" and r.get("counted") == "2"
    r.execute_command("FUNCTION", "FLUSH")
    r.delete(keys.LEADER_LEASE)
    pipe = r.pipeline(transaction=False)
    call(pipe, "mh_lease", [keys.LEADER_LEASE], ["me-2", 5000])
    pipe.lpush("a-list", "x")
    pipe.incr("a-list")  # a key of another type: an error of its own, raised as it was
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        execute(pipe)
    assert r.get(keys.LEADER_LEASE) == "me-2"


def test_due_reads_members_and_scores_as_pairs(r: redis.Redis) -> None:
    """mh_due's flat reply comes back as (member, score) pairs, at or before the server's now less the slack."""
    load_functions(r)
    now = calls.server_times(r)
    r.zadd("zs", {"past": now - 10_000, "recent": now - 10, "future": now + 60_000})
    assert [m for m, _ in calls.due(r, "zs", limit=10)] == ["past", "recent"]
    assert calls.due(r, "zs", slack_ms=5_000, limit=10) == [("past", float(now - 10_000))]
