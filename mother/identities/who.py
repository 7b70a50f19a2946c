"""Who a connection is: the principal its Redis user is (``ACL WHOAMI``, then its record), or None for
Mother's own credentials and an administrator's."""

from __future__ import annotations

from typing import Any

import redis

from mother import keys
from mother.errors import InvalidSpec
from schemas.principal import Principal

__all__ = ["may_act_on", "principal_of", "why_not"]


def may_act_on(principal: Principal, state: Any) -> bool:
    """Whether ``principal`` may decide or cancel run ``state`` (a RunState): it submits for the run's
    user (it submitted it, or acts for that user), the run or its open gate names it as an approver, or
    it is granted ``operate``. Its grants say which commands it may send at all."""
    named = set(state.spec.approvers) | set(state.gate.approvers if state.gate is not None else ())
    return (
        principal.submits_for(state.user_id) or principal.name in named or principal.may("operate")
    )


def why_not(principal: Principal, state: Any, command: str) -> str:
    """The one line a refusal of :func:`may_act_on` says."""
    return (
        f"principal {principal.name} may not {command} run {state.run_id} of user {state.user_id}: "
        "only the principal that submitted it, one acting for its user, an approver it names, or a "
        "principal granted operate may"
    )


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
