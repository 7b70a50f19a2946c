"""``gc``: a step of the artifact GC, asked by a host enrolled for ``maintenance`` (its job reads what is
due; Mother applies each batch, checking each item again: :mod:`mother.artifacts.collect`)."""

from __future__ import annotations

from mother.artifacts.collect import apply
from mother.asks.answer import Answer
from mother.asks.wire import Ask, refused
from mother.identities import hosts
from mother.runtime import Runtime

__all__ = ["gc"]


def gc(rt: Runtime, ask: Ask) -> Answer:
    """One GC step of a host enrolled for maintenance, applied as of the server's clock at the latest."""
    host = hosts.load(rt.redis, ask.host)
    if host is None or not host.takes("maintenance"):
        return Answer(
            refused(
                "not_maintenance",
                f"host {ask.host} is not enrolled for maintenance: the GC runs on one that is "
                "(`mother hosts add NAME --queues maintenance`)",
            )
        )
    body = dict(ask.body)
    # what is due is due by the server's clock: a host asking as of a later time (to collect what has
    # not expired yet) collects as of now
    if isinstance(body.get("now"), int) and not isinstance(body.get("now"), bool):
        body["now"] = min(body["now"], rt.clock.now_ms())
    return Answer({"ok": True, **apply(rt, str(body.get("op")), body)})
