"""Resource budget guards: one atomic server call per action (limits, profiles, overrides, rate limit).

Counters live in RedisJSON documents: ``budget:run:{run_id}``,
``budget:user:{user_id}:daily:{YYYY-MM-DD}`` (the server's UTC date; expires
``keep_days`` after) and ``budget:global``. :class:`Guard` asks the
``mh_guard`` server function before every action; it refuses when the run has
ended, is emergency-stopped (mutating actions only), or a dimension the action
consumes is already at its hard limit, and otherwise charges run and user
counters together. LLM calls reserve their most (prompt estimate + max_tokens)
before and settle the real usage after, so parallel agents of a run cannot
jointly overshoot by more than one call (the spec's grace: an action that started
under the limit completes and is charged; the next is refused).

Dimensions (counter field → reason code):
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

import orjson
import redis

from mother import activity, keys
from mother.codes import CODES
from mother.config import ModelConfig, Settings
from mother.connection import check_durable, queue_durable
from mother.errors import (
    BudgetExhausted,
    BudgetStopped,
    InvalidSpec,
    OverrideRefused,
    PhaseStale,
    QueueFull,
    RateLimited,
)
from mother.functions import call, call_ro, fcall_command, send
from mother.limits import layer_sources
from mother.logs import get_logger
from mother.records.budgets import create_run_budget
from schemas import RunSpec, iso_from_ms
from schemas.budget import BudgetCounter, RunLimits

__all__ = [
    "MAX_AMOUNT",
    "Guard",
    "admit",
    "append_submission",
    "ask_for_child",
    "attempt_tag",
    "check_host_action",
    "check_submission",
    "emergency_stop",
    "open_run_budget",
    "override",
    "rate_check",
    "rate_limited",
    "release_reservations",
    "reset_stop",
    "run_limits",
    "settle_action",
    "spend_micro_usd",
]

__doc__ += "\n".join(f"    {dim:<18} {code}" for dim, code in CODES.items()) + "\n"
# larger is absurd for any dimension (10^12 tokens, $1,000,000 in micro-USD)
MAX_AMOUNT = 10**12
MICRO = Decimal(1_000_000)
# mh_guard's reply when the action was charged
OK_REPLY = '{"ok":true}'
TOOL_ACTIONS = {
    ro: {"read_only": ro, "check": ["tool_calls"], "add": {"tool_calls": 1}} for ro in (False, True)
}
TOOL_ACTION_NAMES = {False: "tool", True: "tool:read_only"}

log = get_logger(__name__)


def check_amount(value: Any, what: str) -> int:
    """An amount must be a non-negative integer below MAX_AMOUNT (no floats, NaN, bools)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidSpec(f"{what} must be a finite whole number, got {value!r}")
        raise InvalidSpec(f"{what} must be a whole number, got {type(value).__name__} {value!r}")
    if value < 0:
        raise InvalidSpec(f"{what} must not be negative, got {value}")
    if value > MAX_AMOUNT:
        raise InvalidSpec(f"{what} of {value} is absurd (limit {MAX_AMOUNT})")
    return value


def spend_micro_usd(model: ModelConfig, input_tokens: int, output_tokens: int) -> int:
    """Price of a call in integer micro-USD, rounded up (never a float)."""
    usd = (
        model.input_price_per_1k_usd * input_tokens + model.output_price_per_1k_usd * output_tokens
    ) / 1000
    return int((usd * MICRO).to_integral_value(rounding=ROUND_CEILING))


def run_limits(
    settings: Settings, spec: RunSpec, resolved: dict[str, Any] | None = None
) -> tuple[dict[str, int], float, dict[str, str]]:
    """The run's hard limits: profile and DefaultBudget.per_run, capped by the run's resolved
    seed-000 limits (turns → model_calls, tokens, spend, duration_seconds, spawns); and which layer
    set each (what ``mother budget show`` prints beside it)."""
    budget = settings.budget
    profile = budget.profiles[spec.budget_profile]
    per_run = budget.per_run
    limits = {
        "duration_sec": profile.wall_clock_seconds,
        "tool_calls": profile.tool_calls,
        "total_tokens": profile.token_estimate,
        "cloud_calls": per_run.max_cloud_calls,
        "model_calls": per_run.max_model_calls,
        "spend_micro_usd": int(per_run.max_spend_usd * MICRO),
        "retrieval_queries": per_run.max_retrieval_queries,
        "parallel_agents": per_run.max_parallel_agents,
        "spawns": per_run.max_spawns,
    }
    profiled = ("duration_sec", "tool_calls", "total_tokens")
    sources = {
        dim: f"budget.profiles.{spec.budget_profile}" if dim in profiled else "budget.per_run"
        for dim in limits
    }
    r = resolved or {}
    layers = layer_sources(settings, spec, r)
    named = {
        "model_calls": "turns",
        "total_tokens": "tokens",
        "spawns": "spawns",
        "duration_sec": "duration_seconds",
        "spend_micro_usd": "spend",
    }
    caps = {
        "model_calls": r.get("turns"),
        "total_tokens": r.get("tokens"),
        "spawns": r.get("spawns"),
        "duration_sec": math.ceil(r["duration_seconds"])
        if r.get("duration_seconds") is not None
        else None,
        "spend_micro_usd": int(Decimal(str(r["spend"])) * MICRO)
        if r.get("spend") is not None
        else None,
    }
    for dim, cap in caps.items():
        if cap is not None and int(cap) < limits[dim]:
            limits[dim] = int(cap)
            sources[dim] = f"{layers.get(named[dim], 'harness.limits')} ({named[dim]})"
    return limits, profile.warning_ratio, sources


def open_run_budget(
    client: redis.Redis | redis.client.Pipeline,
    settings: Settings,
    spec: RunSpec,
    started_ms: int,
    resolved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create the run's two budget documents (NX: a re-delivered start keeps the first): its counters in
    ``budget:run:{run_id}`` (the spec's BudgetCounter, charged by the guard), and what the guard enforces in
    ``limits:run:{run_id}`` (limits, overrides, warning ratio, status, stop, fence, start time and the
    user's daily limits), which only Mother and operators write. Returns the two, merged as
    :func:`budget_view` shows them."""
    assert spec.run_id is not None
    limits, ratio, sources = run_limits(settings, spec, resolved)
    started_at = iso_from_ms(started_ms)
    counters = BudgetCounter(
        run_id=spec.run_id,
        user_id=spec.user_id,
        profile=spec.budget_profile,
        started_at=started_at,
        last_updated=started_at,
        reserved={"total_tokens": 0, "spend_micro_usd": 0, "cloud_calls": 0, "model_calls": 0},
    )
    user = _user_args(settings, spec.user_id)
    enforced = RunLimits(
        run_id=spec.run_id,
        user_id=spec.user_id,
        profile=spec.budget_profile,
        warning_ratio=ratio,
        limits=limits,
        limit_sources=sources,
        started_at=started_at,
        started_ms=started_ms,
        last_updated=started_at,
        user_limits=user["user_limits"],
        user_warning_ratio=user["user_warning_ratio"],
        user_ttl_s=user["user_ttl_s"],
    )
    create_run_budget(client, counters, enforced)
    return {**counters.to_dict(), **enforced.to_dict()}


def _user_args(settings: Settings, user_id: str) -> dict[str, Any]:
    daily = settings.budget.per_user_daily
    return {
        "user_id": user_id,
        "user_limits": {
            "runs": daily.max_runs,
            "cloud_calls": daily.max_cloud_calls,
            "total_tokens": daily.max_total_tokens,
        },
        "user_ttl_s": (daily.keep_days + 1) * 86400,
        "user_warning_ratio": daily.warning_ratio,
    }


@dataclass
class Admission:
    """Intake's decision: admitted (``ok``), waiting for a slot (``ok`` and ``waiting``, at ``position``
    of the admission queue), or refused (``code``, ``details``, ``factors``)."""

    ok: bool
    code: str = ""
    details: str = ""
    factors: list[str] | None = None
    waiting: bool = False
    position: int = 0


def admit(
    client: redis.Redis | redis.client.Pipeline,
    settings: Settings,
    run_id: str,
    user_id: str,
    day: str,
    maxlen: int,
    *,
    child: bool = False,
) -> Admission | None:
    """Intake: circuit breaker (global gauges), the user's daily run cap and the admission queue, in one
    call, decided once per run. A ``child`` (a spawned run, whose parent waits on it) never waits.

    With a pipeline the call is queued (returns None); pass its reply to :func:`admission`."""
    g = settings.budget.global_
    payload = {
        "day": day,
        "run_id": run_id,
        "child": child,
        **_user_args(settings, user_id),
        "global": {
            "max_concurrent_runs": g.max_concurrent_runs,
            "max_redis_memory_mb": g.max_redis_memory_mb,
            "max_docling_jobs": g.max_docling_jobs,
            "warning_ratio": g.warning_ratio,
        },
    }
    reply = call(
        client,
        "mh_admit",
        [
            keys.GLOBAL_BUDGET,
            keys.user_daily_budget_key(user_id, day),
            keys.RUN_DEADLINES,
            activity.global_key(),
            keys.run_key(run_id),
            keys.ADMISSION_WAITING,
            keys.ADMISSION_STATE,
            keys.METRICS_COUNTERS,
            keys.run_activity_key(run_id),
        ],
        [orjson.dumps(payload), maxlen],
    )
    if isinstance(client, redis.client.Pipeline):
        return None
    return admission(client, settings, run_id, user_id, maxlen, reply, child=child)


def admission(
    client: redis.Redis,
    settings: Settings,
    run_id: str,
    user_id: str,
    maxlen: int,
    raw: str,
    *,
    child: bool = False,
) -> Admission:
    """Read mh_admit's reply; when our idea of today differed from the server's, ask again with its day."""
    reply = orjson.loads(raw)
    if "retry_day" in reply:
        again = admit(client, settings, run_id, user_id, reply["retry_day"], maxlen, child=child)
        assert again is not None
        return again
    if reply["ok"]:
        return Admission(
            True, waiting=bool(reply.get("waiting")), position=int(reply.get("position") or 0)
        )
    if reply["code"] == "circuit_open":
        return Admission(
            False,
            "circuit_open",
            "System at capacity, try again later",
            [f"{reply['gauge']} {reply['current']}/{reply['max']}"],
        )
    return Admission(
        False,
        reply["code"],
        f"Daily run limit reached for user {user_id} ({reply['current']}/{reply['max']})",
        [f"{reply['code']} ({reply['current']}/{reply['max']})"],
    )


class Guard:
    """A run's budget guard. Every method is one atomic server call. Mother makes every call: its own
    (the watchdog's clock, a summarizer's model call) and each worker host's (:meth:`asked`)."""

    def __init__(
        self,
        client: redis.Redis,
        settings: Settings,
        run_id: str,
        user_id: str,
        day: Any,
        attempt: tuple[int, int] | None = None,
        host: str | None = None,
    ) -> None:
        self.client, self.settings = client, settings
        self.run_id, self.user_id = run_id, user_id
        # a phase attempt's guard: its reservations and charges are refused once Mother has given up on
        # the attempt (the run's fence, set when it gives back what a failed or lost attempt held), and
        # (``host``: what a worker host asked) unless that host holds the attempt
        self.attempt = attempt_tag(*attempt) if attempt is not None else None
        self.host = host
        # a callable returning today's date (server clock) as YYYY-MM-DD
        self.day = day
        self.maxlen = settings.service.activity_maxlen
        self._keys = [
            keys.run_budget_key(run_id),
            "",
            activity.global_key(),
            keys.run_limits_key(run_id),
            keys.METRICS_COUNTERS,
            keys.run_activity_key(run_id),
            keys.run_key(run_id),
            # where a phase attempt's steps are recorded (mother.journal)
            *([keys.journal_key(run_id, attempt[0])] if attempt is not None else []),
        ]
        self._day = ""
        self._repeating: dict[
            str, tuple[str, tuple[Any, ...]]
            # name → (day, its whole FCALL command)
        ] = {}
        # the action last queued on a pipeline
        self._queued: tuple[dict[str, Any], str | None] = ({}, None)

    def asked(
        self, action: Any, *, step: str | None = None, ask_id: str | None = None
    ) -> dict[str, Any]:
        """A worker host's action (its ``charge`` ask; this guard is of the attempt and host it names),
        checked here and charged on the server only while the host holds the attempt (``mh_guard``'s
        ``not_held``). ``step``: the journal step it records (checked by Mother), appended in the same
        call; ``ask_id``: the ask's stream entry, so an ask applied again charges nothing twice. Returns
        the guard's reply as it is, a refusal included: the host's guard raises on it."""
        checked = self._fenced(check_host_action(action))
        if "settle" in checked:
            checked = {**checked, "attempt": self.attempt, "host": self.host}
        if step is not None:
            checked["step"] = step
        if ask_id is not None:
            checked["ask"] = ask_id
        return self._reply(self._raw(checked), checked, None, raising=False)

    def _raw(
        self,
        action: dict[str, Any],
        cache_as: str | None = None,
        pipe: redis.client.Pipeline | None = None,
        day: str | None = None,
    ) -> Any:
        day = day or self.day()
        kept = self._repeating.get(cache_as) if cache_as else None
        if kept is not None and kept[0] == day:
            command = kept[1]
        else:
            command = self._command(action, day, repeats=cache_as is not None)
            if cache_as:
                self._repeating[cache_as] = (day, command)
        return send(pipe if pipe is not None else self.client, command)

    def _call(
        self,
        action: dict[str, Any],
        cache_as: str | None = None,
        pipe: redis.client.Pipeline | None = None,
        day: str | None = None,
    ) -> dict[str, Any]:
        """One mh_guard call. ``cache_as`` names an action whose JSON never changes (but for the
        day), so the hot path builds its command once a day and sends it as it is. With ``pipe``
        the call is queued on it (returns {}); pass its reply to :meth:`queued_reply`."""
        raw = self._raw(action, cache_as, pipe, day)
        if pipe is not None:
            self._queued = (action, cache_as)
            return {}
        return self._reply(raw, action, cache_as)

    def _command(self, action: dict[str, Any], day: str, *, repeats: bool) -> tuple[Any, ...]:
        """mh_guard's command for ``action`` on ``day`` (the user's daily limits are the run's, read by the
        server from ``limits:run:{id}``: nothing the caller says raises them)."""
        # the daily key changes once a day: build it then
        if day != self._day:
            self._day = day
            self._keys[1] = keys.user_daily_budget_key(self.user_id, day)
        body = orjson.dumps({**action, "day": day})
        # "1": the text repeats, the server keeps its decoding
        args = [body, self.maxlen] + ([b"1"] if repeats else [])
        return fcall_command("mh_guard", self._keys, args)

    def queued_reply(self, raw: str) -> dict[str, Any]:
        """The reply of the call last queued on a pipeline."""
        return self._reply(raw, *self._queued)

    def _reply(
        self, raw: str, action: dict[str, Any], cache_as: str | None, *, raising: bool = True
    ) -> dict[str, Any]:
        if raw == OK_REPLY:
            return {"ok": True}
        reply: dict[str, Any] = orjson.loads(raw)
        # our idea of today differs from the server's: ask again with its day
        if "retry_day" in reply:
            again = self._raw(action, cache_as, day=reply["retry_day"])
            return self._reply(again, action, None, raising=raising)
        if raising:
            self.interpret(reply)
        return reply

    def interpret(self, reply: dict[str, Any]) -> dict[str, Any]:
        """``reply`` when the guard charged the action; else the error its refusal is."""
        if reply.get("ok"):
            return reply
        code = reply.get("code", "budget")
        if code == "budget_stopped":
            raise BudgetStopped(
                f"run {self.run_id} is emergency-stopped; mutating actions wait for `mother budget reset`",
                limit_code=code,
            )
        if code == "run_terminated":
            raise BudgetExhausted(f"run {self.run_id} has ended", limit_code=code)
        if code == "phase_stale":
            raise PhaseStale(
                f"run {self.run_id} gave up on attempt {self.attempt} (fence {reply.get('fence')}); "
                "nothing was charged"
            )
        if code == "not_held":
            raise PhaseStale(
                f"run {self.run_id}'s attempt {self.attempt} is no longer this host's (the run moved "
                "on, ended, or went to another host); nothing was charged"
            )
        if code == "invalid_action":
            raise InvalidSpec(f"budget guard refused the call: {reply.get('error')}")
        raise BudgetExhausted(
            f"{code} ({reply.get('current')}/{reply.get('max')})",
            limit_code=code,
            current=reply.get("current"),
            max=reply.get("max"),
        )

    def _fenced(self, action: dict[str, Any]) -> dict[str, Any]:
        """``action`` as this guard's attempt takes it: refused once the attempt is given up on (and, for
        a host's, unless the host holds it). Settles and releases are never fenced: they give back or
        account for what was already done."""
        if self.attempt is None:
            return action
        return {**action, "attempt": self.attempt, **({"host": self.host} if self.host else {})}

    def charge_tool(self, *, read_only: bool, step: dict[str, Any] | None = None) -> None:
        """Before a tool call: refuse at the tool-call limit (or when stopped, unless read-only);
        ``step``: the call's journal step, recorded with the charge."""
        if step is None:
            self._call(self._fenced(TOOL_ACTIONS[read_only]), cache_as=TOOL_ACTION_NAMES[read_only])
            return
        self._call(self._fenced({**TOOL_ACTIONS[read_only], "step": step}))

    def record(self, step: dict[str, Any]) -> None:
        """A journal step that charges nothing (a tool call's result), recorded while the attempt is
        this guard's."""
        self._call(self._fenced({"read_only": True, "step": step}))

    def charge(self, dimension: str, amount: int = 1, *, read_only: bool = False) -> None:
        """A generic counted action (retrieval_queries, spawns, parallel_agents, ...)."""
        if dimension not in CODES or dimension == "duration_sec":
            raise InvalidSpec(
                f"unknown budget dimension {dimension!r}; one of {', '.join(sorted(CODES))}"
            )
        self._call(
            self._fenced(
                {
                    "read_only": read_only,
                    "check": [dimension],
                    "add": {dimension: check_amount(amount, dimension)},
                }
            )
        )

    def clock(self, *, deadline: bool = False) -> None:
        """Record the run's wall clock (Mother's watchdog): its warning at the profile's ratio, its crossing at
        the limit; with ``deadline`` (the run's deadline passed) the crossing in any case. Never refused."""
        self._call({"read_only": True, "clock": "deadline" if deadline else "tick"})

    def release(self, dimension: str) -> None:
        """Give back one unit of a gauge (``parallel_agents``) charged by this run; never refused."""
        self._call({"read_only": True, "add": {dimension: -1}})

    def reserve_model_call(
        self,
        *,
        max_tokens: int,
        max_spend_micro_usd: int,
        cloud: bool,
        step: dict[str, Any] | None = None,
    ) -> str:
        """Before an LLM call: reserve its most; returns the reservation id to settle. ``step``: the
        call's journal step, recorded with the reservation."""
        tokens = check_amount(max_tokens, "max_tokens")
        spend = check_amount(max_spend_micro_usd, "max_spend_micro_usd")
        op = uuid.uuid4().hex
        check = ["model_calls", "total_tokens", "spend_micro_usd"] + (
            ["cloud_calls"] if cloud else []
        )
        add = {"model_calls": 1, **({"cloud_calls": 1} if cloud else {})}
        self._call(
            self._fenced(
                {
                    "check": check,
                    "user_check": ["total_tokens"] + (["cloud_calls"] if cloud else []),
                    "add": add,
                    "user_add": {"cloud_calls": 1} if cloud else {},
                    "reserve": {
                        "op": op,
                        "dims": {"total_tokens": tokens, "spend_micro_usd": spend},
                        "user_dims": {"total_tokens": tokens},
                    },
                    **({"step": step} if step is not None else {}),
                }
            )
        )
        return op

    def settle_model_call(
        self,
        op: str,
        *,
        input_tokens: int,
        output_tokens: int,
        spend: int,
        model: str | None = None,
        pipe: redis.client.Pipeline | None = None,
        step: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """After an LLM call: release the reservation and charge what it really used (never refused);
        ``model``: its name, for the per-model token and spend counters; ``step``: the call's journal
        step (its reply), recorded with the settle.
        Returns the run's counters after it (model_calls, input/output tokens, spend_micro_usd, duration_sec);
        with ``pipe`` the settle is queued on it (returns None)."""
        action = settle_action(
            op,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            spend=spend,
            model=model,
            step=step,
        )
        return self._call(action, pipe=pipe).get("counters")

    def reserve_call(
        self, model: ModelConfig, prompt_tokens: int, step: dict[str, Any] | None = None
    ) -> str:
        """Reserve a call to ``model``: the prompt plus its max output, in tokens and at its prices
        (``step``: its journal step)."""
        return self.reserve_model_call(
            max_tokens=prompt_tokens + model.max_output_tokens,
            cloud=model.cloud,
            max_spend_micro_usd=spend_micro_usd(model, prompt_tokens, model.max_output_tokens),
            step=step,
        )

    def settle_call(
        self,
        op: str,
        model: ModelConfig,
        input_tokens: int,
        output_tokens: int,
        pipe: redis.client.Pipeline | None = None,
        name: str | None = None,
        step: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Settle a call to ``model`` (called ``name``) with what it used, priced (queued on ``pipe`` when
        given; ``step``: its journal step)."""
        return self.settle_model_call(
            op,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            spend=spend_micro_usd(model, input_tokens, output_tokens),
            model=name,
            pipe=pipe,
            step=step,
        )


# the user's daily dimensions a host's action may check or charge
_USER_DIMS = ("total_tokens", "cloud_calls")
# what a phase charges itself (spawns, their slots and library queries Mother charges, on its asks)
_HOST_ADDS = (
    "model_calls",
    "cloud_calls",
    "tool_calls",
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "spend_micro_usd",
)


def _dims(value: Any, what: str, allowed: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict) or any(d not in allowed for d in value):
        raise InvalidSpec(f"{what} must map dimensions of {', '.join(sorted(allowed))} to amounts")
    return {d: check_amount(n, f"{what}.{d}") for d, n in value.items()}


def check_host_action(action: Any) -> dict[str, Any]:
    """A worker host's guard action, as Mother takes it: only what a phase does (check, charge, reserve
    and settle, in known dimensions, by whole amounts >= 0: a host cannot give back what it used, nor
    stamp the run's clock); anything else is refused in one line (InvalidSpec)."""
    if not isinstance(action, dict):
        raise InvalidSpec("a charge's action is a JSON object")
    unknown = set(action) - {
        "read_only",
        "check",
        "user_check",
        "add",
        "user_add",
        "reserve",
        "settle",
    }
    if unknown:
        raise InvalidSpec(f"a host's charge may not say {sorted(unknown)[0]!r}")
    run_dims = [d for d in CODES if d != "duration_sec"]
    out: dict[str, Any] = {"read_only": bool(action.get("read_only", False))}
    checks: tuple[tuple[str, Any], ...] = (("check", run_dims), ("user_check", _USER_DIMS))
    for name, allowed in checks:
        listed = action.get(name)
        if listed is not None:
            if not isinstance(listed, list) or any(d not in allowed for d in listed):
                raise InvalidSpec(f"{name} must list dimensions of {', '.join(allowed)}")
            out[name] = listed
    adds: tuple[tuple[str, Any], ...] = (("add", _HOST_ADDS), ("user_add", _USER_DIMS))
    for name, allowed in adds:
        if name in action:
            out[name] = _dims(action[name], name, allowed)
    for name in ("reserve", "settle"):
        part = action.get(name)
        if part is None:
            continue
        op = part.get("op") if isinstance(part, dict) else None
        if not isinstance(op, str) or not 1 <= len(op) <= 64:
            raise InvalidSpec(f"{name}.op must name the reservation")
        if name == "reserve":
            out[name] = {
                "op": op,
                "dims": _dims(part.get("dims"), "reserve.dims", _HOST_ADDS),
                "user_dims": _dims(part.get("user_dims"), "reserve.user_dims", _USER_DIMS),
            }
        else:
            model = part.get("model")
            out[name] = {
                "op": op,
                "add": _dims(part.get("add"), "settle.add", _HOST_ADDS),
                "user_add": _dims(part.get("user_add"), "settle.user_add", _USER_DIMS),
                **({"model": model} if isinstance(model, str) and len(model) <= 128 else {}),
            }
    return out


def settle_action(
    op: str,
    *,
    input_tokens: int,
    output_tokens: int,
    spend: int,
    model: str | None = None,
    step: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The guard's action that settles model call ``op`` with what it used (``model``: its name, for the
    per-model counters; ``step``: the call's journal step, its reply)."""
    used = check_amount(input_tokens, "input_tokens") + check_amount(output_tokens, "output_tokens")
    return {
        **({"step": step} if step is not None else {}),
        "settle": {
            "op": op,
            "add": {
                "total_tokens": used,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "spend_micro_usd": check_amount(spend, "spend"),
            },
            "user_add": {"total_tokens": used},
            **({"model": model} if model else {}),
        },
    }


def attempt_tag(phase_index: int, attempt: int) -> str:
    """A phase attempt as the budget guard names it (``index:attempt``; its fence compares them in order)."""
    return f"{phase_index}:{attempt}"


def release_reservations(
    client: redis.Redis | redis.client.Pipeline,
    settings: Settings,
    run_id: str,
    user_id: str,
    held: dict[str, Any],
    why: str,
    *,
    fence: tuple[int, int] | None = None,
) -> Any:
    """Give back what ``held`` (:func:`reservations_of`) reserves for calls whose settle will not come: the
    attempt that made them was lost or timed out, or the run ended (a horse killed mid-call left them
    standing, counted against the run's limits and the user's daily tokens for the rest of the day). One
    atomic server call (``mh_release_reservations``) over the run's document and the user's documents of
    the days they were made; a settle that still comes charges what the call used.

    ``fence`` (phase index, attempt): the attempt given up on. In the same call, the guard is told to refuse
    that attempt's reservations and charges (and earlier ones') from now on: a horse that outlived it can
    reserve nothing this give-back would miss. Returns the call's reply (None when nothing is held and
    nothing is fenced; queued on a pipeline, read it from ``execute()``)."""
    if not held and fence is None:
        return None
    days = sorted({r["at"][:10] for r in held.values() if isinstance(r.get("at"), str)})
    return call(
        client,
        "mh_release_reservations",
        [
            keys.run_budget_key(run_id),
            activity.global_key(),
            keys.run_limits_key(run_id),
            keys.run_activity_key(run_id),
            *(keys.user_daily_budget_key(user_id, d) for d in days),
        ],
        [
            settings.service.activity_maxlen,
            why[:300],
            attempt_tag(*fence) if fence is not None else "",
            *days,
        ],
    )


def audit_fields(actor: str, reason: str) -> dict[str, str]:
    """The who and why an audited budget action records: both required, neither blank."""
    for what, value in (("actor", actor), ("reason", reason)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidSpec(
                f"{what} must say {'who acts' if what == 'actor' else 'why'}; it is empty",
                field=what,
            )
    return {"actor": actor[:128], "reason": reason[:1000]}


def _state(
    client: redis.Redis,
    run_id: str,
    status: str,
    event: dict[str, Any],
    event_type: str,
    maxlen: int,
) -> dict[str, Any]:
    reply = call(
        client,
        "mh_budget_state",
        [
            keys.run_limits_key(run_id),
            activity.global_key(),
            keys.run_key(run_id),
            keys.run_budget_key(run_id),
            keys.run_activity_key(run_id),
        ],
        [status, orjson.dumps(event), maxlen, event_type],
    )
    if isinstance(reply, str) and reply.startswith("ERR"):
        raise OverrideRefused(f"run {run_id}: {reply[4:]}")
    return orjson.loads(reply)


def emergency_stop(
    client: redis.Redis, run_id: str, actor: str, reason: str, maxlen: int
) -> dict[str, Any]:
    """Set the run ``budget_stopped`` now; the event carries actor, reason, at and the counters."""
    return _state(
        client, run_id, "budget_stopped", audit_fields(actor, reason), "budget_stopped", maxlen
    )


def reset_stop(
    client: redis.Redis, run_id: str, actor: str, reason: str, maxlen: int
) -> dict[str, Any]:
    return _state(client, run_id, "active", audit_fields(actor, reason), "budget_reset", maxlen)


def override(
    client: redis.Redis,
    run_id: str,
    *,
    dimension: str,
    delta: int,
    expires_in_s: float,
    actor: str,
    reason: str,
    maxlen: int,
) -> dict[str, Any]:
    """A time-boxed, audited change of one limit; the effective limit never exceeds 2x the profile's."""
    if dimension not in CODES:
        raise OverrideRefused(f"unknown dimension {dimension!r}; one of {', '.join(sorted(CODES))}")
    if isinstance(delta, bool) or not isinstance(delta, int) or abs(delta) > MAX_AMOUNT:
        raise OverrideRefused(
            f"delta must be a whole number from -{MAX_AMOUNT} to {MAX_AMOUNT}, got {delta!r}"
        )
    if delta == 0:
        raise OverrideRefused("delta must not be 0: such an override changes no limit")
    if not (
        isinstance(expires_in_s, int | float)
        and math.isfinite(expires_in_s)
        and 1 <= expires_in_s <= 30 * 86400
    ):
        raise OverrideRefused(
            f"expires-in must be between 1 second and 30 days, got {expires_in_s!r} s"
        )
    payload = {
        "dimension": dimension,
        "delta": delta,
        **audit_fields(actor, reason),
        "expires_in_ms": int(expires_in_s * 1000),
    }
    reply = call(
        client,
        "mh_override",
        [keys.run_limits_key(run_id), activity.global_key(), keys.run_activity_key(run_id)],
        [orjson.dumps(payload), maxlen],
    )
    if isinstance(reply, str) and reply.startswith("ERR"):
        raise OverrideRefused(f"override refused for run {run_id}: {reply[4:]}")
    return orjson.loads(reply)


def rate_check(client: redis.Redis, settings: Settings, user_id: str) -> int:
    """Count one message of ``user_id``; ``RateLimited`` (429, retry_after) past the window's limit."""
    limit = settings.budget.rate_limit
    ok, value = call(
        client,
        "mh_rate",
        [keys.rate_limit_key(user_id)],
        [limit.messages, limit.window_seconds * 1000, uuid.uuid4().hex],
    )
    if not ok:
        raise rate_limited(settings, user_id, int(value))
    return int(value)


def rate_limited(settings: Settings, user_id: str, retry_ms: int) -> RateLimited:
    """The 429 for ``user_id``, who may send again in ``retry_ms``."""
    limit = settings.budget.rate_limit
    retry = max(0.001, retry_ms / 1000)
    return RateLimited(
        f"user {user_id} sent {limit.messages} messages in the last {limit.window_seconds}s; "
        f"retry after {retry:.1f}s",
        retry_after=retry,
        user_id=user_id,
    )


def append_submission(
    client: redis.Redis,
    settings: Settings,
    *,
    stream: str,
    payload: bytes,
    run_id: str,
    user_id: str,
) -> str:
    """Append a spec to ``stream`` (the submitter's own: a principal's or Mother's) after
    :func:`check_submission`. Returns the entry id."""
    check_submission(client, settings, stream=stream, run_id=run_id, user_id=user_id)
    return _text(
        _durably(client, settings, run_id, lambda pipe: pipe.xadd(stream, {"spec": payload}))
    )


def ask_for_child(
    client: redis.Redis, settings: Settings, *, payload: bytes, run_id: str, user_id: str
) -> None:
    """A phase's spawn_run, asked of Mother by its host: the child's spec appended to ``mother:spawns``
    (Mother's own stream), after :func:`check_submission` against it."""
    append_submission(
        client, settings, stream=keys.SPAWNS_STREAM, payload=payload, run_id=run_id, user_id=user_id
    )


def check_submission(
    client: redis.Redis, settings: Settings, *, stream: str, run_id: str, user_id: str
) -> None:
    """A check that changes nothing: ``InvalidSpec`` when the run_id is taken, ``QueueFull`` at the
    leading Mother's max depth, ``RateLimited`` when the user's window is full. The check is a courtesy
    (an early, exact error for the common case); Mother's intake decides, on the server, for every
    submission whatever path it came by: it claims the run_id, counts the rate window and measures the
    queue."""
    limit = settings.budget.rate_limit
    reply = call_ro(
        client,
        "mh_submit_check",
        [
            stream,
            keys.RUN_CLAIMS,
            keys.ADMISSION_WAITING,
            keys.MOTHER_CONFIG,
            keys.rate_limit_key(user_id),
        ],
        [
            run_id,
            settings.budget.global_.max_queue_depth,
            settings.service.consumer_group,
            limit.messages,
            limit.window_seconds * 1000,
        ],
    )
    verdict = _text(reply[0])
    if verdict == "run_id_taken":
        raise InvalidSpec(
            f"run_id {run_id!r} is already used (by submission {_text(reply[1])}); pick another "
            "or omit run_id",
            field="run_id",
        )
    if verdict == "queue_full":
        depth, most = int(reply[1]), int(reply[2])
        raise QueueFull(
            f"the submission queue is full ({depth}/{most} runs waiting to start); try again later",
            depth=depth,
            max=most,
        )
    if verdict == "rate_limited":
        raise rate_limited(settings, user_id, int(reply[1]))


def _durably(client: redis.Redis, settings: Settings, run_id: str, queue: Any) -> Any:
    """Send what ``queue`` queues on a pipeline, with the wait for replicas ``service.wait_replicas``
    asks; returns its first reply (an error in it raised)."""
    pipe = client.pipeline(transaction=False)
    queue(pipe)
    waited = queue_durable(pipe, settings.service)
    replies = pipe.execute(raise_on_error=not waited)
    if isinstance(replies[0], Exception):
        raise replies[0]
    if waited:
        check_durable(replies[-1], settings.service, f"submission of {run_id}", log)
    return replies[0]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
