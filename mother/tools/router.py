"""Routing before the model (seed 003 §4, ``ToolRouter.tryToolsFirst`` and Mother's ``route``).

For a phase's task (its ``task``, else the run's when the pipeline has one phase) and role, the eligible
tools are those whose ``allowed_roles`` name the role (or ``*``), by priority (ties in ``routing_order``).
A tool matches when one of its ``handles_patterns`` (RE2) finds the task, or when at least two of its
``keywords`` start a word of it (case-insensitive). Its inputs are the input schema's defaults, then the
named groups of its matching patterns (the first pattern to name an input wins), then the phase's
declared ``inputs``; a tool whose inputs still break its input schema is passed over (the reason kept).
The matches, in order, are the phase's candidates: a phase with any runs as a ``tool_only`` plan, each
tried until one succeeds.

Some tasks name a tool's trigger words and are no tool request at all: "do not run the tests", "write
a helper script that can run the tests", "fix the failing tests". A task that says not to do something,
or asks for something to be written, or asks to have something explained ("Explain how pytest
fixtures work"), goes to the model (:func:`not_a_tool_request`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import re2

from mother.errors import MotherError
from mother.logs import get_logger
from mother.records.tools import read_registry
from mother.tools.contracts import contract_error, with_defaults
from mother.tools.patterns import compile_pattern, pattern_options, pattern_source
from schemas import RunSpec
from schemas.tool import DeterministicTool, ToolCandidate, ToolRegistry

__all__ = [
    "KEYWORDS_NEEDED",
    "Routed",
    "ToolRouter",
    "ToolsCache",
    "not_a_tool_request",
    "phase_query",
]

log = get_logger("tools")

# keywords that must appear for a tool to match without a pattern (the spec's rule)
KEYWORDS_NEEDED = 2


# a task that says not to do what a tool does, or asks for code to be written or changed, is the model's
_ACTIONS = r"(?:run|execute|check|read|extract|ocr|resize|scale|render|draw|test)"
_NOT_A_TOOL_REQUEST = [
    (
        re2.compile(
            r"(?i)\b(?:do not|don'?t|does not|doesn'?t|never|no need to|not to|without|skip(?:ping)?|"
            rf"avoid|instead of|rather than|stop)\b(?:\W+\w+){{0,4}}?\W+{_ACTIONS}",
            pattern_options(),
        ),
        "the task says not to do it",
    ),
    (
        re2.compile(
            r"(?i)(?:^|[.;:!?]\s*|\b(?:please|then|and|first)\s+)(?:write|create|implement|add|build|"
            r"generate|make|code|develop|design|refactor|fix|update|modify|edit|rewrite|improve)\b",
            pattern_options(),
        ),
        "the task asks for something to be written or changed",
    ),
]


# a task that asks to have something explained ("Explain how pytest fixtures work", "what is a
# fixture?", "how do I run the tests?") is a question about a tool's subject, not a request to run it;
# unless one of its sentences then tells to do it ("How flaky is it? Run the tests.")
_QUESTION = re2.compile(
    r"(?i)^\W*(?:explain|describe|define|teach me|tell me (?:about|how|what|why)|"
    r"what(?:'s| is| are| does| do)\b|what happens|how (?:does|do|did|is|are|can|could|would|should|"
    r"to)\b|how's|why (?:does|do|did|is|are|would|should)\b|what's the difference|compare)\b",
    pattern_options(),
)
_TOLD_TO = re2.compile(
    rf"(?i)[.;:!?]\s*(?:please\s+)?(?:now\s+|then\s+)?{_ACTIONS}\b", pattern_options()
)


def not_a_tool_request(query: str) -> str | None:
    """Why ``query`` is no request for a tool (a negation, a request to write or change something, a
    question about it), or None."""
    for pattern, why in _NOT_A_TOOL_REQUEST:
        if pattern.search(query) is not None:
            return why
    if _QUESTION.search(query) is not None and _TOLD_TO.search(query) is None:
        return "the task asks a question about it, not for it to be done"
    return None


def phase_query(spec: RunSpec, index: int) -> str | None:
    """What the router reads for phase ``index``: its task, else the run's task when it is the only
    phase; None when routing is off for the phase."""
    phase = spec.pipeline[index]
    if phase.tools == "off":
        return None
    if phase.task is not None:
        return phase.task
    return spec.task if len(spec.pipeline) == 1 else None


def _starts_word(text: str, word: str) -> bool:
    """Whether ``word`` occurs in ``text`` at the start of a word (both lower-case)."""
    start = text.find(word)
    while start != -1:
        if start == 0 or not text[start - 1].isalnum():
            return True
        start = text.find(word, start + 1)
    return False


def _typed(tool: DeterministicTool, name: str, value: str) -> Any:
    """A named group's text as the input schema types it (number, integer)."""
    properties = tool.input_schema.get("properties")
    prop = properties.get(name) if isinstance(properties, dict) else None
    kind = prop.get("type") if isinstance(prop, dict) else None
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            number = float(value)
            return int(number) if number.is_integer() else number
    except ValueError:
        return value
    return value


@dataclass(frozen=True)
class _Compiled:
    tool: DeterministicTool
    patterns: tuple[tuple[str, Any], ...]
    keywords: tuple[str, ...]


@dataclass
class Routed:
    """The router's answer: candidates in order, and the tools that matched but were passed over (why)."""

    candidates: list[ToolCandidate] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)


class ToolRouter:
    """A registry's tools with their patterns compiled once, and every pattern of every tool in one RE2
    set: one linear pass over a task finds which patterns match; only those run again, for their groups.
    ``compile`` and ``prefilter`` exist for the benchmark's baseline (Python ``re``, pattern by pattern)."""

    def __init__(
        self,
        registry: ToolRegistry,
        compile: Callable[[str, str], Any] = compile_pattern,
        prefilter: bool = True,
    ) -> None:
        self.registry = registry
        rank = {tool_id: i for i, tool_id in enumerate(registry.routing_order)}
        ordered = sorted(
            registry.tools, key=lambda t: (-t.priority, rank.get(t.tool_id, len(rank)), t.tool_id)
        )
        self.tools = [
            _Compiled(
                tool,
                tuple(
                    (p, compile(p, f"{tool.tool_id}.handles_patterns"))
                    for p in tool.handles_patterns
                ),
                tuple(k.lower() for k in tool.keywords),
            )
            for tool in ordered
        ]
        # (tool position, pattern position) of each pattern in the set, by its index there
        self._set: Any = None
        self._where: list[tuple[int, int]] = []
        # every keyword of every tool in a second set (case-insensitive, at the start of a word)
        self._keyword_set: Any = None
        self._keyword_of: list[tuple[int, str]] = []
        if prefilter:
            self._set, self._where = self._pattern_set()
            self._keyword_set, self._keyword_of = self._keywords_set()

    def _pattern_set(self) -> tuple[Any, list[tuple[int, int]]]:
        patterns = re2.Set.SearchSet(pattern_options())
        where = []
        for t, compiled in enumerate(self.tools):
            for i, (source, _) in enumerate(compiled.patterns):
                patterns.Add(pattern_source(source))
                where.append((t, i))
        patterns.Compile()
        return patterns, where

    def _keywords_set(self) -> tuple[Any, list[tuple[int, str]]]:
        words = re2.Set.SearchSet(pattern_options())
        of = []
        for t, compiled in enumerate(self.tools):
            for keyword in compiled.keywords:
                words.Add(f"(?i)(?:^|[^[:alnum:]]){re2.escape(keyword)}")
                of.append((t, keyword))
        words.Compile()
        return words, of

    def match(
        self,
        compiled: _Compiled,
        query: str,
        lowered: str,
        hits: set[int] | None = None,
        words: list[str] | None = None,
    ) -> tuple[str, dict[str, Any]] | None:
        """(what matched, the inputs its named groups extracted), or None. ``hits``: the positions of
        this tool's patterns the set found, ``words`` its keywords it found (None: look)."""
        first: str | None = None
        groups: dict[str, Any] = {}
        for i, (source, pattern) in enumerate(compiled.patterns):
            if hits is not None and i not in hits:
                continue
            found = pattern.search(query)
            if found is None:
                continue
            first = first or source
            for name, value in found.groupdict().items():
                if value is not None and name not in groups:
                    groups[name] = _typed(compiled.tool, name, value)
        if first is not None:
            return f"pattern: {first}", groups
        if words is None:
            words = [k for k in compiled.keywords if _starts_word(lowered, k)]
        if len(words) >= KEYWORDS_NEEDED:
            return f"keywords: {', '.join(words)}", {}
        return None

    def _found(self, query: str) -> dict[int, tuple[set[int], list[str]]] | None:
        """Tool position -> (its patterns that match ``query``, its keywords in it), for the tools with
        either, from one pass of each set (None: no sets, look tool by tool)."""
        if self._set is None:
            return None
        found: dict[int, tuple[set[int], list[str]]] = {}
        for index in self._set.Match(query) or ():
            t, i = self._where[index]
            found.setdefault(t, (set(), []))[0].add(i)
        for index in self._keyword_set.Match(query) or ():
            t, keyword = self._keyword_of[index]
            found.setdefault(t, (set(), []))[1].append(keyword)
        return found

    def route(self, query: str, role: str, declared: dict[str, Any] | None = None) -> Routed:
        routed = Routed()
        why = not_a_tool_request(query)
        if why is not None:
            routed.passed_over.append(f"no tool request: {why}")
            return routed
        lowered = query.lower()
        found = self._found(query)
        # with the sets, only the tools they found can match, in the tools' order
        positions = sorted(found) if found is not None else range(len(self.tools))
        for t in positions:
            compiled = self.tools[t]
            if not compiled.tool.allows(role):
                continue
            hits, words = found[t] if found is not None else (None, None)
            matched = self.match(compiled, query, lowered, hits, words)
            if matched is None:
                continue
            how, extracted = matched
            inputs = with_defaults(compiled.tool, {**extracted, **(declared or {})})
            problem = contract_error(compiled.tool, "input", inputs)
            if problem is not None:
                routed.passed_over.append(problem)
                continue
            routed.candidates.append(
                ToolCandidate(tool_id=compiled.tool.tool_id, inputs=inputs, matched=how[:1000])
            )
        return routed


class ToolsCache:
    """This process's view of ``registry:tools`` and its router, re-read at most every
    ``tools.refresh_seconds`` (a sync reaches Mother and the workers within that)."""

    def __init__(self, client: Any, settings: Any) -> None:
        self.client = client
        self.settings = settings
        self._read_at: float | None = None
        self._stamp: str | None = None
        self.registry: ToolRegistry | None = None
        self.router: ToolRouter | None = None

    def current(self) -> ToolRouter | None:
        now = time.monotonic()
        if self._read_at is None or now - self._read_at >= self.settings.tools.refresh_seconds:
            self._read_at = now
            try:
                registry = read_registry(self.client)
            # a registry that cannot be read routes nothing; the phase goes to the model
            except MotherError as exc:
                log.warning("tool_registry_unreadable", error=exc.message)
                registry = None
            stamp = registry.updated_at if registry is not None else None
            if registry is None:
                self.registry, self.router = None, None
            elif stamp != self._stamp or self.router is None:
                try:
                    self.registry, self.router = registry, ToolRouter(registry)
                except MotherError as exc:
                    log.warning("tool_registry_unusable", error=exc.message)
                    self.registry, self.router = None, None
            self._stamp = stamp
        return self.router

    def plan(self, spec: RunSpec, index: int) -> Routed:
        """The candidates for phase ``index`` (none when routing is off, or no registry is synced)."""
        if not self.settings.tools.routing:
            return Routed()
        query = phase_query(spec, index)
        router = self.current() if query is not None else None
        if router is None or query is None:
            return Routed()
        phase = spec.pipeline[index]
        return router.route(query, phase.role, dict(phase.inputs))
