"""Mother-Harness configuration: one model, every default in one place.

Sources, highest precedence first:

1. keyword arguments to :func:`load_settings` (the CLI's flags),
2. ``MOTHER_*`` environment variables (nested fields with ``__``, e.g.
   ``MOTHER_SERVER__PORT=6390``),
3. a YAML file: ``MOTHER_CONFIG`` names it; otherwise ``./mother.yaml`` if present,
4. the defaults below.

Unknown keys are errors in every source, including a ``MOTHER_`` variable that
names no setting, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from mother.errors import ConfigError

__all__ = ["ServerSettings", "Settings", "config_path", "load_settings"]

ENV_PREFIX = "MOTHER_"
CONFIG_ENV = "MOTHER_CONFIG"
DEFAULT_CONFIG_FILE = "mother.yaml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ServerSettings(_Section):
    """The embedded development server started by ``mother server`` / ``mother up``."""

    port: int = Field(6379, ge=1, le=65535, description="TCP port on 127.0.0.1")
    unix_socket: Path | None = Field(None, description="listen on this socket instead of TCP")
    dir: Path = Field(Path(".mother/redis"), description="data directory (AOF, logs)")
    appendfsync: Literal["always", "everysec", "no"] = "everysec"
    modules: bool = Field(True, description="load RedisJSON and RediSearch")
    start_timeout_seconds: float = Field(15.0, gt=0, le=300)


class Settings(BaseSettings):
    """Every setting of Mother-Harness. Later parts add their sections here."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_assignment=True,
    )

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="redis:// or unix:// URL of a Redis with the JSON module",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: console on a terminal, JSON lines otherwise"
    )
    server: ServerSettings = Field(default_factory=ServerSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = config_path()
        if path is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)


def config_path() -> Path | None:
    """The YAML file in force: ``$MOTHER_CONFIG``, else ``./mother.yaml`` if it exists."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(f"{CONFIG_ENV}={named}: no such file; fix the path or unset it")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def _check_env_names() -> None:
    known = set(Settings.model_fields) | {"config"}
    for name in os.environ:
        if not name.startswith(ENV_PREFIX):
            continue
        field = name[len(ENV_PREFIX) :].lower().split("__", 1)[0]
        if field not in known:
            raise ConfigError(
                f"environment variable {name} names no setting; "
                f"known: {', '.join(sorted('MOTHER_' + k.upper() for k in known))}"
            )


def _check_yaml(path: Path) -> None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        reason = str(exc).replace("\n", " ")
        raise ConfigError(f"{path}: cannot read YAML config: {reason}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the config file must be a mapping of setting: value")


def _describe(exc: ValidationError, path: Path | None) -> str:
    where = f" (sources: {path}, MOTHER_* environment)" if path else " (source: MOTHER_* environment)"
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        msg = "unknown setting" if err["type"] == "extra_forbidden" else err["msg"]
        parts.append(f"{loc}: {msg}")
    return "invalid configuration: " + "; ".join(parts) + where


def load_settings(**overrides: Any) -> Settings:
    """Load and validate the settings; raise ``ConfigError`` with one readable line."""
    _check_env_names()
    path = config_path()
    if path is not None:
        _check_yaml(path)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None
