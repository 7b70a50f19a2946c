"""Token counting behind one interface, and the estimate's calibration from real usage.

A model of the catalogue is counted with

- its own tokenizer when ``models.NAME.tokenizer`` names a ``tokenizer.json`` (the HF
  ``tokenizers`` library, offline): exact;
- else the **estimate**: one token per 3 bytes of UTF-8. Common tokenizers average about
  4 bytes per token on English prose and about 3 on code, so the raw estimate errs on the
  side of counting too many, never too few. It then calibrates itself: every model call a
  worker makes adds the raw estimate of the request's messages (what Mother's context check
  counts; its tool schemas are left out, as some servers' chat templates drop them) and the
  ``prompt_tokens`` the provider reported to ``tokens:calibration:{model}`` (HINCRBY, atomic
  across workers); once ``context.calibration_min_samples`` reports are in, the estimate is
  multiplied by reported / estimated, never below half (RATIO_BOUNDS), so it converges to what
  the provider really counts without undercounting.

tiktoken is not used: its encodings are downloaded on first use, which these machines
cannot do; a model with an OpenAI tokenizer is counted by the estimate (calibrated).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import orjson

from mother import keys
from mother.config import ModelConfig, Settings
from mother.errors import ConfigError

__all__ = [
    "BYTES_PER_TOKEN",
    "Calibration",
    "EstimateCounter",
    "TokenCounter",
    "TokenizerCounter",
    "counter_for",
    "raw_estimate",
    "request_estimate",
    "request_texts",
]

BYTES_PER_TOKEN = 3.0
# a calibration outside these is a broken report, not a tokenizer: it never takes off more than half
# of the estimate (common tokenizers count 3 to 6 bytes a token), so the context check cannot undercount
# by trusting a server that counted less than it was sent (a chat template that drops tool schemas)
RATIO_BOUNDS = (0.5, 5.0)


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def raw_estimate(text: str) -> int:
    """The uncalibrated estimate: ceil(UTF-8 bytes / 3)."""
    return math.ceil(_utf8_len(text) / BYTES_PER_TOKEN)


def request_texts(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[str]:
    """What a model tokenizes in a chat request: the message texts and tool calls, and the tool specs."""
    parts = []
    for message in messages:
        if message.get("content"):
            parts.append(str(message["content"]))
        for call in message.get("tool_calls") or ():
            parts.append(call["function"]["name"] + call["function"]["arguments"])
    return ["\n".join(parts), *([orjson.dumps(list(tools)).decode()] if tools else [])]


def request_estimate(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    """The raw estimate of what a model tokenizes in a chat request (:func:`request_texts`).

    This is what calibration compares with the provider's ``prompt_tokens`` (which also counts
    the chat template's few tokens per message, so the ratio leans conservative).
    """
    return sum(raw_estimate(text) for text in request_texts(messages, tools))


class TokenCounter(Protocol):
    name: str
    exact: bool

    def count(self, text: str) -> int: ...

    def count_many(self, texts: Sequence[str]) -> list[int]: ...


class EstimateCounter:
    """The conservative estimate, scaled by the model's calibrated ratio (1.0 until calibrated)."""

    exact = False

    def __init__(self, ratio: float = 1.0) -> None:
        self.ratio = ratio
        self.name = "estimate" if ratio == 1.0 else f"estimate(calibrated x{ratio:.3f})"

    def count(self, text: str) -> int:
        return math.ceil(_utf8_len(text) / BYTES_PER_TOKEN * self.ratio) if text else 0

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]


class TokenizerCounter:
    """A model's own tokenizer (``tokenizer.json``), through the ``tokenizers`` library."""

    exact = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = f"tokenizer:{path.name}"
        self._tokenizer = _load_tokenizer(str(path))

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids) if text else 0

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [
            len(e.ids) for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        ]


@lru_cache(maxsize=32)
def _load_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(Path(path).expanduser()))
    # the library raises a bare Exception for unreadable files
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(
            f"tokenizer {path}: cannot load it ({str(exc)[:200]}); point models.NAME.tokenizer at a "
            "tokenizer.json or remove it to use the estimate"
        ) from None


class Calibration:
    """The per-model running ratio reported / estimated, read from Redis at most every ``ttl`` seconds."""

    def __init__(self, client: Any, min_samples: int = 3, ttl: float = 5.0) -> None:
        self.client, self.min_samples, self.ttl = client, min_samples, ttl
        self._cache: dict[str, tuple[float, float]] = {}

    def ratio(self, model: str) -> float:
        cached = self._cache.get(model)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self.ttl:
            return cached[0]
        estimated, reported, samples = self.client.hmget(
            keys.token_calibration_key(model), "estimated", "reported", "samples"
        )
        ratio = ratio_from(estimated, reported, samples, self.min_samples)
        self._cache[model] = (ratio, now)
        return ratio

    @staticmethod
    def record(client: Any, model: str, estimated: int, reported: int) -> None:
        """Add one call's raw estimate and reported prompt tokens (one round trip, atomic)."""
        if estimated <= 0 or reported <= 0:
            return
        pipe = client.pipeline(transaction=True)
        Calibration.queue_record(pipe, model, estimated, reported)
        pipe.execute()

    @staticmethod
    def queue_record(pipe: Any, model: str, estimated: int, reported: int) -> None:
        """Queue :meth:`record`'s writes on ``pipe``."""
        key = keys.token_calibration_key(model)
        pipe.hincrby(key, "estimated", estimated)
        pipe.hincrby(key, "reported", reported)
        pipe.hincrby(key, "samples", 1)


def ratio_from(estimated: Any, reported: Any, samples: Any, min_samples: int) -> float:
    if not estimated or not reported or int(samples or 0) < min_samples:
        return 1.0
    ratio = int(reported) / int(estimated)
    return min(max(ratio, RATIO_BOUNDS[0]), RATIO_BOUNDS[1])


def counter_for(
    settings: Settings, model: str, calibration: Calibration | None = None
) -> TokenCounter:
    """The counter for a catalogue model: its tokenizer, else the (calibrated) estimate."""
    config: ModelConfig = settings.models[model]
    if config.tokenizer is not None:
        return TokenizerCounter(config.tokenizer)
    return EstimateCounter(calibration.ratio(model) if calibration is not None else 1.0)
