"""The credentials a service was started with, kept in its memory and out of its environment.

A worker is started with its Redis URL (and password), the libraries' hash key and the models' API
keys in its environment, and every process it starts would inherit them. At start, once its settings
are loaded, a service calls :func:`take`: every ``MOTHER_*`` variable and every model's
``api_key_env`` moves out of ``os.environ`` into this module, and what needs a key asks :func:`get`.
The tools' sandboxes get an allowlisted environment anyway; this keeps the rest of what a worker
starts (and a forked work-horse's ``os.environ``) clean too.

What it cannot do: ``/proc/PID/environ`` of the service shows the environment it was started with
(the kernel keeps that copy), readable by the same user and root only; no tool runs as that user in
its sandbox, and the sandbox's PID namespace shows no process of the host.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["get", "take", "taken"]

_kept: dict[str, str] = {}


def _names(settings: Any) -> set[str]:
    names = {name for name in os.environ if name.startswith("MOTHER_")}
    names |= {m.api_key_env for m in settings.models.values() if m.api_key_env}
    return names


def take(settings: Any) -> list[str]:
    """Move this process's credentials (``MOTHER_*``, the models' API keys) out of its environment;
    the names taken, sorted. Call it once the settings are loaded: they are not read again."""
    for name in _names(settings):
        if name in os.environ:
            _kept[name] = os.environ.pop(name)
    return sorted(_kept)


def get(name: str) -> str:
    """A credential by its environment variable's name (taken at start, else the environment's)."""
    return _kept.get(name) or os.environ.get(name, "")


def taken() -> frozenset[str]:
    return frozenset(_kept)
