"""The redaction engine (seed 003 §7, RedactionEngine): a library policy's patterns, compiled with RE2
(linear in the text, whatever a policy's author writes; a pattern RE2 cannot run is refused when the
policy loads), applied before any chunk reaches a model or an artifact.

Every pattern is matched on the original text. A match redacts its group ``value`` (or ``value_<x>``)
when one takes part (the rest is context that stays: "phone: " before a number), else the whole match;
one in which a group ``keep`` (or ``keep_<x>``) takes part is a look-alike and redacts nothing (RE2 has
no lookaround: a look-alike written as an earlier alternative is consumed before the pattern sees its
digits). A pattern's ``check`` (``luhn``) must pass too. Where redactions overlap, they become one: the
union of their spans is redacted (no part of either secret stays visible), credited to the most severe
pattern (then the one that starts first, then the longer, then the earlier pattern); positions and
lengths in the record refer to the text as it was. ``mask`` puts the pattern's replacement in place,
``remove`` drops the span, ``hash`` puts ``[pattern_id:token]``, the token a keyed HMAC of the span:
the same value gives the same token within a library (joins still work), and nothing outside it can
reverse or correlate it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from mother.errors import ConfigError
from mother.tools.patterns import compile_pattern
from schemas.library import DEFAULT_PATTERNS, LibraryAccessPolicy, Redaction, RedactionPattern

__all__ = ["Redacted", "RedactionEngine", "iban", "library_key", "luhn", "policy_patterns"]

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


SEVERITY_RANK = {"low": 0, "medium": 1, "high": 2}


def luhn(digits: str) -> bool:
    """Whether ``digits`` (a card number's, 12 or more) end in a valid Luhn check digit."""
    if len(digits) < 12:
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = ord(ch) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def iban(value: str) -> bool:
    """Whether ``value`` (spaces allowed) is an IBAN with valid check digits (ISO 13616: mod 97 is 1),
    or is not shaped like one at all (an account number of digits: nothing to check)."""
    compact = value.replace(" ", "").upper()
    if not (compact[:2].isalpha() and compact[:2].isascii()):
        return True
    if not (15 <= len(compact) <= 34 and compact.isascii() and compact.isalnum()):
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


def _digits(value: str) -> str:
    return "".join(ch for ch in value if ch.isdigit())


# a phone number has 9 to 17 digits (E.164's 15, written with a 00 or a trunk prefix)
PHONE_DIGITS = (9, 17)

CHECKS = {
    "luhn": lambda value: luhn(_digits(value)),
    "phone": lambda value: PHONE_DIGITS[0] <= len(_digits(value)) <= PHONE_DIGITS[1],
    "iban": iban,
}


@dataclass(frozen=True)
class _Compiled:
    pattern: RedactionPattern
    regex: Any
    values: tuple[int, ...]  # the indexes of its value groups
    keeps: tuple[int, ...]  # of its keep groups


def _groups(regex: Any, prefix: str) -> tuple[int, ...]:
    return tuple(
        sorted(
            index
            for name, index in regex.groupindex.items()
            if name == prefix or name.startswith(f"{prefix}_")
        )
    )


class RedactionEngine:
    """A policy's patterns, compiled once."""

    def __init__(self, policy: LibraryAccessPolicy, key: bytes = b"") -> None:
        self.method = policy.redaction_rules.redaction_method
        if self.method == "hash" and not key:
            raise ConfigError(f"library {policy.library_id}: redaction_method hash needs a key")
        self.key = key
        self.patterns: list[_Compiled] = []
        for p in policy_patterns(policy):
            regex = compile_pattern(
                p.regex, f"library {policy.library_id}: redaction pattern {p.pattern_id}"
            )
            self.patterns.append(
                _Compiled(p, regex, _groups(regex, "value"), _groups(regex, "keep"))
            )

    def _replacement(self, pattern: RedactionPattern, value: str) -> str:
        if self.method == "mask":
            return pattern.replacement
        if self.method == "remove":
            return ""
        token = hmac.new(self.key, value.encode(), hashlib.sha256).hexdigest()[:TOKEN_CHARS]
        return f"[{pattern.pattern_id}:{token}]"

    def spans(self, text: str) -> list[tuple[int, int, int, RedactionPattern]]:
        """Every redaction the patterns find, before overlaps are joined: (start, end, order, pattern)."""
        found = []
        for order, c in enumerate(self.patterns):
            check = CHECKS[c.pattern.check] if c.pattern.check else None
            for match in c.regex.finditer(text):
                if any(match.start(g) >= 0 for g in c.keeps):
                    continue
                start, end = match.start(), match.end()
                for g in c.values:
                    if match.start(g) >= 0:
                        start, end = match.span(g)
                        break
                if end > start and (check is None or check(text[start:end])):
                    found.append((start, end, order, c.pattern))
        return found

    def apply(self, text: str) -> Redacted:
        if not self.patterns:
            return Redacted(text, [])
        found = sorted(self.spans(text), key=lambda f: (f[0], f[0] - f[1], f[2]))
        # overlapping spans joined: [start, end, the credited one's (rank, start, -length, order), pattern]
        joined: list[list[Any]] = []
        for start, end, order, pattern in found:
            rank = (-SEVERITY_RANK[pattern.severity], start, start - end, order)
            if joined and start < joined[-1][1]:
                last = joined[-1]
                last[1] = max(last[1], end)
                if rank < last[2]:
                    last[2], last[3] = rank, pattern
            else:
                joined.append([start, end, rank, pattern])
        pieces: list[str] = []
        redactions: list[Redaction] = []
        cursor = 0
        for start, end, _rank, pattern in joined:
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
