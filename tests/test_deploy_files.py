"""The deployment files as shipped (deploy/): the image's user can write its workspace and the workers
share it, compose services have healthchecks and start after a healthy Redis, the systemd units run as
their user from the data directory after Redis with their secrets from an EnvironmentFile, and every
command and MOTHER_* variable they use exists. There is no Docker engine or systemd on the machines the
tests run on: these checks read the files and run each command's --help."""

from __future__ import annotations

import configparser
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_the_image_runs_as_a_user_that_owns_its_shared_workspace() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^USER mother$", text, re.M)
    assert "mkdir -p /var/lib/mother/workspaces && chown -R mother:mother /var/lib/mother" in text
    assert "MOTHER_DATA_DIR=/var/lib/mother" in text
    assert 'VOLUME ["/var/lib/mother/workspaces"]' in text
    services = _compose()["services"]
    ours = {name: s for name, s in services.items() if "build" in s}
    assert set(ours) == {"mother", "worker-1", "worker-2", "gc-1", "cron", "dashboard"}
    # no shared worker user: each worker service is an enrolled host of its own
    for name in ("worker-1", "worker-2", "gc-1"):
        url = ours[name]["environment"]["MOTHER_REDIS_URL"]
        assert url.startswith(f"redis://host%3A{name}:"), url
    for name, service in ours.items():
        assert "workspaces:/var/lib/mother/workspaces" in service["volumes"], name
        assert service["depends_on"]["redis"]["condition"] == "service_healthy", name
        assert service["healthcheck"]["test"][0] == "CMD", name
    assert services["redis"]["healthcheck"]["test"][:2] == ["CMD", "redis-cli"]
    assert "workspaces" in _compose()["volumes"]


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_each_systemd_unit_runs_as_its_user_after_redis_with_an_environment_file(
    unit: Path,
) -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(unit)
    service = parser["Service"]
    assert service["User"] == "mother" and service["WorkingDirectory"] == "/var/lib/mother"
    assert "redis" in parser["Unit"]["After"]
    env_file = service["EnvironmentFile"]
    assert env_file.startswith("/etc/mother/") and env_file.endswith(".env")
    example = (DEPLOY / "mother.env.example").read_text()
    # a host's file is named for its instance (%i): the example shows one for each kind of host
    shown = Path(env_file).name.replace("host-%i", "host-worker-1")
    assert f"# {shown}" in example, "the example shows that file's MOTHER_REDIS_URL"


def _commands() -> list[list[str]]:
    found = []
    for unit in UNITS:
        line = next(x for x in unit.read_text().splitlines() if x.startswith("ExecStart="))
        words = shlex.split(line.removeprefix("ExecStart="))
        found.append(words[1:])
    for service in _compose()["services"].values():
        if service.get("command", [None])[0] == "mother":
            found.append(service["command"][1:])
    return found


@pytest.mark.parametrize("args", _commands(), ids=lambda a: " ".join(a))
def test_every_shipped_command_exists_with_its_options(args: list[str]) -> None:
    # %H-%i are systemd's specifiers: any name will do
    args = [a.replace("%H", "host").replace("%i", "1") for a in args]
    done = run_cli(*args, "--help")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_shipped_mother_variable_names_a_setting(tmp_path: Path) -> None:
    from mother.config import load_settings

    names = set()
    for path in [DEPLOY / "Dockerfile", DEPLOY / "mother.env.example", *UNITS]:
        names |= set(re.findall(r"\b(MOTHER_[A-Z_]+)=", path.read_text()))
    for service in _compose()["services"].values():
        names |= {n for n in (service.get("environment") or {}) if n.startswith("MOTHER_")}
    assert "MOTHER_REDIS_URL" in names and "MOTHER_DATA_DIR" in names
    values = {"MOTHER_LOG_FORMAT": "json", "MOTHER_DATA_DIR": str(tmp_path)}
    env = {
        n: values.get(n, "redis://127.0.0.1:6379/0" if n.endswith("URL") else "t") for n in names
    }
    saved = {n: os.environ.get(n) for n in env}
    os.environ.update(env)
    try:
        load_settings()
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


def test_no_acl_rule_allows_a_first_argument_of_a_command() -> None:
    """Redis 8 warns at every ACL load that a rule like `+fcall|name` (a command's first argument) "may get
    disabled in the future": neither the shipped users nor the rules Mother makes for principals and
    hosts use one (a subcommand of a container command, `+client|setname`, is not one)."""
    from mother.identities.rules import host_rules, principal_rules
    from schemas.host import Host
    from schemas.principal import Principal

    containers = {"client", "acl", "function", "config", "module", "xinfo", "object", "memory",
                  "command", "pubsub", "script", "slowlog", "latency", "xgroup", "cluster"}  # fmt: skip
    digest = "0" * 64
    every = [
        *(DEPLOY / "users.acl").read_text().split(),
        *principal_rules(
            Principal(
                name="p",
                grants=["submit", "approve", "answer", "cancel", "operate", "inspect"],
                created_at="2026-12-06T00:00:00.000Z",
                password_sha256=digest,
            )
        ),
        *host_rules(
            Host(
                name="h",
                queues=["agents", "tools", "maintenance"],
                enrolled_at="2026-12-06T00:00:00.000Z",
                password_sha256=digest,
            )
        ),
    ]
    allowed = [rule for rule in every if rule[:1] in "+-" and "|" in rule]
    assert allowed and all(rule[1:].split("|")[0] in containers for rule in allowed), [
        r for r in allowed if r[1:].split("|")[0] not in containers
    ]
