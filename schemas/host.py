"""``host:{name}``: a worker host an operator enrolled. Mother knows it by its own Redis ACL user
(``host:{name}``), reads what it asks on its own stream, and queues its jobs on its own queues. No I/O."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from schemas._base import Record, Timestamp

__all__ = ["HOST_NAME_PATTERN", "HOST_QUEUE_KINDS", "Host", "HostQueue"]

HostQueue = Literal["agents", "tools", "maintenance"]
HOST_QUEUE_KINDS: tuple[HostQueue, ...] = ("agents", "tools", "maintenance")
# no dots, colons or underscores: a host's RQ keys are confined by the prefix "{name}." in ACL patterns
HOST_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"


class Host(Record):
    """An enrolled worker host: its name (its ACL user is ``host:{name}``), the kinds of job it takes,
    and its password's SHA-256 (never the password)."""

    name: Annotated[str, StringConstraints(pattern=HOST_NAME_PATTERN)]
    queues: list[HostQueue] = Field(min_length=1)
    enrolled_at: Timestamp
    rotated_at: Timestamp | None = None
    password_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="SHA-256 of its password: what Mother makes its ACL user again with (ACL SETUSER "
        "#digest) after a restart or a failover, which keep no ACL user"
    )

    def takes(self, kind: str) -> bool:
        return kind in self.queues
