"""The settings model: defaults, YAML, MOTHER_* environment, and unknown keys as errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mother.config import load_settings
from mother.errors import ConfigError


def test_defaults(clean_env: Path) -> None:
    """With no file and no environment every default applies."""
    cfg = load_settings()
    assert cfg.redis_url == "redis://127.0.0.1:6379/0"
    assert cfg.server.port == 6379
    assert cfg.server.appendfsync == "everysec"
    assert cfg.server.dir == cfg.data_dir / "redis"


def test_yaml_then_env_then_arguments(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """./mother.yaml is read; MOTHER_* beats it; explicit arguments beat both."""
    (clean_env / "mother.yaml").write_text(
        "redis_url: redis://10.0.0.1:6380/0\nserver:\n  port: 7000\nlog_level: DEBUG\n"
    )
    assert load_settings().server.port == 7000
    monkeypatch.setenv("MOTHER_SERVER__PORT", "7100")
    monkeypatch.setenv("MOTHER_REDIS_URL", "redis://127.0.0.1:7100/0")
    cfg = load_settings()
    assert (cfg.server.port, cfg.redis_url, cfg.log_level) == (
        7100,
        "redis://127.0.0.1:7100/0",
        "DEBUG",
    )
    assert load_settings(log_level="ERROR").log_level == "ERROR"


def test_mother_config_names_the_file(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MOTHER_CONFIG points at a YAML file elsewhere; a missing one is a clear error."""
    path = clean_env / "elsewhere.yaml"
    path.write_text("log_format: json\n")
    monkeypatch.setenv("MOTHER_CONFIG", str(path))
    assert load_settings().log_format == "json"
    monkeypatch.setenv("MOTHER_CONFIG", str(clean_env / "missing.yaml"))
    with pytest.raises(ConfigError, match="no such file"):
        load_settings()
    monkeypatch.setenv("MOTHER_CONFIG", str(clean_env))
    with pytest.raises(ConfigError, match="a directory, not a file; fix the path or unset it"):
        load_settings()
    monkeypatch.delenv("MOTHER_CONFIG")
    # was skipped without a word: the defaults ran instead
    (clean_env / "mother.yaml").mkdir()
    with pytest.raises(
        ConfigError,
        match=r"^\./mother.yaml is not a file; remove it, or name the config with MOTHER_CONFIG$",
    ):
        load_settings()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis_uri: redis://x\n", "redis_uri: unknown setting"),
        ("server:\n  prot: 1\n", "server.prot: unknown setting"),
        ("server:\n  port: 70000\n", "server.port: Input should be less than or equal to 65535"),
        ("log_level: LOUD\n", "log_level: Input should be"),
        ("- a\n- b\n", "must be a mapping"),
        (
            "redis_url: [unclosed\n",
            "not valid YAML: line 2, column 1: expected ',' or ']', but got '<stream end>'",
        ),
        ("redis_url: caf\udce9\n", "not UTF-8 text (byte 0xe9 at offset 14); save it as UTF-8"),
        (
            "service:\n  claim_idle_seconds: .inf\n",
            "service.claim_idle_seconds: Input should be a finite number",
        ),
        (
            "budget:\n  max_override_factor: .nan\n",
            "budget.max_override_factor: Input should be a finite number",
        ),
        (
            "worker:\n  queues: [agents, tool]\n",
            "worker.queues: unknown queue 'tool'; Mother-Harness enqueues on agents, tools, maintenance",
        ),
        (
            "budget:\n  profiles:\n    turbo: {tool_calls: 5}\n",
            "budget.profiles: unknown profile 'turbo'; the profiles are conservative, balanced, extended",
        ),
        (
            "budget:\n  profiles:\n    balanced: {tool_calls: -1}\n",
            "budget.profiles.balanced.tool_calls: Input should be greater than 0",
        ),
        (
            # the last one won, silently
            "service:\n  batch: 10\nlog_level: INFO\nservice:\n  batch: 20\n",
            "line 4, column 1: key 'service' appears twice (first on line 1); keep one",
        ),
    ],
)
def test_bad_yaml_is_refused(clean_env: Path, text: str, expected: str) -> None:
    """Unknown keys, wrong types and broken YAML each give one line naming the problem."""
    # \udce9: a raw byte 0xe9
    (clean_env / "mother.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert expected in info.value.message
    assert "\n" not in info.value.message


def test_unknown_environment_variable_is_refused(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MOTHER_ variable that names no setting is an error, not silently ignored."""
    monkeypatch.setenv("MOTHER_REDIS_ULR", "redis://x")
    with pytest.raises(ConfigError, match="MOTHER_REDIS_ULR names no setting"):
        load_settings()


@pytest.mark.parametrize("name", ["MOTHER_MODELS", "MOTHER_SERVICE"])
def test_environment_json_that_does_not_parse_names_the_variable(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A section or map given whole in one variable must be JSON; the error names the variable."""
    monkeypatch.setenv(name, "{bad")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.message.startswith(f"{name} is not valid JSON (Expecting property name")
    assert "\n" not in info.value.message


def test_a_profile_given_in_part_keeps_its_other_settings(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One profile setting from YAML, another from MOTHER_*: that profile's others and the other profiles stay
    shipped (a partial profile was refused as missing fields; a whole one dropped the other two profiles)."""
    (clean_env / "mother.yaml").write_text(
        "budget:\n  profiles:\n    balanced:\n      tool_calls: 3\n"
    )
    monkeypatch.setenv("MOTHER_BUDGET__PROFILES__BALANCED__WARNING_RATIO", "0.5")
    profiles = load_settings().budget.profiles
    assert profiles["balanced"].model_dump() == {
        "wall_clock_seconds": 1800,
        "tool_calls": 3,
        "token_estimate": 180_000,
        "warning_ratio": 0.5,
    }
    assert (profiles["conservative"].tool_calls, profiles["extended"].tool_calls) == (80, 360)


def test_mother_up_hands_every_mother_setting_to_its_children(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS=1000 mother up` was silently ignored: the stack dropped every
    MOTHER_* variable but MOTHER_CONFIG from its processes' environment. The stack's own Redis URL still wins."""
    from mother.stack import LocalStack

    monkeypatch.setenv("MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS", "1000")
    monkeypatch.setenv("MOTHER_REDIS_URL", "redis://elsewhere:1/0")
    env = LocalStack("redis://127.0.0.1:7/0", env={"MOTHER_LOG_LEVEL": "DEBUG"})._env()
    assert env["MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS"] == "1000"
    assert (env["MOTHER_REDIS_URL"], env["MOTHER_LOG_LEVEL"]) == ("redis://127.0.0.1:7/0", "DEBUG")


def test_files_live_under_the_data_dir_not_the_current_directory(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    cfg = load_settings()
    assert cfg.data_dir == home / "mother"
    assert (cfg.server.dir, cfg.worker.workspace_root) == (
        home / "mother" / "redis",
        home / "mother" / "workspaces",
    )
    assert not str(cfg.worker.workspace_root).startswith(str(clean_env))
    monkeypatch.setenv("MOTHER_DATA_DIR", "/var/lib/mother")
    assert load_settings().worker.workspace_root == Path("/var/lib/mother/workspaces")
    monkeypatch.setenv("MOTHER_WORKER__WORKSPACE_ROOT", "/srv/ws")
    cfg = load_settings()
    assert (cfg.worker.workspace_root, cfg.server.dir) == (
        Path("/srv/ws"),
        Path("/var/lib/mother/redis"),
    )


def test_config_show_prints_each_setting_with_its_source(clean_env: Path) -> None:
    import orjson

    from tests.conftest import run_cli

    path = clean_env / "mother.yaml"
    path.write_text("runs:\n  phase_timeout_seconds: 120\ndashboard:\n  token: s3cret\n")
    shown = run_cli(
        "config",
        "show",
        "--json",
        env={
            "MOTHER_CONFIG": str(path),
            "MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS": "50",
            "MOTHER_REDIS_URL": "redis://mother:pw@127.0.0.1:6379/0",
        },
        cwd=clean_env,
    )
    assert shown.returncode == 0, shown.stderr
    rows = orjson.loads(shown.stdout)
    assert rows["budget.global.max_concurrent_runs"] == {
        "value": 50,
        "source": "env MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS",
    }
    assert rows["runs.phase_timeout_seconds"] == {"value": 120, "source": f"file {path}"}
    assert rows["dashboard.token"]["value"] == "***" and "s3cret" not in shown.stdout
    assert "pw" not in rows["redis_url"]["value"] and rows["redis_url"]["source"].startswith("env")
    assert rows["gates.timeout_seconds"]["source"] == "default"
    unknown = run_cli("config", "show", "nope", env={"MOTHER_CONFIG": str(path)}, cwd=clean_env)
    assert unknown.returncode == 2 and "no setting is named 'nope'" in unknown.stderr


def test_a_models_section_adds_to_the_shipped_catalogue_as_the_docs_say(clean_env: Path) -> None:
    """A `models` section naming one model keeps the shipped ones it does not name; a shipped model
    named with a provider is replaced, with only some settings keeps its others. docs/runspec.md and
    docs/configuration.md say the same (they said opposite things)."""
    (clean_env / "mother.yaml").write_text(
        "models:\n"
        "  mine: {provider: openai, base_url: 'http://127.0.0.1:1/v1', model: m}\n"
        "  scripted-large: {allow_faults: true}\n"
    )
    models = load_settings().models
    assert {"mine", "scripted", "scripted-large", "ollama/qwen2.5:32b"} <= set(models)
    assert models["scripted-large"].allow_faults and models["scripted-large"].max_tokens == 131_072
    root = Path(__file__).resolve().parents[1]
    runspec = " ".join((root / "docs" / "runspec.md").read_text().split())
    configuration = " ".join((root / "docs" / "configuration.md").read_text().split())
    assert "adds to the shipped catalogue: the shipped models it does not name stay" in runspec
    assert "replaces the whole catalogue" not in runspec
    assert "keeps the shipped models it does not name" in configuration
