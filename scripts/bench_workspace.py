"""Benchmark: what a workspace's hand-over between hosts costs (issue 54, workers/workspaces.py).

    .venv/bin/python scripts/bench_workspace.py [--sizes 1,50] [--repeat 15] [--store redis|s3]

One embedded server. For each workspace size (MB: source-like text files of 10-100 KB, a fifth of
the bytes random binary, which does not compress), measured ``--repeat`` times, each on a fresh run id:

- store, first: every file is new (what the first phase that writes them pays);
- restore, other host: into an empty root (what the next phase's host pays before its first tool);
- store, one file changed: what a later phase that edits one file pays;
- restore, same host: the root is already equal (the common case when phases stay on one host).

Printed: p50 / p99 ms, the bytes that crossed the network, and, in the same run, the baseline: one
pipelined SET and one GET of the workspace's bytes as they are (no hashing, no compression), and a
bare round trip (PING). With ``--store s3`` the contents go to an S3-compatible store (Ceph's gateway on
a one-node cluster, tests/s3_server.py: as root, with Debian's ceph-mon, ceph-osd and radosgw), and
the baseline is one PUT and one GET per file of the bytes as they are.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mother import keys
from mother.server import EmbeddedRedis
from scripts.bench import pct
from workers import workspaces

WORDS = [
    "def",
    "return",
    "self",
    "value",
    "import",
    "from",
    "class",
    "for",
    "in",
    "if",
    "else",
    "while",
    "with",
    "as",
    "yield",
    "lambda",
    "none",
    "true",
    "false",
    "print",
    "result",
    "items",
    "index",
    "count",
    "total",
    "phase",
    "run",
    "worker",
    "redis",
    "budget",
    "mother",
]


def make_workspace(root: Path, megabytes: float, seed: int) -> list[Path]:
    """Files adding up to ``megabytes``: 80% text of 10-100 KB, 20% random binary."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    target, made, paths = int(megabytes * 2**20), 0, []
    i = 0
    while made < target:
        size = min(target - made, rng.randint(10_000, 100_000))
        path = root / f"pkg{i % 7}" / f"file{i}.{'bin' if i % 5 == 4 else 'py'}"
        path.parent.mkdir(exist_ok=True)
        if i % 5 == 4:
            path.write_bytes(os.urandom(size))
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(size // 5 + 1))
            path.write_text(text[:size])
        made += size
        paths.append(path)
        i += 1
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,50", help="workspace sizes in MB")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--store", choices=("redis", "s3"), default="redis")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        server = EmbeddedRedis(dir=Path(tmp) / "redis", appendfsync="no").start()
        ceph = None
        try:
            client = server.client()
            blobs: workspaces.Blobs = workspaces.RedisBlobs(client)
            if args.store == "s3":
                ceph, s3 = _object_store()
                blobs = workspaces.S3Blobs(
                    s3,
                    BUCKET,
                    "workspaces/",
                    lambda run, shas: client.sadd(keys.workspace_blobs_key(run), *shas),
                )
            print(f"contents in {args.store}")
            print(f"{args.repeat} hand-overs per size; ms p50 / p99; bytes over the network")
            for size in (float(s) for s in args.sizes.split(",")):
                src = Path(tmp) / f"src-{size}"
                paths = make_workspace(src, size, seed=int(size * 1000))
                raw = sum(p.stat().st_size for p in paths)
                rows: dict[str, list[float]] = {
                    k: [] for k in ("store new", "restore other", "store 1 changed", "restore same")
                }
                sent: dict[str, int] = {}
                base_set, base_get, pings = [], [], []
                for n in range(args.repeat):
                    run_id = f"bench-{size}-{n}"
                    moved = workspaces.store(
                        workspaces.RedisPlace(client, run_id, blobs), run_id, src, cap_bytes=2**40
                    )
                    rows["store new"].append(moved.ms)
                    sent["store new"] = moved.sent_bytes
                    dst = Path(tmp) / f"dst-{size}-{n}"
                    moved = workspaces.restore(
                        workspaces.RedisPlace(client, run_id, blobs), run_id, dst
                    )
                    rows["restore other"].append(moved.ms)
                    sent["restore other"] = moved.sent_bytes
                    changed = dst / paths[n % len(paths)].relative_to(src)
                    changed.write_bytes(changed.read_bytes()[::-1])
                    moved = workspaces.store(
                        workspaces.RedisPlace(client, run_id, blobs), run_id, dst, cap_bytes=2**40
                    )
                    rows["store 1 changed"].append(moved.ms)
                    sent["store 1 changed"] = moved.sent_bytes
                    moved = workspaces.restore(
                        workspaces.RedisPlace(client, run_id, blobs), run_id, dst
                    )
                    rows["restore same"].append(moved.ms)
                    sent["restore same"] = moved.sent_bytes
                    shutil.rmtree(dst)
                    if ceph is not None:
                        base_set.append(_s3_baseline(s3, paths, n, put=True))
                        base_get.append(_s3_baseline(s3, paths, n, put=False))
                        shas = client.smembers(keys.workspace_blobs_key(run_id))
                        blobs.delete(run_id, [sha.decode() for sha in shas])
                        client.flushall()
                        continue
                    # the baseline: the same bytes as they are, one SET and one GET a file, pipelined
                    t = time.perf_counter()
                    pipe = client.pipeline(transaction=False)
                    for i, p in enumerate(paths):
                        pipe.set(f"base:{n}:{i}", p.read_bytes())
                    pipe.execute()
                    base_set.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    pipe = client.pipeline(transaction=False)
                    for i in range(len(paths)):
                        pipe.get(f"base:{n}:{i}")
                    pipe.execute()
                    base_get.append((time.perf_counter() - t) * 1000)
                    client.delete(*(f"base:{n}:{i}" for i in range(len(paths))))
                    t = time.perf_counter()
                    client.ping()
                    pings.append((time.perf_counter() - t) * 1000)
                    client.flushall()
                print(f"\n{size:g} MB workspace: {len(paths)} files, {raw:,} bytes")
                for name, samples in rows.items():
                    print(
                        f"  {name:<18} {statistics.median(samples):8.1f} / {pct(samples, 0.99):8.1f}"
                        f"   {sent[name]:>12,} bytes"
                    )
                put, get = ("PUT", "GET") if ceph is not None else ("SET", "GET")
                print(
                    f"  {'baseline ' + put:<18} {statistics.median(base_set):8.1f} / "
                    f"{pct(base_set, 0.99):8.1f}   {raw:>12,} bytes (as they are)"
                )
                print(
                    f"  {'baseline ' + get:<18} {statistics.median(base_get):8.1f} / "
                    f"{pct(base_get, 0.99):8.1f}   {raw:>12,} bytes"
                )
                if pings:
                    print(f"  {'PING':<18} {statistics.median(pings):8.3f}")
        finally:
            server.stop()
            if ceph is not None:
                ceph.stop()


BUCKET = "mother-bench"


def _object_store() -> tuple[Any, Any]:
    """Ceph's gateway on a one-node cluster and an S3 client of it, with the bench's bucket."""
    from botocore.config import Config

    from tests.s3_server import CephS3, unavailable

    why = unavailable()
    if why is not None:
        sys.exit(f"--store s3: {why}")
    ceph = CephS3().start()
    s3 = ceph.client(config=Config(max_pool_connections=workspaces.S3_CONCURRENCY))
    s3.create_bucket(Bucket=BUCKET)
    return ceph, s3


def _s3_baseline(s3: Any, paths: list[Path], n: int, *, put: bool) -> float:
    """One PUT (or GET) per file of the bytes as they are, as many in flight as the store sends
    (``workspaces.S3_CONCURRENCY``), in ms; the GETs delete what the PUTs made."""

    def one(item: tuple[int, Path]) -> None:
        i, p = item
        if put:
            s3.put_object(Bucket=BUCKET, Key=f"base/{n}/{i}", Body=p.read_bytes())
        else:
            s3.get_object(Bucket=BUCKET, Key=f"base/{n}/{i}")["Body"].read()

    t = time.perf_counter()
    with ThreadPoolExecutor(workspaces.S3_CONCURRENCY) as pool:
        list(pool.map(one, enumerate(paths)))
    ms = (time.perf_counter() - t) * 1000
    if not put:
        for i in range(len(paths)):
            s3.delete_object(Bucket=BUCKET, Key=f"base/{n}/{i}")
    return ms


if __name__ == "__main__":
    main()
