"""structlog, configured once per process.

JSON lines through orjson when stderr is not a terminal (services, CI), a
readable console renderer when it is. Bind ids with ``log.bind(run_id=...)``;
never format them into the event text.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import orjson
import structlog

__all__ = ["configure_logging", "get_logger"]

_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
}
_configured = False


def configure_logging(
    level: str = "INFO", fmt: Literal["auto", "json", "console"] = "auto", *, force: bool = False
) -> None:
    """Configure structlog for this process (idempotent unless ``force``)."""
    global _configured
    if _configured and not force:
        return
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if console:
        processors.append(structlog.dev.ConsoleRenderer())
        factory: structlog.typing.WrappedLogger = structlog.PrintLoggerFactory(sys.stderr)
    else:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ]
        factory = structlog.BytesLoggerFactory(sys.stderr.buffer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(name: str | None = None, **bound: object) -> structlog.typing.FilteringBoundLogger:
    """A logger with ``bound`` context (``component=name`` when a name is given).

    It stays a lazy proxy until first used, so module-level loggers pick up the
    configuration made later by :func:`configure_logging`.
    """
    if name:
        bound = {"component": name, **bound}
    return structlog.get_logger(**bound)
