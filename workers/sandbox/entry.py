"""Inside the sandbox: the process a tool call runs in (``python -I -S -B``, calling :func:`main`).

It reads its request (JSON) from standard input, sets the call's resource limits on itself (what it
starts inherits them; none can raise them again), moves into ``/workspace``, imports the tool's
entrypoint, calls it, and writes the outcome as JSON on the descriptor the request names. Nothing here
imports the settings, the Redis client or the worker: the sandbox holds none of them.

:func:`call` is also what an unsandboxed tool process runs (``tools.sandbox: none``), so a tool's
outcome reads the same either way.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# every shipped tool resolves its paths with it: loaded while the sandbox waits for its request
import workers.tools.files  # noqa: F401
from mother.errors import MotherError, PolicyViolation, ToolError, ToolTransient

__all__ = ["WORKSPACE", "call", "main", "set_limits"]

# where the run's workspace is mounted in the sandbox
WORKSPACE = "/workspace"

# errno values worth a second try: busy, try again, interrupted, timed out
_TRANSIENT = {11, 16, 4, 110}

_MB = 1024 * 1024
# limit name -> (resource, bytes per unit)
_LIMITS = {
    "cpu_seconds": (resource.RLIMIT_CPU, 1),
    "memory_mb": (resource.RLIMIT_AS, _MB),
    "processes": (resource.RLIMIT_NPROC, 1),
    "open_files": (resource.RLIMIT_NOFILE, 1),
    "file_size_mb": (resource.RLIMIT_FSIZE, _MB),
}


def call(fn: Callable[[Path, dict[str, Any]], Any], workspace: Path, inputs: Any) -> dict[str, Any]:
    """``fn(workspace, inputs)`` as an outcome: {"output": ...} or {"error": ..., "transient"?,
    "violation"?}; never raises for the tool's own failure."""
    try:
        return {"output": fn(workspace, inputs)}
    except ToolTransient as exc:
        return {"error": exc.message, "transient": True}
    except ToolError as exc:
        return {"error": exc.message}
    except PolicyViolation as exc:
        return {"error": exc.message, "violation": True}
    except MotherError as exc:
        return {"error": exc.message}
    except MemoryError:
        return {"error": "it ran out of memory (its sandbox's memory_mb limit)"}
    except OSError as exc:
        return {"error": f"{exc.strerror or exc}", "transient": exc.errno in _TRANSIENT}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}


def _plain(value: Any) -> Any:
    """A NumPy scalar or array (what image and OCR tools hand back) as plain JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode(result: dict[str, Any]) -> bytes:
    """The outcome as JSON (the standard library's encoder: the sandbox's process starts without
    loading anything more); an output that is not JSON (NaN included) is an error."""
    try:
        return json.dumps(result, default=_plain, allow_nan=False, ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        return json.dumps({"error": f"the tool's output is not JSON: {exc}"}).encode()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def set_limits(limits: dict[str, int]) -> None:
    """This process's resource limits (soft and hard: nothing it starts can raise them), never above
    what it already has. CPU time gets a one-second grace between SIGXCPU and SIGKILL."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, (which, unit) in _LIMITS.items():
        if name not in limits:
            continue
        want = int(limits[name]) * unit
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        top = want + 1 if which == resource.RLIMIT_CPU else want
        if hard != resource.RLIM_INFINITY:
            top = min(top, hard)
        resource.setrlimit(which, (want, top))


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    out = int(request["result_fd"])
    # a process the tool forks must not hold the result open
    os.set_inheritable(out, False)
    limits = request.get("limits") or {}

    def out_of_cpu(signum: int, frame: Any) -> None:
        write_all(
            out, encode({"error": f"it used up its CPU time ({limits.get('cpu_seconds')} s)"})
        )
        os._exit(1)

    try:
        signal.signal(signal.SIGXCPU, out_of_cpu)
        set_limits(limits)
        for path in request.get("sys_path") or ():
            if path not in sys.path:
                sys.path.append(path)
        os.chdir(WORKSPACE)
        os.environ["PWD"] = WORKSPACE
        if request.get("allow_git_dir"):
            from workers.tools.files import allow_git_dir

            allow_git_dir(True)
        module, _, func = str(request["entrypoint"]).partition(":")
        fn = getattr(importlib.import_module(module), func)
        result = call(fn, Path(WORKSPACE), request.get("inputs") or {})
    except Exception as exc:  # noqa: BLE001
        result = {"error": f"the tool could not start in its sandbox: {type(exc).__name__}: {exc}"}
    write_all(out, encode(result))
    os.close(out)
    # the sandbox is thrown away: no interpreter teardown to wait for
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
