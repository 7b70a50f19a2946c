"""The foundation CLI: doctor, inspect, schema export, version, against real servers."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis

from mother import keys
from mother.server import EmbeddedRedis
from schemas import MODELS
from tests.conftest import run_cli


def test_doctor_passes_on_the_embedded_server(r: redis.Redis, redis_url: str) -> None:
    """doctor reports the JSON and search modules and exits 0."""
    result = run_cli("doctor", env={"MOTHER_REDIS_URL": redis_url})
    assert result.returncode == 0, result.stderr
    assert "JSON module        present" in result.stdout
    assert "search module      present" in result.stdout
    # nothing serves this server: said, as warnings (runs would wait), not failures
    assert (
        "warn mother             no Mother leads: submissions wait until one runs (`mother run`)"
        in result.stdout
    )
    assert (
        "warn agents jobs        no live host takes them: they wait (`mother hosts add`, then "
        "`mother worker`)" in result.stdout
    )
    assert "warn maintenance jobs   no live host takes them" in result.stdout


def test_doctor_refuses_a_server_without_json(tmp_path: Path) -> None:
    """The same Valkey binary without modules is refused with the one line that says what to do."""
    with EmbeddedRedis(dir=tmp_path, modules=False) as bare:
        result = run_cli("doctor", env={"MOTHER_REDIS_URL": bare.url})
        inspect = run_cli("inspect", "x", env={"MOTHER_REDIS_URL": bare.url})
    expected = f"error[redis_no_json]: Redis at {bare.url} has no JSON module: use Redis Stack / Redis 8, or `mother server`"
    assert result.returncode == 1
    assert result.stderr.strip() == expected
    assert "search module      absent" in result.stdout
    assert inspect.returncode == 2
    assert inspect.stderr.strip() == expected


def test_doctor_unreachable() -> None:
    """An unreachable Redis is one line naming the URL and the fix."""
    result = run_cli("doctor", env={"MOTHER_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert result.returncode == 1
    assert result.stderr.startswith(
        "error[redis_unavailable]: cannot reach Redis at redis://127.0.0.1:1/0"
    )
    assert len(result.stderr.strip().splitlines()) == 1


def test_inspect_pretty_prints_json_and_reports_missing(r: redis.Redis, redis_url: str) -> None:
    """inspect prints a JSON document as indented JSON; a missing key is one line, exit 2."""
    r.execute_command("JSON.SET", "termination:run-1", "$", '{"run_id":"run-1","reason":"timeout"}')
    result = run_cli("inspect", "termination:run-1", env={"MOTHER_REDIS_URL": redis_url})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"run_id": "run-1", "reason": "timeout"}
    assert '\n  "reason": "timeout"' in result.stdout
    missing = run_cli("inspect", "nope", env={"MOTHER_REDIS_URL": redis_url})
    assert missing.returncode == 2
    assert missing.stderr.startswith(
        "error[not_found]: no run and no key 'nope'; list runs with `mother runs`"
    )
    not_an_id = run_cli("inspect", "no such key", env={"MOTHER_REDIS_URL": redis_url})
    assert not_an_id.returncode == 2
    assert not_an_id.stderr.startswith("error[not_found]: key 'no such key' does not exist")


def test_inspect_shows_every_type_and_bytes_that_are_not_utf8(
    r: redis.Redis, redis_url: str
) -> None:
    """Any key someone wrote, of any type, is shown; bytes that are not UTF-8 appear as \\xNN escapes
    (inspect failed with a bare UnicodeDecodeError on them)."""
    prefix = f"inspect-{uuid.uuid4().hex[:6]}"
    r.set(f"{prefix}:blob", b"ok\xff")
    r.set(f"{prefix}:json", '{"a": [1, 2]}')
    r.hset(f"{prefix}:hash", mapping={b"k\xfe": b"v\xff", "plain": "text"})
    r.rpush(f"{prefix}:list", b"a\xff", "b")
    r.sadd(f"{prefix}:set", b"\xff", "b")
    r.zadd(f"{prefix}:zset", {b"m\xff": 2.5})
    entry = r.xadd(f"{prefix}:stream", {b"type\xff": b"x\xfe"})
    expected = {
        "blob": "ok\\xff",
        "json": {"a": [1, 2]},
        "hash": {"k\\xfe": "v\\xff", "plain": "text"},
        "list": ["a\\xff", "b"],
        "set": ["\\xff", "b"],
        "zset": [{"member": "m\\xff", "score": 2.5}],
        "stream": [{"id": entry, "type\\xff": "x\\xfe"}],
    }
    for kind, value in expected.items():
        shown = run_cli("inspect", f"{prefix}:{kind}", env={"MOTHER_REDIS_URL": redis_url})
        assert shown.returncode == 0, (kind, shown.stderr)
        assert json.loads(shown.stdout) == value, kind


def test_schema_export_writes_one_file_per_model(tmp_path: Path) -> None:
    """schema export writes a valid JSON Schema per public record."""
    result = run_cli("schema", "export", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == sorted(f"{name}.schema.json" for name in MODELS)
    schema = json.loads((tmp_path / "out" / "TerminationRecord.schema.json").read_text())
    assert schema["properties"]["reason"]["enum"][2] == "policyViolation"
    assert set(schema["required"]) >= {
        "run_id",
        "reason",
        "phase_at_termination",
        "timestamp",
        "details",
    }


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    """A config file with an unknown key stops any command with one line."""
    (tmp_path / "mother.yaml").write_text("redis_urll: x\n")
    result = run_cli("doctor", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        "error[config_invalid]: invalid configuration: redis_urll: unknown setting"
    )


def test_usage_mistakes_are_one_line_naming_the_help() -> None:
    """An unknown option or command, a value of the wrong type, a missing argument: one line, exit 2
    (click drew a box of several lines, unlike every other error); help itself is unchanged."""
    cases = {
        (
            "runs",
            "--limit",
            "0",
        ): "error[usage]: Invalid value for '--limit': Input should be greater than or equal to 1; "
        "see `mother runs --help`",
        (
            "runs",
            "--jsn",
        ): "error[usage]: No such option: --jsn (Possible options: --json, --reason, --since); see `mother runs --help`",
        ("status",): "error[usage]: Missing argument 'run_id'; see `mother status --help`",
        ("nosuch",): "error[usage]: No such command 'nosuch'; see `mother --help`",
        (
            "budget",
            "override",
            "r1",
            "--dimension",
            "tool_calls",
            "--delta",
            "x",
            "--expires-in",
            "5m",
            "--actor",
            "a",
            "--reason",
            "b",
        ): "error[usage]: Invalid value for '--delta': Input should be a valid integer, unable to parse "
        "string as an integer; see `mother budget override --help`",
        # a port past 65535 was an OverflowError traceback from bind()
        (
            "up",
            "--port",
            "99999",
        ): "error[usage]: Invalid value for '--port': Input should be less than or equal to "
        "65535; see `mother up --help`",
        (
            "server",
            "--port",
            "0",
        ): "error[usage]: Invalid value for '--port': Input should be greater than or equal to 1; "
        "see `mother server --help`",
    }
    for args, line in cases.items():
        result = run_cli(*args, env={"MOTHER_REDIS_URL": "redis://127.0.0.1:1/0"})
        assert (result.returncode, result.stderr.strip(), result.stdout) == (2, line, ""), args
    helped = run_cli("runs", "--help")
    assert helped.returncode == 0 and "--reason" in helped.stdout
    bare = run_cli("budget")
    assert bare.returncode == 2 and "override" in bare.stdout + bare.stderr


def test_version() -> None:
    """version names the package and its key dependencies."""
    result = run_cli("version")
    assert result.returncode == 0
    assert result.stdout.startswith("mother-harness ")
    assert "\nrq " in result.stdout


def test_worker_refuses_a_queue_nothing_is_enqueued_on() -> None:
    """A typo in --queues is refused at once (the worker would idle while runs time out)."""
    result = run_cli(
        "worker", "--queues", "agent,tools", env={"MOTHER_REDIS_URL": "redis://127.0.0.1:1/0"}
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "error[usage]: --queues: unknown queue 'agent'; Mother-Harness enqueues on agents, tools, maintenance"
    )


def test_wait_says_once_when_no_mother_takes_the_run_in(
    r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """submit --wait with no Mother running: one notice after a few seconds, then not_found at the timeout."""
    from mother.functions import load_functions

    load_functions(r)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "user_id: u\ntask: t\npipeline: [{name: a, role: r, model: scripted}]\n"
        "scripts: {r: [{text: done}]}\n"
    )
    result = run_cli(
        "submit",
        str(spec),
        "--wait",
        "--timeout",
        "4",
        env={"MOTHER_REDIS_URL": redis_url, "COLUMNS": "60"},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("submitted run-")
    # not folded
    assert lines[1].endswith("is not taken in after 3s; still waiting (is `mother run` running?)")
    assert lines[2].startswith("error[not_found]: no run ") and lines[2].endswith("(waited 4s)")
    assert len(lines) == 3


@pytest.mark.parametrize("timeout", ["-1", "nan", "inf"])
def test_a_wait_timeout_that_is_no_number_of_seconds_is_refused_before_anything_is_sent(
    r: redis.Redis, redis_url: str, tmp_path: Path, timeout: str
) -> None:
    """`wait --timeout nan` waited for good and `-1` reported '(waited -1s)'; `submit --wait --timeout -1`
    submitted the run, then failed. Both are refused first; so is MotherClient.wait's."""
    from mother.client import MotherClient
    from mother.config import load_settings
    from mother.errors import InvalidSpec

    spec = tmp_path / "spec.yaml"
    spec.write_text("user_id: u\ntask: t\npipeline: [{name: a, role: r, model: scripted}]\n")
    env = {"MOTHER_REDIS_URL": redis_url}
    message = f"error[invalid_spec]: timeout must be a finite number of seconds, 0 or more (omit it to wait until the run ends), got {float(timeout)!r}"
    before = r.xlen(keys.SUBMISSIONS_STREAM) if r.exists(keys.SUBMISSIONS_STREAM) else 0
    for args in (
        ("wait", "run-x", "--timeout", timeout),
        ("submit", str(spec), "--wait", "--timeout", timeout),
    ):
        result = run_cli(*args, env=env, timeout=20)
        assert (result.returncode, result.stderr.strip()) == (2, message), args
    assert (r.xlen(keys.SUBMISSIONS_STREAM) if r.exists(keys.SUBMISSIONS_STREAM) else 0) == before
    with pytest.raises(InvalidSpec, match=r"^timeout must be a finite number of seconds"):
        MotherClient(settings=load_settings(redis_url=redis_url)).wait("run-x", float(timeout))
