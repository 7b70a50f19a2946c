"""Context budget ownership: Mother decides what every agent sees, and never cuts silently.

Before each phase Mother builds the spec's sections in priority order::

    task_definition 100 (required)   current_phase 95 (required)   recent_messages 90
    retrieval_hits 85   session_summaries 80   project_knowledge 75   previous_artifacts 70

and fits them into the phase model's ``available_for_context``:

1. everything fits → everything goes in whole;
2. else summarize, lowest priority first: first pass, a section larger than
   ``context.summary_share`` of the window is summarized to that share; second pass,
   sections are squeezed into what is left. Every summary is a ContextSummary record
   (``context_summary:{id}``, activity ``context_summarized``), never a silent cut;
3. else (the required sections, or the optional sections' summary notes, do not fit)
   escalate to the catalogue's ``escalate_to`` model and start over there, recording why;
4. else the run ends ``context_budget_exceeded``.

The extractive summarizer is deterministic: it scores units (chunks, or the
paragraphs and sentences of big chunks) against the task with BM25 and keeps the best
that fit, in their original order; the same input gives the same summary, id and hash.
With ``context.summarizer: llm_generated`` a catalogue model writes the summary (its
call metered like any other); a reply too long for the target is trimmed extractively
(``hybrid``); a failed call falls back to extractive and says so in the activity stream.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from mother import keys
from mother.config import Settings
from mother.errors import ContextBudgetExceeded, ContextInvalid, MotherError
from mother.logs import get_logger
from mother.tokens import Calibration, TokenCounter, counter_for, raw_estimate
from schemas import SECTION_ORDER, ComposedContext, ComposedSection, ContextSummary, RunSpec
from schemas.context import SectionName, SummaryMethod

__all__ = [
    "Composition",
    "Section",
    "build_sections",
    "compose",
    "context_hash",
    "extractive_summary",
    "llm_summarizer",
    "load",
    "queue_load",
    "render",
    "store",
    "summary_notes",
]

log = get_logger("context")
# bigger chunks (or above a quarter of the target) go by paragraph, then sentence
UNIT_MAX_TOKENS = 1_000
# information_preserved / information_lost entries kept (then "... and N more")
LIST_CAP = 40
_WORD = re.compile(r"[a-z0-9]{3,}")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "are",
        "was",
        "were",
        "you",
        "your",
        "not",
        "but",
        "have",
        "has",
        "had",
        "its",
        "into",
        "all",
        "any",
        "can",
        "will",
        "would",
        "should",
        "could",
        "been",
        "being",
        "than",
        "then",
        "them",
        "they",
        "their",
        "there",
        "what",
        "when",
        "which",
        "who",
        "how",
        "why",
        "one",
        "two",
        "use",
        "used",
        "using",
        "also",
        "such",
        "each",
        "more",
        "most",
        "other",
    ]
)
HEADERS: dict[str, str] = {
    "task_definition": "# Task",
    "current_phase": "# Current phase",
    "recent_messages": "# Recent messages",
    "retrieval_hits": "# Retrieval hits",
    "session_summaries": "# Session summaries",
    "project_knowledge": "# Project knowledge",
    "previous_artifacts": "# Earlier phases",
}


@dataclass
class Section:
    name: SectionName
    priority: int
    required: bool
    chunks: list[str]

    @property
    def header(self) -> str:
        return HEADERS[self.name]

    @property
    def content(self) -> str:
        return render(self.header, self.chunks)


def render(header: str, chunks: Sequence[str]) -> str:
    return header + "\n" + "\n\n".join(chunks)


def build_sections(
    settings: Settings,
    spec: RunSpec,
    index: int,
    outputs: Sequence[tuple[str, str]],
    notes: Sequence[str] = (),
) -> list[Section]:
    """The run's sections for phase ``index`` (``outputs``: earlier phases' (name, output)); empty ones are
    absent. ``notes`` (people's answers, conflict decisions) join the current_phase section, which is
    required: no summary or cut drops them."""
    phase = spec.pipeline[index]
    ctx = spec.context
    task = [spec.task] + (
        ["## Goals\n" + "\n".join(f"- {g}" for g in ctx.goals)] if ctx.goals else []
    )
    current = f"{phase.name} (you are the {phase.role})"
    if phase.exit_criteria:
        current += f"\nExit criteria: {phase.exit_criteria}"
    if notes:
        current += "\n## Decisions so far\n" + "\n".join(f"- {n}" for n in notes)
    chunks: dict[str, list[str]] = {
        "task_definition": task,
        "current_phase": [current],
        "recent_messages": list(ctx.recent_messages[-settings.context.recent_messages :]),
        "retrieval_hits": list(ctx.retrieval_hits),
        "session_summaries": list(ctx.session_summaries),
        "project_knowledge": list(ctx.project_knowledge),
        "previous_artifacts": [f"## Output of phase {name}\n{output}" for name, output in outputs],
    }
    return [
        Section(name, priority, required, chunks[name])
        for name, priority, required in SECTION_ORDER
        if required or chunks[name]
    ]


# -- extractive summarization ------------------------------------------------------------------


def _terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def _units(
    chunks: Sequence[str], counter: TokenCounter, largest: int
) -> tuple[list[str], list[int]]:
    """Chunks, with any bigger than ``largest`` tokens split into paragraphs, then sentences, then words."""
    units: list[str] = []
    for chunk in chunks:
        units.extend(_split(chunk, counter, largest))
    return units, counter.count_many(units)


def _split(text: str, counter: TokenCounter, largest: int) -> list[str]:
    """Where to cut is decided on the raw estimate (cheap, and never under a real count by much);
    the pieces are then counted with the real counter in one batch."""
    if raw_estimate(text) <= largest:
        return [text]
    for pattern in (_PARAGRAPH, _SENTENCE):
        parts = [p for p in pattern.split(text) if p.strip()]
        if len(parts) > 1:
            return [u for part in parts for u in _split(part, counter, largest)]
    # one endless sentence: pieces of whole words
    words = text.split(" ")
    size = max(1, len(words) * largest // max(1, raw_estimate(text)))
    return [" ".join(words[i : i + size]) for i in range(0, len(words), size)]


def _scores(units: Sequence[str], query: Sequence[str]) -> list[float]:
    """BM25 (k1 1.2, b 0.75) of each unit against the query terms; a unit's length is its size in bytes."""
    wanted = sorted(set(query))
    if not wanted or not units:
        return [0.0] * len(units)
    finder = re.compile(r"(?<![a-z0-9])(?:" + "|".join(map(re.escape, wanted)) + r")(?![a-z0-9])")
    bags = [Counter(finder.findall(u.lower())) for u in units]
    lengths = [len(u) for u in units]
    n = len(units)
    avg = sum(lengths) / n or 1.0
    df: Counter[str] = Counter()
    for bag in bags:
        df.update(bag.keys())
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in wanted}
    scores = []
    for bag, length in zip(bags, lengths, strict=True):
        norm = 1.2 * (0.25 + 0.75 * length / avg)
        scores.append(sum(idf[t] * tf * 2.2 / (tf + norm) for t, tf in bag.items()))
    return scores


def _headline(text: str) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= 100 else line[:97] + "..."


def _capped(items: list[str]) -> list[str]:
    return (
        items
        if len(items) <= LIST_CAP
        else [*items[:LIST_CAP], f"... and {len(items) - LIST_CAP} more"]
    )


@dataclass
class Extract:
    text: str
    tokens: int
    preserved: list[str]
    lost: list[str]


def extractive_summary(
    chunks: Sequence[str], budget: int, query: Sequence[str], counter: TokenCounter
) -> Extract:
    """The best-scoring units that fit ``budget`` tokens, in their original order."""
    units, sizes = _units(chunks, counter, max(16, min(UNIT_MAX_TOKENS, budget // 4)))
    scores = _scores(units, query)
    order = sorted(range(len(units)), key=lambda i: (-scores[i], i))
    chosen: list[int] = []
    used = 0
    for i in order:
        # the blank line between units
        cost = sizes[i] + (1 if chosen else 0)
        if used + cost <= budget:
            chosen.append(i)
            used += cost
    chosen.sort()
    text = "\n\n".join(units[i] for i in chosen)
    tokens = counter.count(text)
    # a real tokenizer may merge differently across joins
    while chosen and tokens > budget:
        chosen.remove(min(chosen, key=lambda i: (scores[i], -i)))
        text = "\n\n".join(units[i] for i in chosen)
        tokens = counter.count(text)
    kept = set(chosen)
    return Extract(
        text,
        tokens,
        _capped([_headline(units[i]) for i in chosen]),
        _capped([_headline(units[i]) for i in range(len(units)) if i not in kept]),
    )


# -- fitting ------------------------------------------------------------------------------------


def summary_notes(section: Section, summary_id: str, source: int, tokens: int, method: str) -> str:
    return f"{section.header} [summarized: {summary_id}, {source:,} -> {tokens:,} tokens, {method}]"


def _note_cost(section: Section, counter: TokenCounter) -> int:
    return counter.count(
        summary_notes(section, "summary-" + "0" * 16, 99_999_999, 99_999_999, "llm_generated")
        + "\n"
    )


@dataclass
class Plan:
    # tokens of each section whole
    sizes: dict[SectionName, int]
    # sections to summarize → their token target
    targets: dict[SectionName, int] = field(default_factory=dict)


def fit(
    sections: Sequence[Section], counter: TokenCounter, budget: int, share: float
) -> Plan | str:
    """Which sections to summarize, to what size, for everything to fit ``budget``; or why it cannot."""
    sizes = dict(
        zip(
            [s.name for s in sections],
            counter.count_many([s.content for s in sections]),
            strict=True,
        )
    )
    required = sum(sizes[s.name] for s in sections if s.required)
    if required > budget:
        return f"the required sections need {required:,} tokens and the window leaves {budget:,}"
    plan = Plan(sizes)
    total = sum(sizes.values())
    optional = sorted((s for s in sections if not s.required), key=lambda s: s.priority)
    cap = int(budget * share)
    # first pass: what exceeds its share comes down to it
    for section in optional:
        if total <= budget:
            return plan
        if sizes[section.name] > cap:
            plan.targets[section.name] = cap
            total -= sizes[section.name] - cap
    # second pass: squeeze into what is left
    for section in optional:
        if total <= budget:
            return plan
        current = plan.targets.get(section.name, sizes[section.name])
        room = max(budget - (total - current), _note_cost(section, counter))
        if room < current:
            plan.targets[section.name] = room
            total -= current - room
    if total <= budget:
        return plan
    return (
        f"the required sections ({required:,} tokens) and the summary notes of the others "
        f"({total - required:,}) exceed the {budget:,} the window leaves"
    )


# -- composition --------------------------------------------------------------------------------


def context_hash(model: str, sections: Sequence[tuple[str, str]]) -> str:
    """SHA-256 over the model and every (section, content): what the worker re-checks."""
    return hashlib.sha256(orjson.dumps([model, [list(s) for s in sections]])).hexdigest()


@dataclass
class Composition:
    context: ComposedContext
    summaries: list[ContextSummary]
    escalations: list[str]
    # llm summaries that fell back to extractive, and why
    fallbacks: list[str] = field(default_factory=list)


# An llm summarizer: (section text, token budget) -> (summary text, model used); raises MotherError.
LLMSummarizer = Callable[[str, str, int], tuple[str, str]]


def compose(
    settings: Settings,
    run_id: str,
    spec: RunSpec,
    index: int,
    outputs: Sequence[tuple[str, str]],
    *,
    notes: Sequence[str] = (),
    now_iso: str,
    calibration: Calibration | None = None,
    llm: LLMSummarizer | None = None,
    may_use: Callable[[str], bool] = lambda model: True,
) -> Composition:
    """Compose phase ``index``'s context; raise ``ContextBudgetExceeded`` when no model can take it.

    ``may_use(model)`` says whether the run's capabilities allow escalating to ``model``.
    """
    requested = spec.pipeline[index].model
    sections = build_sections(settings, spec, index, outputs, notes)
    model, counter, plan, escalations = _fit_escalating(
        settings, spec.pipeline[index].name, requested, sections, calibration, may_use
    )
    query = _terms(" ".join(s.content for s in sections if s.required))
    composed: list[ComposedSection] = []
    summaries: list[ContextSummary] = []
    fallbacks: list[str] = []
    for section in sections:
        size = plan.sizes[section.name]
        target = plan.targets.get(section.name)
        if target is None:
            composed.append(
                ComposedSection(
                    section=section.name,
                    priority=section.priority,
                    required=section.required,
                    tokens=size,
                    source_tokens=size,
                    content=section.content,
                )
            )
            continue
        summary, content, fallback = _summarize(
            settings, run_id, section, size, target, query, counter, now_iso, llm
        )
        if fallback:
            fallbacks.append(fallback)
        summaries.append(summary)
        composed.append(
            ComposedSection(
                section=section.name,
                priority=section.priority,
                required=False,
                tokens=counter.count(content),
                source_tokens=size,
                summary_id=summary.summary_id,
                content=content,
            )
        )
    context = ComposedContext(
        run_id=run_id,
        phase_index=index,
        model=model,
        requested_model=requested,
        escalation_reason="; ".join(escalations) or None,
        counter=counter.name,
        available_for_context=settings.models[model].available_for_context,
        total_tokens=sum(s.tokens for s in composed),
        sections=composed,
        summary_ids=[s.summary_id for s in summaries],
        content_hash=context_hash(model, [(s.section, s.content) for s in composed]),
        composed_at=now_iso,
    )
    return Composition(context, summaries, escalations, fallbacks)


def _fit_escalating(
    settings: Settings,
    phase: str,
    model: str,
    sections: Sequence[Section],
    calibration: Calibration | None,
    may_use: Callable[[str], bool],
) -> tuple[str, TokenCounter, Plan, list[str]]:
    """The first model of ``model``'s escalation chain whose window takes the sections: the model,
    its counter, the plan, and why each smaller one was passed; ContextBudgetExceeded when none
    does (or the next is not among the run's capabilities)."""
    escalations: list[str] = []
    chain = [model]
    while True:
        config = settings.models[model]
        counter = counter_for(settings, model, calibration)
        plan = fit(sections, counter, config.available_for_context, settings.context.summary_share)
        if isinstance(plan, Plan):
            return model, counter, plan, escalations
        refused = config.escalate_to is not None and not may_use(config.escalate_to)
        if config.escalate_to is None or refused:
            why = (
                f"escalation to {config.escalate_to} is not among the run's capabilities (model.{config.escalate_to})"
                if refused
                else "nothing larger to escalate to"
            )
            raise ContextBudgetExceeded(
                f"Context does not fit phase {phase}: on {model}, {plan}; {why} (tried {' -> '.join(chain)})",
                factors=[*escalations, f"{model}: {plan}; {why}"],
            )
        escalations.append(f"{model}: {plan}; escalated to {config.escalate_to}")
        model = config.escalate_to
        chain.append(model)


def _summarize(
    settings: Settings,
    run_id: str,
    section: Section,
    size: int,
    target: int,
    query: list[str],
    counter: TokenCounter,
    now_iso: str,
    llm: LLMSummarizer | None,
) -> tuple[ContextSummary, str, str | None]:
    source_hash = hashlib.sha256(section.content.encode()).hexdigest()
    method: SummaryMethod = "llm_generated" if llm is not None else "extractive"
    summary_id = (
        "summary-"
        + hashlib.sha256(
            f"{run_id}\0{section.name}\0{source_hash}\0{target}\0{method}".encode()
        ).hexdigest()[:16]
    )
    budget = max(0, target - _note_cost(section, counter))
    model_used = None
    fallback = None
    extract: Extract | None = None
    if llm is not None:
        try:
            text, model_used = llm(section.name, section.content, budget)
            extract = Extract(
                text,
                counter.count(text),
                [f"{model_used} summary of {len(section.chunks)} chunks"],
                [],
            )
            # too long: trimmed extractively
            if extract.tokens > budget:
                extract = extractive_summary([text], budget, query, counter)
                method = "hybrid"
        except MotherError as exc:
            fallback = f"{section.name}: llm summary failed ({exc.message[:200]}); used extractive"
            log.warning(
                "llm_summary_failed", run_id=run_id, section=section.name, error=exc.message
            )
            method, model_used, extract = "extractive", None, None
    if extract is None:
        extract = extractive_summary(section.chunks, budget, query, counter)
    summary = ContextSummary(
        summary_id=summary_id,
        run_id=run_id,
        created_at=now_iso,
        source_sections=[section.name],
        source_token_count=size,
        summary_token_count=extract.tokens,
        compression_ratio=round(size / max(1, extract.tokens), 3),
        summary_text=extract.text,
        summarization_method=method,
        model_used=model_used,
        information_preserved=extract.preserved,
        information_lost=extract.lost,
        content_hash=hashlib.sha256(extract.text.encode()).hexdigest(),
    )
    content = summary_notes(section, summary_id, size, extract.tokens, method) + "\n" + extract.text
    return summary, content, fallback


def queue_load(pipe: Any, run_id: str, index: int) -> None:
    """Queue the read of a phase's composed context on ``pipe``; check its reply with :func:`load`."""
    pipe.execute_command("JSON.GET", keys.context_key(run_id, index))


def load(raw: Any, run_id: str, index: int) -> ComposedContext:
    """A worker's check of its composed context: present, for this phase, every required section
    there, and the hash matching the content; else ``ContextInvalid`` (it never runs on a partial context)."""
    if raw is None:
        raise ContextInvalid(
            f"no composed context at {keys.context_key(run_id, index)}; Mother composes it before "
            "dispatching, so the run's phase was dispatched without it"
        )
    try:
        ctx = ComposedContext.model_validate(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise ContextInvalid(
            f"composed context of {run_id} phase {index} is malformed: {str(exc)[:300]}"
        ) from None
    if (ctx.run_id, ctx.phase_index) != (run_id, index):
        raise ContextInvalid(
            f"composed context is for {ctx.run_id} phase {ctx.phase_index}, not {run_id} phase {index}"
        )
    present = {s.section for s in ctx.sections}
    missing = [name for name, _, required in SECTION_ORDER if required and name not in present]
    if missing:
        raise ContextInvalid(
            f"composed context lacks required section(s) {', '.join(missing)}; refusing to run on it"
        )
    if context_hash(ctx.model, [(s.section, s.content) for s in ctx.sections]) != ctx.content_hash:
        raise ContextInvalid(
            "composed context does not match its content_hash (altered or partly written); "
            "refusing to run on it"
        )
    return ctx


def store(pipe: Any, emit: Callable[..., Any], comp: Composition, keep_seconds: int) -> None:
    """Queue the composed context, its summaries and their activity entries on ``pipe``."""
    ctx = comp.context
    key = keys.context_key(ctx.run_id, ctx.phase_index)
    pipe.execute_command("JSON.SET", key, "$", ctx.to_json())
    pipe.expire(key, keep_seconds)
    phase_fields = {"run_id": ctx.run_id, "phase_index": ctx.phase_index}
    for summary in comp.summaries:
        skey = keys.context_summary_key(summary.summary_id)
        pipe.execute_command("JSON.SET", skey, "$", summary.to_json())
        pipe.expire(skey, keep_seconds)
        emit(
            pipe,
            "context_summarized",
            **phase_fields,
            summary_id=summary.summary_id,
            sections=summary.source_sections,
            method=summary.summarization_method,
            source_tokens=summary.source_token_count,
            summary_tokens=summary.summary_token_count,
            content_hash=summary.content_hash,
        )
    if comp.escalations:
        emit(
            pipe,
            "context_escalated",
            **phase_fields,
            requested_model=ctx.requested_model,
            model=ctx.model,
            reasons=comp.escalations,
        )
    for fallback in comp.fallbacks:
        emit(pipe, "summarizer_failed", **phase_fields, detail=fallback)


def llm_summarizer(
    settings: Settings,
    guard_for: Callable[[], Any],
    spec: RunSpec,
    attempt: int = 1,
    *,
    make_provider: Callable[..., Any],
) -> LLMSummarizer:
    """A summarizer that asks ``context.summarizer_model`` (metered against the run's budget), through
    ``make_provider`` (the process's model providers: ``workers.providers.make_provider``, the same the
    agents use, handed in by whoever runs Mother)."""
    name = settings.context.summarizer_model
    assert name is not None
    config = settings.models[name]

    def summarize(section: str, text: str, budget: int) -> tuple[str, str]:
        counter = counter_for(settings, name)
        room = config.available_for_context - 200
        size = counter.count(text)
        # too big for the summarizer: pre-trim
        if size > room:
            text = extractive_summary([text], room, [], counter).text
            size = counter.count(text)
        provider = make_provider(
            name, config, role="summarizer", scripts=spec.scripts, attempt=attempt
        )
        messages = [
            {
                "role": "system",
                "content": "You summarize context for another agent. Keep every fact the task needs.",
            },
            {
                "role": "user",
                "content": f"Summarize this {section.replace('_', ' ')} in at most {budget} tokens.\n\n{text}",
            },
        ]
        guard = guard_for()
        op = guard.reserve_call(config, size + 100)
        reply = None
        try:
            reply = provider.complete(messages, [])
        finally:
            guard.settle_call(
                op, config, reply.input_tokens if reply else 0, reply.output_tokens if reply else 0
            )
        if not reply.text:
            raise MotherError(f"summarizer {name} replied without text")
        return reply.text, name

    return summarize
