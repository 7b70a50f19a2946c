"""The host side of the sandbox: a tool call as a bubblewrap (``bwrap``) process.

Each call gets fresh namespaces (mount, PID, IPC, UTS, cgroup, and network unless the deployment lets
the tool have it), a root built from read-only binds of the system directories, the Python
installation and the project's packages, a private ``/tmp``, and the run's workspace, read-write, at
``/workspace``: nothing of the worker's home, config, data directory or other runs is mounted. Its
environment is an allowlist, and ``bwrap`` itself starts with only that (nothing of the worker's is in
``/proc/*/environ``, and the PID namespace shows no process of the host anyway).

Who the tool runs as:

- a worker running as root (the shipped image) sets the sandbox up as root and hands the command to
  ``setpriv``, which drops to a user id of the run's own (``tools.sandbox_uid_base`` plus a hash of the
  workspace) with every capability gone before anything of the tool runs; the workspace is handed to
  that user first. Files a tool makes are that user's, never root's;
- any other worker uses an unprivileged user namespace (``--unshare-user --disable-userns``): the tool
  is a user of that namespace with no capability, mapped to the worker's own user id.

At its timeout the sandbox's first process (PID 1 of its namespace) is killed, and the kernel kills
everything else in the namespace with it, whatever called ``setsid`` or forked twice.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from workers.sandbox.entry import WORKSPACE
from workers.sandbox.rules import PROJECT_PACKAGES, CallPolicy, ToolRules, tool_environment
from workers.sandbox.started import Started

__all__ = ["NOT_INSTALLED", "Sandbox", "SandboxUnavailable", "hand_over"]

# how the reason starts when bwrap is not there at all (the one case where installing it is the fix)
NOT_INSTALLED = "bubblewrap is not installed"

# the host's directories a tool sees read-only (each where it exists; symlinks kept as symlinks)
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# of /etc, only what programs need to start and name things
ETC_PATHS = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
)
# and what a tool allowed the network needs to resolve names and check certificates
NETWORK_ETC_PATHS = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
)
# the sandbox's Python starts without site (-S: no .pth files read, no import hooks installed), which
# halves its start; its path is the worker's, limited to what the sandbox mounts, with the project first
ENTRY = "import sys; sys.path[:0] = {path!r}; from workers.sandbox.entry import main; main()"


class SandboxUnavailable(Exception):
    """The sandbox cannot be made on this host; the message says why and what to install."""


def hand_over(workspace: Path, uid: int) -> None:
    """Make ``workspace`` (and what is in it) ``uid``'s, mode 0700 at its top, when it is not yet: a
    root worker's sandbox runs as that unprivileged user, who must be able to write it. The walk
    holds each directory open and changes entries by name relative to it, never following a
    symlink: a directory swapped for a symlink meanwhile cannot send it outside the workspace."""
    top = os.lstat(workspace)
    if top.st_uid == uid and top.st_gid == uid:
        return
    for _, dirnames, filenames, dirfd in os.fwalk(workspace, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, uid, uid, dir_fd=dirfd, follow_symlinks=False)
    os.chown(workspace, uid, uid, follow_symlinks=False)
    os.chmod(workspace, 0o700)


def _existing(paths: Iterable[str | Path]) -> list[Path]:
    return [Path(p) for p in paths if os.path.lexists(p)]


def _python_paths() -> list[Path]:
    """The interpreter, its standard library and site-packages, and the project's packages."""
    found = {
        Path(p).resolve()
        for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)
    }
    found.add(Path(sys.executable).resolve().parent.parent)
    for name in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            found.add(Path(location).resolve())
    return sorted(found)


def _covered(path: Path, by: Iterable[Path]) -> bool:
    return any(path == b or b in path.parents for b in by)


def _pipe_with(data: bytes) -> int:
    """The read end of a pipe holding ``data`` (small: it fits the pipe's buffer)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end


class Sandbox:
    """Runs tool calls in bubblewrap sandboxes (see the module's docstring). Build it with
    :meth:`from_settings`; :meth:`check` proves it works on this host."""

    def __init__(
        self,
        bwrap: str,
        *,
        rules: ToolRules,
        setpriv: str | None = None,
        version: str = "",
        extra_paths: Iterable[Path] = (),
        uid_base: int = 100_000,
        uid_count: int = 50_000,
        mode: str | None = None,
        prestart: bool = True,
    ) -> None:
        self.bwrap = bwrap
        self.prestart = prestart
        # the sandbox started ahead for the next call: (its launch key, it)
        self._spare: tuple[tuple[Any, ...], Started] | None = None
        self.version = version
        self.rules = rules
        self.uid_base, self.uid_count = uid_base, uid_count
        root = os.geteuid() == 0
        self.setpriv = setpriv
        self.mode = mode or ("setpriv" if root and setpriv else "userns")
        if self.mode == "setpriv" and not setpriv:
            raise SandboxUnavailable("setpriv (util-linux) is not installed")
        self.python = sys.executable
        self.python_bin = str(Path(sys.executable).parent)
        self.read_only = self._read_only_paths(extra_paths)
        self._entry = ENTRY.format(path=self._sys_path())
        self._base = self._base_args()
        self._binds = self._bind_args()

    # -- building it ---------------------------------------------------------------------------

    @classmethod
    def from_settings(cls, settings: Any) -> Sandbox:
        """The deployment's sandbox (``tools.sandbox: bwrap``), or SandboxUnavailable saying why not."""
        tools = settings.tools
        bwrap = shutil.which(tools.sandbox_bwrap)
        if bwrap is None:
            raise SandboxUnavailable(
                f"{NOT_INSTALLED} ({tools.sandbox_bwrap!r} not found; Debian/Ubuntu: "
                "apt install bubblewrap; Fedora: dnf install bubblewrap)"
            )
        version = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, check=False, env={}
        ).stdout.strip()
        sandbox = cls(
            bwrap,
            rules=ToolRules.from_settings(settings),
            setpriv=shutil.which("setpriv"),
            version=version,
            extra_paths=tools.sandbox_paths,
            uid_base=tools.sandbox_uid_base,
            uid_count=tools.sandbox_uid_count,
            prestart=tools.sandbox_prestart,
        )
        sandbox.refuse_exposed(
            {
                "data_dir": settings.data_dir,
                "server.dir": settings.server.dir,
                "worker.workspace_root": settings.worker.workspace_root,
            }
        )
        return sandbox

    def _read_only_paths(self, extra: Iterable[Path]) -> list[Path]:
        system = _existing(SYSTEM_PATHS)
        paths = [p for p in _python_paths() if not _covered(p, system)]
        paths += [Path(p) for p in extra]
        return system + _existing(ETC_PATHS) + sorted(set(paths))

    def _sys_path(self) -> list[str]:
        """The sandbox's import path: the directories holding the project's packages, then the worker's
        own path where the sandbox mounts it (site-packages, the standard library)."""
        mounted = [p for p in self.read_only if not p.is_symlink()]
        path: list[str] = []
        for name in PROJECT_PACKAGES:
            spec = importlib.util.find_spec(name)
            for location in (spec.submodule_search_locations or []) if spec else []:
                path.append(str(Path(location).resolve().parent))
        for entry in sys.path:
            if entry and os.path.isdir(entry) and _covered(Path(entry).resolve(), mounted):
                path.append(str(Path(entry).resolve()))
        return list(dict.fromkeys(path))

    def refuse_exposed(self, secret_dirs: Mapping[str, Path]) -> None:
        """SandboxUnavailable when a directory tools must never see lies inside one they see."""
        mounted = [p for p in self.read_only if p.is_dir() and not p.is_symlink()]
        for name, path in secret_dirs.items():
            where = Path(os.path.abspath(path))
            for ro in mounted:
                if where == ro or ro in where.parents:
                    raise SandboxUnavailable(
                        f"{name} ({where}) is inside {ro}, which every tool sees read-only; "
                        "move it out of there"
                    )

    def _dirs_for(self, targets: Iterable[Path]) -> list[str]:
        """``--perms 0755 --dir`` for each missing ancestor of ``targets`` (bwrap makes them 0700 when
        it runs as root, and the tool's user could not pass them)."""
        # the root, and the private /tmp mounted before them
        made: set[Path] = {Path("/"), Path("/tmp")}
        covered = [p for p in self.read_only if not p.is_symlink()]
        args: list[str] = []
        for target in targets:
            for parent in reversed(target.parents):
                if parent in made or _covered(parent, covered):
                    continue
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        return args

    def _base_args(self) -> list[str]:
        args = [
            self.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
            # the worker's directory means nothing in the sandbox (and names a host path)
            "--chdir",
            "/",
        ]
        if self.mode == "userns":
            args += ["--unshare-user", "--disable-userns"]
        else:
            # what setpriv needs to become the tool's user; it drops them with root
            args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return args

    def _bind_args(self) -> list[str]:
        """The read-only binds, after the private ``/tmp``: a path under ``/tmp`` (a clone, a venv or a
        CI checkout there) is bound onto the tmpfs, which mounted later would hide it."""
        args = self._dirs_for(p for p in self.read_only if not p.is_symlink())
        for path in self.read_only:
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            else:
                args += ["--ro-bind", str(path), str(path)]
        return args

    # -- one call ------------------------------------------------------------------------------

    def uid_for(self, workspace: Path) -> int:
        """The user id a run's tools run as (one per workspace, so runs never share one)."""
        return self.uid_base + zlib.crc32(str(workspace).encode()) % self.uid_count

    def argv(
        self, workspace: Path, policy: CallPolicy, uid: int, fds: Mapping[str, int]
    ) -> list[str]:
        """The bwrap command line of one call (``fds``: the passwd, group and info descriptors)."""
        args = list(self._base)
        if self.mode == "userns":
            args += ["--uid", str(uid), "--gid", str(uid)]
        if not policy.network:
            args.append("--unshare-net")
        else:
            for path in _existing(NETWORK_ETC_PATHS):
                args += ["--ro-bind", str(path), str(path)]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--size", str(policy.limits.tmp_mb * 1024 * 1024), "--perms", "1777"]
        args += ["--tmpfs", "/tmp", *self._binds]
        args += ["--ro-bind-data", str(fds["passwd"]), "/etc/passwd"]
        args += ["--ro-bind-data", str(fds["group"]), "/etc/group"]
        extra = [p for p in policy.module_paths if not _covered(p, self.read_only)]
        args += self._dirs_for(extra)
        for path in extra:
            args += ["--ro-bind", str(path), str(path)]
        args += ["--bind", str(workspace), WORKSPACE, "--info-fd", str(fds["info"])]
        args.append("--")
        if self.mode == "setpriv":
            assert self.setpriv is not None
            args += [
                self.setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--",
            ]
        return [*args, self.python, "-I", "-S", "-B", "-c", self._entry]

    def run(
        self,
        entrypoint: str,
        workspace: Path,
        inputs: dict[str, Any],
        policy: CallPolicy,
        timeout_s: float,
        max_bytes: int,
    ) -> dict[str, Any]:
        """Call ``entrypoint`` on ``inputs`` in a sandbox on ``workspace``: {"output": ...} or
        {"error": ..., "transient"?, "violation"?, "timed_out"?}.

        With ``prestart``, the sandbox of the next call on the same workspace (same mounts, same
        environment) is started when this one ends, and waits for its request: an agent calls its
        next tool after a model turn, so that call finds its sandbox up. It is never one a call has
        used: each call has a fresh sandbox."""
        workspace = workspace.resolve()
        # the directory itself, not only its name: one removed and made again is another
        made = os.stat(workspace)
        key = (workspace, made.st_dev, made.st_ino, policy.launch_key())
        started = self._take_spare(key)
        if started is None:
            try:
                started = self._start(workspace, policy)
            except OSError as exc:
                return {"error": f"the sandbox could not start: {exc.strerror or exc}"}
        request = orjson.dumps(
            {
                "entrypoint": entrypoint,
                "inputs": inputs,
                "limits": policy.limits.for_entry(),
                "allow_git_dir": policy.allow_git_dir,
                "sys_path": [str(p.parent) for p in policy.module_paths],
                "result_fd": started.result_fd,
            }
        )
        outcome = started.call(request, timeout_s, max_bytes)
        if self.prestart:
            try:
                self._spare = (key, self._start(workspace, policy))
            # the next call starts its own
            except OSError:
                self._spare = None
        return outcome

    def _take_spare(self, key: tuple[Any, ...]) -> Started | None:
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        if spare[0] == key and spare[1].alive():
            return spare[1]
        spare[1].kill()
        return None

    def close(self) -> None:
        """Stop the sandbox started ahead for a next call, if any."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare[1].kill()

    def _start(self, workspace: Path, policy: CallPolicy) -> Started:
        """A sandbox on ``workspace``, started and waiting for its request on standard input."""
        uid = self.uid_for(workspace)
        if self.mode == "setpriv":
            hand_over(workspace, uid)
        passwd = _pipe_with(
            f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:sandbox:/tmp:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode()
        )
        group = _pipe_with(f"root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n".encode())
        pipes = {name: os.pipe() for name in ("stdin", "result", "info", "err")}
        passed = (pipes["result"][1], pipes["info"][1], passwd, group)
        ours = (pipes["stdin"][1], pipes["result"][0], pipes["info"][0], pipes["err"][0])
        theirs = (pipes["stdin"][0], pipes["err"][1], *passed)
        try:
            argv = self.argv(
                workspace, policy, uid, {"passwd": passwd, "group": group, "info": passed[1]}
            )
            env = tool_environment(policy.env, sandboxed=True, path=self._path())
            proc = subprocess.Popen(
                argv,
                stdin=pipes["stdin"][0],
                stdout=pipes["err"][1],
                stderr=pipes["err"][1],
                pass_fds=passed,
                env=env,
            )
        except OSError:
            for fd in (*ours, *theirs):
                os.close(fd)
            raise
        # the child has its copies
        for fd in theirs:
            os.close(fd)
        return Started(proc, *ours, result_fd=passed[0])

    def _path(self) -> str:
        return f"{self.python_bin}:/usr/local/bin:/usr/bin:/bin"

    def check(self) -> None:
        """Run a trivial call in a sandbox on a scratch workspace; SandboxUnavailable with bwrap's own
        words when it fails (no user namespaces, a kernel that refuses, a path that is missing)."""
        import tempfile

        # a check starts no sandbox ahead: nothing of it outlives it
        prestart, self.prestart = self.prestart, False
        try:
            with tempfile.TemporaryDirectory(prefix="mother-sandbox-check-") as scratch:
                got = self.run(
                    "workers.sandbox.probe:whoami",
                    Path(scratch),
                    {},
                    CallPolicy(limits=self.rules.limits),
                    timeout_s=30,
                    max_bytes=1 << 16,
                )
        finally:
            self.prestart = prestart
            self.close()
        if "output" not in got:
            raise SandboxUnavailable(f"bwrap cannot make a sandbox here: {got.get('error')}")
        seen = got["output"]
        if seen.get("capabilities") not in (0, None) or seen.get("uid") == 0:
            raise SandboxUnavailable(
                f"a sandboxed tool runs with uid {seen.get('uid')} and capabilities "
                f"{seen.get('capabilities'):#x}; it must have neither"
            )

    def describe(self) -> str:
        """One line for `mother doctor` and the worker's start."""
        who = (
            f"as user ids {self.uid_base}-{self.uid_base + self.uid_count - 1} (setpriv from root)"
            if self.mode == "setpriv"
            else "in a user namespace, as the worker's user"
        )
        return f"{self.version or 'bubblewrap'}: tools run {who}, no network, workspace only"
