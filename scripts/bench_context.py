"""Benchmark: composing 500 sections (2 million tokens) into a 128k window, beside reading the bytes from Redis.

    .venv/bin/python scripts/bench_context.py [--repeat 5] [--chunks 500] [--tokens 2000000]

One process, one embedded server, one run. The material is English prose (Python's own
documentation topics, reshuffled by paragraph) cut into ``--chunks`` documents totalling
``--tokens`` tokens by the raw estimate, spread over retrieval_hits, session_summaries and
project_knowledge of one RunSpec, composed for the spec's LocalModelBudget (128,000-token
window, 110,000 available). Printed, as medians of ``--repeat`` runs:

- token counting throughput (MB/s): the estimate, and a real BPE ``tokenizer.json``
  (trained here, offline, on the same corpus) through the ``tokenizers`` library;
- composition time with each counter (count, plan, extractive summaries, manifest hash);
- the baseline: the same bytes read back from Redis (500 GETs in one pipeline), MB/s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

from mother.config import ModelConfig, Settings
from mother.context import compose
from mother.server import EmbeddedRedis
from mother.tokens import EstimateCounter, TokenizerCounter
from schemas import RunSpec

NOW = "2026-11-22T00:00:00.000Z"


def corpus(chunks: int, tokens: int) -> list[str]:
    from pydoc_data.topics import topics

    paragraphs = [
        p.strip() for t in topics.values() for p in t.split("\n\n") if len(p.strip()) > 40
    ]
    rng = random.Random(7)
    # bytes per chunk: the raw estimate counts 3 bytes a token
    size = tokens * 3 // chunks
    out = []
    for _ in range(chunks):
        text = ""
        while len(text) < size:
            text += rng.choice(paragraphs) + "\n\n"
        out.append(text[:size].encode("ascii", "ignore").decode())
    return out


def train_tokenizer(texts: list[str], path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=16_000,
            special_tokens=["[UNK]"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.save(str(path))


def timed(repeat: int, fn) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=500)
    parser.add_argument("--tokens", type=int, default=2_000_000)
    args = parser.parse_args()
    texts = corpus(args.chunks, args.tokens)
    mb = sum(len(t) for t in texts) / 1e6
    third = len(texts) // 3
    spec = RunSpec(
        user_id="bench",
        task="How do the with statement and context managers handle exceptions?",
        pipeline=[{"name": "research", "role": "researcher", "model": "local"}],
        context={
            "retrieval_hits": texts[:third],
            "session_summaries": texts[third : 2 * third],
            "project_knowledge": texts[2 * third :],
        },
    )
    with (
        tempfile.TemporaryDirectory(prefix="mother-bench-") as tmp,
        EmbeddedRedis(dir=Path(tmp) / "redis", appendfsync="no") as server,
    ):
        tok_path = Path(tmp) / "tokenizer.json"
        train_tokenizer(texts[:50], tok_path)
        window = {
            "max_tokens": 128_000,
            "reserved_for_system": 3_000,
            "reserved_for_output": 15_000,
        }
        estimate = Settings(models={"local": ModelConfig(provider="scripted", **window)})
        tokenizer = Settings(
            models={"local": ModelConfig(provider="scripted", tokenizer=tok_path, **window)}
        )

        client = redis.Redis.from_url(server.url)
        pipe = client.pipeline(transaction=False)
        for i, t in enumerate(texts):
            pipe.set(f"bench:chunk:{i}", t)
        pipe.execute()

        def read_back() -> int:
            p = client.pipeline(transaction=False)
            for i in range(len(texts)):
                p.get(f"bench:chunk:{i}")
            return sum(len(v) for v in p.execute())

        t_redis, got = timed(args.repeat, read_back)
        assert got == sum(len(t) for t in texts)
        t_est_count, est_counts = timed(args.repeat, lambda: EstimateCounter().count_many(texts))
        real = TokenizerCounter(tok_path)
        t_tok_count, tok_counts = timed(args.repeat, lambda: real.count_many(texts))
        t_est_comp, comp_est = timed(
            args.repeat, lambda: compose(estimate, "run-bench", spec, 0, [], now_iso=NOW)
        )
        t_tok_comp, comp_tok = timed(
            args.repeat, lambda: compose(tokenizer, "run-bench", spec, 0, [], now_iso=NOW)
        )

    print(
        f"material: {len(texts)} chunks, {mb:.2f} MB, {sum(est_counts):,} tokens by the estimate, "
        f"{sum(tok_counts):,} by the BPE tokenizer; window 128,000 (110,000 available); median of {args.repeat}"
    )
    rows = [
        ("baseline: read the bytes from Redis (500 GETs, 1 pipeline)", t_redis, ""),
        ("count tokens: estimate", t_est_count, ""),
        ("count tokens: tokenizer.json (tokenizers, batch)", t_tok_count, ""),
        ("compose: estimate counter", t_est_comp, _shape(comp_est)),
        ("compose: tokenizer.json counter", t_tok_comp, _shape(comp_tok)),
    ]
    print(f"{'':58} {'ms':>9} {'MB/s':>9} {'x Redis read':>13}")
    for name, seconds, note in rows:
        print(
            f"{name:58} {seconds * 1000:9.1f} {mb / seconds:9.1f} {seconds / t_redis:13.2f}  {note}"
        )
    return 0


def _shape(comp) -> str:
    ctx = comp.context
    return f"{ctx.total_tokens:,} tokens composed, {len(comp.summaries)} summaries"


if __name__ == "__main__":
    sys.exit(main())
