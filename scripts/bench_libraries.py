"""Benchmark: retrieval under a library policy against a bare FT.SEARCH, and redaction speed.

    .venv/bin/python scripts/bench_libraries.py [--chunks 100000] [--queries 500]

One embedded server (no AOF). A library of ``--chunks`` chunks (generated English-like text with some
fake PII in one chunk in ten) under the `personal` example policy (e-mail and phone redaction, log
every access). Printed:

- retrieval latency p50/p99 of ``--queries`` queries through ``retrieve`` (decision, the server-side
  caps, BM25 search, redaction of the hits, the audit record) beside the same query as a bare
  ``FT.SEARCH`` on the same connection: the ratio is our overhead;
- redaction MB/s of the five default patterns with RE2 (what the engine uses) and with Python ``re``
  on the same patterns, on clean text and on adversarial text built to make a backtracking engine
  slow (long runs of characters an e-mail pattern's classes accept, with no '@' to end them).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
import redis

from mother import keys
from mother.config import Settings
from mother.connection import connect
from mother.functions import load_functions
from mother.libraries.policy import load_policy
from mother.libraries.redaction import RedactionEngine
from mother.libraries.retrieval import query_text, retrieve, search_command
from mother.records.libraries import ensure_indexes, write_policy
from mother.runtime import Runtime
from mother.server import EmbeddedRedis
from schemas.library import DEFAULT_PATTERNS, LibraryAccessPolicy

ROOT = Path(__file__).resolve().parents[1]
WORDS = [
    "retry",
    "budget",
    "backoff",
    "jitter",
    "queue",
    "worker",
    "phase",
    "model",
    "token",
    "context",
    "summary",
    "library",
    "policy",
    "audit",
    "ledger",
    "spend",
    "limit",
    "cancel",
    "review",
    "arbiter",
    "conflict",
    "verdict",
    "tool",
    "registry",
    "artifact",
    "archive",
    "retention",
    "schedule",
    "report",
    "metric",
    "latency",
    "throughput",
    "window",
    "chunk",
    "index",
    "search",
]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(8, 16))).capitalize() + "."


def fill(client: redis.Redis, library_id: str, count: int) -> None:
    rng = random.Random(3)
    step = 2_000
    for start in range(0, count, step):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + step)):
            text = " ".join(sentence(rng) for _ in range(6))
            if i % 10 == 0:
                text += f" Contact user{i}@example.com or (555) 123-{i % 10_000:04d}."
            pipe.execute_command(
                "JSON.SET",
                keys.chunk_key(library_id, f"doc-{i // 50}", i % 50),
                "$",
                orjson.dumps(
                    {
                        "library_id": library_id,
                        "document_id": f"doc-{i // 50}",
                        "chunk_id": f"doc-{i // 50}:{i % 50}",
                        "position": i % 50,
                        "text": text,
                    }
                ),
            )
        pipe.execute()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def redaction_speed(policy: LibraryAccessPolicy) -> None:
    rng = random.Random(5)
    clean = " ".join(sentence(rng) for _ in range(20_000))
    # an e-mail's local part accepts these; no '@' ever ends the run, so a backtracking engine retries
    # every start position against every length
    adversarial = ("a." * 2_000 + " ") * 40
    engine = RedactionEngine(policy)
    compiled = [re.compile(p.regex) for p in DEFAULT_PATTERNS]
    print(
        f"\nredaction of the five default patterns ({len(clean) / 1e6:.1f} MB clean, "
        f"{len(adversarial) / 1e6:.2f} MB adversarial):"
    )
    for name, text in (("clean", clean), ("adversarial", adversarial)):
        t = time.perf_counter()
        engine.apply(text)
        re2_s = time.perf_counter() - t
        t = time.perf_counter()
        for pattern in compiled:
            for _ in pattern.finditer(text):
                pass
            if time.perf_counter() - t > 60:
                break
        py_s = time.perf_counter() - t
        print(
            f"  {name:<12} RE2 {len(text) / 1e6 / re2_s:>8.1f} MB/s   Python re "
            f"{len(text) / 1e6 / py_s:>8.2f} MB/s   ({py_s / re2_s:.1f}x the time)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    policy = load_policy(ROOT / "examples" / "libraries" / "personal.yaml")
    policy.retrieval_limits.max_queries_per_run = 10**5
    policy.retrieval_limits.max_queries_per_user_daily = 10**6
    with (
        tempfile.TemporaryDirectory(prefix="bench-lib-") as tmp,
        EmbeddedRedis(
            dir=Path(tmp) / "redis", appendfsync="no", extra_args=["--appendonly", "no"]
        ) as server,
    ):
        client = connect(server.url)
        load_functions(client)
        rt = Runtime(settings=Settings(redis_url=server.url), redis=client)
        ensure_indexes(client)
        write_policy(client, policy, rt.clock.now_iso())
        t0 = time.perf_counter()
        fill(client, "personal", args.chunks)
        # wait for the index to take everything in
        while True:
            info = client.execute_command("FT.INFO", keys.CHUNK_INDEX)
            fields = dict(zip(info[::2], info[1::2], strict=False))
            if int(fields.get("num_docs", 0)) >= args.chunks and str(fields.get("indexing")) in (
                "0",
                "b'0'",
            ):
                break
            time.sleep(0.2)
        print(f"{args.chunks:,} chunks stored and indexed in {time.perf_counter() - t0:.0f} s")
        rng = random.Random(9)
        queries = [" ".join(rng.choices(WORDS, k=3)) for _ in range(args.queries)]
        ours, bare = [], []
        for i, q in enumerate(queries):
            t = time.perf_counter()
            got = retrieve(
                rt,
                run_id="run-bench",
                user_id="bench",
                role="coder",
                model="scripted",
                library_id="personal",
                query=q,
            )
            ours.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            client.execute_command(
                *search_command(
                    query_text("personal", q), policy.retrieval_limits.max_chunks_per_query
                )
            )
            bare.append((time.perf_counter() - t) * 1000)
            if i == 0:
                print(f"first query: {len(got.hits)} hits, {got.redactions} redactions")
        print(
            f"retrieval ({args.queries} queries, {policy.retrieval_limits.max_chunks_per_query} hits each):\n"
            f"  through retrieve   p50 {statistics.median(ours):7.2f} ms  p99 {pct(ours, 0.99):7.2f} ms\n"
            f"  bare FT.SEARCH     p50 {statistics.median(bare):7.2f} ms  p99 {pct(bare, 0.99):7.2f} ms\n"
            f"  ratio p50 {statistics.median(ours) / statistics.median(bare):.2f}x, "
            f"overhead p50 {statistics.median(ours) - statistics.median(bare):.2f} ms"
        )
    redaction_speed(policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
