"""Benchmark: what installing mother-harness costs, the base package and each heavy extra.

    .venv/bin/python scripts/bench_install.py [--before REV]

Each install goes into a fresh virtual environment under a temporary directory, from this tree (built
as pip builds it, not editable), pinned by constraints.txt, with pip's cache as it is (a second
install of a package reads it: the times are a warm machine's). Prints the seconds it took and the
environment's size (``du``), for the base package, then base + ``[ocr]``; with ``--before REV`` the base
package of that revision too (``git archive``), the baseline of the same run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _size_mb(path: Path) -> int:
    return int(
        subprocess.run(
            ["du", "-sm", str(path)], capture_output=True, text=True, check=True
        ).stdout.split()[0]
    )


def _install(venv: Path, target: str) -> float:
    started = time.monotonic()
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
         "-c", str(ROOT / "constraints.txt"), target],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="a revision whose base install is measured too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mother-bench-install-") as tmp:
        base = Path(tmp)
        rows = []
        if args.before:
            tree = base / "before"
            tree.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
            venv = base / "venv-before"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            took = _install(venv, str(tree))
            rows.append((f"{args.before} (baseline)", took, _size_mb(venv)))
        venv = base / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        empty = _size_mb(venv)
        took = _install(venv, str(ROOT))
        rows.append(("base", took, _size_mb(venv)))
        took = _install(venv, f"{ROOT}[ocr]")
        rows.append(("base + [ocr]", took, _size_mb(venv)))
        print(f"an empty virtual environment: {empty} MB")
        for name, seconds, size in rows:
            print(f"  {name:<28} {seconds:6.1f} s   {size:5d} MB")


if __name__ == "__main__":
    main()
