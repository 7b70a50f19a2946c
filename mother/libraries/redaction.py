"""The redaction engine (seed 003 §7, RedactionEngine): a library policy's patterns, compiled with RE2
(linear in the text, whatever a policy's author writes; a pattern RE2 cannot run is refused when the
policy loads), applied before any chunk reaches a model or an artifact.

Every pattern is matched on the original text; where matches overlap, the one that starts first wins
(then the longer, then the earlier pattern), so positions and lengths in the record refer to the text
as it was. ``mask`` puts the pattern's replacement in place, ``remove`` drops the match, ``hash`` puts
``[pattern_id:token]``, the token a keyed HMAC of the match: the same value gives the same token within
a library (joins still work), and nothing outside it can reverse or correlate it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from mother.errors import ConfigError
from mother.tools.patterns import compile_pattern
from schemas.library import DEFAULT_PATTERNS, LibraryAccessPolicy, Redaction, RedactionPattern

__all__ = ["Redacted", "RedactionEngine", "library_key", "policy_patterns"]

DEFAULTS = {p.pattern_id: p for p in DEFAULT_PATTERNS}
TOKEN_CHARS = 12


def library_key(master: bytes, library_id: str) -> bytes:
    """The library's own HMAC key, derived from the deployment's secret."""
    return hmac.new(master, f"library:{library_id}".encode(), hashlib.sha256).digest()


def policy_patterns(policy: LibraryAccessPolicy) -> list[RedactionPattern]:
    """The patterns a policy applies: none without pii_detection; its custom ones (a default's id names
    it), or the five defaults when it lists none."""
    rules = policy.redaction_rules
    if not rules.pii_detection:
        return []
    if not rules.custom_patterns:
        return list(DEFAULT_PATTERNS)
    out = []
    for item in rules.custom_patterns:
        if isinstance(item, str):
            found = DEFAULTS.get(item)
            if found is None:
                raise ConfigError(
                    f"library {policy.library_id}: no default redaction pattern {item!r}; "
                    f"the defaults: {', '.join(DEFAULTS)}"
                )
            out.append(found)
        else:
            out.append(item)
    return out


@dataclass(frozen=True)
class Redacted:
    text: str
    redactions: list[Redaction]

    @property
    def redaction_count(self) -> int:
        return len(self.redactions)


class RedactionEngine:
    """A policy's patterns, compiled once."""

    def __init__(self, policy: LibraryAccessPolicy, key: bytes = b"") -> None:
        self.method = policy.redaction_rules.redaction_method
        if self.method == "hash" and not key:
            raise ConfigError(f"library {policy.library_id}: redaction_method hash needs a key")
        self.key = key
        self.patterns: list[tuple[RedactionPattern, Any]] = [
            (
                p,
                compile_pattern(
                    p.regex, f"library {policy.library_id}: redaction pattern {p.pattern_id}"
                ),
            )
            for p in policy_patterns(policy)
        ]

    def _replacement(self, pattern: RedactionPattern, value: str) -> str:
        if self.method == "mask":
            return pattern.replacement
        if self.method == "remove":
            return ""
        token = hmac.new(self.key, value.encode(), hashlib.sha256).hexdigest()[:TOKEN_CHARS]
        return f"[{pattern.pattern_id}:{token}]"

    def apply(self, text: str) -> Redacted:
        if not self.patterns:
            return Redacted(text, [])
        found = []
        for order, (pattern, regex) in enumerate(self.patterns):
            for match in regex.finditer(text):
                start, end = match.start(), match.end()
                if end > start:
                    found.append((start, -(end - start), order, end, pattern))
        found.sort(key=lambda f: (f[0], f[1], f[2]))
        pieces: list[str] = []
        redactions: list[Redaction] = []
        cursor = 0
        for start, _neg, _order, end, pattern in found:
            if start < cursor:
                continue
            pieces.append(text[cursor:start])
            pieces.append(self._replacement(pattern, text[start:end]))
            redactions.append(
                Redaction(
                    pattern_id=pattern.pattern_id,
                    original_position=start,
                    original_length=end - start,
                    severity=pattern.severity,
                )
            )
            cursor = end
        pieces.append(text[cursor:])
        return Redacted("".join(pieces), redactions)
