"""How Mother finishes an ask: what it writes, its reply and its acknowledgement go together.

For an ask about an attempt, the writes, the reply and the ``XACK``/``XDEL`` of the entry are the
follow-ups of one ``mh_held`` call: made only if the host holds the attempt, and then all at once, so an
ask is applied once whatever Mother dies when (a pending ask another Mother reclaims was not applied). A
host's own asks (beats, the GC's) and refusals go in one ``MULTI``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from mother import keys
from mother.asks.wire import REPLY_TTL_MS, Ask, refused
from mother.functions import call, follow_ups

__all__ = ["HOLDING_STATUSES", "Answer", "finish", "holds", "not_held", "ok"]


@dataclass
class Answer:
    """What an ask comes to: its ``reply`` (None: the host waits for none), the ``writes`` that apply it
    (queued on a pipeline), and whether they are made only while the host holds the attempt (``held``)."""

    reply: dict[str, Any] | None
    writes: Callable[[Any], None] | None = None
    held: bool = False
    # what is done once the ask is applied and acknowledged (a server function that cannot be one of its
    # follow-ups: lost, never doubled, should Mother die in between)
    after: Callable[[], None] | None = None


def ok(**data: Any) -> Answer:
    return Answer({"ok": True, **data})


def _queue_end(pipe: Any, ask: Ask, stream: str, group: str, reply: dict[str, Any] | None) -> None:
    if ask.reply_key is not None and reply is not None:
        pipe.lpush(ask.reply_key, orjson.dumps(reply))
        pipe.pexpire(ask.reply_key, REPLY_TTL_MS)
    pipe.xack(stream, group, ask.entry_id)
    pipe.xdel(stream, ask.entry_id)


def finish(client: Any, ask: Ask, answer: Answer, *, stream: str, group: str) -> bool:
    """Apply ``answer``: its writes, reply and the ask's acknowledgement. Returns False when the writes
    were to be held and the host no longer holds the attempt (then it is refused and acknowledged)."""
    pipe = client.pipeline(transaction=not answer.held)
    if answer.writes is not None:
        answer.writes(pipe)
    _queue_end(pipe, ask, stream, group, answer.reply)
    if not answer.held:
        pipe.execute()
        if answer.after is not None:
            answer.after()
        return True
    assert ask.attempt is not None
    run_id, index, attempt = ask.attempt
    keys_, words = follow_ups(pipe)
    pipe.reset()
    applied = call(
        client, "mh_held", [keys.run_key(run_id), *keys_], [index, attempt, ask.host, *words]
    )
    if int(applied) == 1:
        if answer.after is not None:
            answer.after()
        return True
    finish(client, ask, Answer(not_held(ask)), stream=stream, group=group)
    return False


# the run statuses in which an attempt is held (as the server functions' holds())
HOLDING_STATUSES = ("running", "budget_stopped")


def holds(client: Any, ask: Ask) -> bool:
    """Whether ``ask``'s host holds the attempt it names now: read before anything is looked up for it
    (what a refused ask's errors would say of another's run is never said). The writes of a held answer
    are made under the same check, atomically."""
    from mother.records import runs

    assert ask.attempt is not None
    run_id, index, attempt = ask.attempt
    position, host = runs.read_position_and_host(client, run_id)
    return (
        position is not None
        and position[0] in HOLDING_STATUSES
        and position[1:] == (index, attempt)
        and host == ask.host
    )


def not_held(ask: Ask) -> dict[str, Any]:
    assert ask.attempt is not None
    run_id, index, attempt = ask.attempt
    return refused(
        "not_held",
        f"host {ask.host} does not hold run {run_id}'s phase {index} attempt {attempt} (the run moved "
        "on, ended, or went to another host)",
    )
