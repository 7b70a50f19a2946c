"""Library access control, the parts built so far: the controller's decision table (agent, model,
justification), policy loading (RE2 refusing a backtracking pattern), and the redaction engine's
default patterns on true and false positives (including what the spec's damaged regexes miss),
its methods and its records."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from mother.errors import ConfigError
from mother.libraries import RedactionEngine, decide, load_policy
from mother.libraries.redaction import library_key
from schemas.library import DEFAULT_PATTERNS, LibraryAccessPolicy
from tests.conftest import wait_for_person
from tests.test_pipeline import wait_until

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
                "phone 5551234567",
                "+1 (555) 123-4567",
            ],
            # bare ten digits are ISBN-10s and Unix times as often as phones: only after "phone", "call"...
            [
                "123-45-6789",
                "2026-11-24",
                "555-1234",
                "12345",
                "v1.2.3",
                "1732665600",
                "0306406152",
            ],
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
    out = orjson.loads(shown.stdout)
    assert out["text"] == "mail ***@**.***" and out["redactions"][0]["pattern_id"] == "email"
    bad = tmp_path / "bad.yaml"
    bad.write_text("library_id: x\nlibrary_name: X\nsensitivity: secret\n")
    refused = run_cli("library", "check", str(bad))
    assert refused.returncode == 2 and "sensitivity" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


# -- documents, retrieval, caps, audit, report (real Redis with the search module) -----------------


def _minimal_pdf(text: str) -> bytes:
    """A one-page PDF whose page shows ``text`` (built by hand: no PDF writer is installed)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out


def _libraries(r: object, **settings: object) -> object:
    from mother.config import Settings
    from mother.functions import load_functions
    from mother.libraries.ingest import create_library
    from mother.runtime import Runtime

    load_functions(r)  # type: ignore[arg-type]
    rt = Runtime(settings=Settings(**settings), redis=r)  # type: ignore[arg-type]
    for name in ("public_research", "financials", "personal"):
        create_library(r, EXAMPLES / f"{name}.yaml", [EXAMPLES / "docs" / name], rt.clock.now_iso())
    return rt


def test_ingest_chunks_text_and_pdf_and_search_ranks_and_redacts(r, tmp_path: Path) -> None:
    from mother import keys
    from mother.libraries.ingest import CHUNK_CHARS, chunks_of, ingest
    from mother.libraries.retrieval import retrieve

    rt = _libraries(r)
    pdf = tmp_path / "memo.pdf"
    pdf.write_bytes(_minimal_pdf("Backoff memo: jitter prevents retry storms."))
    got = ingest(r, "public_research", pdf, rt.clock.now_iso())
    assert got.chunks == 1
    long = " ".join(f"Sentence {i} about quarterly margins." for i in range(400))
    pieces = chunks_of(long)
    assert all(len(p) <= CHUNK_CHARS for p in pieces) and len(pieces) > 5
    assert pieces[1][:20] in pieces[0]  # overlap
    found = retrieve(
        rt,
        run_id="run-s",
        user_id="alice",
        role="coder",
        model="scripted",
        library_id="public_research",
        query="retry storms jitter",
    )
    memo = [h for h in found.hits if h.document_id.startswith("memo-")]
    assert memo and "retry storms" in memo[0].text  # the PDF's text, extracted by pypdf
    assert [h.score for h in found.hits] == sorted((h.score for h in found.hits), reverse=True)
    fin = retrieve(
        rt,
        run_id="run-s",
        user_id="alice",
        role="analyst",
        model="scripted",
        library_id="financials",
        query="payroll salary",
        justification="audit",
    )
    text = " ".join(h.text for h in fin.hits)
    assert "123-45-6789" not in text and "$123,456.78" not in text and "SSN ***-***-***" in text
    assert fin.redactions == 6
    assert r.execute_command("JSON.GET", keys.library_key("financials"), "$.chunk_count") == "[1]"


def test_a_word_with_a_non_ascii_capital_is_found_whatever_its_case(r, tmp_path: Path) -> None:
    """The search module folds only ASCII letters: "Überstunden" and "ÉCOLE" in a document are found
    by a query that writes them lower-case, capitalised or upper-case."""
    from mother.libraries.ingest import ingest
    from mother.libraries.retrieval import retrieve

    rt = _libraries(r)
    memo = tmp_path / "hr.md"
    memo.write_text("Überstunden werden im März bezahlt. Die ÉCOLE zahlt später.\n")
    ingest(r, "public_research", memo, rt.clock.now_iso())
    for query in ("überstunden", "Überstunden", "ÜBERSTUNDEN", "école", "März", "märz"):
        found = retrieve(
            rt,
            run_id="run-u",
            user_id="alice",
            role="coder",
            model="scripted",
            library_id="public_research",
            query=query,
        )
        assert any(h.document_id.startswith("hr-") for h in found.hits), query


def _take(url: str, run: str, user: str, n: int) -> int:
    import redis as redis_lib

    from mother.config import Settings
    from mother.libraries.retrieval import RetrievalRefused, retrieve
    from mother.runtime import Runtime

    rt = Runtime(settings=Settings(), redis=redis_lib.Redis.from_url(url, decode_responses=True))
    granted = 0
    for _ in range(n):
        try:
            retrieve(
                rt,
                run_id=run,
                user_id=user,
                role="coder",
                model="scripted",
                library_id="personal",
                query="dentist",
            )
            granted += 1
        except RetrievalRefused:
            pass
    return granted


def test_per_run_and_daily_caps_hold_under_8_contending_processes(r, redis_url: str) -> None:
    """personal: 20 queries a run, 500 a user a day. 8 processes x 5 on one run: 20 granted. Then a
    policy of 7 a day: 8 processes on 8 runs of one user, 3 each: 7 granted."""
    import multiprocessing

    from mother import keys
    from mother.records.libraries import write_policy

    rt = _libraries(r)
    with multiprocessing.get_context("fork").Pool(8) as pool:
        assert sum(pool.starmap(_take, [(redis_url, "run-cap", "alice", 5)] * 8)) == 20
    policy = load_policy(EXAMPLES / "personal.yaml")
    policy.retrieval_limits.max_queries_per_user_daily = 7
    write_policy(r, policy, rt.clock.now_iso())
    with multiprocessing.get_context("fork").Pool(8) as pool:
        runs = [(redis_url, f"run-d{i}", "bob", 3) for i in range(8)]
        assert sum(pool.starmap(_take, runs)) == 7
    assert r.get(keys.library_user_usage_key("bob", rt.clock.today(), "personal")) == "7"
    refused = [orjson.loads(v) for v in r.lrange(keys.SECURITY_VIOLATIONS, 0, -1)]
    assert any("max_queries_per_user_daily reached (7/7)" in v["why"] for v in refused)


def test_audit_records_are_exact_and_the_report_matches_independent_counts(r) -> None:
    from mother import keys
    from mother.libraries.report import access_report
    from mother.libraries.retrieval import RetrievalRefused, retrieve

    rt = _libraries(r)
    expected = {
        "total": 0,
        "granted": 0,
        "refused": 0,
        "users": set(),
        "by_agent": {},
        "redactions": 0,
        "chunks": 0,
        "violations": 0,
    }
    plan = [
        ("alice", "analyst", "scripted", "audit Q3"),
        ("alice", "analyst", "scripted", None),  # no justification
        ("bob", "vision", "scripted", "x"),  # denied agent
        ("bob", "research", "ollama/devstral-2:123b-cloud", "x"),  # cloud model
        ("carol", "research", "scripted", "budget"),
    ]
    logs = []
    for user, role, model, why in plan:
        expected["total"] += 1
        expected["users"].add(user)
        expected["by_agent"][role] = expected["by_agent"].get(role, 0) + 1
        try:
            got = retrieve(
                rt,
                run_id=f"run-{user}",
                user_id=user,
                role=role,
                model=model,
                library_id="financials",
                query="payroll salary account",
                justification=why,
            )
            expected["granted"] += 1
            expected["redactions"] += got.redactions
            expected["chunks"] += len(got.hits)
            logs.append(got.log_id)
        except RetrievalRefused:
            expected["refused"] += 1
            expected["violations"] += 1
    report = access_report(r, "financials", 0, 10**13)
    assert report == {
        "library_id": "financials",
        "from_ms": 0,
        "to_ms": 10**13,
        "total_accesses": expected["total"],
        "granted": expected["granted"],
        "refused": expected["refused"],
        "unique_users": len(expected["users"]),
        "by_agent": expected["by_agent"],
        "violations": expected["violations"],
        "redactions_applied": expected["redactions"],
        "chunks_retrieved": expected["chunks"],
    }
    assert (expected["granted"], expected["refused"]) == (2, 3)
    log = orjson.loads(r.execute_command("JSON.GET", keys.access_log_key(logs[0])))
    assert {
        k: log[k]
        for k in (
            "run_id",
            "user_id",
            "agent_role",
            "library_id",
            "model_id",
            "justification",
            "access_granted",
            "policy_violations",
        )
    } == {
        "run_id": "run-alice",
        "user_id": "alice",
        "agent_role": "analyst",
        "library_id": "financials",
        "model_id": "scripted",
        "justification": "audit Q3",
        "access_granted": True,
        "policy_violations": [],
    }
    assert log["retrieval_count"] == len(log["chunk_ids"]) == 1 and log["redactions_applied"] == 6
    assert log["query"] == "payroll salary account" and log["document_ids"][0].startswith(
        "q3-payroll-"
    )
    assert 0 < r.ttl(keys.access_log_key(logs[0])) <= 2555 * 86_400
    assert r.zcard(keys.access_logs_key("financials")) == 5
    kinds = [orjson.loads(v)["kind"] for v in r.lrange(keys.SECURITY_VIOLATIONS, 0, -1)]
    assert kinds.count("library_access_refused") == 3


# -- with real Mother and workers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    from tests.conftest import start_with_libraries, stop_pipeline

    p = start_with_libraries(tmp_path_factory.mktemp("libraries"))
    yield p
    stop_pipeline(p)


@pytest.mark.parametrize(
    ("example", "reason", "says"),
    [
        ("library-redacted", "success", None),
        ("library-refused-agent", "policyViolation", "Agent 'vision' not allowed"),
        ("library-refused-model", "policyViolation", "a cloud model"),
        ("library-rate-limited", "policyViolation", "max_queries_per_run reached (5/5)"),
        ("library-insufficient", "insufficient_evidence", "found 0 hit(s)"),
    ],
)
def test_the_library_examples_end_as_their_policies_say(
    stack, example: str, reason: str, says: str | None
) -> None:
    from mother import keys
    from tests.test_pipeline import example as load_example

    run_id = stack.client.submit(load_example(example))
    if example in ("library-redacted", "library-rate-limited"):
        # financials requires approval for export_to_artifact: the run waits before its first phase
        state = wait_for_person(stack, run_id)
        assert "export_to_artifact" in state.gate.subject and "financials" in state.gate.subject
        stack.client.approve(run_id, actor="ops", reason="board pack")
    record = stack.wait(run_id, timeout=60).termination
    assert record.reason == reason, record.details
    if says is not None:
        assert says in record.details
    if example == "library-redacted":
        context = stack.redis.execute_command("JSON.GET", keys.context_key(run_id, 0))
        assert "SSN ***-***-***" in context and "123-45-6789" not in context
        assert "$123,456.78" not in context and "[financials/q3-payroll-" in context
        budget = orjson.loads(stack.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
        assert budget["retrieval_queries"] == 1
    if example == "library-rate-limited":
        assert [p.phase for p in stack.client.result(run_id).phases] == [
            f"check-{i}" for i in range(1, 6)
        ]


def test_library_cli_end_to_end(stack, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    env = {"MOTHER_REDIS_URL": stack.url}
    policy = tmp_path / "notes.yaml"
    data = yaml.safe_load((EXAMPLES / "personal.yaml").read_text())
    data.update(library_id="notes", library_name="Notes")
    policy.write_text(yaml.safe_dump(data))
    created = run_cli("library", "create", "notes", "--policy", str(policy), env=env)
    assert created.returncode == 0, created.stderr
    wrong = run_cli("library", "create", "other", "--policy", str(policy), env=env)
    assert wrong.returncode == 2 and "is the policy of library 'notes'" in wrong.stderr
    ingested = run_cli("library", "ingest", "notes", str(EXAMPLES / "docs" / "personal"), env=env)
    assert ingested.returncode == 0 and "1 chunk(s)" in ingested.stdout
    listed = run_cli("library", "list", env=env)
    assert listed.returncode == 0 and "notes" in listed.stdout
    found = run_cli("library", "search", "notes", "dentist", "--role", "coder", env=env)
    assert found.returncode == 0, found.stderr
    hits = orjson.loads(found.stdout)
    assert hits["hits"] and "dentist@example.com" not in found.stdout and hits["access_log"]
    unknown = run_cli(
        "library", "search", "notes", "dentist", "--role", "coder", "--model", "gpt-9", env=env
    )
    # an unknown model is neither local nor cloud: refused, not taken for a local one
    assert unknown.returncode == 2 and "model 'gpt-9' is not in the catalogue" in unknown.stderr
    refused = run_cli("library", "search", "notes", "dentist", "--role", "vision", env=env)
    assert refused.returncode == 2 and "Agent 'vision' not allowed" in refused.stderr
    report = orjson.loads(run_cli("library", "report", "notes", env=env).stdout)
    assert (report["total_accesses"], report["granted"], report["refused"]) == (2, 1, 1)
    assert report["by_agent"] == {"coder": 1, "vision": 1}
    bad = run_cli("library", "report", "notes", "--from", "yesterday", env=env)
    assert bad.returncode == 2 and "--from/--to" in bad.stderr
    missing = run_cli("library", "show", "nope", env=env)
    assert missing.returncode != 0 and "no library 'nope'" in missing.stderr


def test_joining_libraries_waits_for_a_persons_approval(stack) -> None:
    """financials requires approval for cross_library_joins: a run that names it with another library
    waits before its first phase, the gate saying why; approved, it retrieves from both."""
    import uuid

    from mother import keys

    run_id = f"join-{uuid.uuid4().hex[:8]}"
    stack.client.submit(
        {
            "run_id": run_id,
            "user_id": "alice",
            "task": "Compare payroll growth with the retry policy research",
            "libraries": ["financials", "public_research"],
            "justification": "board pack",
            "pipeline": [{"name": "compare", "role": "analyst", "model": "scripted"}],
            "scripts": {"analyst": [{"text": "compared"}]},
        }
    )

    state = wait_for_person(stack, run_id)
    assert state.gate is not None and "cross_library_joins" in state.gate.subject
    assert "financials" in state.gate.subject
    stack.client.approve(run_id, actor="ops", reason="board pack approved")
    assert stack.wait(run_id).termination.reason == "success"
    context = stack.redis.execute_command("JSON.GET", keys.context_key(run_id, 0))
    assert "[financials/" in context and "[public_research/" in context
    # one library that needs no approval: no gate
    single = stack.client.submit(load_example_spec("library-insufficient"))
    assert stack.wait(single).termination.reason == "insufficient_evidence"


def load_example_spec(name: str) -> dict:
    from tests.test_pipeline import example

    return example(name)


def test_agents_search_a_library_through_the_registry_tool(stack, tmp_path: Path) -> None:
    """search_library is a registry tool run by the one executor with the phase's context: a granted
    call is charged to retrieval_queries, audited and counted in tool_stats; a refusal is a tool error
    the model sees, and the run's second refusal ends it policyViolation."""
    import uuid

    from mother import keys
    from mother.clock import ServerClock
    from mother.libraries.ingest import create_library

    def successes() -> int:
        doc = stack.redis.execute_command("JSON.GET", keys.tool_stats_key("search_library"))
        return int(orjson.loads(doc)["success_count"]) if doc else 0

    before = successes()
    run_id = f"tool-{uuid.uuid4().hex[:8]}"
    stack.client.submit(
        {
            "run_id": run_id,
            "user_id": "alice",
            "task": "Find the dentist's number",
            "libraries": ["personal"],
            "pipeline": [{"name": "look", "role": "coder", "model": "scripted"}],
            "scripts": {
                "coder": [
                    {
                        "tool_calls": [
                            {
                                "name": "search_library",
                                "arguments": {"library_id": "personal", "query": "dentist"},
                            },
                            {
                                "name": "search_library",
                                "arguments": {"library_id": "financials", "query": "payroll"},
                            },
                        ]
                    },
                    {"text": "The dentist's number is in the notes.", "confidence": 0.9},
                ]
            },
        }
    )
    assert stack.wait(run_id).termination.reason == "success"
    budget = orjson.loads(stack.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    # one for the phase's retrieval_hits, one for the agent's granted call (the other named a
    # library outside the run: refused before anything was charged)
    assert budget["retrieval_queries"] == 2
    # added to tool_stats by Mother at the host's tool_stat ask
    assert wait_until(lambda: successes() == before + 1)
    logs = [
        orjson.loads(stack.redis.execute_command("JSON.GET", keys.access_log_key(log_id)))
        for log_id in stack.redis.zrange(keys.access_logs_key("personal"), 0, -1)
    ]
    mine = [log for log in logs if log["run_id"] == run_id]
    assert len(mine) == 2 and all(
        log["access_granted"] and log["agent_role"] == "coder" for log in mine
    )

    # one query a run: the context takes it, the agent's two calls are refused, the second ends it
    policy = tmp_path / "tight.yaml"
    data = yaml.safe_load((EXAMPLES / "personal.yaml").read_text())
    data.update(
        library_id="tight",
        library_name="Tight",
        retrieval_limits={
            "max_chunks_per_query": 5,
            "max_queries_per_run": 1,
            "max_queries_per_user_daily": 100,
        },
    )
    policy.write_text(yaml.safe_dump(data))
    create_library(
        stack.redis, policy, [EXAMPLES / "docs" / "personal"], ServerClock(stack.redis).now_iso()
    )
    call = {"name": "search_library", "arguments": {"library_id": "tight", "query": "dentist"}}
    tight = stack.client.submit(
        {
            "user_id": "alice",
            "task": "Find the dentist",
            "libraries": ["tight"],
            "pipeline": [{"name": "look", "role": "coder", "model": "scripted"}],
            "scripts": {"coder": [{"tool_calls": [call]}, {"tool_calls": [call]}, {"text": "x"}]},
        }
    )
    record = stack.wait(tight).termination
    assert record.reason == "policyViolation", record.details
    assert "refused 2 times" in record.details and "max_queries_per_run" in record.details


def test_the_financials_example_serves_the_catalogues_local_models() -> None:
    """The shipped confidential example lets its roles send hits to every local model of the shipped
    catalogue (it named models the catalogue does not have, and refused its only local one), and
    still refuses the cloud ones."""
    from mother.config import Settings

    policy = load_policy(EXAMPLES / "financials.yaml")
    models = Settings().models
    local = [name for name, m in models.items() if not m.cloud]
    assert "ollama/qwen2.5:32b" in local
    for name in local:
        assert decide(
            policy, role="analyst", model=name, cloud=False, justification="audit"
        ).allowed
    for name in (n for n, m in models.items() if m.cloud):
        assert not decide(policy, role="analyst", model=name, cloud=True, justification="a").allowed


def test_a_document_and_a_library_can_be_purged(stack, tmp_path: Path) -> None:
    """`mother library remove-document` takes a document's chunks out (search finds nothing of it, no
    chunk key is left) with an activity entry naming who and why; `remove --yes` takes the library."""
    from mother import keys
    from mother.activity import recent
    from tests.conftest import run_cli

    env = {"MOTHER_REDIS_URL": stack.url}
    policy = tmp_path / "purge.yaml"
    data = yaml.safe_load((EXAMPLES / "personal.yaml").read_text())
    data.update(library_id="purge-me", library_name="Purge me")
    policy.write_text(yaml.safe_dump(data))
    assert (
        run_cli("library", "create", "purge-me", "--policy", str(policy), env=env).returncode == 0
    )
    assert (
        run_cli(
            "library", "ingest", "purge-me", str(EXAMPLES / "docs" / "personal"), env=env
        ).returncode
        == 0
    )
    shown = orjson.loads(run_cli("library", "show", "purge-me", env=env).stdout)
    (document_id,) = shown["documents"]
    assert list(stack.redis.scan_iter(match="chunk:purge-me:*"))
    removed = run_cli(
        "library", "remove-document", "purge-me", document_id, "--reason", "PII request 42",
        "--actor", "dpo", env=env,
    )  # fmt: skip
    assert removed.returncode == 0 and "1 chunk(s)" in removed.stdout, removed.stderr
    assert list(stack.redis.scan_iter(match="chunk:purge-me:*")) == []
    found = orjson.loads(
        run_cli("library", "search", "purge-me", "dentist", "--role", "coder", env=env).stdout
    )
    assert found["hits"] == []
    entry = next(e for e in recent(stack.redis, 200) if e.type == "library_document_removed")
    assert entry.data["actor"] == "dpo" and entry.data["reason"] == "PII request 42"
    unconfirmed = run_cli("library", "remove", "purge-me", "--reason", "gone", env=env)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    gone = run_cli("library", "remove", "purge-me", "--reason", "gone", "--yes", env=env)
    assert gone.returncode == 0, gone.stderr
    assert not stack.redis.exists(keys.library_key("purge-me"), keys.library_policy_key("purge-me"))
    assert "purge-me" not in run_cli("library", "list", env=env).stdout
