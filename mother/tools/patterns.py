"""User regexes (a tool's ``handles_patterns``), compiled with RE2: linear time in the text, so no
pattern a user writes can stall Mother, and a pattern RE2 cannot run (backreferences, lookaround) is
refused when it is synced, with the reason.

A pattern is written plain (``run.*tests``) or as the spec writes them, ``/run.*tests/i``; the flags
``i`` (ignore case), ``m`` (multi-line) and ``s`` (dot matches newline) become RE2's inline flags.
"""

from __future__ import annotations

from typing import Any

import re2

from mother.errors import ConfigError

__all__ = ["compile_pattern", "pattern_options", "pattern_source"]

_FLAGS = {"i", "m", "s"}


def pattern_options() -> Any:
    """RE2's options for user patterns."""
    options = re2.Options()
    # the refusal is raised to the caller; RE2 would also print it to stderr
    options.log_errors = False
    return options


_OPTIONS = pattern_options()


def pattern_source(pattern: str) -> str:
    """The RE2 source of a plain or ``/.../flags`` pattern."""
    if len(pattern) >= 2 and pattern.startswith("/"):
        end = pattern.rfind("/")
        if end > 0:
            body, flags = pattern[1:end], pattern[end + 1 :]
            unknown = set(flags) - _FLAGS
            if unknown:
                raise ConfigError(
                    f"pattern {pattern!r}: unknown flag {''.join(sorted(unknown))!r}; use i, m or s"
                )
            return f"(?{''.join(sorted(set(flags)))}){body}" if flags else body
    return pattern


def compile_pattern(pattern: str, where: str = "pattern") -> Any:
    """``pattern`` compiled with RE2, or ConfigError naming it and why RE2 refused it."""
    source = pattern_source(pattern)
    try:
        return re2.compile(source, _OPTIONS)
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        raise ConfigError(
            f"{where}: {pattern!r} is not a pattern RE2 runs ({why}); RE2 has no backreferences or "
            "lookaround, which is what keeps matching linear"
        ) from None
