"""Benchmark-only: phase attempts held by a host that is this process (no worker runs them), so a
benchmark can time a host's asks about them one by one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from mother import keys
from mother.client import MotherClient
from mother.clock import ServerClock
from mother.identities import hosts, party_url
from workers.asking import Asker

__all__ = ["Held", "hold"]


@dataclass
class Held:
    """Attempts ``ids`` held by enrolled host ``host`` (connect as it with ``url``), kept alive by its
    beats until :meth:`release`."""

    host: str
    url: str
    ids: list[tuple[str, int, int]]
    client: MotherClient
    _stop: threading.Event = field(default_factory=threading.Event)

    def asker(self, timeout: float = 30) -> Asker:
        return Asker(redis.Redis.from_url(self.url, decode_responses=True), self.host, timeout)

    def release(self) -> None:
        """Stop beating and cancel the runs."""
        self._stop.set()
        for ids in self.ids:
            self.client.cancel(ids[0], actor="bench", reason="done")


def _line(asker: Asker, concurrency: int, busy: int = 0, attempts: Any = ()) -> None:
    line = {"concurrency": concurrency, "busy": busy, "workers": concurrency}
    asker.ask("beat", {"attempts": [list(a) for a in attempts], "line": line}, wait=False)


def hold(server_url: str, host: str, specs: list[dict[str, Any]], client: MotherClient) -> Held:
    """Enroll ``host`` on the server at ``server_url`` (an administrator's URL), let Mother queue each
    spec's first attempt on it, take each job off its queue and ``begin`` it: the attempts are the host's
    from then on (it beats for them every second)."""
    admin = redis.Redis.from_url(server_url, decode_responses=True)
    _host, password = hosts.add(admin, host, ["agents", "tools"], ServerClock(admin).now_iso())
    held = Held(host, party_url(server_url, keys.host_user(host), password), [], client)
    asker = held.asker()
    width = 2 * len(specs)
    deadline = time.monotonic() + 60
    while admin.get(keys.host_alive_key(host)) is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"Mother did not take host {host}'s beat within 60 s")
        _line(asker, width)
        time.sleep(0.05)
    for spec in specs:
        run_id = client.submit(spec)
        queue = f"rq:queue:{keys.host_queue(host, 'agents')}"
        while not asker.client.lpop(queue):
            if time.monotonic() > deadline + 60:
                raise SystemExit(f"run {run_id}'s job never reached host {host}")
            _line(asker, width)
            time.sleep(0.01)
        asker.ask("begin", {}, (run_id, 0, 1))
        held.ids.append((run_id, 0, 1))
    _beating(held, lambda beats: _line(beats, width, len(held.ids), held.ids))
    return held


def _beating(held: Held, beat: Callable[[Asker], None]) -> None:
    """The host beats for its attempts (as its pool would), or Mother takes them for lost."""

    def beats() -> None:
        asker = held.asker()
        while not held._stop.wait(1.0):
            beat(asker)

    threading.Thread(target=beats, daemon=True).start()
