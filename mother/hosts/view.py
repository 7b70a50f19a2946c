"""What an operator sees of the worker hosts (``mother hosts list`` and the dashboard's ``/hosts``, one
reader for both): every enrolled host, whether it is live (Mother has its line from a beat within a
heartbeat timeout), stopped (its pool said so) or silent, its workers busy and free, the depth of each of
its queues, the attempts it runs now (each with its run), how long ago it beat, and the phases it finished
and failed in the last hour (the activity stream's ``phase_completed`` and ``phase_failed`` entries whose
worker is one of the host's)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mother import keys
from mother.activity import since
from mother.hosts.table import HostTable
from mother.records.budgets import published_limits

__all__ = ["HostRow", "host_rows"]

# how far back "the last hour" reads the activity stream, and how many entries at most
HOUR_MS = 3_600_000
MAX_HOUR_ENTRIES = 100_000


@dataclass
class HostRow:
    name: str
    takes: list[str]
    state: str
    enrolled_at: str
    workers: int | None = None
    busy: int | None = None
    free: int | None = None
    queued: dict[str, int] = field(default_factory=dict)
    # the attempts it runs now: {run_id, phase_index, attempt}
    running: list[dict[str, Any]] = field(default_factory=list)
    beat_ms_ago: int | None = None
    done_last_hour: int = 0
    failed_last_hour: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def host_rows(client: Any, heartbeat_timeout_ms: int) -> list[HostRow]:
    """Every enrolled host's row, by name. ``heartbeat_timeout_ms``: how long a host's line lives after a
    beat, so its time left says when it beat: the leading Mother's, as it published it, else this."""
    published = published_limits(client)
    if published is not None and published.heartbeat_timeout_ms:
        heartbeat_timeout_ms = published.heartbeat_timeout_ms
    table = HostTable(client)
    table.refresh()
    names = sorted(table.enrolled)
    pipe = client.pipeline(transaction=False)
    pipe.time()
    for name in names:
        pipe.pttl(keys.host_alive_key(name))
    pipe.zrange(keys.HEARTBEATS, 0, -1)
    now_s, *ttls, members = pipe.execute()
    now_ms = int(now_s[0]) * 1000 + int(now_s[1]) // 1000
    rows = {
        name: HostRow(
            name,
            list(table.enrolled[name].queues),
            _state(table, name),
            table.enrolled[name].enrolled_at,
        )
        for name in names
    }
    for name, ttl in zip(names, ttls, strict=True):
        row, live = rows[name], table.live.get(name)
        row.queued = {kind: n for kind, n in (live.queued if live else {}).items() if n}
        if live is not None:
            row.workers, row.busy, row.free = live.concurrency, live.busy, max(0, live.free())
        if isinstance(ttl, int) and ttl >= 0:
            row.beat_ms_ago = max(0, heartbeat_timeout_ms - ttl)
    _running(client, [_text(m) for m in members], rows)
    _last_hour(client, now_ms, rows)
    return [rows[name] for name in names]


def _state(table: HostTable, name: str) -> str:
    if name in table.live:
        return "live"
    return "stopped" if name in table.stopped else "silent"


def _running(client: Any, members: list[str], rows: dict[str, HostRow]) -> None:
    """Each attempt Mother tracks whose heartbeat names a host that runs it (``{host}:{pid}``), on that
    host's row."""
    if not members:
        return
    pipe = client.pipeline(transaction=False)
    parsed = [ids for ids in map(keys.heartbeat_member_ids, members) if ids is not None]
    for ids in parsed:
        pipe.get(keys.attempt_heartbeat_key(*ids))
    for (run_id, index, attempt), mark in zip(parsed, pipe.execute(), strict=True):
        host = _text(mark).split(":")[0] if mark is not None else ""
        if host in rows:
            rows[host].running.append({"run_id": run_id, "phase_index": index, "attempt": attempt})


def _last_hour(client: Any, now_ms: int, rows: dict[str, HostRow]) -> None:
    """The phases each host finished and failed in the last hour, from the activity stream."""
    for event in since(client, now_ms - HOUR_MS, MAX_HOUR_ENTRIES):
        if event.type not in ("phase_completed", "phase_failed"):
            continue
        worker = event.data.get("worker")
        row = rows.get(worker.split(".", 1)[0]) if isinstance(worker, str) else None
        if row is None:
            continue
        if event.type == "phase_completed":
            row.done_last_hour += 1
        else:
            row.failed_last_hour += 1


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")
