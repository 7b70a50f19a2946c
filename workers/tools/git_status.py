"""``git_status``: the branch and the staged, modified and untracked files of a repository in the run's
workspace, from the ``git`` binary's machine-readable output (``status --porcelain=v2 --branch -z``),
with optional locks off so a read-only tool never writes the index.

The repository is the workspace's, so whoever wrote the workspace (a model, a test it ran) wrote its
``.git/config`` too. git runs commands that config names (``core.fsmonitor``, filters, diff drivers,
hooks, a pager), so :func:`hardened` turns every one of them off on the command line, which wins over
every config file, and the system and global config files are not read at all."""

from __future__ import annotations

import os
import re
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


# git's environment: no system or global config, no prompts, no locks, no pager
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "LC_ALL": "C",
}
# settings that name a command git may run, overridden whatever the repository's config says
SAFE_SETTINGS = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.editor=true",
    "core.sshCommand=",
    "core.askPass=",
    "core.gitProxy=",
    "diff.external=",
    "protocol.allow=never",
    "credential.helper=",
    "gpg.program=",
    # the repository is a model's, usually not owned by the tool's user
    "safe.directory=*",
)
# per-driver settings naming a command: filter.<driver>.clean, diff.<driver>.textconv, ...
_DRIVER_COMMAND = re.compile(
    r"^(filter\.(.+)\.(clean|smudge|process)|diff\.(.+)\.(command|textconv)|merge\.(.+)\.driver)$",
    re.IGNORECASE,
)


def hardened(git: str, repo: Path, env: dict[str, str]) -> list[str]:
    """``git -C repo`` with every command-running setting of the repository's config (and what it
    includes) overridden. Listing the config's names only reads files: nothing runs."""
    listed = subprocess.run(
        [git, "-C", str(repo), *_settings(SAFE_SETTINGS), "config", "--list", "--name-only"],
        capture_output=True,
        env=env,
        check=False,
    )
    overrides = list(SAFE_SETTINGS)
    for name in listed.stdout.decode("utf-8", errors="replace").splitlines():
        if _DRIVER_COMMAND.match(name) or name.lower().startswith("alias."):
            overrides.append(f"{name}=")
    return [git, "-C", str(repo), *_settings(overrides)]


def _settings(pairs: tuple[str, ...] | list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("-c", pair)]


def run(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    repo = inside(workspace, inputs.get("repo_path", "."), "repo_path")
    if not repo.is_dir():
        raise ToolError(f"no directory {inputs.get('repo_path')!r} in the workspace")
    git = shutil.which("git")
    if git is None:
        raise ToolError("the git binary is not installed on this worker (install git)")
    # the tool's own environment (the sandbox's allowlist), git's settings on top
    # and no repository looked for above the workspace
    env = {**os.environ, **GIT_ENV, "GIT_CEILING_DIRECTORIES": str(workspace.resolve().parent)}
    done = subprocess.run(
        [*hardened(git, repo, env), "status", "--porcelain=v2", "--branch", "-z"],
        capture_output=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        text = why[-1] if why else f"git exited {done.returncode}"
        if "index.lock" in text:
            raise ToolTransient(f"git status: {text}")
        if "not a git repository" in text or "filesystem boundary" in text:
            raise ToolError(f"{inputs.get('repo_path')!r} is not a git repository")
        raise ToolError(f"git status: {text}")
    return parse_porcelain(done.stdout)
