"""What worker hosts ask of Mother, and how Mother applies it: every write a phase, a tool job or the GC
causes is an ask on its host's own stream (:mod:`~mother.asks.wire`), applied by any Mother with its own
credentials once the host is found to hold the attempt it asks about (:mod:`~mother.asks.server`, one
handler per kind: :mod:`~mother.asks.handlers`)."""

from mother.asks.server import AskServer
from mother.asks.wire import Ask, AskInvalid, ask_fields, parse_ask

__all__ = ["Ask", "AskInvalid", "AskServer", "ask_fields", "parse_ask"]
