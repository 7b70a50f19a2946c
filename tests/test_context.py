"""Context budget ownership: composition, summaries, escalation, validation, counting."""

from __future__ import annotations

import hashlib
import random
import statistics
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from mother import keys
from mother.budget import open_run_budget
from mother.clock import ServerClock
from mother.config import ModelConfig, Settings
from mother.context import (
    HEADERS,
    build_sections,
    compose,
    context_hash,
    llm_summarizer,
    load,
    store,
)
from mother.errors import ConfigError, ContextBudgetExceeded, ContextInvalid
from mother.runtime import Runtime
from mother.tokens import Calibration, EstimateCounter, TokenizerCounter, counter_for, raw_estimate
from schemas import ComposedContext, ContextSummary, RunSpec
from tests.conftest import bpe_tokenizer

NOW = "2026-11-22T00:00:00.000Z"
WORDS = [
    "budget",
    "window",
    "token",
    "summary",
    "agent",
    "phase",
    "mother",
    "worker",
    "queue",
    "stream",
    "redis",
    "context",
    "retrieval",
    "consumer",
    "group",
    "lease",
    "ledger",
    "guard",
    "script",
    "hook",
    "limit",
]


def text(nbytes: int, lead: str = "", seed: int = 0) -> str:
    """ASCII text of exactly ``nbytes`` bytes (so the raw estimate is exactly nbytes / 3 tokens)."""
    rng = random.Random(seed * 7919 + nbytes)
    out = lead
    while len(out) < nbytes:
        out += " " + rng.choice(WORDS)
    return out[:nbytes]


def chunks(section: str, n: int, tokens: int, lead: str = "") -> list[str]:
    """``n`` chunks whose rendered section counts exactly ``tokens`` by the raw estimate."""
    total = tokens * 3 - len(HEADERS[section]) - 1 - 2 * (n - 1)
    each = total // n
    return [
        text(each if i < n - 1 else total - each * (n - 1), lead.format(i=i), seed=i)
        for i in range(n)
    ]


def model(available: int, **kw: Any) -> ModelConfig:
    return ModelConfig(
        provider="scripted",
        max_tokens=available + 20_000,
        reserved_for_system=5_000,
        reserved_for_output=15_000,
        **kw,
    )


def scenario_spec(model_name: str = "m") -> RunSpec:
    """The spec's Example Scenario: 500 + 300 + 5,000 + 85,000 + 10,000 tokens."""
    task = text(500 * 3 - len("# Task\n"), "Find why the budget guard slows down under load.")
    phase_line = "# Current phase\nresearch (you are the researcher)\nExit criteria: "
    return RunSpec(
        user_id="u1",
        task=task,
        pipeline=[
            {
                "name": "research",
                "role": "researcher",
                "model": model_name,
                "exit_criteria": text(300 * 3 - len(phase_line)),
            }
        ],
        context={
            "recent_messages": chunks("recent_messages", 10, 5_000),
            "retrieval_hits": chunks("retrieval_hits", 114, 85_000, "hit {i}:"),
            "session_summaries": chunks("session_summaries", 10, 10_000),
        },
    )


def scenario_settings(**models: ModelConfig) -> Settings:
    return Settings(models={"m": model(100_000), **models})


def test_spec_example_scenario_summarizes_retrieval_to_about_15000() -> None:
    """100,800 tokens against 100,000: retrieval (85,000) is summarized to about 15,000; about 30,800 in all."""
    comp = compose(scenario_settings(), "run-ctx1", scenario_spec(), 0, [], now_iso=NOW)
    got = {s.section: s for s in comp.context.sections}
    assert [s.source_tokens for s in comp.context.sections] == [500, 300, 5_000, 85_000, 10_000]
    assert [s.section for s in comp.context.sections if s.summary_id] == ["retrieval_hits"]
    assert 14_000 <= got["retrieval_hits"].tokens <= 15_000
    assert all(
        got[n].tokens == got[n].source_tokens
        for n in ("task_definition", "current_phase", "recent_messages", "session_summaries")
    )
    assert 29_800 <= comp.context.total_tokens <= 30_800
    assert comp.context.total_tokens == sum(s.tokens for s in comp.context.sections)
    [summary] = comp.summaries
    assert summary.summary_id == got["retrieval_hits"].summary_id and summary.summary_id.startswith(
        "summary-"
    )
    assert summary.source_sections == ["retrieval_hits"] and summary.source_token_count == 85_000
    assert summary.summary_token_count <= 15_000
    assert summary.compression_ratio == pytest.approx(
        85_000 / summary.summary_token_count, rel=1e-3
    )
    assert summary.content_hash == hashlib.sha256(summary.summary_text.encode()).hexdigest()
    assert summary.summarization_method == "extractive" and summary.model_used is None
    assert summary.summary_version == "summary:v1"
    # "top 20 chunks"
    assert 15 <= len(summary.information_preserved) <= 20
    assert summary.information_lost and summary.information_lost[-1].startswith("... and ")
    assert got["retrieval_hits"].content.startswith(
        f"# Retrieval hits [summarized: {summary.summary_id}, 85,000 -> "
    )
    assert comp.context.escalation_reason is None and comp.context.model == "m"


def test_summaries_are_stored_and_logged(r: redis.Redis) -> None:
    """The ContextSummary lands at context_summary:{id} with every field; the activity stream says so."""
    rt = Runtime(settings=scenario_settings(), redis=r)
    comp = compose(rt.settings, "run-ctx2", scenario_spec(), 0, [], now_iso=NOW)
    pipe = r.pipeline()
    store(pipe, rt.emit, comp, 3600)
    pipe.execute()
    summary = comp.summaries[0]
    stored = ContextSummary.model_validate(
        orjson.loads(r.execute_command("JSON.GET", keys.context_summary_key(summary.summary_id)))
    )
    assert stored == summary
    assert set(
        orjson.loads(r.execute_command("JSON.GET", keys.context_summary_key(summary.summary_id)))
    ) >= {
        "summary_id",
        "run_id",
        "created_at",
        "source_sections",
        "source_token_count",
        "summary_token_count",
        "compression_ratio",
        "summary_text",
        "summarization_method",
        "information_preserved",
        "information_lost",
        "summary_version",
        "content_hash",
    }
    assert 0 < r.ttl(keys.context_summary_key(summary.summary_id)) <= 3600
    ctx = ComposedContext.model_validate(
        orjson.loads(r.execute_command("JSON.GET", keys.context_key("run-ctx2", 0)))
    )
    assert ctx == comp.context
    [entry] = [f for _, f in r.xrange(keys.ACTIVITY_STREAM) if f["type"] == "context_summarized"]
    data = orjson.loads(entry["data"])
    assert entry["run_id"] == "run-ctx2" and data["summary_id"] == summary.summary_id
    assert data["source_tokens"] == 85_000 and data["method"] == "extractive"


def test_everything_fits_goes_in_whole() -> None:
    spec = RunSpec(
        user_id="u1",
        task="Small task",
        pipeline=[{"name": "a", "role": "r", "model": "m"}],
        context={"retrieval_hits": ["one hit", "two hit"]},
    )
    comp = compose(
        scenario_settings(), "run-ctx3", spec, 0, [("earlier", "its output")], now_iso=NOW
    )
    assert comp.summaries == [] and comp.escalations == []
    assert [s.section for s in comp.context.sections] == [
        "task_definition",
        "current_phase",
        "retrieval_hits",
        "previous_artifacts",
    ]
    assert (
        comp.context.sections[-1].content
        == "# Earlier phases\n## Output of phase earlier\nits output"
    )
    assert comp.context.sections[0].content == "# Task\nSmall task"


def test_same_input_same_summary_and_hash() -> None:
    a = compose(scenario_settings(), "run-ctx4", scenario_spec(), 0, [], now_iso=NOW)
    b = compose(scenario_settings(), "run-ctx4", scenario_spec(), 0, [], now_iso=NOW)
    assert a.context == b.context and a.summaries == b.summaries
    assert a.summaries[0].content_hash == b.summaries[0].content_hash


def test_required_sections_larger_than_the_budget_end_the_run() -> None:
    spec = RunSpec(
        user_id="u1", task=text(12_000 * 3), pipeline=[{"name": "a", "role": "r", "model": "m"}]
    )
    with pytest.raises(
        ContextBudgetExceeded,
        match=r"required sections need 12,0\d\d tokens and the window leaves 10,000",
    ):
        compose(Settings(models={"m": model(10_000)}), "run-ctx5", spec, 0, [], now_iso=NOW)


def test_escalation_picks_the_larger_model_and_records_why() -> None:
    settings = Settings(models={"m": model(10_000, escalate_to="big"), "big": model(50_000)})
    spec = RunSpec(
        user_id="u1",
        task=text(12_000 * 3),
        pipeline=[{"name": "a", "role": "r", "model": "m"}],
        context={"retrieval_hits": ["a hit"]},
    )
    comp = compose(settings, "run-ctx6", spec, 0, [], now_iso=NOW)
    assert comp.context.model == "big" and comp.context.requested_model == "m"
    assert comp.context.escalation_reason.startswith("m: the required sections need 12,0")
    assert comp.context.escalation_reason.endswith("escalated to big")
    assert comp.context.available_for_context == 50_000 and comp.summaries == []
    with pytest.raises(
        ContextBudgetExceeded, match="escalation to big is not among the run's capabilities"
    ):
        compose(settings, "run-ctx6", spec, 0, [], now_iso=NOW, may_use=lambda m: m != "big")


def test_summarize_before_escalating() -> None:
    """Optional sections that can be summarized keep the run on its own model."""
    settings = scenario_settings(big=model(500_000))
    settings.models["m"] = model(100_000, escalate_to="big")
    comp = compose(settings, "run-ctx7", scenario_spec(), 0, [], now_iso=NOW)
    assert comp.context.model == "m" and len(comp.summaries) == 1


@pytest.mark.parametrize("seed", range(25))
def test_no_section_is_dropped_or_cut_without_a_summary(seed: int) -> None:
    """Random section sizes and windows: every section is present, whole or summarized with a record, within budget."""
    rng = random.Random(seed)
    available = rng.choice([2_000, 6_000, 20_000, 60_000])
    settings = Settings(models={"m": model(available)})
    ctx = {
        name: [text(rng.randint(30, 9_000), seed=seed * 10 + i) for i in range(rng.randint(0, 12))]
        for name in ("recent_messages", "retrieval_hits", "session_summaries", "project_knowledge")
    }
    outputs = [(f"p{i}", text(rng.randint(30, 30_000), seed=i)) for i in range(rng.randint(0, 3))]
    spec = RunSpec(
        user_id="u1",
        task=text(rng.randint(10, 3_000)),
        context=ctx,
        pipeline=[{"name": f"p{i}", "role": "r", "model": "m"} for i in range(len(outputs) + 1)],
    )
    try:
        comp = compose(settings, "run-ctx8", spec, len(outputs), outputs, now_iso=NOW)
    except ContextBudgetExceeded as exc:
        required = sum(
            EstimateCounter().count(s.content)
            for s in build_sections(settings, spec, len(outputs), outputs)
            if s.required
        )
        assert required > available or "summary notes" in exc.message
        return
    built = build_sections(settings, spec, len(outputs), outputs)
    summaries = {s.summary_id: s for s in comp.summaries}
    assert [s.name for s in built] == [s.section for s in comp.context.sections]
    for original, got in zip(built, comp.context.sections, strict=True):
        if got.summary_id is None:
            assert got.content == original.content
        else:
            assert not got.required and got.summary_id in summaries
            assert summaries[got.summary_id].summary_text in got.content
    assert comp.context.total_tokens <= available
    assert len(summaries) == len([s for s in comp.context.sections if s.summary_id])


def test_agent_refuses_a_context_missing_a_required_section_or_altered() -> None:
    comp = compose(scenario_settings(), "run-ctx9", scenario_spec(), 0, [], now_iso=NOW)
    good = comp.context.to_json()
    assert load(good, "run-ctx9", 0) == comp.context
    with pytest.raises(ContextInvalid, match="no composed context"):
        load(None, "run-ctx9", 0)
    with pytest.raises(ContextInvalid, match="not run-ctx9 phase 1"):
        load(good, "run-ctx9", 1)
    data = orjson.loads(good)
    data["sections"] = [s for s in data["sections"] if s["section"] != "current_phase"]
    data["content_hash"] = context_hash(
        data["model"], [(s["section"], s["content"]) for s in data["sections"]]
    )
    with pytest.raises(ContextInvalid, match=r"lacks required section.* current_phase"):
        load(orjson.dumps(data), "run-ctx9", 0)
    data = orjson.loads(good)
    # silently cut
    data["sections"][2]["content"] = data["sections"][2]["content"][:-10]
    with pytest.raises(ContextInvalid, match="does not match its content_hash"):
        load(orjson.dumps(data), "run-ctx9", 0)
    with pytest.raises(ContextInvalid, match="malformed"):
        load(b"{not json", "run-ctx9", 0)


def test_catalogue_validation() -> None:
    with pytest.raises(ValueError, match="leaves no room"):
        ModelConfig(
            provider="scripted", max_tokens=1_000, reserved_for_system=500, reserved_for_output=500
        )
    with pytest.raises(ValueError, match="max_output_tokens 2048 exceeds reserved_for_output 1000"):
        ModelConfig(provider="scripted", max_output_tokens=2048, reserved_for_output=1000)
    with pytest.raises(ValueError, match="escalate_to: 'nope' is not in the catalogue"):
        Settings(models={"m": model(1_000, escalate_to="nope")})
    with pytest.raises(ValueError, match="has no larger context window"):
        Settings(models={"m": model(1_000, escalate_to="s"), "s": model(500)})
    with pytest.raises(ValueError, match=r"needs context\.summarizer_model"):
        Settings(context={"summarizer": "llm_generated"})
    shipped = Settings().models
    # the spec's LocalModelBudget
    assert shipped["ollama/qwen2.5:32b"].available_for_context == 110_000
    # CloudModelBudget
    assert shipped["ollama/devstral-2:123b-cloud"].available_for_context == 170_000
    assert shipped["ollama/devstral-2:123b-cloud"].cloud
    assert shipped["scripted"].escalate_to == "scripted-large"


# -- token counting -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A real BPE tokenizer.json trained offline on a third of Python's own documentation topics."""
    return bpe_tokenizer(tmp_path_factory.mktemp("tok"))


def test_tokenizer_json_counts_exactly(corpus_tokenizer: tuple[Path, list[str]]) -> None:
    path, texts = corpus_tokenizer
    settings = Settings(models={"m": model(100_000, tokenizer=path)})
    counter = counter_for(settings, "m")
    assert (
        isinstance(counter, TokenizerCounter)
        and counter.exact
        and counter.name == "tokenizer:tokenizer.json"
    )
    from tokenizers import Tokenizer

    truth = Tokenizer.from_file(str(path))
    assert counter.count(texts[1]) == len(truth.encode(texts[1], add_special_tokens=False).ids)
    assert counter.count_many(texts[1:4]) == [counter.count(t) for t in texts[1:4]]
    spec = RunSpec(
        user_id="u1",
        task="Explain the with statement",
        pipeline=[{"name": "a", "role": "r", "model": "m"}],
        context={"retrieval_hits": texts[1::2]},
    )
    settings = Settings(models={"m": model(20_000, tokenizer=path)})
    comp = compose(settings, "run-tok1", spec, 0, [], now_iso=NOW)
    assert comp.context.counter == "tokenizer:tokenizer.json"
    assert sum(counter.count(s.content) for s in comp.context.sections) <= 20_000
    with pytest.raises(ConfigError, match="cannot load it"):
        TokenizerCounter(path.parent / "missing.json")


def test_estimate_calibrates_to_reported_usage(
    r: redis.Redis, corpus_tokenizer: tuple[Path, list[str]]
) -> None:
    """The raw estimate over-counts (conservative); after the provider's reports its error is small.

    The "provider" here is the real tokenizer's count of each request (what prompt_tokens reports);
    the tokenizer was trained on one third of the corpus, calibration learns from the second and
    is judged on the last.
    """
    path, texts = corpus_tokenizer
    truth = TokenizerCounter(path)
    learn, judge = texts[1::3], texts[2::3]
    before = [abs(raw_estimate(t) - truth.count(t)) / truth.count(t) for t in judge]
    # conservative: never under
    assert all(raw_estimate(t) >= truth.count(t) for t in judge)
    calibration = Calibration(r, min_samples=3, ttl=0)
    assert calibration.ratio("ollama/x") == 1.0
    for t in learn[:2]:
        Calibration.record(r, "ollama/x", raw_estimate(t), truth.count(t))
    # not enough samples yet
    assert calibration.ratio("ollama/x") == 1.0
    for t in learn[2:]:
        Calibration.record(r, "ollama/x", raw_estimate(t), truth.count(t))
    counter = EstimateCounter(calibration.ratio("ollama/x"))
    after = [abs(counter.count(t) - truth.count(t)) / truth.count(t) for t in judge]
    total_before = abs(sum(raw_estimate(t) for t in judge) / sum(truth.count(t) for t in judge) - 1)
    total_after = abs(sum(counter.count(t) for t in judge) / sum(truth.count(t) for t in judge) - 1)
    print(
        f"\nestimate error on {len(judge)} held-out texts ({sum(map(len, judge)):,} chars): "
        f"mean per text {statistics.mean(before):.1%} before, {statistics.mean(after):.1%} after calibration; "
        f"on the total {total_before:.1%} before, {total_after:.1%} after (ratio {counter.ratio:.3f})"
    )
    assert statistics.mean(after) < statistics.mean(before) / 2
    assert total_after < 0.05 < total_before
    assert r.hget(keys.token_calibration_key("ollama/x"), "samples") == str(len(learn))
    rt_settings = Settings(
        models={"ollama/x": ModelConfig(provider="openai", base_url="http://127.0.0.1:1/v1")}
    )
    assert counter_for(rt_settings, "ollama/x", calibration).name.startswith(
        "estimate(calibrated x0."
    )


def test_calibration_never_takes_off_more_than_half(r: redis.Redis) -> None:
    """A server that counted far less than it was sent (llama.cpp's chat template dropped the tool
    schemas: 834 reported for an estimate of 6,402) cannot shrink later estimates below half: a prompt
    three times the window passed the context check when calibration could take off 80%. What is
    compared is the messages' estimate, not the tool schemas'."""
    from mother.tokens import RATIO_BOUNDS, request_estimate

    calibration = Calibration(r, min_samples=3, ttl=0)
    for _ in range(3):
        Calibration.record(r, "ollama/y", 6402, 834)
    assert calibration.ratio("ollama/y") == RATIO_BOUNDS[0] == 0.5
    messages = [{"role": "user", "content": "x" * 3000}]
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"d": "y" * 9000}}}]
    assert request_estimate(messages, []) == 1000 < request_estimate(messages, tools)


# -- llm_generated summaries --------------------------------------------------------------------


def _llm_setup(r: redis.Redis, replies: list[dict[str, Any]]) -> tuple[Settings, RunSpec, Any]:
    settings = Settings(
        models={"m": model(100_000), "writer": model(100_000)},
        context={"summarizer": "llm_generated", "summarizer_model": "writer"},
    )
    spec = RunSpec.model_validate(
        {**scenario_spec().model_dump(), "run_id": "run-llm1", "scripts": {"summarizer": replies}}
    )
    open_run_budget(r, settings, spec, ServerClock(r).now_ms())
    from mother.budget import Guard
    from workers.providers import make_provider

    summarizer = llm_summarizer(
        settings,
        lambda: Guard(r, settings, "run-llm1", "u1", ServerClock(r).today),
        spec,
        make_provider=make_provider,
    )
    return settings, spec, summarizer


def test_llm_generated_summary_is_metered_and_recorded(r: redis.Redis) -> None:
    settings, spec, summarizer = _llm_setup(
        r,
        [
            {
                "text": "The guard slows down because every call decodes the budget document.",
                "usage": {"input_tokens": 14_000, "output_tokens": 20},
            }
        ],
    )
    comp = compose(settings, "run-llm1", spec, 0, [], now_iso=NOW, llm=summarizer)
    [summary] = comp.summaries
    assert summary.summarization_method == "llm_generated" and summary.model_used == "writer"
    assert (
        summary.summary_text
        == "The guard slows down because every call decodes the budget document."
    )
    budget = orjson.loads(r.execute_command("JSON.GET", keys.run_budget_key("run-llm1")))
    # the summarizer's call is charged
    assert budget["model_calls"] == 1 and budget["input_tokens"] == 14_000


def test_llm_summary_too_long_is_trimmed_and_failure_falls_back(r: redis.Redis) -> None:
    long_reply = " ".join(f"Fact {i} about the budget guard and its window." for i in range(6_000))
    settings, spec, summarizer = _llm_setup(r, [{"text": long_reply}])
    [summary] = compose(settings, "run-llm1", spec, 0, [], now_iso=NOW, llm=summarizer).summaries
    assert summary.summarization_method == "hybrid" and summary.summary_token_count <= 15_000
    r.flushall()
    settings, spec, summarizer = _llm_setup(r, [{"fail": "raise"}])
    comp = compose(settings, "run-llm1", spec, 0, [], now_iso=NOW, llm=summarizer)
    assert comp.summaries[0].summarization_method == "extractive"
    assert comp.fallbacks and "llm summary failed" in comp.fallbacks[0]
