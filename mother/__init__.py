"""Mother-Harness: the Mother service and the library its parts share."""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("mother-harness")
# running from a source tree without install
except PackageNotFoundError:
    __version__ = "0.0.0+source"

from mother.config import Settings, load_settings
from mother.connection import ServerInfo, connect, server_info
from mother.errors import MotherError
from mother.server import EmbeddedRedis

if TYPE_CHECKING:
    from mother.client import MotherClient

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


def __getattr__(name: str) -> Any:
    # the client is imported on first use: a worker or Mother importing mother.* does not pay for it
    if name == "MotherClient":
        from mother.client import MotherClient

        return MotherClient
    raise AttributeError(f"module 'mother' has no attribute {name!r}")
