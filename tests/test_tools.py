"""The deterministic tool registry: manifests and sync (RE2 refusing what it cannot run), the routing
table, the executor (contracts, timeouts that kill, retries of transient failures only, statistics exact
under 4 processes), the real tools on real inputs, and tool_only plans end to end with real Redis,
Mother and workers."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
import yaml

from mother import keys
from mother.activity import recent
from mother.config import Settings
from mother.errors import ConfigError, SignatureInvalid
from mother.records.budgets import budget_doc
from mother.records.tools import read_registry, read_stats
from mother.tools import ToolRouter, build_registry, load_manifests, phase_query, sync
from mother.tools.patterns import compile_pattern, pattern_source
from schemas import RunSpec
from schemas.tool import DeterministicTool
from tests.conftest import Pipeline, need, run_cli, start_pipeline, stop_pipeline, wait_for_person
from tests.test_pipeline import example, wait_until
from workers.tools import ToolBox, shipped_tools
from workers.tools.executor import ToolExecutor
from workers.tools.run_tests import parse_summary

NOW = "2026-11-24T00:00:00.000Z"
FIXTURES = frozenset(
    {
        "tests.tool_fixtures.sleepy",
        "tests.tool_fixtures.bad_output",
        "tests.tool_fixtures.flaky",
        "tests.tool_fixtures.broken",
    }
)


def _tool(tool_id: str, entrypoint: str, **more: Any) -> DeterministicTool:
    return DeterministicTool.model_validate(
        {
            "tool_id": tool_id,
            "tool_name": tool_id,
            "version": "1.0.0",
            "category": "compute",
            "input_schema": {"type": "object", "properties": {"fail": {"type": "integer"}}},
            "output_schema": {
                "type": "object",
                "properties": {"count": {"type": "integer"}},
                "required": ["count"],
            },
            "side_effects": "read_only",
            "priority": 50,
            "allowed_roles": ["*"],
            "entrypoint": entrypoint,
            **more,
        }
    )


def _router(**settings: Any) -> ToolRouter:
    cfg = Settings(**settings)
    return ToolRouter(build_registry(cfg, load_manifests(cfg), NOW))


def _manifest(directory: Path, tool_id: str, **changes: Any) -> Path:
    data = yaml.safe_load((Path("mother/tools/manifests") / "git_status.yaml").read_text())
    data.update(tool_id=tool_id, **changes)
    path = directory / f"{tool_id}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# -- the routing table -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "role", "first", "inputs"),
    [
        # a pattern's named group fills the input
        (
            "Run the tests with python -m unittest",
            "coder",
            "run_tests",
            {"test_command": "python -m unittest", "repo_path": "."},
        ),
        # priority: run_tests (100) before git_status (95) when both match
        ("run the tests with pytest and check git status", "coder", "run_tests", None),
        # role filter: git_status is not for the vision role
        ("check git status", "vision", None, None),
        ("check git status", "critic", "git_status", {"repo_path": "."}),
        # typed groups: numbers, as the input schema says
        (
            "Resize image photo.png to 64x32",
            "vision",
            "resize_image",
            {"input_path": "photo.png", "width": 64, "height": 32},
        ),
        ("extract text from image card.png", "vision", "ocr_extract", None),
        # two keywords route without a pattern; one does not; a keyword must start a word
        ("the pytest suite please", "coder", "run_tests", None),
        ("write a suite of poems", "coder", None, None),
        ("the latest protest suite", "coder", None, None),
        ("nothing a tool does", "coder", None, None),
    ],
)
def test_routing_table(query: str, role: str, first: str | None, inputs: dict | None) -> None:
    routed = _router().route(query, role)
    got = routed.candidates[0] if routed.candidates else None
    assert (got.tool_id if got else None) == first, (query, routed)
    if inputs is not None:
        assert got is not None and {k: got.inputs.get(k) for k in inputs} == inputs


def test_routing_orders_every_match_by_priority_and_passes_over_missing_inputs() -> None:
    """All matching tools are candidates, by priority; one whose inputs break its schema is passed over
    with the reason; the phase's declared inputs fill and override what the task gave."""
    router = _router()
    routed = router.route("scale image and extract text from image now", "vision")
    # both matched (/scale.*image/, /extract.*text.*image/) but neither has its required inputs
    assert routed.candidates == []
    assert any("resize_image" in why and "input_path" in why for why in routed.passed_over)
    assert any("ocr_extract" in why and "image_path" in why for why in routed.passed_over)
    declared = router.route(
        "scale image", "vision", {"input_path": "a.png", "width": 10, "height": 20}
    )
    assert declared.candidates[0].tool_id == "resize_image"
    assert declared.candidates[0].inputs == {"input_path": "a.png", "width": 10, "height": 20}
    both = router.route("run the tests with pytest", "coder", {"test_command": "pytest -x"})
    assert both.candidates[0].inputs["test_command"] == "pytest -x"
    assert "pattern: " in both.candidates[0].matched


def test_phase_query_and_routing_off() -> None:
    base = {"user_id": "u", "task": "check git status", "scripts": {}}
    one = RunSpec.model_validate(
        {**base, "pipeline": [{"name": "a", "role": "coder", "model": "m"}]}
    )
    assert phase_query(one, 0) == "check git status"
    two = RunSpec.model_validate(
        {
            **base,
            "pipeline": [
                {"name": "a", "role": "coder", "model": "m"},
                {"name": "b", "role": "coder", "model": "m", "task": "run the tests"},
                {"name": "c", "role": "coder", "model": "m", "task": "git status", "tools": "off"},
            ],
        }
    )
    assert [phase_query(two, i) for i in range(3)] == [None, "run the tests", None]


def test_patterns_are_re2() -> None:
    """'/.../i' flags become RE2's; a catastrophic pattern runs in linear time; RE2 refuses what it
    cannot run (backreferences, lookaround) with one line."""
    assert pattern_source("/git status/i") == "(?i)git status"
    assert compile_pattern("/GIT/i").search("git") is not None
    # exponential in a backtracking engine; linear in RE2
    assert compile_pattern("(a+)+$").search("a" * 100_000 + "b") is None
    for bad in (r"(a)\1", r"(?=x)y", r"(?<!x)y"):
        with pytest.raises(ConfigError, match="not a pattern RE2 runs") as err:
            compile_pattern(bad)
        assert "\n" not in err.value.message
    with pytest.raises(ConfigError, match="unknown flag 'g'"):
        compile_pattern("/x/g")


# -- manifests and sync ------------------------------------------------------------------------------


def test_sync_refuses_a_backtracking_pattern_and_writes_nothing(
    r: redis.Redis, tmp_path: Path
) -> None:
    r.delete(keys.TOOLS_REGISTRY)
    _manifest(tmp_path, "bad_tool", handles_patterns=[r"(\w+) and \1"])
    cfg = Settings(tools={"manifests_dir": tmp_path})
    with pytest.raises(ConfigError) as err:
        sync(r, cfg, NOW)
    assert "bad_tool.yaml: handles_patterns[0]" in err.value.message and "RE2" in err.value.message
    assert r.exists(keys.TOOLS_REGISTRY) == 0


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"priority": 101}, "priority"),
        ({"max_retries": 3}, "max_retries"),
        ({"side_effects": "risky"}, "side_effects"),
        ({"input_schema": {"type": "string"}}, 'type: "object"'),
        (
            {"input_schema": {"type": "object", "properties": {"a": {"type": "nope"}}}},
            "JSON Schema",
        ),
        ({"entrypoint": "workers.tools.nothing_here:run"}, "no module"),
        ({"cost_tier": "cheap"}, "cost_tier"),
        ({"surprise": 1}, "unknown field"),
    ],
)
def test_bad_manifests_get_one_line(tmp_path: Path, changes: dict, says: str) -> None:
    _manifest(tmp_path, "t1", **changes)
    with pytest.raises(ConfigError) as err:
        load_manifests(Settings(tools={"manifests_dir": tmp_path, "shipped": False}))
    assert says in err.value.message and "\n" not in err.value.message


def test_sync_replaces_a_shipped_tool_and_keeps_routing_order(
    r: redis.Redis, tmp_path: Path
) -> None:
    _manifest(tmp_path, "git_status", priority=100, approval_required=True)
    registry = sync(r, Settings(tools={"manifests_dir": tmp_path}), NOW)
    stored = read_registry(r)
    assert stored is not None and stored == registry
    assert stored.registry_version == "tools:v1" and stored.allow_fallback_to_llm is True
    assert stored.routing_order[:2] == ["git_status", "run_tests"]  # ties by tool_id
    assert {t.tool_id for t in stored.tools} >= {
        "read_file",
        "list_dir",
        "write_file",
        "git_status",
        "run_tests",
        "resize_image",
        "ocr_extract",
    }
    gs = stored.tool("git_status")
    assert gs is not None and gs.approval_required
    assert gs.annotations() == {
        "title": "Git Status Check",
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
    }
    assert gs.openai_function()["function"]["parameters"] == gs.input_schema


def test_two_manifests_with_one_tool_id_are_refused_naming_both(
    r: redis.Redis, tmp_path: Path
) -> None:
    """A deployment's manifest may replace a shipped tool; two of its own with one tool_id are refused
    (the last one used to win without a word), naming both files; nothing is synced."""
    first = _manifest(tmp_path, "twin")
    second = tmp_path / "zz-twin.yaml"
    second.write_text(first.read_text())
    with pytest.raises(ConfigError) as err:
        sync(r, Settings(tools={"manifests_dir": tmp_path}), NOW)
    assert str(second) in err.value.message and str(first) in err.value.message
    assert "tool_id 'twin'" in err.value.message and read_registry(r) is None


def test_success_rates_are_in_the_registry(r: redis.Redis, tmp_path: Path) -> None:
    """registry:tools.tool_success_rates holds each tool's rate from its tool_stats (it was always {}):
    at sync, and refreshed by Mother's watchdog."""
    from mother.records.tools import record_call, refresh_success_rates

    sync(r, Settings(), NOW)
    record_call(r, "list_dir", ok=True, execution_ms=1.0)
    record_call(r, "list_dir", ok=False, execution_ms=1.0)
    assert refresh_success_rates(r)
    stored = read_registry(r)
    assert stored is not None and stored.tool_success_rates == {"list_dir": 0.5}
    synced = sync(r, Settings(), NOW)
    assert synced.tool_success_rates == {"list_dir": 0.5}


def test_signed_manifests_are_required_when_signatures_are(tmp_path: Path) -> None:
    from mother.signing import generate_keypair, sign_file

    directory = tmp_path / "tools"
    directory.mkdir()
    path = _manifest(directory, "mine")
    private, public = generate_keypair(tmp_path / "keys")
    cfg = Settings(
        tools={"manifests_dir": directory, "shipped": False},
        harness={"require_signatures": True, "trusted_keys": [public]},
    )
    with pytest.raises(SignatureInvalid, match="not signed"):
        load_manifests(cfg)
    sign_file(path, private)
    assert [t.tool_id for t in load_manifests(cfg)] == ["mine"]
    path.write_text(path.read_text().replace("priority: 95", "priority: 99"))
    with pytest.raises(SignatureInvalid):
        load_manifests(cfg)


# -- the executor ------------------------------------------------------------------------------------


def test_contract_violations_in_and_out_are_one_line(tmp_path: Path) -> None:
    ex = ToolExecutor(allowed_entrypoints=FIXTURES)
    git = shipped_tools()["git_status"]
    bad_in = ex.run(git, tmp_path, {"repo_path": 7})
    assert not bad_in.ok and bad_in.tries == 0
    assert (
        bad_in.error
        == "inputs of git_status break its input_schema at $.repo_path: 7 is not of type 'string'"
    )
    out = ex.run(_tool("bad_out", "tests.tool_fixtures:bad_output"), tmp_path, {})
    assert not out.ok and out.error is not None and "\n" not in out.error
    assert out.error.startswith("output of bad_out break its output_schema at $.count")
    outside = ex.run(_tool("x", "os:system"), tmp_path, {})
    assert not outside.ok and "outside workers.tools" in (outside.error or "")


def test_a_tool_past_its_timeout_is_killed_with_what_it_started(
    r: redis.Redis, tmp_path: Path
) -> None:
    r.delete(keys.tool_stats_key("sleepy"))
    ex = ToolExecutor(_counted(r), allowed_entrypoints=FIXTURES)
    outcome = ex.run(_tool("sleepy", "tests.tool_fixtures:sleepy", timeout_ms=1500), tmp_path, {})
    assert not outcome.ok and outcome.timed_out
    assert outcome.error == "timed out after 1500 ms; its processes were killed"
    pid = int((tmp_path / "sleeper.pid").read_text())

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie until its parent (init) reaps it
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"

    assert wait_until(gone, timeout=5)
    stats = read_stats(r, ["sleepy"])["sleepy"]
    assert (stats.success_count, stats.failure_count, stats.success_rate) == (0, 1, 0.0)


def test_only_transient_failures_are_retried(tmp_path: Path) -> None:
    ex = ToolExecutor(allowed_entrypoints=FIXTURES)
    flaky = _tool("flaky", "tests.tool_fixtures:flaky", max_retries=2)
    ok = ex.run(flaky, tmp_path / "a", {"fail": 2})
    assert ok.ok and ok.tries == 3 and ok.output == {"count": 3}
    short = ex.run(
        _tool("flaky", "tests.tool_fixtures:flaky", max_retries=1), tmp_path / "b", {"fail": 2}
    )
    assert not short.ok and short.tries == 2 and short.error == "busy (call 2)"
    broken = ex.run(_tool("broken", "tests.tool_fixtures:broken", max_retries=2), tmp_path, {})
    assert not broken.ok and broken.tries == 1 and broken.error == "RuntimeError: disk on fire"


def _counted(client: redis.Redis) -> Any:
    """What counts a tool's call on a worker host (its ask), here Mother's own record_call."""
    from mother.records.tools import record_call

    return lambda tool_id, ok, ms: record_call(client, tool_id, ok=ok, execution_ms=ms)


def _stat_worker(url: str, workspace: str, calls: int) -> None:
    ex = ToolExecutor(_counted(redis.Redis.from_url(url)))
    tool = shipped_tools()["list_dir"]
    for i in range(calls):
        ex.run(tool, Path(workspace), {"path": "." if i % 2 == 0 else "missing"})


def test_stats_are_exact_after_calls_from_four_processes(
    r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    r.delete(keys.tool_stats_key("list_dir"))
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_stat_worker, args=(redis_url, str(tmp_path), 40)) for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    stats = read_stats(r, ["list_dir"])["list_dir"]
    assert (stats.success_count, stats.failure_count, stats.success_rate) == (80, 80, 0.5)
    assert stats.avg_execution_ms > 0 and stats.last_used is not None
    assert stats.avg_execution_ms == pytest.approx(stats.total_execution_ms / 160, abs=0.001)
    with pytest.raises(redis.ResponseError, match="finite number"):
        r.execute_command(
            "FCALL",
            "mh_tool_stat",
            2,
            keys.tool_stats_key("list_dir"),
            keys.METRICS_COUNTERS,
            1,
            "-5",
        )
    # the counters' key is passed in KEYS (ACL key patterns see it): a call that leaves it out is refused
    before = r.execute_command("JSON.GET", keys.tool_stats_key("list_dir"))
    with pytest.raises(redis.ResponseError, match=r"KEYS\[2\] must be metrics:counters"):
        r.execute_command("FCALL", "mh_tool_stat", 1, keys.tool_stats_key("list_dir"), 1, "5")
    assert r.execute_command("JSON.GET", keys.tool_stats_key("list_dir")) == before


# -- the real tools ----------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("git") is None, reason="no git binary on this machine")
def test_git_status_on_a_real_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "trunk")
    git("config", "user.email", "t@example.invalid")
    git("config", "user.name", "t")
    (repo / "a.txt").write_text("a\n")
    (repo / "old.txt").write_text("o\n")
    git("add", ".")
    git("commit", "-qm", "init")
    (repo / "a.txt").write_text("a\nb\n")
    (repo / "staged.txt").write_text("s\n")
    git("add", "staged.txt")
    git("mv", "old.txt", "new name.txt")
    (repo / "untracked.txt").write_text("u\n")
    ex = ToolExecutor()
    got = ex.run(shipped_tools()["git_status"], tmp_path, {"repo_path": "repo"})
    assert got.ok, got.error
    assert got.output == {
        "branch": "trunk",
        "modified_files": ["a.txt"],
        "staged_files": ["new name.txt", "staged.txt"],
        "untracked_files": ["untracked.txt"],
        "clean": False,
    }
    not_repo = ex.run(shipped_tools()["git_status"], tmp_path, {})
    assert not not_repo.ok and not_repo.error == "'.' is not a git repository"


def test_run_tests_counts_real_pytest_and_unittest_runs(tmp_path: Path) -> None:
    (tmp_path / "test_m.py").write_text(
        "import unittest\n\n\nclass T(unittest.TestCase):\n"
        "    def test_ok(self):\n        self.assertEqual(1, 1)\n\n"
        "    def test_bad(self):\n        self.assertEqual(1, 2)\n\n"
        "    def test_ok2(self):\n        pass\n"
    )
    ex = ToolExecutor()
    tool = shipped_tools()["run_tests"]
    for command in ("python -m pytest -q", "python -m unittest"):
        got = ex.run(tool, tmp_path, {"test_command": command})
        assert got.ok, got.error
        assert got.output is not None
        assert (
            got.output["tests_run"],
            got.output["tests_passed"],
            got.output["tests_failed"],
        ) == (3, 2, 1), command
        assert got.output["exit_code"] == 1
    refused = ex.run(tool, tmp_path, {"test_command": "rm -rf /"})
    assert not refused.ok and "must start with a test runner" in (refused.error or "")
    assert parse_summary("Tests:       1 failed, 4 passed, 5 total") == (5, 4, 1)
    assert parse_summary("===== 2 passed, 1 error in 0.1s =====") == (3, 2, 1)
    assert parse_summary("nothing here") is None


def test_run_tests_picks_the_workspaces_runner_and_no_tests_is_a_failure(tmp_path: Path) -> None:
    """Without a test_command a JavaScript workspace (package.json) runs `npm test`, not pytest (which
    ended such a run `success` with no tests ran); a Python workspace with no tests, or a runner that
    finds none, fails the tool instead of passing."""
    need(None if shutil.which("npm") else "npm is not installed on this machine (Debian's npm)")
    js = tmp_path / "js"
    js.mkdir()
    (js / "package.json").write_text(
        orjson.dumps({"name": "t", "scripts": {"test": "node check.js"}}).decode()
    )
    (js / "check.js").write_text(
        "console.log('Tests:       1 failed, 2 passed, 3 total'); process.exit(1);\n"
    )
    ex = ToolExecutor()
    tool = shipped_tools()["run_tests"]
    got = ex.run(tool, js, {"repo_path": "."})
    assert got.ok and got.output is not None, got.error
    assert (got.output["tests_run"], got.output["tests_failed"]) == (3, 1)
    empty = tmp_path / "py"
    empty.mkdir()
    (empty / "module.py").write_text("x = 1\n")
    none = ex.run(tool, empty, {"repo_path": "."})
    assert not none.ok and "python -m pytest -q found no tests" in (none.error or "")


@pytest.mark.parametrize("runner", ["mocha", "node --test"])
def test_run_tests_counts_mocha_and_nodes_own_test_runner(tmp_path: Path, runner: str) -> None:
    """A JavaScript workspace whose `npm test` runs mocha, or node's own test runner (`node --test`,
    also as a test_command of its own): the real runner's summary is counted (2 passed, 1 failed, a
    skipped test not run), the tool does not fail for want of a summary."""
    program = runner.split()[0]
    need(None if shutil.which("npm") else "npm is not installed on this machine (Debian's npm)")
    need(None if shutil.which(program) else f"{program} is not installed (npm install -g mocha)")
    js = tmp_path / "js"
    (js / "test").mkdir(parents=True)
    (js / "package.json").write_text(
        orjson.dumps({"name": "t", "scripts": {"test": runner}}).decode()
    )
    if program == "mocha":
        (js / "test" / "m.spec.js").write_text(
            "const assert = require('assert');\n"
            "describe('m', () => { it('a', () => assert.equal(1, 1)); it('b', () => assert.equal(1, 2));"
            " it.skip('c', () => {}); it('d', () => {}); });\n"
        )
    else:
        (js / "test" / "n.test.js").write_text(
            "const test = require('node:test'); const assert = require('node:assert');\n"
            "test('a', () => assert.strictEqual(1, 1)); test('b', () => assert.strictEqual(1, 2));\n"
            "test('c', { skip: true }, () => {}); test('d', () => {});\n"
        )
    ex = ToolExecutor()
    tool = shipped_tools()["run_tests"]
    for inputs in ({"repo_path": "."}, {"repo_path": ".", "test_command": runner}):
        got = ex.run(tool, js, inputs)
        assert got.ok and got.output is not None, (inputs, got.error)
        counts = (got.output["tests_run"], got.output["tests_passed"], got.output["tests_failed"])
        assert counts == (3, 2, 1), (inputs, got.output["stdout"][-500:])
        assert got.output["exit_code"] != 0
    refused = ex.run(tool, js, {"repo_path": ".", "test_command": "node -e 1"})
    assert not refused.ok and "only as its test runner" in (refused.error or "")


def test_render_resize_and_ocr_on_a_generated_image(tmp_path: Path) -> None:
    from PIL import Image

    ex = ToolExecutor()
    tools = shipped_tools()
    drawn = ex.run(tools["render_text"], tmp_path, {"text": "HELLO 2026", "output_path": "c.png"})
    assert drawn.ok, drawn.error
    small = ex.run(
        tools["resize_image"], tmp_path, {"input_path": "c.png", "width": 50, "height": 10}
    )
    assert small.ok and small.output is not None
    assert small.output["new_size"] == {"width": 50, "height": 10}
    with Image.open(tmp_path / small.output["output_path"]) as image:
        assert image.size == (50, 10)
    (tmp_path / "not.png").write_text("text")
    bad = ex.run(
        tools["resize_image"], tmp_path, {"input_path": "not.png", "width": 5, "height": 5}
    )
    assert not bad.ok and "not an image Pillow can read" in (bad.error or "")
    read = ex.run(tools["ocr_extract"], tmp_path, {"image_path": "c.png"})
    assert read.ok, read.error
    assert read.output is not None and "HELLO 2026" in read.output["text"].replace("\n", " ")
    assert 0.5 < read.output["confidence"] <= 1.0


def test_the_agent_loop_sees_registry_tools_for_its_role(tmp_path: Path) -> None:
    tools = list(shipped_tools().values())
    box = ToolBox(tmp_path, registry=[t for t in tools if t.allows("vision")])
    names = {spec["function"]["name"] for spec in box.specs()}
    assert "ocr_extract" in names and "git_status" not in names and "read_file" in names
    assert box.is_read_only("ocr_extract") and not box.is_read_only("write_file")


# -- tool_only plans end to end ---------------------------------------------------------------------


# how often this module's Mother and workers re-read the tool registry (5 s by default)
REGISTRY_REFRESH_SECONDS = 0.5


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = start_pipeline(
        tmp_path_factory.mktemp("tools"),
        env={"MOTHER_TOOLS__REFRESH_SECONDS": str(REGISTRY_REFRESH_SECONDS)},
    )
    yield p
    stop_pipeline(p)


def _activity(p: Pipeline, run_id: str) -> list[Any]:
    return [e for e in recent(p.redis, 2000) if e.run_id == run_id]


def test_a_phase_a_tool_handles_calls_no_model(stack: Pipeline) -> None:
    """ "run the tests with pytest" goes to run_tests on the tools queue: no model call, cost 0, its
    verdict from the test run, tool_success in the activity stream, the call in tool_stats."""
    run_id = stack.client.submit(example("tool-run-tests"))
    envelope = stack.wait(run_id)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    code, tests = envelope.phases
    assert code.handled_by is None and code.usage.model_calls == 2
    assert tests.handled_by == "run_tests" and tests.usage.model_calls == 0
    assert tests.usage.tool_calls == 1 and tests.verdict is not None
    assert tests.verdict.decision == "accept" and tests.evidence_count == 2
    output = orjson.loads(tests.output.removeprefix("[run_tests] "))
    assert (output["tests_run"], output["tests_failed"], output["exit_code"]) == (2, 0, 0)
    events = _activity(stack, run_id)
    dispatched = [e for e in events if e.type == "phase_dispatched"]
    assert [e.data.get("plan") for e in dispatched] == ["agent", "tool_only"]
    assert dispatched[1].data["tools"][0] == "run_tests"
    success = [e for e in events if e.type == "tool_success"]
    assert len(success) == 1 and success[0].data["tool_id"] == "run_tests"
    assert (
        success[0].data["cost"] == 0 and success[0].data["message"] == "Handled by tool: run_tests"
    )
    budget = budget_doc(stack.redis, keys.run_budget_key(run_id))
    # two write_file calls and the plan's run_tests; the coder's two model calls only
    assert (budget["tool_calls"], budget["model_calls"]) == (3, 2)
    # added to tool_stats by Mother at the host's tool_stat ask
    wait_until(lambda: "run_tests" in read_stats(stack.redis, ["run_tests"]))
    assert read_stats(stack.redis, ["run_tests"])["run_tests"].success_count >= 1


def test_a_failed_tool_falls_back_to_the_model(stack: Pipeline) -> None:
    run_id = stack.client.submit(example("tool-fallback"))
    envelope = stack.wait(run_id)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    (phase,) = envelope.phases
    assert phase.handled_by is None and phase.usage.model_calls == 1
    assert phase.output.startswith("jest is not installed")
    types = [e.type for e in _activity(stack, run_id)]
    assert (
        types.index("tool_failed") < types.index("tool_fallback") < types.index("phase_completed")
    )
    failed = next(e for e in _activity(stack, run_id) if e.type == "tool_failed")
    assert failed.data["error"] == "test runner 'jest' is not installed on this worker"


def test_an_ocr_run_on_an_image_it_generates(stack: Pipeline) -> None:
    run_id = stack.client.submit(example("tool-ocr"))
    envelope = stack.wait(run_id, timeout=120)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    assert [p.handled_by for p in envelope.phases] == ["render_text", "ocr_extract"]
    text = orjson.loads(envelope.phases[1].output.removeprefix("[ocr_extract] "))["text"]
    assert "INVOICE 42 PAID" in text.replace("\n", " ")
    assert (stack.workspace / run_id / "card.png").is_file()
    budget = budget_doc(stack.redis, keys.run_budget_key(run_id))
    assert (budget["model_calls"], budget["spend_micro_usd"], budget["tool_calls"]) == (0, 0, 2)


def test_an_approval_required_tool_waits_for_a_person(stack: Pipeline) -> None:
    """A tool the run must approve (approval_tools) stops the plan before the call; approved, the phase
    runs it (same inputs: the approval is bound to them)."""
    spec = example("tool-run-tests", approval_tools=["run_tests"])
    run_id = stack.client.submit(spec)

    state = wait_for_person(stack, run_id)
    assert state.gate is not None and state.gate.kind == "approval"
    assert "run_tests" in state.gate.subject
    stack.client.approve(run_id, actor="ops", reason="tests may run")
    envelope = stack.wait(run_id)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    assert envelope.phases[-1].handled_by == "run_tests"


def test_tools_cli(stack: Pipeline, tmp_path: Path) -> None:
    env = {"MOTHER_REDIS_URL": stack.url}
    synced = run_cli("tools", "sync", env=env)
    assert synced.returncode == 0, synced.stderr
    assert "registry:tools synced (tools:v1" in synced.stdout
    listed = run_cli("tools", "list", "--role", "vision", env=env)
    assert listed.returncode == 0 and "ocr_extract" in listed.stdout
    assert "git_status" not in listed.stdout
    shown = run_cli("tools", "show", "run_tests", env=env)
    assert shown.returncode == 0, shown.stderr
    doc = orjson.loads(shown.stdout)
    assert doc["annotations"]["readOnlyHint"] is True and doc["timeout_ms"] == 300000
    assert doc["stats"] is None or doc["stats"]["success_count"] >= 0
    exported = orjson.loads(run_cli("tools", "export", "--format", "mcp", env=env).stdout)
    assert {"name", "inputSchema", "annotations"} <= set(exported[0])
    missing = run_cli("tools", "show", "nope", env=env)
    assert missing.returncode != 0 and "no tool 'nope' in registry:tools" in missing.stderr
    _manifest(tmp_path, "bad", handles_patterns=["(?<=x)y"])
    refused = run_cli("tools", "sync", str(tmp_path), env=env)
    assert refused.returncode != 0 and "RE2" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # the refused sync wrote nothing: the registry is the one synced above
    assert read_registry(stack.redis) is not None
    assert read_registry(stack.redis).tool("bad") is None  # type: ignore[union-attr]


def test_writing_tools_are_refused_after_an_emergency_stop(r: redis.Redis) -> None:
    """A tool call is charged as its side_effects say: after an emergency stop a read-only tool may still
    run, a writing or destructive one is refused by the guard before it runs."""
    from mother.budget import emergency_stop
    from mother.errors import BudgetStopped
    from tests.test_budget import _open

    guard = _open(r, "tools-stop-1")
    tools = shipped_tools()
    emergency_stop(r, "tools-stop-1", "ops", "runaway", 1000)
    guard.charge_tool(read_only=tools["git_status"].read_only)
    destructive = _tool("wipe", "tests.tool_fixtures:broken", side_effects="destructive")
    for tool in (tools["write_file"], destructive):
        with pytest.raises(BudgetStopped):
            guard.charge_tool(read_only=tool.read_only)


def test_a_call_that_cannot_run_is_never_put_to_a_person(stack: Pipeline) -> None:
    """A tool call that needs approval but breaks the tool's input schema gets the schema's error back
    (the model can correct it); no gate opens for a call that could never run."""
    spec = example(
        "tool-run-tests",
        approval_tools=["write_file"],
        pipeline=[{"name": "code", "role": "coder", "model": "scripted"}],
        scripts={
            "coder": [
                {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.py"}}]},
                {"text": "gave up"},
            ]
        },
    )
    run_id = stack.client.submit(spec)
    envelope = stack.wait(run_id)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    state = stack.client.status(run_id)
    assert state.gates == [] and state.gate is None


def test_an_approval_required_manifest_gates_its_tool(stack: Pipeline, tmp_path: Path) -> None:
    """A manifest with approval_required makes the plan wait on a gate for exactly its call (the
    registry is re-read within tools.refresh_seconds); denied, the run ends approval_denied."""
    import time

    from mother.config import load_settings

    data = yaml.safe_load((Path("mother/tools/manifests") / "run_tests.yaml").read_text())
    data["approval_required"] = True
    (tmp_path / "run_tests.yaml").write_text(yaml.safe_dump(data))
    settings = load_settings(redis_url=stack.url)
    sync(
        stack.redis,
        settings.model_copy(
            update={"tools": settings.tools.model_copy(update={"manifests_dir": tmp_path})}
        ),
        NOW,
    )
    try:
        # Mother and the workers re-read the registry every tools.refresh_seconds
        time.sleep(REGISTRY_REFRESH_SECONDS + 0.5)
        run_id = stack.client.submit(example("tool-run-tests"))

        state = wait_for_person(stack, run_id)
        assert state.gate is not None and "run_tests" in state.gate.subject
        stack.client.deny(run_id, actor="ops", reason="not on this branch")
        record = stack.wait(run_id).termination
        assert record is not None and record.reason == "approval_denied"
    finally:
        sync(stack.redis, settings, NOW)
        time.sleep(REGISTRY_REFRESH_SECONDS + 0.5)
