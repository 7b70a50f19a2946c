"""Replay bundles: every example run (real Mother and workers, the scripted model) exported, read back,
told as a story, and replayed to the same termination reason and counters, the people's decisions made
again; a bundle of another format refused in one line; the CLI end to end."""

from __future__ import annotations

import gzip
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from mother.errors import InvalidSpec, NotFound
from mother.records.budgets import budget_view
from mother.replay import BUNDLE_FORMAT, export, read_bundle, replay, story, write_bundle
from tests.conftest import Pipeline, run_cli, start_with_libraries, stop_pipeline
from tests.test_pipeline import example, wait_until

EXAMPLES = [
    "three-phase",
    "retries-exhausted",
    "timeout",
    "cancelled",
    "worker-killed",
    "context-summarized",
    "conflict-arbiter",
    "conflict-escalation",
    "conflict-ask-user",
    "approval-denied",
    "gate-timeout",
    "conflicting-agents",
    "tool-run-tests",
    "tool-fallback",
    "tool-ocr",
    "library-redacted",
    "library-refused-agent",
    "library-refused-model",
    "library-rate-limited",
    "library-insufficient",
]
# the people of the demo: what each waiting example is told
DECISIONS = {
    "conflict-ask-user": ("answer", "alice", "Use the UTC date."),
    "approval-denied": ("deny", "ops", "freeze week"),
    "library-redacted": ("approve", "ops", "board pack"),
    "library-rate-limited": ("approve", "ops", "reconciliation"),
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    p = start_with_libraries(tmp_path_factory.mktemp("replay"))
    yield p
    stop_pipeline(p)


def _play(p, run_ids: dict[str, str], timeout: float = 180) -> dict[str, str]:
    """Make the people's decisions and the cancel, restart a killed worker, wait for every end."""
    c = p.client
    pending, ended, cancelled = dict(run_ids), {}, False
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        p.stack.respawn_dead()
        for name, run_id in list(pending.items()):
            try:
                state = c.status(run_id)
            except NotFound:
                continue
            if state.status == "terminated":
                ended[name] = state.reason or ""
                del pending[name]
            elif name == "cancelled" and state.status == "running" and not cancelled:
                # once its model call is charged (the reply then takes 30 s): a state the replay
                # can reach again before it cancels
                if (budget_view(p.redis, run_id) or {}).get("model_calls", 0) >= 1:
                    c.cancel(run_id, actor="tester", reason="not needed")
                    cancelled = True
            elif state.status == "waiting" and name in DECISIONS and state.gate.decision is None:
                kind, actor, text = DECISIONS[name]
                if kind == "answer":
                    c.answer(run_id, text, actor=actor, reason="asked")
                else:
                    getattr(c, kind)(run_id, actor=actor, reason=text)
        time.sleep(0.1)
    assert not pending, f"did not end: {pending}"
    return ended


# examples whose counters depend on a phase starting within its deadline (3 s from its dispatch)
ALONE = ("timeout",)


def _timelines(p: Pipeline, run_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Each run's activity (type, time): what a failure shows."""
    from mother import keys

    return {
        run_id: [
            (e["type"], e.get("at", "")) for _id, e in p.redis.xrange(keys.run_activity_key(run_id))
        ]
        for run_id in run_ids
    }


def _every_host_idle(p: Pipeline) -> None:
    """Every worker process alive and its host live with no worker busy and no job queued (Mother's
    table, as its dispatch reads it)."""
    from mother.hosts import HostTable

    workers = [n for n in p.stack.procs if n.startswith("worker-")]
    table = HostTable(p.redis)

    def idle() -> bool:
        p.stack.respawn_dead()
        table.refresh()
        return len(table.live) == len(workers) and all(
            h.busy == 0 and not any(h.queued.values()) for h in table.live.values()
        )

    wait_until(idle, timeout=60)


def test_every_example_replays_to_the_same_reason_and_counters(stack, tmp_path: Path) -> None:
    c = stack.client
    # the workers warm (a first job pays for what the pool did not load) and idle
    for run_id in [c.submit(example("three-phase")) for _ in range(2)]:
        c.wait(run_id, 60)
    _every_host_idle(stack)
    # those first, while the workers are idle
    order = [*ALONE, *(name for name in EXAMPLES if name not in ALONE)]
    originals = {name: c.submit(example(name)) for name in order}
    reasons = _play(stack, originals)
    bundles = {}
    for name, run_id in originals.items():
        path = tmp_path / f"{name}.json.gz"
        write_bundle(export(c, run_id), path)
        bundles[name] = read_bundle(path)
        told = "\n".join(story(bundles[name]))
        assert f"stopped: {reasons[name]}" in told and "next: " in told
        assert "artifacts at termination:" in told and "cost: $" in told
    # the failed attempts and their errors, and the cost, from the bundle's timeline
    told = "\n".join(story(bundles["retries-exhausted"]))
    failed = [line for line in told.splitlines() if ": failed" in line and "; error: " in line]
    assert len(failed) == 3, told

    def again(name: str):
        # worker-killed kills a worker: the replay's is restarted by the loop below
        return replay(c, bundles[name], timeout=180)

    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = {name: pool.submit(again, name) for name in EXAMPLES if name not in ALONE}
        deadline = time.monotonic() + 300
        while not all(f.done() for f in futures.values()) and time.monotonic() < deadline:
            stack.stack.respawn_dead()
            time.sleep(0.2)
        outcomes = {name: f.result(timeout=1) for name, f in futures.items()}
    # a phase whose deadline runs from its dispatch, replayed on idle workers (as it first ran: it
    # was submitted first): queued behind the others, or on a host whose worker the worker-killed
    # replay killed and is being started again, it could time out before its model call
    _every_host_idle(stack)
    outcomes |= {name: again(name) for name in ALONE}
    wrong = {
        name: (o.reason, o.expected, orjson.dumps(o.counters), orjson.dumps(o.recorded))
        for name, o in outcomes.items()
        if not (o.same_reason and o.same_counters)
    }
    assert not wrong, (wrong, _timelines(stack, [outcomes[name].run_id for name in wrong]))
    # the people's decisions were made again, by the same actors
    assert outcomes["approval-denied"].decisions == ["deny by ops"]
    assert outcomes["conflict-ask-user"].decisions == ["answer by alice"]
    assert outcomes["cancelled"].decisions == ["cancel"]


def test_a_bundle_of_another_format_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old.json.gz"
    old.write_bytes(gzip.compress(orjson.dumps({"format": "mother-replay:v0", "spec": {}})))
    with pytest.raises(InvalidSpec, match=r"format 'mother-replay:v0'; this version reads"):
        read_bundle(old)
    junk = tmp_path / "junk.json.gz"
    junk.write_bytes(b"\x1f\x8bnot gzip at all")
    with pytest.raises(InvalidSpec, match="not a gzip'd bundle"):
        read_bundle(junk)
    with pytest.raises(NotFound):
        read_bundle(tmp_path / "missing.json.gz")
    # a small file that unpacks past the limit is read only to the limit
    import mother.replay

    monkeypatch.setattr(mother.replay, "MAX_BUNDLE_BYTES", 1_000)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * 1_000_000))
    with pytest.raises(InvalidSpec, match="over 1000 bytes unpacked"):
        read_bundle(bomb)
    shown = run_cli("replay", "show", str(old))
    assert shown.returncode == 2 and shown.stderr.count("\n") == 1
    assert "mother-replay:v0" in shown.stderr and BUNDLE_FORMAT in shown.stderr


def test_replay_from_the_cli_and_on_another_model(stack, tmp_path: Path) -> None:
    env = {"MOTHER_REDIS_URL": stack.url}
    run_id = stack.client.submit(example("three-phase"))
    assert stack.wait(run_id).termination.reason == "success"
    bundle = tmp_path / "run.json.gz"
    exported = run_cli("replay", "export", run_id, "-o", str(bundle), env=env)
    assert exported.returncode == 0, exported.stderr
    shown = run_cli("replay", "show", str(bundle), env=env)
    assert shown.returncode == 0 and "stopped: success" in shown.stdout
    ran = run_cli("replay", "run", str(bundle), env=env, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "ended success; the original ended success" in ran.stdout
    other = run_cli("replay", "run", str(bundle), "--model", "scripted-large", env=env, timeout=120)
    assert other.returncode == 0, other.stdout + other.stderr
    unknown = run_cli("replay", "run", str(bundle), "--model", "nope", env=env)
    assert unknown.returncode == 2 and "unknown model 'nope'" in unknown.stderr


def test_a_malformed_bundle_is_one_line_and_exit_2(stack, tmp_path: Path) -> None:
    """Before: a bundle edited by hand (a field of the wrong type) got a 47-line traceback."""
    from mother.replay import export
    from tests.conftest import cli

    run_id = stack.client.submit(example("three-phase"))
    assert stack.wait(run_id).termination.reason == "success"
    good = export(stack.client, run_id)
    edits = {
        "run": 5,
        "spec": {**good["spec"], "pipeline": "x"},
        "termination": [],
        "replies": {},
        "conflicts": [{"conflict_id": 1}],
        "gates": "none",
        "artifacts": [7],
        "run_id": {"a": 1},
    }
    for field, value in edits.items():
        path = tmp_path / f"{field}.json.gz"
        path.write_bytes(gzip.compress(orjson.dumps({**good, field: value})))
        for command in ("show", "run"):
            got = cli("replay", command, str(path), url=stack.url)
            assert got.exit_code == 2, (field, command, got.stdout, got.stderr)
            assert got.stderr.count("\n") == 1 and "not a well-formed" in got.stderr, got.stderr
            assert field in got.stderr or field == "run_id", got.stderr
