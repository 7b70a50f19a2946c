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
    host = hosts.load(rt.redis, ask.host)
    if host is None or not host.takes("maintenance"):
        return Answer(
            refused(
                "not_maintenance",
                f"host {ask.host} is not enrolled for maintenance: the GC runs on one that is "
                "(`mother hosts add NAME --queues maintenance`)",
            )
        )
    return Answer({"ok": True, **apply(rt, str(ask.body.get("op")), ask.body)})
