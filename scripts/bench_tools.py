"""Benchmark: routing a task to the tool registry, RE2 against Python's ``re`` on the same patterns.

    .venv/bin/python scripts/bench_tools.py [--tools 100] [--queries 1000] [--repeat 5]

One process, no server. ``--tools`` synthetic tools (the 8 shipped ones plus generated ones, each with
3 patterns and 4 keywords in the shipped manifests' style) and ``--queries`` tasks (a third handled by
a shipped tool, a third by a generated one, a third by none). Printed, as medians of ``--repeat`` runs:

- routing decisions/s with Mother's router (patterns compiled with RE2) and with the same router on
  Python ``re`` (the baseline), and their ratio; the two must route every query the same way;
- a pathological pattern, ``(a+)+$`` on 'a' * n + 'b', with each engine (Python ``re`` is exponential
  in n; it is stopped at the first n past 1 s);
- JSON Schema checks/s of the shipped input schemas with ``jsonschema`` (used) and ``fastjsonschema``
  (if installed), to say whether the faster validator is worth its code generation;
- one registry tool call through the executor (a forked process with its timeout) against the same
  function called in-process: the price of being able to kill a tool.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mother.config import Settings
from mother.tools import ToolRouter, build_registry, load_manifests
from mother.tools.patterns import pattern_source
from schemas.tool import DeterministicTool

NOW = "2026-11-24T00:00:00.000Z"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "vector",
    "matrix",
    "table",
    "ledger",
    "invoice",
    "report",
    "chart",
    "schema",
    "index",
    "backup",
    "archive",
    "deploy",
    "render",
    "upload",
    "export",
]


def synthetic(count: int, shipped: list[DeterministicTool]) -> list[DeterministicTool]:
    rng = random.Random(11)
    tools = list(shipped)
    base = shipped[0].model_dump()
    for i in range(count - len(shipped)):
        a, b, c = rng.sample(WORDS, 3)
        tools.append(
            DeterministicTool.model_validate(
                {
                    **base,
                    "tool_id": f"gen_{i:03d}",
                    "tool_name": f"Generated {i}",
                    "handles_patterns": [
                        f"/{a}.*{b}.*(?P<item_{i}>\\w+)\\.{c}{i}/i",
                        f"/\\b{a}{i} {b}\\b/i",
                        f"/(?:make|build) (?:the )?{c}{i}/i",
                    ],
                    "keywords": [f"{a}{i}", f"{b}{i}", f"{c}{i}", f"tool{i}"],
                    "priority": rng.randint(1, 94),
                    "allowed_roles": ["*"],
                    "input_schema": {"type": "object"},
                }
            )
        )
    return tools


def queries(count: int, tools: list[DeterministicTool]) -> list[str]:
    rng = random.Random(5)
    shipped_tasks = [
        "run the tests with pytest",
        "check git status of the repo",
        "Resize image photo.png to 640x480",
        "extract text from image scan.png",
        "render text 'HELLO' to image hi.png",
    ]
    out = []
    for n in range(count):
        kind = n % 3
        if kind == 0:
            out.append(rng.choice(shipped_tasks))
        elif kind == 1:
            i = rng.randrange(len(tools) - 8)
            out.append(f"please make the {tools[8 + i].keywords[2]} for the quarterly numbers")
        else:
            out.append(" ".join(rng.choices(WORDS, k=12)) + " nothing to see")
    return out


def python_re_router(registry: Any) -> ToolRouter:
    """The same router on Python's ``re``, pattern by pattern (the baseline)."""
    return ToolRouter(
        registry, compile=lambda p, where="": re.compile(pattern_source(p)), prefilter=False
    )


def re2_each_router(registry: Any) -> ToolRouter:
    """The router on RE2 without its pattern set: each pattern searched on its own."""
    return ToolRouter(registry, prefilter=False)


def decisions(router: ToolRouter, tasks: list[str]) -> tuple[float, list[str | None]]:
    picked = []
    started = time.perf_counter()
    for task in tasks:
        routed = router.route(task, "coder")
        picked.append(routed.candidates[0].tool_id if routed.candidates else None)
    return len(tasks) / (time.perf_counter() - started), picked


def pathological() -> None:
    import re2

    print("\npathological pattern (a+)+$ on 'a' * n + 'b' (seconds):")
    print(f"{'n':>6} {'RE2':>10} {'Python re':>12}")
    r2, py = re2.compile(r"(a+)+$"), re.compile(r"(a+)+$")
    stopped = False
    for n in (10, 16, 20, 22, 24, 26, 100_000):
        text = "a" * n + "b"
        t = time.perf_counter()
        assert r2.search(text) is None
        t_re2 = time.perf_counter() - t
        if stopped or n > 1000:
            print(f"{n:>6} {t_re2:>10.6f} {'(not run)':>12}")
            continue
        t = time.perf_counter()
        assert py.search(text) is None
        t_py = time.perf_counter() - t
        print(f"{n:>6} {t_re2:>10.6f} {t_py:>12.4f}")
        stopped = t_py > 1.0


def schema_checks(tools: list[DeterministicTool], rounds: int) -> None:
    from jsonschema import Draft202012Validator

    cases = [
        (
            t.input_schema,
            {"repo_path": ".", "test_command": "pytest", "path": "a", "image_path": "x"},
        )
        for t in tools[:8]
    ]
    validators = [Draft202012Validator(s) for s, _ in cases]
    t = time.perf_counter()
    for _ in range(rounds):
        for v, (_, value) in zip(validators, cases, strict=True):
            v.is_valid(value)
    js = rounds * len(cases) / (time.perf_counter() - t)
    line = f"\nJSON Schema checks/s on the shipped input schemas: jsonschema {js:,.0f}"
    try:
        import fastjsonschema
    except ImportError:
        print(line + "; fastjsonschema not installed")
        return
    compiled = [fastjsonschema.compile(s) for s, _ in cases]
    t = time.perf_counter()
    for _ in range(rounds):
        for check, (_, value) in zip(compiled, cases, strict=True):
            with contextlib.suppress(fastjsonschema.JsonSchemaException):
                check(value)
    fast = rounds * len(cases) / (time.perf_counter() - t)
    print(line + f", fastjsonschema {fast:,.0f} ({fast / js:.1f}x)")


def executor_cost(rounds: int) -> None:
    from workers.tools import shipped_tools
    from workers.tools.executor import ToolExecutor
    from workers.tools.files import list_dir

    tool = shipped_tools()["list_dir"]
    ex = ToolExecutor()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / "a.txt").write_text("a")
        t = time.perf_counter()
        for _ in range(rounds):
            list_dir(ws, {"path": "."})
        inproc = (time.perf_counter() - t) / rounds * 1000
        t = time.perf_counter()
        for _ in range(rounds):
            assert ex.run(tool, ws, {"path": "."}).ok
        forked = (time.perf_counter() - t) / rounds * 1000
    print(
        f"\none list_dir call: in-process {inproc:.3f} ms, through the executor (fork, contracts, "
        f"timeout) {forked:.3f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=100)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cfg = Settings()
    shipped = load_manifests(cfg)
    tools = synthetic(args.tools, shipped)
    registry = build_registry(cfg, tools, NOW)
    tasks = queries(args.queries, tools)
    routers = {
        "RE2 set (Mother)": ToolRouter(registry),
        "RE2 each": re2_each_router(registry),
        "Python re (baseline)": python_re_router(registry),
    }
    rates: dict[str, list[float]] = {name: [] for name in routers}
    picks: dict[str, list[str | None]] = {}
    for _ in range(args.repeat):
        for name, router in routers.items():
            rate, picks[name] = decisions(router, tasks)
            rates[name].append(rate)
    first = next(iter(picks.values()))
    assert all(p == first for p in picks.values()), "the engines routed a query differently"
    handled = sum(p is not None for p in first)
    base = statistics.median(rates["Python re (baseline)"])
    print(
        f"{len(tools)} tools ({sum(len(t.handles_patterns) for t in tools)} patterns) x "
        f"{len(tasks)} queries ({handled} routed to a tool), median of {args.repeat}:"
    )
    for name, got in rates.items():
        rate = statistics.median(got)
        print(
            f"  {name:<22} {rate:>9,.0f} decisions/s  {1e6 / rate:>8,.1f} us each  "
            f"{rate / base:>5.2f}x the baseline"
        )
    pathological()
    schema_checks(tools, 2000)
    executor_cost(200)
    return 0


if __name__ == "__main__":
    sys.exit(main())
