"""Library access control, the parts built so far: the controller's decision table (agent, model,
justification), policy loading (RE2 refusing a backtracking pattern), and the redaction engine's
default patterns on true and false positives (including what the spec's damaged regexes miss),
its methods and its records."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mother.errors import ConfigError
from mother.libraries import RedactionEngine, decide, load_policy
from mother.libraries.redaction import library_key
from schemas.library import DEFAULT_PATTERNS, LibraryAccessPolicy

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "libraries"


def _policy(**changes: object) -> LibraryAccessPolicy:
    base: dict[str, object] = {
        "library_id": "lib",
        "library_name": "Lib",
        "sensitivity": "private",
        "allowed_agents": ["research", "analyst"],
        "denied_agents": ["vision"],
        "cloud_models_allowed": False,
        "allowed_models": ["qwen2.5:14b", "qwen2.5:32b-cloud"],
        "denied_models": ["qwen2.5:7b"],
    }
    return LibraryAccessPolicy.model_validate({**base, **changes})


@pytest.mark.parametrize(
    ("changes", "role", "model", "cloud", "justification", "expect"),
    [
        # agents: allowlist, deny wins over allow and over *, * allows
        ({}, "research", "qwen2.5:14b", False, None, None),
        ({}, "coder", "qwen2.5:14b", False, None, "Agent 'coder' not allowed"),
        (
            {"denied_agents": ["research"]},
            "research",
            "qwen2.5:14b",
            False,
            None,
            "Agent 'research'",
        ),
        ({"allowed_agents": ["*"]}, "coder", "qwen2.5:14b", False, None, None),
        ({"allowed_agents": ["*"]}, "vision", "qwen2.5:14b", False, None, "Agent 'vision'"),
        (
            {"allowed_agents": ["*"], "denied_agents": ["*"]},
            "coder",
            "qwen2.5:14b",
            False,
            None,
            "Agent",
        ),
        # models: the catalogue's cloud flag, not the name
        ({}, "research", "qwen2.5:32b-cloud", True, None, "a cloud model"),
        ({"cloud_models_allowed": True}, "research", "qwen2.5:32b-cloud", True, None, None),
        ({"allowed_models": ["*"]}, "research", "local-but-named-cloud", False, None, None),
        ({}, "research", "qwen2.5:7b", False, None, "Model 'qwen2.5:7b'"),
        ({"allowed_models": ["*"]}, "research", "qwen2.5:7b", False, None, "Model"),
        ({}, "research", "llama3", False, None, "Model 'llama3'"),
        (
            {"cloud_models_allowed": True, "allowed_models": ["*"], "denied_models": ["*"]},
            "research",
            "big",
            True,
            None,
            "Model 'big'",
        ),
        (
            {"cloud_models_allowed": True, "allowed_models": ["*"], "denied_models": ["*"]},
            "research",
            "small",
            False,
            None,
            None,
        ),
        # justification
        (
            {"audit": {"require_justification": True}},
            "research",
            "qwen2.5:14b",
            False,
            None,
            "justification",
        ),
        (
            {"audit": {"require_justification": True}},
            "research",
            "qwen2.5:14b",
            False,
            "  ",
            "justification",
        ),
        (
            {"audit": {"require_justification": True}},
            "research",
            "qwen2.5:14b",
            False,
            "Q3 audit",
            None,
        ),
    ],
)
def test_the_controllers_decision_table(
    changes: dict, role: str, model: str, cloud: bool, justification: str | None, expect: str | None
) -> None:
    decision = decide(
        _policy(**changes), role=role, model=model, cloud=cloud, justification=justification
    )
    if expect is None:
        assert decision.allowed and decision.policy_applied == "lib" and decision.reason is None
    else:
        assert not decision.allowed and expect in decision.details
        assert decision.reason == (
            "noJustification" if expect == "justification" else "policyViolation"
        )


def test_a_cloud_rule_by_name_is_refused() -> None:
    with pytest.raises(ValueError, match="catalogue's `cloud` flag"):
        _policy(denied_models=["*-cloud"])


@pytest.mark.parametrize(
    ("pattern_id", "hits", "misses"),
    [
        (
            "ssn",
            ["123-45-6789", "SSN: 078-05-1120."],
            ["123-456-789", "2026-11-24", "1234-56-7890", "a123-45-6789"],
        ),
        (
            "credit_card",
            ["4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111"],
            ["4111 1111 1111", "41111111111111112", "1.2.3.4"],
        ),
        (
            "email",
            ["jane.doe@example.com", "a+b@mail.example.co.uk", "X_Y%z@ex-ample.org"],
            ["user@localhost", "@example.com", "jane.doe@", "not an email"],
        ),
        (
            # the spec's "(?\d{3}?)?" is not a pattern at all: a parenthesised area code is what it meant
            "phone",
            [
                "(555) 123-4567",
                "(555)123-4567",
                "555-123-4567",
                "555.123.4567",
                "555 123 4567",
                "5551234567",
            ],
            ["123-45-6789", "2026-11-24", "555-1234", "12345", "v1.2.3"],
        ),
        (
            "account_number",
            [
                "Account 12345678",
                "account #123456789012",
                "ACCOUNT: 1234567890",
                "Account number: 123456789",
            ],
            ["Account 1234567", "accounting 12345678", "account holder"],
        ),
    ],
)
def test_each_default_pattern_on_true_and_false_positives(
    pattern_id: str, hits: list[str], misses: list[str]
) -> None:
    policy = _policy(redaction_rules={"custom_patterns": [pattern_id]})
    engine = RedactionEngine(policy)
    for text in hits:
        redacted = engine.apply(f"before {text} after")
        assert [r.pattern_id for r in redacted.redactions] == [pattern_id], text
        assert text not in redacted.text and redacted.text.startswith("before ")
    for text in misses:
        assert engine.apply(f"before {text} after").redactions == [], text


def test_redaction_records_positions_and_methods() -> None:
    text = "Mail jane@example.com or call (555) 123-4567; SSN 123-45-6789; mail jane@example.com"
    masked = RedactionEngine(_policy()).apply(text)
    assert masked.text == "Mail ***@**.*** or call ***-***-***; SSN ***-***-***; mail ***@**.***"
    assert [
        (r.pattern_id, r.original_position, r.original_length, r.severity)
        for r in masked.redactions
    ] == [
        ("email", 5, 16, "medium"),
        ("phone", 30, 14, "medium"),
        ("ssn", 50, 11, "high"),
        ("email", text.rindex("jane@"), 16, "medium"),
    ]
    for r in masked.redactions:
        assert text[r.original_position : r.original_position + r.original_length] in (
            "jane@example.com",
            "(555) 123-4567",
            "123-45-6789",
        )
    removed = RedactionEngine(_policy(redaction_rules={"redaction_method": "remove"})).apply(text)
    assert removed.text == "Mail  or call ; SSN ; mail " and removed.redaction_count == 4
    hashed_policy = _policy(redaction_rules={"redaction_method": "hash"})
    key = library_key(b"deployment secret", "lib")
    hashed = RedactionEngine(hashed_policy, key).apply(text)
    tokens = [part for part in hashed.text.split() if part.startswith("[email:")]
    assert len(tokens) == 2 and tokens[0] == tokens[1]  # the same value, the same token
    other = RedactionEngine(hashed_policy, library_key(b"deployment secret", "other")).apply(text)
    assert other.text != hashed.text  # another library, another token
    with pytest.raises(ConfigError, match="needs a key"):
        RedactionEngine(hashed_policy)
    assert (
        RedactionEngine(_policy(redaction_rules={"pii_detection": False})).apply(text).text == text
    )


def test_policy_files_load_and_re2_refuses_a_backtracking_pattern(tmp_path: Path) -> None:
    loaded = {p.stem: load_policy(p) for p in sorted(EXAMPLES.glob("*.yaml"))}
    assert set(loaded) == {"public_research", "financials", "personal"}
    fin = RedactionEngine(loaded["financials"])
    redacted = fin.apply("Pay $123,456.78 to account #123456789 for 123-45-6789; jane@example.com")
    assert [r.pattern_id for r in redacted.redactions] == ["salary", "account_number", "ssn"]
    data = yaml.safe_load((EXAMPLES / "personal.yaml").read_text())
    data["redaction_rules"]["custom_patterns"] = [
        {
            "pattern_id": "dup",
            "name": "Doubled word",
            "regex": r"\b(\w+) \1\b",
            "replacement": "x",
            "severity": "low",
        }
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="redaction pattern dup") as err:
        load_policy(bad)
    assert "RE2" in err.value.message and "\n" not in err.value.message
    data["redaction_rules"]["custom_patterns"] = ["nope"]
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="no default redaction pattern 'nope'"):
        load_policy(bad)
    # linear: a pattern that explodes a backtracking engine runs at once
    data["redaction_rules"]["custom_patterns"] = [
        {
            "pattern_id": "evil",
            "name": "e",
            "regex": "(a+)+$",
            "replacement": "x",
            "severity": "low",
        }
    ]
    bad.write_text(yaml.safe_dump(data))
    assert RedactionEngine(load_policy(bad)).apply("a" * 50_000 + "b").redactions == []
    assert len(DEFAULT_PATTERNS) == 5


def test_library_cli_checks_a_policy_and_redacts(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    ok = run_cli("library", "check", str(EXAMPLES / "financials.yaml"))
    assert ok.returncode == 0 and "library financials (confidential) is valid" in ok.stdout
    shown = run_cli(
        "library", "redact", str(EXAMPLES / "personal.yaml"), "--text", "mail a@b.io", "--json"
    )
    assert shown.returncode == 0
    import orjson

    out = orjson.loads(shown.stdout)
    assert out["text"] == "mail ***@**.***" and out["redactions"][0]["pattern_id"] == "email"
    bad = tmp_path / "bad.yaml"
    bad.write_text("library_id: x\nlibrary_name: X\nsensitivity: secret\n")
    refused = run_cli("library", "check", str(bad))
    assert refused.returncode == 2 and "sensitivity" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
