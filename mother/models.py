"""The model catalogue's endpoints, checked from here (``mother doctor --models``): one
``GET {base_url}/models`` each, the way an OpenAI-compatible server lists what it serves."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

import orjson

from mother import secrets
from mother.config import ModelConfig

__all__ = ["EndpointProbe", "probe_endpoint"]


@dataclass(frozen=True)
class EndpointProbe:
    reachable: bool
    # reachable and serving the model (or not saying which it serves)
    ok: bool
    detail: str


def probe_endpoint(name: str, config: ModelConfig, timeout: float = 3.0) -> EndpointProbe:
    """Whether ``name``'s endpoint answers, and whether it serves the model, in one line."""
    base = (config.base_url or "").rstrip("/")
    if not base:
        return EndpointProbe(False, False, f"no base_url: set models.{name}.base_url")
    request = urllib.request.Request(f"{base}/models")
    key = secrets.get(config.api_key_env) if config.api_key_env else ""
    if config.api_key_env and not key:
        return EndpointProbe(
            False, False, f"{config.api_key_env} (its API key) is not set in this environment"
        )
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            body = reply.read(2_000_000)
    except urllib.error.HTTPError as exc:
        # it answered: a server is there, the listing is refused or absent
        return EndpointProbe(
            True, exc.code == 404, f"{base} answered HTTP {exc.code} to GET /models"
        )
    except urllib.error.URLError as exc:
        why = exc.reason
        text = why.strerror if isinstance(why, OSError) and why.strerror else str(why)
        return EndpointProbe(False, False, f"{base} cannot be reached: {text}")
    except TimeoutError:
        return EndpointProbe(False, False, f"{base} did not answer within {timeout:g} s")
    wanted = config.model or name
    try:
        listed = [m.get("id") for m in orjson.loads(body).get("data", [])]
    except (orjson.JSONDecodeError, AttributeError):
        return EndpointProbe(True, True, f"{base} answers (its /models is not a model list)")
    if wanted in listed:
        return EndpointProbe(True, True, f"{base} serves {wanted}")
    shown = ", ".join(str(m) for m in listed[:8]) or "nothing"
    return EndpointProbe(
        True, False, f"{base} answers but does not list {wanted} (it lists {shown})"
    )
