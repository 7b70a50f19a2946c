"""Every key of Appendix A is built by mother/keys.py, spelled exactly, and nowhere else."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from mother import keys
from mother.errors import InvalidSpec

ROOT = Path(__file__).resolve().parents[1]


def test_appendix_a_spelling() -> None:
    """Each builder yields the spec's key for sample ids."""
    assert keys.termination_key("run-abc123") == "termination:run-abc123"
    assert keys.run_key("r1") == "run:r1"
    assert keys.run_budget_key("r1") == "budget:run:r1"
    assert (
        keys.user_daily_budget_key("alice", dt.date(2025, 12, 19))
        == "budget:user:alice:daily:2025-12-19"
    )
    assert keys.user_daily_budget_key("alice", "2025-12-19") == "budget:user:alice:daily:2025-12-19"
    assert keys.global_budget_key() == "budget:global"
    assert keys.tools_registry_key() == "registry:tools"
    assert keys.tool_stats_key("grep") == "tool_stats:grep"
    assert keys.conflict_key("c1") == "conflict:c1"
    assert keys.context_summary_key("summary-1") == "context_summary:summary-1"
    assert keys.artifact_key("a1") == "artifact:a1"
    assert keys.artifact_meta_key("a1") == "artifact_meta:a1"
    assert keys.archive_artifact_key("a1") == "archive:artifact:a1"
    assert keys.library_policy_key("lib1") == "policy:library:lib1"
    assert keys.access_log_key("l1") == "access_log:l1"
    assert keys.access_logs_key("lib1") == "access_logs:lib1"
    assert keys.gc_report_key("2025-12-19T02:00:00.000Z") == "gc_report:2025-12-19T02:00:00.000Z"
    assert keys.SECURITY_VIOLATIONS == "security:violations"
    assert (keys.SUBMISSIONS_STREAM, keys.EVENTS_STREAM, keys.ACTIVITY_STREAM) == (
        "mother:submissions",
        "mother:events",
        "activity",
    )


@pytest.mark.parametrize("bad", ["", "has space", "a/b", "x" * 129, "run:{1}", None, 7])
def test_bad_ids_are_refused(bad: object) -> None:
    """An id outside the alphabet never becomes a key."""
    with pytest.raises(InvalidSpec, match="is not a valid id"):
        keys.termination_key(bad)  # type: ignore[arg-type]


def test_a_long_bad_id_is_shown_in_part() -> None:
    """The error for a 1,000-character id shows its start and length, not all of it."""
    with pytest.raises(InvalidSpec) as caught:
        keys.check_id("x" * 999 + " ", "run_id")
    assert caught.value.message == (
        f"run_id '{'x' * 59}… (1000 characters) is not a valid id: "
        "use 1-128 characters from A-Z a-z 0-9 _ . : -"
    )


def test_a_spec_that_is_not_utf8_is_named_so() -> None:
    """Bytes or a str that are not UTF-8 are refused naming the byte (orjson said 'str is not valid UTF-8:
    surrogates not allowed' for bytes); the size limit counts bytes, not characters."""
    from mother.client import parse_spec
    from schemas import MAX_SPEC_BYTES

    for spec, byte in (
        (b'{"task": "caf\xe9"}', "0xe9 at offset 13"),
        ("\ud800", "0xed at offset 0"),
    ):
        with pytest.raises(InvalidSpec) as caught:
            parse_spec(spec)
        assert (
            caught.value.message
            == f"invalid RunSpec: not UTF-8 text (byte {byte}); send UTF-8 JSON"
        )
    # under the limit in characters, over it in bytes
    wide = "é" * (MAX_SPEC_BYTES // 2 + 1)
    with pytest.raises(
        InvalidSpec,
        match=f"spec is {len(wide.encode())} bytes; the limit is {MAX_SPEC_BYTES} bytes",
    ):
        parse_spec(wide)


def test_bad_day_is_refused() -> None:
    """The daily key wants a real date."""
    with pytest.raises(InvalidSpec, match="YYYY-MM-DD"):
        keys.user_daily_budget_key("alice", "2025-13-40")


def test_no_key_is_formatted_outside_keys_module() -> None:
    """No product module spells a key prefix in an f-string; keys.py is the only builder."""
    prefixes = "termination|budget|run|artifact|artifact_meta|conflict|context_summary|policy|access_log|access_logs|tool_stats|gc_report|archive|registry|security"
    pattern = re.compile(rf"f[\"']({prefixes}):")
    offenders = []
    for package in ("mother", "workers", "schemas"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "keys.py" and path.parent.name == "mother":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}")
    assert offenders == []


def _spec(**fields: object) -> object:
    from schemas import RunSpec

    base = {"user_id": "alice", "task": "t", "pipeline": [{"name": "a", "role": "r", "model": "m"}]}
    return RunSpec.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"run_id": "alpha:x"}, "run_id 'alpha:x' holds ':'"),
        ({"user_id": "bob:2026-11-27"}, "user_id 'bob:2026-11-27' holds ':'"),
        ({"run_id": "alpha.c0123abcd"}, "names no parent_run_id"),
        ({"run_id": "alpha.c0123abcd", "parent_run_id": "beta"}, "its parent_run_id is 'beta'"),
    ],
)
def test_run_ids_that_would_share_another_runs_keys_are_refused(
    fields: dict[str, object], says: str
) -> None:
    """A run named ``alpha:x`` would live in ``alpha``'s ``budget:library:run:alpha:*`` keys, a user
    ``bob:{day}`` in ``bob``'s per-library daily counters, and a run of a spawned child's shape that its
    parent did not spawn in that parent's children's ledger nodes: what the attempt users of ``alpha`` and
    ``bob`` may write. Refused in one line; a child of the shape under its parent is taken."""
    from mother.specs import check_ids

    with pytest.raises(InvalidSpec, match=re.escape(says)):
        check_ids(_spec(**fields))  # type: ignore[arg-type]
    check_ids(_spec(run_id="alpha.c0123abcd", parent_run_id="alpha"))  # type: ignore[arg-type]
    long_parent = "a" * 119
    check_ids(
        _spec(run_id=f"{keys.child_prefix(long_parent)}.c0123abcd", parent_run_id=long_parent)
    )  # type: ignore[arg-type]


def test_a_hosts_patterns_match_its_own_rq_keys_only() -> None:
    """A host's ACL key patterns cover RQ's keys of its own queues, jobs and workers, and no other host's:
    not one whose name starts with its own (``gpu`` and ``gpu-2``), not another's jobs or workers."""
    from fnmatch import fnmatchcase

    patterns = keys.host_rq_patterns("gpu")

    def covered(key: str) -> bool:
        return any(fnmatchcase(key, p) for p in patterns)

    mine = [
        f"rq:queue:{keys.host_queue('gpu', 'agents')}",
        f"rq:queue:{keys.host_queue('gpu', 'agents')}:intermediate",
        f"rq:wip:{keys.host_queue('gpu', 'tools')}",
        f"rq:failed:{keys.host_queue('gpu', 'maintenance')}",
        f"rq:job:{keys.phase_job_id('gpu', 'run-1', 0, 1)}",
        f"rq:results:{keys.phase_job_id('gpu', 'run-1', 0, 1)}",
        f"rq:worker:{keys.host_worker_name('gpu', 'w0')}",
        f"rq:workers:{keys.host_queue('gpu', 'agents')}",
    ]
    others = [
        f"rq:queue:{keys.host_queue('gpu-2', 'agents')}",
        f"rq:job:{keys.phase_job_id('gpu-2', 'run-1', 0, 1)}",
        f"rq:worker:{keys.host_worker_name('gpu-2', 'w0')}",
        "rq:queue:agents",
        "rq:workers",
        "run:run-1",
    ]
    assert all(covered(k) for k in mine), [k for k in mine if not covered(k)]
    assert not any(covered(k) for k in others), [k for k in others if covered(k)]
