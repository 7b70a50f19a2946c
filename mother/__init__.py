"""Mother-Harness: the Mother service and the library its parts share.

The names below are imported on first use: importing one module of the package (``mother.errors``, say,
which a sandboxed tool process imports) does not load the settings, the Redis client or the server."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str
    from mother.client import MotherClient
    from mother.config import Settings, load_settings
    from mother.connection import ServerInfo, connect, server_info
    from mother.errors import MotherError
    from mother.server import EmbeddedRedis

__all__ = [
    "EmbeddedRedis",
    "MotherClient",
    "MotherError",
    "ServerInfo",
    "Settings",
    "__version__",
    "connect",
    "load_settings",
    "server_info",
]

# public name -> the module that defines it
_LAZY = {
    "EmbeddedRedis": "mother.server",
    "MotherClient": "mother.client",
    "MotherError": "mother.errors",
    "ServerInfo": "mother.connection",
    "Settings": "mother.config",
    "connect": "mother.connection",
    "load_settings": "mother.config",
    "server_info": "mother.connection",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mother-harness")
    # running from a source tree without install
    except PackageNotFoundError:
        return "0.0.0+source"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mother' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
