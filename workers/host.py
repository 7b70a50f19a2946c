"""The worker host this process runs as: an enrolled host (``mother hosts add NAME``), known by the ACL
user its URL names (``host:{name}``). It takes jobs from its own queues (``{name}.agents``, ``{name}.tools``,
``{name}.maintenance``) and asks Mother for every write on its own stream (:mod:`workers.asking`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mother import keys
from mother.errors import ConfigError
from workers.asking import Asker

__all__ = ["Host", "current", "identify", "set_current"]

_current: Host | None = None


@dataclass(frozen=True)
class Host:
    name: str

    def queues(self, kinds: list[str] | tuple[str, ...]) -> list[str]:
        """This host's own queues for ``kinds`` (agents, tools, maintenance)."""
        return [keys.host_queue(self.name, kind) for kind in kinds]

    def asker(self, client: Any, timeout_seconds: float) -> Asker:
        return Asker(client, self.name, timeout_seconds)


def identify(client: Any, url_shown: str) -> Host:
    """The enrolled host ``client`` is connected as (``ACL WHOAMI``), or ConfigError in one line."""
    user = client.execute_command("ACL", "WHOAMI")
    user = user.decode() if isinstance(user, bytes) else str(user)
    name = keys.host_of_user(user)
    if name is None:
        raise ConfigError(
            f"`mother worker` runs as an enrolled worker host, and {url_shown} connects as ACL user "
            f"{user!r}: enroll one with `mother hosts add NAME` (an administrator's connection) and "
            "set MOTHER_REDIS_URL to the URL it prints"
        )
    return Host(name)


def set_current(host: Host | None) -> None:
    global _current
    _current = host


def current() -> Host | None:
    """This process's host (a pool's workers and horses inherit it)."""
    return _current
