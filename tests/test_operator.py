"""What an operator asks of a running deployment (issue 52): a run's whole story, however many runs came
after it; lists over every run; a run's timeline and cost; metrics to alert on; a CLI that starts fast.

Real Mother and RQ workers (the module's pipeline), the dashboard in-process (Starlette's test client)
and the CLI in-process (typer's runner) where a subprocess would prove nothing more."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mother import keys
from tests.conftest import Pipeline, cli
from tests.test_pipeline import example, wait_until

NEWER_RUNS = 10_000
ENTRIES_PER_RUN = 11


def _global_types(pipeline: Pipeline, run_id: str) -> list[str]:
    """The run's entry types in the global stream, oldest first (what it held while the run was fresh)."""
    rows = pipeline.redis.xrange(keys.ACTIVITY_STREAM, "-", "+")
    return [f["type"] for _id, f in rows if f.get("run_id") == run_id]


def _flood(pipeline: Pipeline) -> None:
    """NEWER_RUNS runs' worth of entries after it, the global stream trimmed at its cap as Mother trims it."""
    cap = pipeline.client.settings.service.activity_maxlen
    pipe = pipeline.redis.pipeline(transaction=False)
    for i in range(NEWER_RUNS):
        for step in range(ENTRIES_PER_RUN):
            pipe.xadd(
                keys.ACTIVITY_STREAM,
                {"type": f"step_{step}", "at": "2026-01-01T00:00:00.000Z", "run_id": f"newer-{i}"},
                maxlen=cap,
                approximate=True,
            )
        if i % 500 == 499:
            pipe.execute()
    pipe.execute()


@pytest.fixture(scope="module")
def old_run(pipeline: Pipeline) -> tuple[str, list[str]]:
    """A three-phase run that succeeded, with 10,000 newer runs' entries after it: its entries are gone from
    the global stream. Returns its id and the types its entries had there."""
    run_id = pipeline.client.submit(example("three-phase"))
    assert pipeline.wait(run_id).termination.reason == "success"
    story = _global_types(pipeline, run_id)
    assert story[0] == "run_submitted" and story[-1] == "terminated", story
    _flood(pipeline)
    assert _global_types(pipeline, run_id) == [], "the flood did not push the run out of the stream"
    return run_id, story


def test_a_run_keeps_its_whole_activity_after_ten_thousand_newer_runs(
    pipeline: Pipeline, old_run: tuple[str, list[str]], tmp_path: Path
) -> None:
    """Before: the run page, `mother logs`, `mother inspect` and replay bundles read the newest 500-5,000
    entries of the global stream and filtered them: a run 15 minutes old under load showed no activity and
    its bundle had "activity": [] and "budget_timeline": []."""
    from starlette.testclient import TestClient

    from mother.replay import export
    from mother.web import create_app

    run_id, story = old_run
    assert len(story) >= 8
    # inspect (the client, and the CLI's JSON)
    assert [e["type"] for e in pipeline.client.inspect(run_id)["activity"]] == story
    got = cli("inspect", run_id, "--json", url=pipeline.url)
    assert got.exit_code == 0, got.stderr
    assert [e["type"] for e in json.loads(got.stdout)["activity"]] == story
    # logs
    got = cli("logs", run_id, "--json", url=pipeline.url)
    assert got.exit_code == 0, got.stderr
    assert [json.loads(line)["type"] for line in got.stdout.splitlines()] == story
    # a replay bundle
    bundle = export(pipeline.client, run_id)
    assert [e["type"] for e in bundle["activity"]] == story
    # the run page and its JSON
    with TestClient(create_app(pipeline.client.settings, pipeline.client)) as web:
        page = web.get(f"/runs/{run_id}")
        assert page.status_code == 200
        for kind in set(story):
            assert kind in page.text, kind
        view = web.get(f"/api/runs/{run_id}").json()
        assert [e["type"] for e in view["activity"]] == story


def test_metrics_and_pages_with_redis_stopped(tmp_path: Path) -> None:
    """Before: every page and /metrics answered a bare 500 with a traceback per request. Now /metrics
    answers mother_redis_up 0 (Prometheus drops the samples of a failed scrape, so a 503 could never
    carry it) and every page and API a one-line 503 that names the server."""
    from starlette.testclient import TestClient

    from mother.config import load_settings
    from mother.server import EmbeddedRedis
    from mother.web import create_app

    server = EmbeddedRedis(dir=tmp_path / "redis", appendfsync="no").start()
    try:
        settings = load_settings(redis_url=server.url)
        with TestClient(create_app(settings)) as web:
            assert "mother_redis_up 1.0" in web.get("/metrics").text
            server.stop()
            metrics = web.get("/metrics")
            assert metrics.status_code == 200
            assert "mother_redis_up 0.0" in metrics.text
            assert "mother_runs_terminated_total" not in metrics.text
            for path in ("/", "/runs", "/runs/some-run", "/waiting", "/healthz"):
                page = web.get(path)
                assert page.status_code == 503, path
                assert page.text.startswith("Redis unreachable at redis://"), page.text
                assert len(page.text.strip().splitlines()) == 1 and "Traceback" not in page.text
            api = web.get("/api/runs")
            assert api.status_code == 503 and api.json()["error"].startswith("Redis unreachable")
    finally:
        server.stop()


def test_a_runs_timeline_shows_every_attempt_and_why(pipeline: Pipeline) -> None:
    """Before: a run page showed only the last accepted attempt's model milliseconds; failed attempts, their
    errors and retries, and the critic's rejecting review were not shown. Now every attempt is on the
    timeline with its status, error, times and worker, and the summary and CLI show the same."""
    failing = pipeline.client.submit(example("retries-exhausted"))
    assert pipeline.wait(failing).termination.reason == "retries_exhausted"
    tl = pipeline.client.inspect(failing)["timeline"]
    rows = [(a["phase"], a["attempt"], a["status"]) for a in tl["attempts"]]
    assert rows == [
        ("plan", 1, "completed"),
        ("execute", 1, "failed"),
        ("execute", 2, "failed"),
        ("execute", 3, "failed"),
    ]
    assert tl["retries"] == 2
    for a in tl["attempts"]:
        assert a["dispatched_at"] and a["started_at"] and a["ended_at"] and a["worker"]
        assert a["queue_ms"] is not None and a["run_ms"] is not None
    assert all("scripted failure" in a["error"] for a in tl["attempts"][1:])
    assert [p["attempts"] for p in tl["phases"]] == [1, 3]
    shown = cli("inspect", failing, url=pipeline.url)
    assert shown.exit_code == 0, shown.stderr
    text = shown.stdout
    assert "retries_exhausted" in text and "scripted failure" in text and "mother logs" in text
    assert text.count("failed") >= 3 and len(text.splitlines()) < 60
    # a critic that rejects: its attempt completed and raised the conflict, then the conflict's steps
    rejected = pipeline.client.submit(example("conflicting-agents"))
    pipeline.wait(rejected)
    tl = pipeline.client.inspect(rejected)["timeline"]
    review = [a for a in tl["attempts"] if a["phase"] == "review"]
    assert review and review[0]["status"] == "completed" and review[0]["started_at"]
    assert [c["type"] for c in tl["conflicts"]][:1] == ["conflict_detected"]


def test_time_and_cost_of_a_call_on_a_priced_http_model(tmp_path: Path) -> None:
    """A phase on a chat-completions server that takes 0.3 s per reply and a priced model: the attempt's
    model time covers the server's delay, its tokens and USD match what the guard charged, the run's cost
    is the same in the list, the timeline and /metrics' per-model counters."""
    from mother.observe.listing import RunQuery
    from mother.observe.timeline import usd
    from tests.test_providers_tools import _run_on_chat_server

    replies = [
        {
            "text": "Looking.",
            "tool_calls": [{"name": "list_dir", "arguments": {}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50},
            "delay": 0.3,
        },
        {"text": "Empty.", "usage": {"prompt_tokens": 1200, "completion_tokens": 20}, "delay": 0.3},
    ]

    def collect(r: Any, run_id: str) -> dict[str, Any]:
        from mother.client import MotherClient
        from mother.config import load_settings

        client = MotherClient(settings=load_settings(redis_url=_url(r)), client=r)
        # the phase's counts reach metrics:counters as Mother applies its host's asks
        counters = wait_until(
            lambda: (
                int((c := r.hgetall(keys.METRICS_COUNTERS)).get("model_input_tokens|local-llm", 0))
                >= 2200
                and c
            )
        )
        return {
            "view": client.inspect(run_id),
            "row": client.list_runs(RunQuery(limit=5)).rows[0],
            "counters": counters,
        }

    envelope, got, _chat = _run_on_chat_server(
        tmp_path, replies, collect, input_price_per_1k_usd="0.01", output_price_per_1k_usd="0.03"
    )
    assert envelope.termination.reason == "success"
    tl = got["view"]["timeline"]
    (attempt,) = tl["attempts"]
    assert attempt["status"] == "completed" and attempt["model_ms"] >= 600
    assert attempt["input_tokens"] == 2200 and attempt["output_tokens"] == 70
    # 2,200 in at $0.01/1k + 70 out at $0.03/1k = $0.0241
    assert attempt["spend_micro_usd"] == 24_100 == tl["cost"]["spend_micro_usd"]
    assert tl["cost"]["spend_usd"] == usd(24_100) == "$0.0241" == got["row"]["spend_usd"]
    assert got["row"]["duration_ms"] >= attempt["run_ms"] > 0
    counters = got["counters"]
    assert int(counters["model_input_tokens|local-llm"]) == 2200
    assert int(counters["model_output_tokens|local-llm"]) == 70
    assert int(counters["model_spend_micro_usd|local-llm"]) == 24_100
    assert int(counters["run_duration_count"]) >= 1 and int(counters["queue_wait_count"]) >= 1


def _url(r: Any) -> str:
    kw = r.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}"


def _truth(pipeline: Pipeline) -> list[dict[str, Any]]:
    """Every run record, read one by one (what the index must agree with)."""
    r = pipeline.redis
    found = []
    for key in r.scan_iter(match="run:*", count=1000):
        if r.type(key) != "ReJSON-RL":
            continue
        doc = json.loads(r.execute_command("JSON.GET", key))
        found.append(doc)
    return found


def test_mother_runs_filters_sorts_and_pages_over_every_run(pipeline: Pipeline) -> None:
    """Before: status and time filters saw the newest limit*10 runs only, lists stopped at 500 with no paging,
    no sorting and no "not success". Each filter here is checked against the records themselves."""
    ids = [pipeline.client.submit(example("three-phase", user_id="pat")) for _ in range(3)]
    ids += [pipeline.client.submit(example("retries-exhausted", user_id="pat")) for _ in range(2)]
    for run_id in ids:
        pipeline.wait(run_id)
    truth = _truth(pipeline)

    def listed(*args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        got = cli("runs", "--json", *args, url=pipeline.url)
        assert got.exit_code == 0, got.stderr
        rows = [json.loads(line) for line in got.stdout.splitlines()]
        tail = json.loads(got.stderr) if got.stderr else {"next": None}
        return rows, tail

    rows, tail = listed("--user", "pat", "--limit", "500")
    assert {r["run_id"] for r in rows} == {d["run_id"] for d in truth if d["user_id"] == "pat"}
    assert tail == {"next": None}
    rows, _ = listed("--user", "pat", "--not-success", "--limit", "500")
    assert {r["run_id"] for r in rows} == {
        d["run_id"]
        for d in truth
        if d["user_id"] == "pat" and d.get("reason") not in (None, "success")
    }
    rows, _ = listed("--status", "terminated", "--limit", "500")
    assert len(rows) == sum(1 for d in truth if d["status"] == "terminated")
    # newest first by creation, and its pages: every run once
    seen: list[dict[str, Any]] = []
    cursor: list[str] = []
    while True:
        rows, tail = listed("--limit", "2", *cursor)
        seen += rows
        if tail["next"] is None:
            break
        assert tail["total"] == len(truth)
        cursor = ["--cursor", tail["next"]]
    assert len(seen) == len(truth)
    assert {r["run_id"] for r in seen} == {d["run_id"] for d in truth}
    created = [d["created_ms"] for d in sorted(truth, key=lambda d: -d["created_ms"])]
    from schemas import ms_from_iso

    assert [ms_from_iso(r["created_at"]) for r in seen] == created
    # the oldest first, by when they ended, within a time range
    first_end = min(d["terminated_ms"] for d in truth if "terminated_ms" in d)
    rows, _ = listed("--by-end", "--oldest-first", "--limit", "500", "--since", "1h")
    ended = sorted((d for d in truth if "terminated_ms" in d), key=lambda d: d["terminated_ms"])
    assert [r["run_id"] for r in rows] == [d["run_id"] for d in ended]
    assert ms_from_iso(rows[0]["terminated_at"]) == first_end
    # the table: times, duration and cost columns (at the test runner's width); bad input is one line
    table = cli("runs", "--user", "pat", url=pipeline.url)
    assert "(times UTC)" in table.stdout and "created" in table.stdout and "took" in table.stdout
    bad = cli("runs", "--status", "sleeping", url=pipeline.url)
    assert bad.exit_code != 0 and "unknown status 'sleeping'" in bad.stderr
    bad = cli("runs", "--since", "yesterday", url=pipeline.url)
    assert bad.exit_code != 0 and "is not an age" in bad.stderr
    bad = cli("runs", "--cursor", "nope", url=pipeline.url)
    assert bad.exit_code != 0 and "cursor" in bad.stderr


def test_a_pipe_closed_early_ends_quietly(pipeline: Pipeline) -> None:
    """Before: `mother logs RUN --json | head -1` ended in a BrokenPipe error line. The run's story is made
    longer than a pipe holds (64 KiB), so the writer does meet the closed pipe."""
    import subprocess

    from tests.conftest import MOTHER_BIN, cli_env

    run_id = pipeline.client.submit(example("three-phase"))
    pipeline.wait(run_id)
    pipe = pipeline.redis.pipeline(transaction=False)
    for i in range(3000):
        fields = {"type": "note", "at": "2026-01-01T00:00:00.000Z", "run_id": run_id}
        pipe.xadd(keys.run_activity_key(run_id), {**fields, "data": f'{{"i": {i}}}'})
    pipe.execute()
    for args in (
        ["logs", run_id, "--json", "--limit", "5000"],
        ["logs", run_id, "--limit", "5000"],
    ):
        got = subprocess.run(
            ["sh", "-c", f"{MOTHER_BIN} {' '.join(args)} | head -c 20 > /dev/null; echo done"],
            env=cli_env({"MOTHER_REDIS_URL": pipeline.url}),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert got.stdout == "done\n" and got.stderr == "", (args, got.stderr)
