"""Benchmark: redaction recall, precision and speed on the corpus (tests/redaction_corpus.py).

    .venv/bin/python scripts/bench_redaction.py [--repeat 20]

One process, no server. Two sets of patterns through the one engine (mother/libraries/redaction.py), in
the same run:

- baseline: the five defaults and the financials example's salary pattern as they were before the corpus
  (the spec's patterns with what the PDF conversion damaged fixed; no Luhn, no context);
- now: the shipped defaults (schemas/library.py) and examples/libraries/financials.yaml's salary pattern.

Printed per pattern: secrets, recall, redactions, precision; then both on the held-out strings alone
(written after the patterns were tuned); then per pattern on the international variants (other
scripts, national phone formats, IBANs and other languages' account numbers, other currencies and digit
groupings: tuned on one part, the other held out); then the speed of each over the whole corpus (MB/s and µs per
string), and what the misses and wrong redactions of the shipped patterns are.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mother.libraries.redaction import RedactionEngine
from schemas.library import LibraryAccessPolicy, RedactionPattern
from tests.redaction_corpus import CORPUS, HELD_OUT, INTERNATIONAL, INTERNATIONAL_HELD_OUT, score
from tests.test_redaction_corpus import corpus_engine

BEFORE = [
    ("ssn", r"\b\d{3}-\d{2}-\d{4}\b", "high"),
    ("credit_card", r"\b\d{4}[ -]?\d{4}[ -]?\d{4}[ -]?\d{4}\b", "high"),
    ("email", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b", "medium"),
    ("phone", r"(?:\(\d{3}\)[ .-]?|\b\d{3}[ .-])\d{3}[ .-]\d{4}\b|\b\d{10}\b", "medium"),
    ("account_number", r"(?i)\baccount(?:\s*(?:no\.?|number|#|:))*\s*\d{8,12}\b", "high"),
    ("salary", r"\$\d{1,3}(?:,\d{3})+(?:\.\d{2})?", "high"),
]


def baseline_engine() -> RedactionEngine:
    patterns = [
        RedactionPattern(pattern_id=i, name=i, regex=r, replacement="***", severity=s)  # type: ignore[arg-type]
        for i, r, s in BEFORE
    ]
    policy = LibraryAccessPolicy.model_validate(
        {
            "library_id": "bench",
            "library_name": "bench",
            "sensitivity": "private",
            "allowed_agents": ["*"],
            "allowed_models": ["*"],
            "redaction_rules": {"custom_patterns": patterns},
        }
    )
    return RedactionEngine(policy)


def speed(engine: RedactionEngine, texts: list[str], repeat: int) -> tuple[float, float]:
    """MB/s and µs per string, best of ``repeat`` passes over ``texts``."""
    size = sum(len(t.encode()) for t in texts)
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for text in texts:
            engine.apply(text)
        best = min(best, time.perf_counter() - started)
    return size / best / 1e6, best / len(texts) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    engines = {"baseline": baseline_engine(), "now": corpus_engine()}
    scores = {name: score(engine) for name, engine in engines.items()}
    print(
        f"corpus: {len(CORPUS)} strings, {sum(len(s) for _, s in CORPUS)} secrets, "
        f"{sum(1 for _, s in CORPUS if not s)} look-alike strings"
    )
    print(
        f"{'pattern':<16}{'secrets':>8}  {'recall base':>11} {'now':>6}  {'precision base':>14} {'now':>6}"
    )
    now = scores["now"]
    for pattern_id in sorted(now.secrets):
        base = scores["baseline"]
        print(
            f"{pattern_id:<16}{now.secrets[pattern_id]:>8}  {base.recall(pattern_id):>11.3f} "
            f"{now.recall(pattern_id):>6.3f}  {base.precision(pattern_id):>14.3f} "
            f"{now.precision(pattern_id):>6.3f}"
        )
    base = scores["baseline"]
    print(
        f"{'all':<16}{sum(now.secrets.values()):>8}  {base.recall():>11.3f} {now.recall():>6.3f}  "
        f"{base.precision():>14.3f} {now.precision():>6.3f}"
    )
    for name, engine in engines.items():
        held = score(engine, HELD_OUT)
        print(
            f"held-out ({len(HELD_OUT)} strings), {name}: recall {held.recall():.3f}, "
            f"precision {held.precision():.3f}"
        )
    for label, corpus in (
        ("international (tuned on)", INTERNATIONAL),
        ("international, held out", INTERNATIONAL_HELD_OUT),
    ):
        print(f"{label}: {len(corpus)} strings")
        measured = {name: score(engine, corpus) for name, engine in engines.items()}
        for pattern_id in sorted(measured["now"].secrets):
            row = "  ".join(
                f"{name} recall {m.recall(pattern_id):.3f} precision {m.precision(pattern_id):.3f}"
                for name, m in measured.items()
            )
            print(f"  {pattern_id:<16}{measured['now'].secrets[pattern_id]:>4}  {row}")
        print("  missed now:", measured["now"].missed or "none")
        print("  wrongly redacted now:", measured["now"].wrong or "none")
    texts = [text for text, _ in CORPUS]
    for name, engine in engines.items():
        mbs, per = speed(engine, texts, args.repeat)
        print(f"speed, {name}: {mbs:.2f} MB/s, {per:.1f} µs per string")
    print("missed now:", now.missed or "none")
    print("wrongly redacted now:", now.wrong or "none")


if __name__ == "__main__":
    main()
