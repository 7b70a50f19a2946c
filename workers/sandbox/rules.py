"""The deployment's rules for a tool call, sandboxed or not: its limits, whether it may have the
network, which of the worker's environment variables it gets (never a credential), and where a
deployment's own tool module is."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mother.errors import ToolError

__all__ = [
    "PROJECT_PACKAGES",
    "CallPolicy",
    "Limits",
    "ToolRules",
    "module_paths",
    "tool_environment",
]

# the project's packages (an editable install keeps them outside site-packages)
PROJECT_PACKAGES = ("mother", "workers", "schemas")
_LOCALE = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int
    memory_mb: int
    processes: int
    open_files: int
    file_size_mb: int
    tmp_mb: int

    def merged(self, override: Any) -> Limits:
        """These limits with a manifest's ``limits`` (None fields left as they are)."""
        if override is None:
            return self
        given = {k: v for k, v in override.model_dump().items() if v is not None}
        return replace(self, **given)

    def for_entry(self) -> dict[str, int]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_mb": self.memory_mb,
            "processes": self.processes,
            "open_files": self.open_files,
            "file_size_mb": self.file_size_mb,
        }


@dataclass(frozen=True)
class CallPolicy:
    """What one call's sandbox allows: its limits, the network, its environment, and the paths of a
    deployment's own tool module (read-only)."""

    limits: Limits
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    allow_git_dir: bool = False
    module_paths: tuple[Path, ...] = ()

    def launch_key(self) -> tuple[Any, ...]:
        """What the sandbox is started with (a sandbox started ahead serves a call with the same)."""
        return (
            self.network,
            self.limits.tmp_mb,
            tuple(sorted(self.env.items())),
            self.module_paths,
        )


@dataclass(frozen=True)
class ToolRules:
    """The deployment's rules for every tool call, sandboxed or not: the default limits, the tools
    allowed the network, and the environment variables that hold credentials."""

    limits: Limits
    network_tools: frozenset[str] = frozenset()
    secret_env: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Any) -> ToolRules:
        tools = settings.tools
        return cls(
            limits=Limits(**tools.sandbox_limits.model_dump()),
            network_tools=frozenset(tools.sandbox_network_tools),
            secret_env=frozenset(m.api_key_env for m in settings.models.values() if m.api_key_env),
        )

    @classmethod
    def defaults(cls) -> ToolRules:
        from mother.config import SandboxLimitSettings

        return cls(limits=Limits(**SandboxLimitSettings().model_dump()))

    def policy(
        self, tool: Any, module_paths: Iterable[Path] = (), environ: Mapping[str, str] | None = None
    ) -> CallPolicy:
        """What a call of ``tool`` (its manifest) gets, or a ToolError saying what the deployment
        refuses it."""
        if tool.network and tool.tool_id not in self.network_tools:
            raise ToolError(
                f"{tool.tool_id} asks for the network (network: true in its manifest), which this "
                f"deployment does not allow it; add it to tools.sandbox_network_tools to allow it"
            )
        secret = [n for n in tool.env if n.upper().startswith("MOTHER_") or n in self.secret_env]
        if secret:
            raise ToolError(
                f"{tool.tool_id}'s manifest passes {secret[0]} into its sandbox, which holds a "
                "credential of the worker's; remove it from the manifest's env"
            )
        environ = os.environ if environ is None else environ
        return CallPolicy(
            limits=self.limits.merged(tool.limits),
            network=tool.network,
            env={n: environ[n] for n in tool.env if n in environ},
            allow_git_dir=tool.allow_git_dir,
            module_paths=tuple(module_paths),
        )


def module_paths(entrypoint: str) -> tuple[Path, ...]:
    """Where a deployment's own tool module lives (its top-level package's directories, or its file),
    for the sandbox to mount read-only; () for the project's packages, which are always there. The
    module is already imported (the executor loaded the entrypoint)."""
    top = entrypoint.partition(":")[0].split(".")[0]
    module = sys.modules.get(top)
    if top in PROJECT_PACKAGES or module is None:
        return ()
    locations = getattr(module, "__path__", None)
    if locations is not None:
        return tuple(Path(p).resolve() for p in locations)
    file = getattr(module, "__file__", None)
    return (Path(file).resolve(),) if file else ()


def tool_environment(
    extra: Mapping[str, str] = {}, *, sandboxed: bool, path: str | None = None
) -> dict[str, str]:
    """A tool's whole environment: PATH, HOME, TMPDIR, LANG (and USER/LOGNAME), then ``extra`` (what its
    manifest names). Nothing else of the worker's, so no credential, reaches a tool. Unsandboxed,
    PATH, HOME and TMPDIR keep the worker's values (the host's directories are the tool's)."""
    lang = os.environ.get("LANG", "")
    env = {
        "PATH": path or os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": "/tmp" if sandboxed else os.environ.get("HOME", "/tmp"),
        "TMPDIR": "/tmp" if sandboxed else os.environ.get("TMPDIR", "/tmp"),
        "LANG": lang if _LOCALE.match(lang) else "C.UTF-8",
        "USER": "sandbox" if sandboxed else os.environ.get("USER", "tool"),
        "LOGNAME": "sandbox" if sandboxed else os.environ.get("LOGNAME", "tool"),
    }
    env.update(extra)
    return env
