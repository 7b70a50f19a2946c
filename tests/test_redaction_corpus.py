"""Redaction as people write their secrets: recall and precision on the corpus (tests/redaction_corpus.py),
Luhn for cards, context for bare phone numbers, look-alikes left alone, and overlapping matches joined so
no part of any secret stays visible."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from mother.libraries.policy import load_policy
from mother.libraries.redaction import RedactionEngine, iban, library_key, luhn
from schemas.library import DEFAULT_PATTERNS, LibraryAccessPolicy, RedactionPattern
from tests.redaction_corpus import CORPUS, HELD_OUT, INTERNATIONAL, INTERNATIONAL_HELD_OUT, score

ROOT = Path(__file__).resolve().parents[1]


def _engine(patterns: list, method: str = "mask", key: bytes = b"") -> RedactionEngine:
    policy = LibraryAccessPolicy.model_validate(
        {
            "library_id": "lib",
            "library_name": "Lib",
            "sensitivity": "private",
            "allowed_agents": ["*"],
            "allowed_models": ["*"],
            "redaction_rules": {"custom_patterns": patterns, "redaction_method": method},
        }
    )
    return RedactionEngine(policy, key)


def corpus_engine() -> RedactionEngine:
    """The five defaults and the financials example's salary pattern (read from the example's file)."""
    financials = load_policy(ROOT / "examples" / "libraries" / "financials.yaml")
    salary = [p for p in financials.redaction_rules.custom_patterns if not isinstance(p, str)]
    assert [p.pattern_id for p in salary] == ["salary"]
    return _engine([*DEFAULT_PATTERNS, *salary])


def test_the_corpus_is_big_enough_and_has_no_repeats() -> None:
    texts = [text for text, _ in CORPUS]
    assert len(texts) >= 300 and len(set(texts)) == len(texts)
    lookalikes = [text for text, secrets in CORPUS if not secrets]
    assert len(lookalikes) >= 100
    for text, secrets in CORPUS:
        for _, secret in secrets:
            assert secret in text, (text, secret)


def test_recall_and_precision_on_the_corpus() -> None:
    measured = score(corpus_engine())
    assert measured.recall() >= 0.95, measured.missed
    assert measured.precision() >= 0.95, measured.wrong
    for pattern_id in measured.secrets:
        assert measured.recall(pattern_id) >= 0.9, (pattern_id, measured.missed)
        assert measured.precision(pattern_id) >= 0.9, (pattern_id, measured.wrong)
    # on the strings the patterns were not tuned on, too
    held = score(corpus_engine(), HELD_OUT)
    assert held.recall() >= 0.95 and held.precision() >= 0.95, (held.missed, held.wrong)


@pytest.mark.parametrize("part", ["tuned", "held_out"])
def test_international_variants_recall_and_precision_per_pattern(part: str) -> None:
    """Addresses in other scripts, national phone formats without "+", account numbers as other
    languages and IBANs write them, amounts in other currencies and groupings: every pattern hides at
    least 95% of its secrets there, and at least 95% of its redactions cover a secret."""
    corpus = INTERNATIONAL if part == "tuned" else INTERNATIONAL_HELD_OUT
    measured = score(corpus_engine(), corpus)
    assert set(measured.secrets) >= {"email", "phone", "account_number", "salary", "credit_card"}
    for pattern_id in measured.secrets:
        assert measured.recall(pattern_id) >= 0.95, (pattern_id, measured.missed)
        assert measured.precision(pattern_id) >= 0.95, (pattern_id, measured.wrong)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("DE89 3704 0044 0532 0130 00", True),
        ("GB29NWBK60161331926819", True),
        ("DE00 1234 5678 9012 3456 78", False),
        ("GB29NWBK6016133192", False),
        ("12345678", True),  # not shaped like an IBAN: nothing to check
    ],
)
def test_iban_check_digits(value: str, valid: bool) -> None:
    assert iban(value) is valid


@pytest.mark.parametrize(
    ("digits", "valid"),
    [
        ("4111111111111111", True),
        ("4111111111111112", False),
        ("378282246310005", True),
        ("6011000990139424", True),
        ("0000000000000000", True),  # valid Luhn: the pattern's issuer prefixes refuse it
        ("123", False),
    ],
)
def test_luhn(digits: str, valid: bool) -> None:
    assert luhn(digits) is valid


def test_a_card_number_must_pass_luhn_and_a_bare_phone_needs_context() -> None:
    engine = _engine(["credit_card", "phone"])
    assert engine.apply("card 4111 1111 1111 1111").text == "card ****-****-****-****"
    assert engine.apply("card 4111 1111 1111 1112").redactions == []
    # a ten-digit number is a phone after "phone", "call"...; alone it is as often an ISBN or a time
    assert engine.apply("call 5551234567 now").text == "call ***-***-*** now"
    for lookalike in ("ts 1732665600", "ISBN 0306406152", "ISBN 978-0-306-40615-7"):
        assert engine.apply(lookalike).redactions == [], lookalike


def test_value_and_keep_groups_of_a_custom_pattern() -> None:
    """A ``value`` group narrows what is redacted (its context stays); a match in which a ``keep`` group
    takes part redacts nothing, and consumes the text it matched."""
    pattern = {
        "pattern_id": "badge",
        "name": "Badge",
        "regex": r"(?i)(?P<keep>test badge \d+)|badge:? (?P<value>\d{6})",
        "replacement": "######",
        "severity": "low",
    }
    engine = _engine([pattern])
    out = engine.apply("badge: 123456; test badge 654321")
    assert out.text == "badge: ######; test badge 654321"
    [one] = out.redactions
    assert (one.original_position, one.original_length) == (7, 6)


def test_an_unknown_check_is_refused_with_what_to_write() -> None:
    with pytest.raises(ValidationError, match="luhn"):
        RedactionPattern(
            pattern_id="x", name="x", regex="x", replacement="", severity="low", check="mod97"
        )


OVERLAPPING = [
    {
        "pattern_id": "badge",
        "name": "Badge",
        "regex": r"B-\d{4}",
        "replacement": "[badge]",
        "severity": "low",
    },
    {
        "pattern_id": "pin",
        "name": "PIN pair",
        "regex": r"\d{4}-4711",
        "replacement": "[pin]",
        "severity": "high",
    },
]


@pytest.mark.parametrize("method", ["mask", "remove", "hash"])
def test_overlapping_matches_hide_all_of_both(method: str) -> None:
    """ "B-1234" (badge) and "1234-4711" (pin) overlap: the mask of the one that starts first must not leave
    the end of the other visible. The union is redacted once, credited to the more severe pattern."""
    engine = _engine(OVERLAPPING, method, library_key(b"secret", "lib"))
    text = "id B-1234-4711 ok"
    out = engine.apply(text)
    assert "4711" not in out.text and "1234" not in out.text
    [one] = out.redactions
    assert (one.pattern_id, one.severity) == ("pin", "high")
    assert text[one.original_position : one.original_position + one.original_length] == (
        "B-1234-4711"
    )
    expected = {"mask": "id [pin] ok", "remove": "id  ok"}
    if method in expected:
        assert out.text == expected[method]
    else:
        assert out.text.startswith("id [pin:") and out.text.endswith("] ok")


def test_a_chain_of_overlaps_is_one_redaction_and_neighbours_stay_apart() -> None:
    engine = _engine(OVERLAPPING)
    # B-1234 overlaps 1234-4711, and nothing joins the next, which only touches a space
    out = engine.apply("B-1234-4711 B-9999")
    assert out.text == "[pin] [badge]"
    assert [(r.original_position, r.original_length) for r in out.redactions] == [(0, 11), (12, 6)]


def test_defaults_that_overlap_leave_nothing_of_either() -> None:
    """An account number that is also a card number: whichever is credited, every digit is hidden."""
    engine = _engine(list(DEFAULT_PATTERNS))
    out = engine.apply("acct 4111 1111 1111 1111 and SSN 123-45-6789")
    assert not any(ch.isdigit() for ch in out.text), out.text
