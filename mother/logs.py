"""structlog, configured once per process.

JSON lines through orjson when stderr is not a terminal (services, CI), a
readable console renderer when it is. Bind ids with ``log.bind(run_id=...)``;
never format them into the event text.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson

if TYPE_CHECKING:
    import structlog

__all__ = ["RQLogBridge", "configure_logging", "get_logger", "route_rq_logs"]

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
    """Configure structlog for this process (idempotent unless ``force``). structlog itself is imported
    when a logger is first used (a CLI command that logs nothing never loads it: ~30 ms of its start)."""
    global _configured, _wanted
    if _configured and not force:
        return
    _wanted = (level, fmt)
    if "structlog" in sys.modules or force:
        _apply()
    _configured = True


_wanted: tuple[str, str] | None = None


def _apply() -> None:
    """Configure structlog as :func:`configure_logging` was asked (the defaults when it was not)."""
    import structlog

    level, fmt = _wanted or ("INFO", "auto")
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if console:
        processors.append(structlog.dev.ConsoleRenderer())
        factory: structlog.typing.WrappedLogger = structlog.PrintLoggerFactory(cast(Any, _Stderr()))
    else:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ]
        factory = structlog.BytesLoggerFactory(cast(Any, _StderrBytes()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )


class _Stderr:
    """Whatever ``sys.stderr`` is when a line is written (not when logging was configured): a stream
    swapped in and closed since (a test runner's, an in-process CLI call's) is never written to."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _StderrBytes:
    """:class:`_Stderr` for bytes (the JSON renderer's): the stream's buffer, or its text."""

    def write(self, data: bytes) -> int:
        stream = sys.stderr
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            return int(buffer.write(data))
        return stream.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        sys.stderr.flush()


class _Lazy:
    """A module-level logger that imports structlog (and applies the configuration) when first used."""

    __slots__ = ("_bound", "_real")

    def __init__(self, bound: dict[str, Any]) -> None:
        self._bound, self._real = bound, None

    def _logger(self) -> Any:
        if self._real is None:
            first = "structlog" not in sys.modules
            import structlog

            if first and _wanted is not None:
                _apply()
            self._real = structlog.get_logger(**self._bound)
        return self._real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger(), name)


def get_logger(name: str | None = None, **bound: object) -> Any:
    """A logger with ``bound`` context (``component=name`` when a name is given).

    It stays a lazy proxy until first used, so module-level loggers pick up the
    configuration made later by :func:`configure_logging` (and structlog loads only then)."""
    if name:
        bound = {"component": name, **bound}
    return _Lazy(bound)


# RQ's colours, which its messages carry
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class RQLogBridge(logging.Handler):
    """RQ's own log records (its worker, queue, scheduler) as our log lines: JSON like the rest of the
    process's when it logs JSON. A job that returned a failed phase attempt is not called "Job OK"."""

    def __init__(self, failed: Callable[[str], bool] | None = None) -> None:
        super().__init__()
        # job id -> whether the phase attempt it ran failed (the work-horse's verdict)
        self.failed = failed
        self.log = get_logger("rq")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = _ANSI.sub("", record.getMessage())
            fields: dict[str, object] = {"logger": record.name}
            if "Job OK" in text and self.failed is not None:
                job_id = text.rsplit("(", 1)[-1].rstrip(")")
                if self.failed(job_id):
                    text = text.replace(
                        "Job OK", "job done, phase attempt failed (reported to Mother)"
                    )
            if record.exc_info:
                fields["exc_info"] = record.exc_info
            level = record.levelname.lower()
            getattr(self.log, level if level in ("debug", "info", "warning", "error") else "info")(
                text, **fields
            )
        except Exception:  # noqa: BLE001
            self.handleError(record)


def route_rq_logs(level: str, failed: Callable[[str], bool] | None = None) -> None:
    """Send RQ's loggers (``rq.*``) through :class:`RQLogBridge` instead of RQ's own coloured stream
    handlers (RQ adds those only where no handler catches its records)."""
    rq_logger = logging.getLogger("rq")
    for handler in list(rq_logger.handlers):
        if isinstance(handler, RQLogBridge):
            rq_logger.removeHandler(handler)
    rq_logger.addHandler(RQLogBridge(failed))
    rq_logger.setLevel(_LEVELS[level])
    rq_logger.propagate = False
