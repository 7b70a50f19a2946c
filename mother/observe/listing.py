"""Runs listed from an index over every stored run, not a window of the newest.

``idx:runs`` is a search index over the run records (``run:{id}``): status, user and reason TAGs, the
creation and end times (``created_ms``, ``terminated_ms``) NUMERIC and sortable. One query filters on
any of them (a reason, a status, "not success", a user, a time range of creation or of the end) and
counts what matches; pages are anchored at the first page's newest (or oldest) time, so runs created
while someone pages do not shift the pages. Each row carries its times, duration and cost (USD and
tokens, from the run's budget counters, what the guard charged).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, cast, get_args

import orjson
import redis

from mother import keys
from mother.errors import InvalidSpec
from mother.logs import get_logger
from mother.observe.timeline import usd
from mother.records._json import ensure_json_index, path_values, tag
from mother.records.results import queue_termination_read
from mother.records.runs import queue_listing_read
from schemas import TERMINATION_REASONS, ms_from_iso
from schemas._base import ID_ALPHABET
from schemas.run import RunStatus

__all__ = [
    "CSV_COLUMNS",
    "MAX_PAGE",
    "OPEN_STATUSES",
    "RUN_FIELDS",
    "RUN_STATUSES",
    "Page",
    "RunQuery",
    "all_rows",
    "backfill_times",
    "csv_lines",
    "ensure_index",
    "list_runs",
    "rows_of",
    "when_ms",
    "words_of",
]

log = get_logger(__name__)

RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
MAX_PAGE = 500
SORTS = ("created", "ended", "duration", "cost")
# the statuses of a run that has not ended (what a bulk action selects among)
OPEN_STATUSES = ("queued", "running", "waiting", "budget_stopped")
# idx:runs: path, field, type (the last is made sortable too). An index made before a field was added
# gets it (FT.ALTER, which indexes the stored records): the search text (the task, and the history's
# details: retries' errors, the termination's reason and details), the phase, the models, the host, and
# the duration and cost Mother copies onto the record at the run's end
RUN_FIELDS = [
    ("$.status", "status", "TAG"),
    ("$.user_id", "user", "TAG"),
    ("$.reason", "reason", "TAG"),
    ("$.terminated_ms", "ended", "NUMERIC SORTABLE"),
    ("$.created_ms", "created", "NUMERIC SORTABLE"),
    ("$.spec.task", "task", "TEXT"),
    ("$.history[*].detail", "detail", "TEXT"),
    ("$.phase", "phase", "TAG"),
    ("$.spec.pipeline[*].model", "model", "TAG"),
    ("$.host", "host", "TAG"),
    ("$.duration_ms", "duration", "NUMERIC SORTABLE"),
    ("$.total_tokens", "tokens", "NUMERIC"),
    ("$.spend_micro_usd", "cost", "NUMERIC"),
]
# the tags a query may filter on (each the index's field of that name)
TAGS = ("phase", "model", "host")
# the numeric ranges a query may filter on (``{name}_from``, ``{name}_to``; the index's field of that name)
RANGES = ("created", "ended", "duration", "cost")
# the backfill's mark: runs made before records carried created_ms / terminated_ms were given them
BACKFILLED = "mother:migrations"


def ensure_index(client: redis.Redis) -> bool:
    """Create ``idx:runs`` when the search module exists (False without it), and give the records made
    before it their times (:func:`backfill_times`)."""
    made = ensure_json_index(client, keys.RUN_SEARCH_INDEX, keys.RUN_PREFIX, RUN_FIELDS)
    if made:
        backfill_times(client)
        log.info("runs_index_ready", index=keys.RUN_SEARCH_INDEX)
    return made


def backfill_times(client: redis.Redis, batch: int = 1000) -> int:
    """Runs stored before records carried ``created_ms`` (and an ended one ``terminated_ms``) get them from
    ``runs:all``'s score and their ``terminated_at``, once (``mother:migrations`` remembers). Returns how
    many records changed."""
    if client.hget(BACKFILLED, "run_times"):
        return 0
    changed, start = 0, 0
    while True:
        page = cast(
            "list[tuple[str, float]]",
            client.zrange(keys.RUNS_INDEX, start, start + batch - 1, withscores=True),
        )
        if not page:
            break
        start += len(page)
        read = client.pipeline(transaction=False)
        for run_id, _score in page:
            read.execute_command(
                "JSON.GET",
                keys.run_key(run_id),
                "$.created_ms",
                "$.terminated_at",
                "$.terminated_ms",
            )
        write = client.pipeline(transaction=False)
        for (run_id, score), raw in zip(page, read.execute(raise_on_error=False), strict=True):
            if not isinstance(raw, str | bytes):
                continue
            found = path_values(raw)
            if found.get("created_ms") is None:
                write.execute_command(
                    "JSON.SET", keys.run_key(run_id), "$.created_ms", int(score), "XX"
                )
            ended = found.get("terminated_at")
            if found.get("terminated_ms") is None and isinstance(ended, str):
                write.execute_command(
                    "JSON.SET", keys.run_key(run_id), "$.terminated_ms", ms_from_iso(ended), "XX"
                )
        if write.command_stack:
            changed += sum(1 for r in write.execute(raise_on_error=False) if r is True or r == "OK")
    client.hset(BACKFILLED, "run_times", "1")
    return changed


@dataclass(frozen=True)
class RunQuery:
    """What to list. Times are epoch ms (server clock), both ends included; ``None``: open."""

    reason: str | None = None
    status: str | None = None
    not_success: bool = False
    user: str | None = None
    created_from: int | None = None
    created_to: int | None = None
    ended_from: int | None = None
    ended_to: int | None = None
    # words the run's task or its history's details (errors, why it stopped) hold, all of them
    search: str | None = None
    phase: str | None = None
    model: str | None = None
    host: str | None = None
    # duration in ms and cost in micro-USD (set at a run's end: these list ended runs only)
    duration_from: int | None = None
    duration_to: int | None = None
    cost_from: int | None = None
    cost_to: int | None = None
    sort: Literal["created", "ended", "duration", "cost"] = "created"
    descending: bool = True
    limit: int = 50
    cursor: str | None = None

    def check(self) -> RunQuery:
        """Itself, or InvalidSpec naming the one thing to fix."""
        if self.reason is not None and self.reason not in TERMINATION_REASONS:
            raise InvalidSpec(
                f"unknown termination reason {self.reason!r}; use one of: {', '.join(TERMINATION_REASONS)}",
                field="reason",
            )
        if self.status is not None and self.status not in RUN_STATUSES:
            raise InvalidSpec(
                f"unknown status {self.status!r}; use one of: {', '.join(RUN_STATUSES)}",
                field="status",
            )
        if self.user is not None:
            keys.check_id(self.user, "user")
        if self.sort not in SORTS:
            raise InvalidSpec(
                f"sort must be one of {', '.join(SORTS)}, got {self.sort!r}", field="sort"
            )
        if isinstance(self.limit, bool) or not 1 <= self.limit <= MAX_PAGE:
            raise InvalidSpec(f"limit must be 1 to {MAX_PAGE}, got {self.limit!r}", field="limit")
        for name in RANGES:
            for end in ("from", "to"):
                value = getattr(self, f"{name}_{end}")
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 0
                ):
                    raise InvalidSpec(
                        f"{name}_{end} must be a whole number >= 0, got {value!r}",
                        field=f"{name}_{end}",
                    )
        for name in TAGS:
            value = getattr(self, name)
            if value is not None and not keys.is_id(value):
                raise InvalidSpec(f"{name} must be an id ({ID_ALPHABET}), got {value[:60]!r}")
        if self.search is not None and not words_of(self.search):
            raise InvalidSpec(
                f"search text {self.search[:40]!r} has no word to look for (letters or digits)",
                field="search",
            )
        _cursor(self.cursor)
        return self

    def by_sets_only(self) -> bool:
        """Whether the run sorted sets answer it: every run or a user's by creation (``runs:all``,
        ``runs:user:{u}``), a reason's (and a user's of them) by end (``terminations:reason:{r}``), with
        no other filter. They list a run whose record is missing or unreadable (edited by hand) too, and
        need no search module."""
        ranges = [getattr(self, f"{name}_{end}") for name in RANGES for end in ("from", "to")]
        plain = (
            self.status is None
            and not self.not_success
            and all(v is None for v in ranges)
            and all(getattr(self, n) is None for n in ("search", *TAGS))
        )
        order = "ended" if self.reason is not None else "created"
        return plain and self.sort == order

    def text(self, anchor: int | None) -> str:
        """The search query (``*``: every run)."""
        parts = []
        if self.user is not None:
            parts.append(f"@user:{tag(self.user)}")
        if self.status is not None:
            parts.append(f"@status:{tag(self.status)}")
        if self.reason is not None:
            parts.append(f"@reason:{tag(self.reason)}")
        if self.not_success:
            parts.append("@status:{terminated} -@reason:{success}")
        for name in TAGS:
            value = getattr(self, name)
            if value is not None:
                parts.append(f"@{name}:{tag(value)}")
        if self.search is not None:
            parts.append(f"@task|detail:({' '.join(words_of(self.search))})")
        ranges = {
            name: (getattr(self, f"{name}_from"), getattr(self, f"{name}_to")) for name in RANGES
        }
        # the pages after the first: nothing past (before) its first row
        if anchor is not None:
            ranges[self.sort] = _clip(*ranges[self.sort], anchor, self.descending)
        for name, (low, high) in ranges.items():
            # sorted by what only an ended run has: only runs that have it (every page alike)
            only_ended = name == self.sort and name in ("duration", "cost")
            if low is not None or high is not None or only_ended:
                parts.append(f"@{name}:[{_bound(low, '-inf')} {_bound(high, '+inf')}]")
        return " ".join(parts) or "*"


def words_of(text: str) -> list[str]:
    """The words of a search (letters, digits, underscores, any script): what the index's text fields
    are matched on, each word as a term (the query syntax's own characters are not passed on)."""
    return re.findall(r"\w+", text)[:32]


def _clip(low: int | None, high: int | None, anchor: int, descending: bool) -> tuple[Any, Any]:
    if descending:
        return low, anchor if high is None else min(high, anchor)
    return (anchor if low is None else max(low, anchor)), high


def _bound(value: int | None, open_end: str) -> str:
    return open_end if value is None else str(int(value))


def _cursor(cursor: str | None) -> tuple[int | None, int]:
    """A page cursor ``ANCHOR.OFFSET`` as (anchor ms, offset); none: the first page."""
    if cursor is None or cursor == "":
        return None, 0
    anchor, _, offset = cursor.partition(".")
    if not (anchor.isdigit() and offset.isdigit()):
        raise InvalidSpec(
            f"cursor {cursor[:40]!r} is not one this listing gave: use the 'next' it printed",
            field="cursor",
        )
    return int(anchor), int(offset)


@dataclass
class Page:
    """One page of runs, the count of every run that matches, and the cursors of the next page (None:
    the last) and the previous one (None: the first)."""

    rows: list[dict[str, Any]]
    total: int
    next: str | None
    previous: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "total": self.total,
            "next": self.next,
            "previous": self.previous,
        }


CSV_COLUMNS = (
    "run_id",
    "user_id",
    "status",
    "reason",
    "phase",
    "created_at",
    "terminated_at",
    "duration_ms",
    "spend_usd",
    "total_tokens",
    "details",
    "suggested_action",
)


def csv_lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    """A listing as CSV (RFC 4180, a header line first), line by line: any number of rows, never held
    whole (the CLI's ``--csv`` and the runs page's export write the same)."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")

    def line(values: Any) -> str:
        writer.writerow(values)
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    yield line(CSV_COLUMNS)
    for row in rows:
        yield line(["" if row.get(c) is None else str(row.get(c)) for c in CSV_COLUMNS])


def all_rows(client: redis.Redis, query: RunQuery) -> Iterator[dict[str, Any]]:
    """Every row ``query`` selects, page after page (its ``limit`` is the page size)."""
    cursor = query.cursor
    while True:
        page = list_runs(client, replace(query, cursor=cursor))
        yield from page.rows
        if page.next is None:
            return
        cursor = page.next


def list_runs(client: redis.Redis, query: RunQuery) -> Page:
    """The page ``query`` asks for: from the run sorted sets where they answer it
    (:meth:`RunQuery.by_sets_only`), else from ``idx:runs`` (without the search module: InvalidSpec
    naming it)."""
    query.check()
    anchor, offset = _cursor(query.cursor)
    if query.by_sets_only():
        return _from_sets(client, query, anchor, offset)
    field = query.sort
    try:
        reply = client.execute_command(
            "FT.SEARCH",
            keys.RUN_SEARCH_INDEX,
            query.text(anchor),
            "RETURN",
            "1",
            field,
            "SORTBY",
            field,
            "DESC" if query.descending else "ASC",
            "LIMIT",
            offset,
            query.limit,
            "DIALECT",
            "2",
        )
    except redis.ResponseError as exc:
        text = str(exc).lower()
        if "unknown command" in text or "no such index" in text or "unknown index" in text:
            raise InvalidSpec(
                "listing runs by status or time needs the search module (idx:runs); this server "
                "has none, or Mother has not made the index yet: `mother runs [--user U]` and "
                "`mother runs --reason R --by-end` work without it"
            ) from None
        raise
    total, found = _search_reply(reply)
    ids = [key.removeprefix(keys.RUN_PREFIX) for key, _ in found]
    rows = rows_of(client, ids)
    if anchor is None and found:
        first = found[0][1].get(field)
        anchor = int(float(first)) if first not in (None, "") else None
    return _page(rows, total, anchor, offset, query.limit)


def _from_sets(client: redis.Redis, query: RunQuery, anchor: int | None, offset: int) -> Page:
    """A page from the sorted sets: a user's runs that ended with a reason are the intersection of the
    two (scored by the end), one round trip for the ids, one for the rows."""
    if query.reason is not None and query.user is not None:
        source = [keys.termination_reason_index_key(query.reason), keys.user_runs_key(query.user)]
        ids_scores = cast(
            "list[tuple[str, float]]", client.zinter({source[0]: 1, source[1]: 0}, withscores=True)
        )
        ids_scores.sort(key=lambda pair: pair[1], reverse=query.descending)
        if anchor is not None:
            keep = (lambda s: s <= anchor) if query.descending else (lambda s: s >= anchor)
            ids_scores = [(m, sc) for m, sc in ids_scores if keep(sc)]
        total = len(ids_scores)
        found = ids_scores[offset : offset + query.limit]
    else:
        if query.reason is not None:
            index = keys.termination_reason_index_key(query.reason)
        else:
            index = keys.user_runs_key(query.user) if query.user is not None else keys.RUNS_INDEX
        high = "+inf" if anchor is None or not query.descending else anchor
        low = "-inf" if anchor is None or query.descending else anchor
        pipe = client.pipeline(transaction=False)
        if query.descending:
            pipe.zrevrangebyscore(index, high, low, start=offset, num=query.limit, withscores=True)
        else:
            pipe.zrangebyscore(index, low, high, start=offset, num=query.limit, withscores=True)
        pipe.zcount(index, low, high)
        got, total = pipe.execute()
        found = [(m.decode() if isinstance(m, bytes) else m, float(sc)) for m, sc in got]
    rows = rows_of(client, [m for m, _ in found])
    if anchor is None and found:
        anchor = int(found[0][1])
    return _page(rows, int(total), anchor, offset, query.limit)


def _page(
    rows: list[dict[str, Any]], total: int, anchor: int | None, offset: int, limit: int
) -> Page:
    """The page of ``rows`` found at ``offset`` of ``total``, and the cursors of the next one and the
    previous one (``limit`` rows back; the first page's is its own anchor at 0)."""
    shown = offset + len(rows)
    more = shown < total and anchor is not None
    back = offset > 0 and anchor is not None
    return Page(
        rows,
        total,
        f"{anchor}.{shown}" if more else None,
        f"{anchor}.{max(0, offset - limit)}" if back else None,
    )


def _search_reply(reply: Any) -> tuple[int, list[tuple[str, dict[str, str]]]]:
    """FT.SEARCH's reply (RESP2 list or RESP3 map) as (total, [(key, {field: value})])."""

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    if isinstance(reply, dict):
        rows = []
        for row in reply.get("results") or reply.get(b"results") or []:
            extra = row.get("extra_attributes") or row.get(b"extra_attributes") or {}
            rows.append(
                (text(row.get("id", row.get(b"id"))), {text(k): text(v) for k, v in extra.items()})
            )
        total = reply.get("total_results") or reply.get(b"total_results") or 0
        return int(total), rows
    rows = []
    for i in range(1, len(reply), 2):
        values = reply[i + 1] or []
        rows.append(
            (
                text(reply[i]),
                {text(values[j]): text(values[j + 1]) for j in range(0, len(values), 2)},
            )
        )
    return int(reply[0]), rows


def rows_of(client: redis.Redis, ids: list[str]) -> list[dict[str, Any]]:
    """The listing rows of ``ids`` (in that order), three reads each in one round trip: the run's listed
    fields, its termination record, its budget counters (cost). A run whose record is gone (deleted by
    hand) is still listed, with what its termination record says."""
    pipe = client.pipeline(transaction=False)
    for run_id in ids:
        queue_listing_read(pipe, run_id)
        queue_termination_read(pipe, run_id)
        pipe.execute_command(
            "JSON.GET", keys.run_budget_key(run_id), "$.spend_micro_usd", "$.total_tokens"
        )
    replies = pipe.execute(raise_on_error=False) if ids else []
    rows = []
    for i, run_id in enumerate(ids):
        run_raw, term_raw, cost_raw = replies[3 * i : 3 * i + 3]
        term = _record(term_raw)
        unread = run_raw is None or isinstance(run_raw, Exception)
        run = _record(run_raw) if unread else path_values(run_raw)
        cost = path_values(cost_raw) if isinstance(cost_raw, str | bytes) else {}
        spend = cost.get("spend_micro_usd")
        row = {
            "run_id": run_id,
            **run,
            **{
                k: term.get(k)
                for k in ("reason", "phase_at_termination", "details", "suggested_action")
            },
        }
        ended = row.get("terminated_at") or term.get("timestamp")
        row["terminated_at"] = ended
        row["duration_ms"] = _duration(row.get("created_at"), ended)
        row["spend_micro_usd"] = spend if isinstance(spend, int) else None
        row["spend_usd"] = usd(spend) if isinstance(spend, int) else None
        tokens = cost.get("total_tokens")
        row["total_tokens"] = tokens if isinstance(tokens, int) else None
        rows.append(row)
    return rows


def _duration(start: Any, end: Any) -> int | None:
    try:
        if isinstance(start, str) and isinstance(end, str):
            return max(0, ms_from_iso(end) - ms_from_iso(start))
    except ValueError:
        return None
    return None


def _record(raw: Any) -> dict[str, Any]:
    """A record read for a listing, as a mapping: empty when it is missing, and a ``status`` that says so
    when it cannot be read as one (a key of another type, JSON that is not an object)."""
    if raw is None:
        return {}
    if isinstance(raw, Exception):
        return {"status": f"record unreadable: {raw}"}
    found = orjson.loads(raw)
    return found if isinstance(found, dict) else {"status": "record is not a JSON object"}


_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def when_ms(text: str, now_ms: int, what: str = "time") -> int:
    """A time a person gives, as epoch ms: an age before ``now_ms`` (``90s``, ``30m``, ``2h``, ``7d``) or
    an ISO date or date-time (``2026-11-27``, ``2026-11-27T10:00``; UTC unless it says otherwise)."""
    import datetime as _dt

    value = text.strip()
    unit = _UNITS.get(value[-1:].lower())
    if unit is not None and value[:-1].replace(".", "", 1).isdigit():
        return now_ms - int(float(value[:-1]) * unit)
    try:
        moment = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSpec(
            f"{what} {text[:40]!r} is not an age (90s, 30m, 2h, 7d) or an ISO date-time "
            "(2026-11-27T10:00, UTC unless it says)",
            field=what,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return int(moment.timestamp() * 1000)
