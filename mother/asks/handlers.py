"""Which handler applies which kind of ask (each ``(rt, ask) -> Answer``)."""

from __future__ import annotations

from collections.abc import Callable

from mother.asks import attempts, gc, host, library, spawn, workspace
from mother.asks.answer import Answer
from mother.asks.wire import Ask
from mother.runtime import Runtime

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Callable[[Runtime, Ask], Answer]] = {
    "begin": attempts.begin,
    "alive": attempts.alive,
    "charge": attempts.charge,
    "emit": attempts.emit,
    "violation": attempts.violation,
    "tool_stat": attempts.tool_stat,
    "calibrate": attempts.calibrate,
    "result": attempts.result,
    "library": library.library,
    "spawn": spawn.spawn,
    "child": spawn.child,
    "workspace": workspace.workspace,
    "blobs": workspace.blobs,
    "store": workspace.store,
    "beat": host.beat,
    "gc": gc.gc,
}
