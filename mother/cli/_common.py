"""What every CLI command shares: settings, a checked connection, one-line errors."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import wraps
from typing import Any, NoReturn, TypeVar

import redis
from rich.console import Console
from rich.text import Text

from mother.config import Settings, load_settings
from mother.connection import connect, mother_error, redact_url
from mother.errors import MotherError
from mother.logs import configure_logging

__all__ = [
    "console",
    "data_console",
    "err_console",
    "fail",
    "handle_errors",
    "pipe_closed",
    "redis_client",
    "sandbox_notice",
    "settings",
]

# a table sent to a file or a pipe (no terminal, no COLUMNS) is this wide, not rich's 80 columns, which
# folded every cell of `mother runs > runs.txt` over several lines
PIPED_WIDTH = 200


def data_console() -> Console:
    """A console for stdout. Markup is off: what the CLI prints is mostly data (model output, details,
    actors' reasons, paths), and rich read '[/x]' in it as a tag, crashing or eating text; our own
    styling goes in style= or Text."""
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=PIPED_WIDTH if piped else None, markup=False, highlight=False)


console = data_console()
err_console = Console(stderr=True, markup=False, highlight=False)
F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Hold Ctrl-C back for the block; it is raised as it ends. For a print that a Ctrl-C may cut: rich
    clears what it printed only after writing it, so an interrupt in between made the next print repeat it."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def stop_signals() -> list[int]:
    """SIGTERM and SIGINT from now on append to the list returned, for a long-running command's loop to
    see; set first, before anything is started: a process whose parent ignores SIGINT (a test runner's,
    a job control-less shell's) inherits that, and a Ctrl-C while it starts would otherwise be lost."""
    stopping: list[int] = []

    def _on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return stopping


def fail(message: str, code: str = "error", exit_code: int = 2) -> NoReturn:
    """Print ``error[code]: message`` on stderr (one line, no traceback) and exit."""
    err_console.print(Text.assemble(("error", "bold red"), f"[{code}]: {message}"), soft_wrap=True)
    sys.exit(exit_code)


def handle_errors(func: F) -> F:
    """Turn every foreseeable failure of a command into one line on stderr."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BrokenPipeError:
            pipe_closed()
        except MotherError as exc:
            fail(exc.message, exc.code)
        except redis.RedisError as exc:
            known = mother_error(exc)
            fail(known.message, known.code)
        except KeyboardInterrupt:
            fail("interrupted", "interrupted", 130)
        except (OSError, ValueError) as exc:
            fail(
                f"{type(exc).__name__}: {exc}",
                "os_error" if isinstance(exc, OSError) else "invalid_value",
            )

    return wrapper  # type: ignore[return-value]


def pipe_closed() -> NoReturn:
    """The reader of stdout went away (``mother logs RUN --json | head -1``): end quietly, as a process
    that SIGPIPE ended (exit 141), with nothing more written (what is buffered goes to /dev/null, or
    Python's own flush at exit would print a BrokenPipeError)."""
    # a stdout with no descriptor (a test runner's) has nothing buffered for the OS to refuse
    with suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(141)


def settings(**overrides: Any) -> Settings:
    """Load the settings and configure logging from them."""
    loaded = load_settings(**{k: v for k, v in overrides.items() if v is not None})
    configure_logging(loaded.log_level, loaded.log_format)
    return loaded


def redis_client(cfg: Settings) -> redis.Redis:
    """A connection to the configured Redis, refused unless it has the JSON module."""
    return connect(cfg.redis_url)


def describe_url(cfg: Settings) -> str:
    return redact_url(cfg.redis_url)


def sandbox_notice(cfg: Settings, *, dev: bool = False) -> None:
    """Before starting workers: fail (one line) where the tool sandbox is required and cannot be made;
    print the one yellow line where tools will run unsandboxed instead (``tools.sandbox_required``
    false, or ``dev``: ``mother up --dev`` and the demo, whose workers get DEV_ENV)."""
    from workers.sandbox.state import sandbox_state

    state = sandbox_state(cfg)
    if state.state != "missing":
        return
    if cfg.tools.sandbox_required and not dev:
        fail(
            f"the tool sandbox cannot be made on this host: {state.detail}. {state.remedy}, "
            "run `mother up --dev` to run tools unsandboxed while developing, or set "
            "tools.sandbox: none",
            "sandbox_missing",
        )
    err_console.print(Text(state.warning or ""), style="yellow", soft_wrap=True)
