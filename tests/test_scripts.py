"""scripts/_bootstrap.sh: ./scripts/demo and ./scripts/test share one .venv and do not reinstall each
other's environment (a fake interpreter records each pip install); and what a missing part does in CI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_demo_and_test_do_not_reinstall_each_others_environment(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "_bootstrap.sh", tmp_path / "scripts" / "_bootstrap.sh")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "constraints.txt").write_text("a==1\n")
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    log = tmp_path / "installs.log"
    fake = venv_bin / "python"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)

    def bootstrap(extras: str) -> None:
        script = f'source scripts/_bootstrap.sh; bootstrap "{extras}"'
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    def installs() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    bootstrap("test")
    assert len(installs()) == 1 and installs()[0].endswith("-e .[test]")
    bootstrap("")  # the demo after the tests
    bootstrap("test")
    bootstrap("")
    assert len(installs()) == 1
    (tmp_path / "constraints.txt").write_text("a==2\n")
    bootstrap("")  # a changed pin installs again
    assert len(installs()) == 2 and installs()[1].endswith("-e .")
    bootstrap("test")  # the tests then add their extras
    assert len(installs()) == 3


def test_a_missing_part_skips_on_a_laptop_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test whose real part is missing skips, saying why; with CI=true (what .ci/run sets after it
    installed every part) it fails instead: nothing skips silently in CI."""
    from tests.conftest import need

    need(None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no bwrap"):
        need("no bwrap")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI: no bwrap"):
        need("no bwrap")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "export CI=true" in ci
    for package in ("bubblewrap", "chromium", "iproute2", "radosgw", "redis-tools", "npm", "mocha"):
        assert package in ci


@pytest.mark.parametrize("script", sorted((ROOT / "scripts").glob("*.py")), ids=lambda p: p.name)
def test_every_script_imports(script: Path) -> None:
    """Every script in scripts/ imports (its main is not run): one that names what the product no longer
    has fails here, not when someone measures with it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"script_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # (a dataclass looks its module up by name)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
