"""``git_status``: the branch and the staged, modified and untracked files of a repository in the run's
workspace, from the ``git`` binary's machine-readable output (``status --porcelain=v2 --branch -z``),
with optional locks off so a read-only tool never writes the index."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from mother.errors import ToolError, ToolTransient
from workers.tools.files import inside

__all__ = ["parse_porcelain", "run"]


def parse_porcelain(raw: bytes) -> dict[str, Any]:
    """``git status --porcelain=v2 --branch -z`` output as the tool's output object."""
    branch: str | None = None
    staged: list[str] = []
    modified: list[str] = []
    untracked: list[str] = []
    fields = raw.decode("utf-8", errors="replace").split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        if entry.startswith("# branch.head "):
            head = entry.removeprefix("# branch.head ")
            branch = None if head == "(detached)" else head
        elif entry[0] in "12u":
            # ordinary (1), renamed or copied (2: the original path follows), unmerged (u)
            parts = entry.split(" ", {"1": 8, "2": 9, "u": 10}[entry[0]])
            xy, path = parts[1], parts[-1]
            if entry[0] == "2":
                i += 1
            if entry[0] == "u" or xy[0] != ".":
                staged.append(path)
            if entry[0] == "u" or xy[1] != ".":
                modified.append(path)
        elif entry.startswith("? "):
            untracked.append(entry[2:])
    return {
        "branch": branch,
        "modified_files": modified,
        "staged_files": staged,
        "untracked_files": untracked,
        "clean": not (staged or modified or untracked),
    }


def run(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    repo = inside(workspace, inputs.get("repo_path", "."), "repo_path")
    if not repo.is_dir():
        raise ToolError(f"no directory {inputs.get('repo_path')!r} in the workspace")
    git = shutil.which("git")
    if git is None:
        raise ToolError("the git binary is not installed on this worker (install git)")
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    done = subprocess.run(
        [git, "-C", str(repo), "status", "--porcelain=v2", "--branch", "-z"],
        capture_output=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        text = why[-1] if why else f"git exited {done.returncode}"
        if "index.lock" in text:
            raise ToolTransient(f"git status: {text}")
        if "not a git repository" in text:
            raise ToolError(f"{inputs.get('repo_path')!r} is not a git repository")
        raise ToolError(f"git status: {text}")
    return parse_porcelain(done.stdout)
