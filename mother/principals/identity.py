"""Who a connection is: the principal its Redis user is (``ACL WHOAMI``, then its record), or None for
Mother's own credentials and an administrator's."""

from __future__ import annotations

from typing import Any

import redis

from mother import keys
from mother.errors import InvalidSpec
from schemas.principal import Principal

__all__ = ["principal_of"]


def principal_of(client: Any) -> Principal | None:
    """The principal ``client`` is connected as (one round trip each for the name and the record)."""
    name = client.execute_command("ACL", "WHOAMI")
    name = name.decode() if isinstance(name, bytes) else str(name)
    if not keys.is_id(name) or name != name.lower():
        return None
    try:
        raw = client.execute_command("JSON.GET", keys.principal_key(name))
    # not a principal's name, or a service user that may not read principals' records
    except (redis.exceptions.NoPermissionError, InvalidSpec):
        return None
    return Principal.model_validate_json(raw) if raw else None
