"""``run_tests``: run a test command in the run's workspace (no shell: the command is split like a shell
would, and its program must be a test runner of :data:`RUNNERS`) and count the tests from the runner's
own summary: pytest's ``3 passed, 1 failed in 0.2s``, unittest's ``Ran 4 tests`` + ``FAILED
(failures=1)``, jest's ``Tests: 1 failed, 3 passed, 4 total``. Failing tests are a result, not a
failure of the tool; a runner that is not installed, a summary that cannot be found, or no tests found
at all, is. Without a ``test_command`` the workspace says which runner: a ``package.json`` is
JavaScript (``npm test``), anything else Python (``python -m pytest -q``)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mother.errors import ToolError
from workers.tools.files import inside

__all__ = ["RUNNERS", "parse_summary", "run"]

# programs a test command may start (python runs only as `python -m <runner>`, node only as
# `node --test`)
RUNNERS = {
    "pytest",
    "python",
    "python3",
    "node",
    "npm",
    "npx",
    "jest",
    "mocha",
    "yarn",
    "pnpm",
    "tox",
}
PYTHON_MODULES = {"pytest", "unittest"}
# what the tool keeps of each stream (the model sees the counts and the end of the output)
KEEP_CHARS = 20_000

_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")
_PYTEST_LINE = re.compile(r"^=*\s*(?:\d+ \w+(?:, )?)+.* in [\d.]+s", re.MULTILINE)
_NO_TESTS = re.compile(r"^=*\s*no tests ran in [\d.]+s", re.MULTILINE)
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in", re.MULTILINE)
_UNITTEST_FAILED = re.compile(r"^FAILED \(([^)]*)\)", re.MULTILINE)
_JEST = re.compile(r"^Tests:\s+(.*?)(\d+) total", re.MULTILINE)
# mocha's spec reporter: "  2 passing (13ms)", "  1 failing", "  1 pending"
_MOCHA = re.compile(r"^\s*(\d+) (passing|failing|pending)\b", re.MULTILINE)
# node's own test runner (node --test), its tap ("# pass 2") and spec ("\u2139 pass 2": an
# information sign) reporters
_NODE = re.compile(r"^(?:#|\u2139) (tests|pass|fail|cancelled|skipped|todo) (\d+)$", re.MULTILINE)


def parse_summary(text: str) -> tuple[int, int, int] | None:
    """(tests_run, tests_passed, tests_failed) from a runner's summary in ``text``, or None."""
    lines = _PYTEST_LINE.findall(text)
    if lines:
        counts: dict[str, int] = {}
        for number, kind in _PYTEST_COUNT.findall(lines[-1]):
            counts[kind.rstrip("s") if kind.startswith("error") else kind] = int(number)
        passed = counts.get("passed", 0) + counts.get("xpassed", 0)
        failed = counts.get("failed", 0) + counts.get("error", 0)
        return passed + failed + counts.get("xfailed", 0), passed, failed
    if _NO_TESTS.search(text):
        return 0, 0, 0
    ran = _UNITTEST_RAN.findall(text)
    if ran:
        total = int(ran[-1])
        failed = skipped = 0
        verdict = _UNITTEST_FAILED.findall(text)
        if verdict:
            for part in verdict[-1].split(","):
                name, _, number = part.strip().partition("=")
                if name in ("failures", "errors", "unexpected successes"):
                    failed += int(number or 0)
        skipped_match = re.findall(r"skipped=(\d+)", text)
        if skipped_match:
            skipped = int(skipped_match[-1])
        return total, max(0, total - failed - skipped), failed
    jest = _JEST.findall(text)
    if jest:
        parts, total = jest[-1]
        found = dict((k, int(v)) for v, k in re.findall(r"(\d+) (failed|passed)", parts))
        return int(total), found.get("passed", 0), found.get("failed", 0)
    node = dict((kind, int(number)) for kind, number in _NODE.findall(text))
    if "tests" in node and "pass" in node:
        failed = node.get("fail", 0) + node.get("cancelled", 0)
        return node["pass"] + failed, node["pass"], failed
    mocha = dict((kind, int(number)) for number, kind in _MOCHA.findall(text))
    if "passing" in mocha or "failing" in mocha:
        passed, failed = mocha.get("passing", 0), mocha.get("failing", 0)
        return passed + failed, passed, failed
    return None


def _argv(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ToolError(f"test_command {command!r} cannot be split into words: {exc}") from None
    if not argv:
        raise ToolError("test_command is empty")
    program = argv[0]
    if program not in RUNNERS:
        raise ToolError(
            f"test_command must start with a test runner ({', '.join(sorted(RUNNERS))}), "
            f"not {program!r}"
        )
    if program == "pytest" or (program in ("python", "python3") and argv[1:3] == ["-m", "pytest"]):
        _need_pytest()
    if program == "pytest":
        # the worker's own pytest, whatever is on PATH
        return [sys.executable, "-m", "pytest", *argv[1:]]
    if program == "node" and "--test" not in argv[1:]:
        raise ToolError("node runs here only as its test runner: `node --test`")
    if program in ("python", "python3"):
        if len(argv) < 3 or argv[1] != "-m" or argv[2] not in PYTHON_MODULES:
            raise ToolError("python runs here only as `python -m pytest` or `python -m unittest`")
        # the worker's own interpreter, where pytest is installed
        return [sys.executable, *argv[1:]]
    found = shutil.which(program)
    if found is None:
        raise ToolError(f"test runner {program!r} is not installed on this worker")
    return [found, *argv[1:]]


def _need_pytest() -> None:
    """pytest is the run-tests extra's: a worker installed without it says how to get it."""
    if importlib.util.find_spec("pytest") is None:
        raise ToolError(
            "pytest is not installed on this worker host: install it with "
            "pip install 'mother-harness[run-tests]' (or name another runner in test_command)"
        )


# a test command named only by its runner
_SHORT = {"unittest": "python -m unittest"}


def runner_for(repo: Path, asked: str | None) -> str:
    """The test command: the one asked for (a bare runner name spelled out), else the workspace's."""
    if asked:
        return _SHORT.get(asked.strip(), asked)
    if (repo / "package.json").is_file():
        return "npm test --silent"
    return "python -m pytest -q"


def run(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    repo = inside(workspace, inputs.get("repo_path", "."), "repo_path")
    if not repo.is_dir():
        raise ToolError(f"no directory {inputs.get('repo_path')!r} in the workspace")
    command = runner_for(repo, inputs.get("test_command"))
    argv = _argv(command)
    extra = inputs.get("env_vars") or {}
    env = {
        **os.environ,
        **{str(k): str(v) for k, v in extra.items()},
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=repo, capture_output=True, env=env, stdin=subprocess.DEVNULL, check=False
    )
    duration_ms = int((time.monotonic() - started) * 1000)
    stdout = done.stdout.decode("utf-8", errors="replace")
    stderr = done.stderr.decode("utf-8", errors="replace")
    if "No module named" in stderr and done.returncode != 0 and not stdout.strip():
        raise ToolError(f"{' '.join(argv[:3])}: {stderr.strip().splitlines()[-1]}")
    counts = parse_summary(stdout + "\n" + stderr)
    if counts is None:
        tail = (stderr or stdout).strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise ToolError(f"no test summary in the output of {argv[0]} ({tail[0][:300]})")
    tests_run, passed, failed = counts
    if tests_run == 0:
        raise ToolError(
            f"{command} found no tests in {inputs.get('repo_path', '.')!r} (a run of no tests proves "
            "nothing); name the tests' runner with test_command, or add tests"
        )
    return {
        "exit_code": done.returncode,
        "stdout": stdout[-KEEP_CHARS:],
        "stderr": stderr[-KEEP_CHARS:],
        "duration_ms": duration_ms,
        "tests_run": tests_run,
        "tests_passed": passed,
        "tests_failed": failed,
    }
