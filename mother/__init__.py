"""Mother-Harness: the Mother service and the library its parts share."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mother-harness")
# running from a source tree without install
except PackageNotFoundError:
    __version__ = "0.0.0+source"

from mother.config import Settings, load_settings
from mother.connection import ServerInfo, connect, server_info
from mother.errors import MotherError
from mother.server import EmbeddedRedis

__all__ = [
    "EmbeddedRedis",
    "MotherError",
    "ServerInfo",
    "Settings",
    "__version__",
    "connect",
    "load_settings",
    "server_info",
]
