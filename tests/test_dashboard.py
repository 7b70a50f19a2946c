"""The dashboard and /metrics against a real stack with runs of ten termination reasons (Mother and RQ
workers in their own processes): every page's figures checked against Redis, counted independently;
/metrics parsed with prometheus_client's parser; every page loaded in Debian's chromium, headless,
through Playwright (skipped, saying why, only when no chromium is installed: `.ci/run` installs it),
with screenshots saved and compared."""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from mother import keys
from mother.server import free_port
from tests.conftest import gated_spec, need, start_with_libraries, stop_pipeline, wait_for_person
from tests.test_pipeline import example, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Stack:
    def __init__(self, p: Any) -> None:
        self.p, self.ended, self.waiting = p, {}, ""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    # the scripted model at a price, so what runs cost adds up to something
    price = {"input_price_per_1k_usd": 0.01, "output_price_per_1k_usd": 0.03}
    models = {
        "scripted": {"provider": "scripted", "max_tokens": 8192, "reserved_for_system": 512,
                     "reserved_for_output": 1024, "escalate_to": "scripted-large", **price},
        "scripted-large": {"provider": "scripted", "max_tokens": 131072,
                           "reserved_for_system": 3000, "reserved_for_output": 15000, **price},
    }  # fmt: skip
    p = start_with_libraries(
        tmp_path_factory.mktemp("dashboard"), env={"MOTHER_MODELS": orjson.dumps(models).decode()}
    )
    c = p.client
    spent = {
        "user_id": "erin",
        "task": "Loop on a tool",
        "limit_overrides": {"turns": 1},
        "pipeline": [{"name": "loop", "role": "coder", "model": "scripted"}],
        "scripts": {
            "coder": [
                {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
                {"text": "done"},
            ]
        },
    }
    submitted = {
        "success": c.submit(example("three-phase")),
        "retries_exhausted": c.submit(example("retries-exhausted")),
        "timeout": c.submit(example("timeout")),
        "conflicting_agents": c.submit(example("conflicting-agents")),
        "policyViolation": c.submit(example("library-refused-agent")),
        "insufficient_evidence": c.submit(example("library-insufficient")),
        "blocked": c.submit(example("gate-timeout")),
        "approval_denied": c.submit(example("approval-denied")),
        "user_cancelled": c.submit(example("cancelled")),
        "budget_exhausted": c.submit(spent),
    }
    wait_until(
        lambda: (
            p.redis.exists(keys.run_key(submitted["user_cancelled"]))
            and c.status(submitted["user_cancelled"]).status == "running"
        ),
        timeout=30,
    )
    c.cancel(submitted["user_cancelled"], actor="tester", reason="not needed")
    wait_for_person(p, submitted["approval_denied"])
    c.deny(submitted["approval_denied"], actor="ops", reason="freeze week")
    s = Stack(p)
    for reason, run_id in submitted.items():
        record = p.wait(run_id, timeout=90).termination
        assert record.reason == reason, (reason, record.details)
        s.ended[reason] = run_id
    # one run left waiting for a person
    s.waiting = c.submit(example("approval-denied"))
    wait_for_person(p, s.waiting)
    yield s
    stop_pipeline(p)


def _settings(url: str, **dashboard: Any):
    from mother.config import load_settings

    cfg = load_settings(redis_url=url)
    return cfg.model_copy(
        update={"dashboard": cfg.dashboard.model_copy(update={"refresh_seconds": 0.5, **dashboard})}
    )


@pytest.fixture(scope="module")
def web(stack):
    from starlette.testclient import TestClient

    from mother.web import create_app

    with TestClient(create_app(_settings(stack.p.url))) as client:
        yield client


def _stored_by_reason(r) -> dict[str, int]:
    """Terminations by reason, counted from the per-reason sorted sets (not the search index)."""
    from schemas import TERMINATION_REASONS

    counts = {x: r.zcard(keys.termination_reason_index_key(x)) for x in TERMINATION_REASONS}
    return {x: n for x, n in counts.items() if n}


def test_the_pages_show_what_redis_holds(stack, web) -> None:
    import re

    stored = _stored_by_reason(stack.p.redis)
    assert set(stored) >= set(stack.ended)
    html = web.get("/").text
    for reason, n in stored.items():
        row = re.search(rf'<tr data-reason="{reason}">.*?</tr>', html, re.S)
        assert row is not None, reason
        assert re.search(
            rf'<td class="num stored-total"><a href="[^"]+">{n}</a></td>', row.group(0)
        )
    # the chart's bars add up to the stored terminations (all ended within the last 48 hours)
    bars = Counter()
    for reason, n in re.findall(r'data-reason="([A-Za-z_]+)" data-n="(\d+)"', html):
        bars[reason] += int(n)
    assert dict(bars) == stored
    chart = web.get("/api/chart?bucket=day").json()
    assert chart["totals"] == stored and len(chart["starts"]) == 30
    assert web.get("/api/chart?bucket=week").status_code == 400
    # the waiting run, with the command that decides it
    assert stack.waiting in html and f"mother approve {stack.waiting}" in html
    newest = stack.p.redis.zrevrange(keys.RUNS_INDEX, 0, 14)
    assert re.findall(r'<tr data-run="([^"]+)" data-reason', html) == newest

    runs = web.get("/runs?reason=timeout").text
    assert stack.ended["timeout"] in runs and stack.ended["success"] not in runs
    mine = web.get("/api/runs?user=erin").json()["rows"]
    assert [r["run_id"] for r in mine] == [stack.ended["budget_exhausted"]]
    waiting_only = web.get("/api/runs?status=waiting").json()["rows"]
    assert [r["run_id"] for r in waiting_only] == [stack.waiting]
    bad = web.get("/runs?status=sleeping")
    assert bad.status_code == 400 and "unknown status &#39;sleeping&#39;" in bad.text

    run_id = stack.ended["budget_exhausted"]
    page = web.get(f"/runs/{run_id}").text
    record = orjson.loads(stack.p.redis.execute_command("JSON.GET", keys.termination_key(run_id)))
    assert 'id="run-reason"' in page and ">budget_exhausted</span>" in page
    assert record["details"].replace("'", "&#39;") in page
    budget = orjson.loads(stack.p.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    assert re.search(
        rf'<tr data-dim="model_calls"><td>model_calls</td><td class="num used">{budget["model_calls"]}</td>',
        page,
    )
    missing = web.get("/runs/no-such-run")
    assert missing.status_code == 404 and "no-such-run" in missing.text
    assert web.get("/waiting").text.count('<tr data-run="') == 1
    # a library run's page shows no chunk text: contexts appear as manifests
    library_page = web.get(f"/runs/{stack.ended['insufficient_evidence']}").text
    assert "retrieval_hits (" not in library_page or "[public_research/" not in library_page


def test_bars_reasons_and_filters_list_exactly_the_runs_they_count(stack, web) -> None:
    """Each bar of the chart and each reason links to a listing of exactly the runs it counts (counted
    here from the termination records themselves); "not success", a status, and pages of 2 cover every
    matching run once; the chart has a legend and says its times are UTC."""
    import re
    from html import unescape

    r = stack.p.redis
    records = [
        orjson.loads(r.execute_command("JSON.GET", key))
        for key in r.scan_iter(match=f"{keys.TERMINATION_PREFIX}*")
    ]
    html = web.get("/").text
    assert 'id="legend"' in html and "UTC" in html
    bars = re.findall(
        r'<a href="([^"]+)" class="bar">\s*<rect [^>]*data-reason="([a-z_]+)" data-n="(\d+)" '
        r'data-start="(\d+)" data-end="(\d+)"',
        html,
    )
    assert bars
    for href, reason, n, start, end in bars:
        expected = {
            rec["run_id"]
            for rec in records
            if rec["reason"] == reason and int(start) <= rec["timestamp_ms"] <= int(end)
        }
        listed = web.get(unescape(href).replace("/runs?", "/api/runs?")).json()
        assert listed["total"] == int(n) == len(expected), href
        assert {row["run_id"] for row in listed["rows"]} == expected
    for reason in {rec["reason"] for rec in records}:
        listed = web.get(f"/api/runs?reason={reason}&limit=500").json()
        assert {row["run_id"] for row in listed["rows"]} == {
            rec["run_id"] for rec in records if rec["reason"] == reason
        }
    failed = {rec["run_id"] for rec in records if rec["reason"] != "success"}
    seen: list[str] = []
    url = "/api/runs?outcome=not_success&limit=2"
    while url:
        page = web.get(url).json()
        assert page["total"] == len(failed)
        seen += [row["run_id"] for row in page["rows"]]
        url = f"/api/runs?outcome=not_success&limit=2&cursor={page['next']}" if page["next"] else ""
    assert sorted(seen) == sorted(failed)  # every one, once
    listed = web.get("/runs?outcome=not_success&limit=2").text
    assert f'<span id="runs-total">{len(failed)}</span>' in listed and 'id="next-page"' in listed
    assert 'id="previous-page"' not in listed
    # back from the second page: the first page's rows again
    first = web.get("/api/runs?outcome=not_success&limit=2").json()
    second = web.get(f"/api/runs?outcome=not_success&limit=2&cursor={first['next']}").json()
    back = web.get(f"/api/runs?outcome=not_success&limit=2&cursor={second['previous']}").json()
    assert first["previous"] is None and back["rows"] == first["rows"]
    assert (
        'id="previous-page"'
        in web.get(f"/runs?outcome=not_success&limit=2&cursor={first['next']}").text
    )
    for row in web.get("/api/runs?limit=500").json()["rows"]:
        assert row["created_at"] and "duration_ms" in row and "spend_usd" in row


def test_a_token_guards_every_page(stack) -> None:
    from starlette.testclient import TestClient

    from mother.errors import ConfigError
    from mother.web import check_exposure, create_app

    with TestClient(create_app(_settings(stack.p.url, token="s3cret"))) as client:
        assert client.get("/").status_code == 401
        assert client.get("/metrics").status_code == 401
        assert client.get("/healthz").status_code == 200
        ok = client.get("/runs", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        hop = client.get("/runs?token=s3cret&reason=timeout", follow_redirects=False)
        assert hop.status_code == 303 and hop.headers["location"] == "/runs?reason=timeout"
        assert client.get("/runs?reason=timeout").status_code == 200  # the cookie
        assert "s3cret" not in client.get("/").text
    check_exposure(_settings(stack.p.url))
    with pytest.raises(ConfigError, match=r"dashboard\.token"):
        check_exposure(_settings(stack.p.url, host="0.0.0.0"))
    check_exposure(_settings(stack.p.url, host="0.0.0.0", token="t"))


def test_metrics_parse_and_match_the_runs(stack, web) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = web.get("/metrics").text
    samples: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    for reason, n in _stored_by_reason(stack.p.redis).items():
        assert samples[("mother_runs_terminated_total", (("reason", reason),))] == n
    submitted = stack.p.redis.zcard(keys.RUNS_INDEX)
    assert samples[("mother_runs_submitted_total", ())] == submitted
    # every run but the refused-before-start ones started; the waiting one has not
    assert 0 < samples[("mother_runs_started_total", ())] <= submitted
    assert samples[("mother_guard_calls_total", ())] > 0
    crossed = {
        dict(labels)["code"]: v
        for (name, labels), v in samples.items()
        if name == "mother_budget_limits_exceeded_total"
    }
    assert crossed.get("budget_model_call_exceeded", 0) >= 1, crossed
    assert sum(v for (name, _), v in samples.items() if name == "mother_conflicts_total") >= 1
    assert (
        sum(v for (name, _), v in samples.items() if name == "mother_conflict_resolutions_total")
        >= 1
    )
    assert (
        samples[("mother_tool_calls_total", (("outcome", "success"), ("tool", "write_file")))] >= 1
    )
    count = samples[("mother_phase_duration_seconds_count", ())]
    accepted = sum(
        len(orjson.loads(raw)[0])
        for raw in (
            stack.p.redis.execute_command("JSON.GET", keys.run_key(run_id), "$.results")
            for run_id in stack.p.redis.zrange(keys.RUNS_INDEX, 0, -1)
        )
        if raw
    )
    assert count == accepted
    assert samples[("mother_phase_duration_seconds_bucket", (("le", "+Inf"),))] == count
    assert samples[("mother_runs_waiting_for_person", ())] == 1
    assert samples[("mother_workers", ())] == 2
    assert ("mother_queue_depth", (("queue", "agents"),)) in samples


@contextlib.contextmanager
def _in_chromium(url: str) -> Iterator[tuple[str, Any, Any]]:
    """The dashboard served by uvicorn on a free port and Debian's headless chromium: yields the base
    address, the browser and a 1280x900 page; on a clean exit no page raised a script error."""
    import uvicorn
    from playwright.sync_api import sync_playwright

    from mother.web import create_app

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(_settings(url)), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=20)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield f"http://127.0.0.1:{port}", browser, page
            browser.close()
            assert errors == []
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_every_page_in_headless_chromium(stack, tmp_path: Path) -> None:
    need(None if CHROMIUM else "no chromium on this machine (Debian's `chromium` package)")
    stored = _stored_by_reason(stack.p.redis)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with _in_chromium(stack.p.url) as (base, browser, page):
        page.goto(base + "/")
        for reason, n in stored.items():
            cell = page.locator(f'#reason-totals tr[data-reason="{reason}"] .stored-total')
            assert cell.inner_text() == str(n)
        bars = page.locator("#chart rect")
        drawn = sum(int(bars.nth(i).get_attribute("data-n")) for i in range(bars.count()))
        assert drawn == sum(stored.values())
        assert page.locator("#g-waiting").inner_text() == "1"
        page.screenshot(path=str(shots / "overview.png"), full_page=True)

        # live: a run that ends now shows up without a reload
        before = page.locator("#runs-table tbody tr").count()
        fresh = stack.p.client.submit(example("three-phase"))
        stack.p.wait(fresh)
        page.wait_for_selector(f'#runs-table tr[data-run="{fresh}"]', timeout=15_000)
        # pushed by the live stream (server-sent events), not polled
        assert page.evaluate("document.body.dataset.live") == "events"
        assert page.locator("#runs-table tbody tr").count() >= min(before + 1, 15)
        assert page.locator("#live").inner_text().startswith("live")

        # a bar is a link to exactly the runs it counts
        first = page.locator("#chart a.bar").first
        n = first.locator("rect").get_attribute("data-n")
        first.click()
        page.wait_for_selector("#runs-total")
        assert page.locator("#runs-total").inner_text() == n
        assert page.locator("#runs-table tbody tr").count() == int(n)

        page.goto(base + "/runs?reason=timeout")
        rows = page.locator("#runs-table tbody tr")
        assert rows.count() == 1 and rows.first.get_attribute("data-run") == stack.ended["timeout"]
        page.screenshot(path=str(shots / "runs.png"), full_page=True)

        run_id = stack.ended["conflicting_agents"]
        page.goto(f"{base}/runs/{run_id}")
        assert page.locator("#run-reason").inner_text() == "conflicting_agents"
        conflict_id = stack.p.client.status(run_id).conflicts[0]
        assert conflict_id in page.locator("#conflicts").inner_text()
        assert page.locator("#phases tbody tr").count() == len(
            stack.p.client.status(run_id).spec.pipeline
        )
        # its timeline: every attempt, with its times and cost
        assert page.locator("#timeline tbody tr[data-attempt]").count() >= len(
            stack.p.client.status(run_id).spec.pipeline
        )
        assert "$" in page.locator("#run-cost").inner_text()
        page.screenshot(path=str(shots / "run.png"), full_page=True)
        # the page's content alone (the header's "live" clock changes with every update)
        page.locator("#main").screenshot(path=str(shots / "run-main.png"))

        page.goto(base + "/waiting")
        assert f"mother approve {stack.waiting}" in page.locator("#waiting-table").inner_text()
        page.screenshot(path=str(shots / "waiting.png"), full_page=True)

        # a 390 px phone: no page is wider than the screen
        phone = browser.new_page(viewport={"width": 390, "height": 844})
        for path in ("/", "/runs", f"/runs/{run_id}", "/waiting"):
            phone.goto(base + path)
            wide = phone.evaluate("document.documentElement.scrollWidth")
            assert wide <= 390, (path, wide)
        phone.screenshot(path=str(shots / "phone.png"), full_page=True)
        phone.close()

        # the same page twice gives the same picture (nothing moved in between)
        page.goto(f"{base}/runs/{run_id}")
        page.locator("#main").screenshot(path=str(shots / "run-again.png"))
    for name in ("overview", "runs", "run", "waiting"):
        data = (shots / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
    assert (shots / "run-main.png").read_bytes() == (shots / "run-again.png").read_bytes()


def test_the_grafana_dashboard_names_only_metrics_we_export(web) -> None:
    import json
    import re

    board = json.loads(
        (
            Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "mother-harness.json"
        ).read_text()
    )
    named = {
        name
        for panel in board["panels"]
        for target in panel["targets"]
        for name in re.findall(r"mother_[a-z_]+", target["expr"])
    }
    exported = set(re.findall(r"^# TYPE (mother_[a-z_]+) ", web.get("/metrics").text, re.M))
    series = exported | {f"{n}_total" for n in exported} | {f"{n}_bucket" for n in exported}
    assert named and named <= series, named - series


def _samples(text: str) -> dict[str, list[dict[str, str]]]:
    """The exposition's samples: metric name -> each sample's labels."""
    import re

    found: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
        assert m, line
        labels = dict(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        found.setdefault(m.group(1), []).append(labels)
    return found


def _series(expr: str, samples: dict[str, list[dict[str, str]]]) -> set[tuple[str, ...]]:
    """The series ``sum by (L) (f(metric[w]))`` terms joined by ``or`` return, each as (the metric it
    comes from, its label values): PromQL's ``or`` keeps a right-hand series only where the left has none
    with the same labels (``sum by`` has dropped the metric's name, so one from another metric is lost)."""
    import re

    out: set[tuple[str, ...]] = set()
    for part in expr.split(" or "):
        m = re.fullmatch(
            r"\s*sum by \(([a-z_, ]+)\) \((?:increase|rate)\((mother_[a-z_]+)\[\w+\]\)\).*", part
        )
        assert m, part
        by = [x.strip() for x in m.group(1).split(",")]
        side = {tuple(s.get(x, "") for x in by) for s in samples.get(m.group(2), [])}
        taken = {t[1:] for t in out}
        out |= {(m.group(2), *t) for t in side if t not in taken}
    return out


def test_every_grafana_panel_returns_every_series_it_should(stack, web) -> None:
    """Each panel's expressions, evaluated on what /metrics exports for runs of ten reasons (no promtool
    here: a small evaluator of the shapes the board uses): a `sum by (labels)` panel shows one series per
    label set of each metric it names (the budget panel joined refusals and crossings with `or`, which
    dropped every crossing whose code also had refusals), its labels exist on the metric, and its legend
    names only labels the expression keeps."""
    import json
    import re

    board = json.loads(
        (
            Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "mother-harness.json"
        ).read_text()
    )
    # a run whose tool-call limit the guard reaches (crossed) and then refuses past: one code both
    from mother.errors import BudgetExhausted
    from tests.test_budget import SETTINGS, _open

    settings = SETTINGS.model_copy(deep=True)
    settings.budget.profiles["balanced"].tool_calls = 2
    guard = _open(stack.p.redis, "grafana-panel-run", settings)
    guard.charge_tool(read_only=False)
    guard.charge_tool(read_only=False)
    with pytest.raises(BudgetExhausted):
        guard.charge_tool(read_only=False)
    text = web.get("/metrics").text
    samples = _samples(text)
    declared = {
        f"{name}{tail}"
        for name, kind in re.findall(r"^# TYPE (mother_[a-z_]+) (\w+)", text, re.M)
        for tail in ({"histogram": ("_bucket", "_sum", "_count")}.get(kind, ("",)))
    }
    assert samples["mother_redis_up"] == [{}]
    summed = re.compile(r"sum by \([a-z_, ]+\) \((increase|rate)\(mother_[a-z_]+\[\w+\]\)\).*")
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            metrics = re.findall(r"mother_[a-z_]+", expr)
            for metric in metrics:
                assert metric in samples or metric in declared, (panel["title"], metric)
            groups = re.findall(r"by \(([a-z_, ]+)\)", expr)
            if groups:
                keep = {x.strip() for g in groups for x in g.split(",")}
            elif re.search(r"\b(sum|min|max|avg|count)\(", expr):
                keep = set()
            else:  # a plain selector keeps its labels
                keep = {label for m in metrics for s in samples.get(m, []) for label in s}
            for name in re.findall(r"\{\{(\w+)\}\}", target.get("legendFormat") or ""):
                assert name in keep, (panel["title"], name)
            for metric in metrics:
                if metric not in samples:
                    continue  # declared, nothing counted yet in this stack
                labels = {label for s in samples[metric] for label in s}
                assert keep - {"le"} <= labels | {"le"}, (panel["title"], metric, keep - labels)
            if summed.fullmatch(expr.split(" or ")[0]):
                shown = _series(expr, samples)
                wanted = set().union(*(_series(part, samples) for part in expr.split(" or ")))
                assert shown == wanted, (panel["title"], sorted(wanted - shown))
    refusals = {s["code"] for s in samples.get("mother_budget_refusals_total", [])}
    crossed = {s["code"] for s in samples.get("mother_budget_limits_exceeded_total", [])}
    assert refusals & crossed, "no code was both refused and crossed: the test would prove less"


def test_the_last_gc_report_is_a_gauge_even_with_errors(r) -> None:
    """A GC report's errors are a list of lines: /metrics counts them (float() of the list failed)."""
    from mother.web.metrics import RedisCollector

    key = keys.gc_report_key("2026-11-25T00:00:00.000Z")
    report = {
        "archived": 3,
        "errors": ["artifact a: NOPERM", "artifact b: NOPERM"],
        "duration_ms": 1500,
    }
    r.execute_command("JSON.SET", key, "$", orjson.dumps(report))
    r.zadd(keys.GC_REPORTS, {key: 1})
    families = {f.name: f for f in RedisCollector(r).collect()}
    figures = {s.labels["figure"]: s.value for s in families["mother_gc_last_report"].samples}
    assert (figures["errors"], figures["archived"]) == (2.0, 3.0)
    assert families["mother_gc_last_duration_seconds"].samples[0].value == 1.5


def test_queue_depth_counts_the_queues_jobs_really_use(r: redis.Redis) -> None:
    """Jobs wait on each host's own queues ({host}.agents, {host}.tools, {host}.maintenance), and
    attempts wait for a live host (hosts:awaited): the gauge (the summary's and /metrics'
    mother_queue_depth) counts them all by kind."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    from mother.web.data import gauges

    kwargs = r.connection_pool.connection_kwargs
    plain = redis.Redis(host=kwargs["host"], port=kwargs["port"], db=kwargs.get("db", 0))
    for name, jobs in (
        ("host-a.agents", 3),
        ("host-b.agents", 2),
        ("host-a.tools", 1),
        ("host-b.maintenance", 1),
    ):
        queue = Queue(name, connection=plain, serializer=JSONSerializer)
        for _ in range(jobs):
            queue.enqueue_call("workers.phase.execute", args=("x",))
    r.zadd(keys.HOSTS_AWAITED, {f"run-{n} 0 1": n for n in range(4)})
    assert gauges(r)["queues"] == {"agents": 5, "tools": 1, "maintenance": 1, "awaiting_host": 4}


def test_axis_labels_fit_and_an_open_gate_counts_its_wait() -> None:
    """The chart's axis says 10k, not a clipped "10000.0"; an open gate has waited until now (the run
    page said "waiting for people 0ms" while one was open); a run that ended before its first phase
    waited until its end before it."""
    from mother.observe.timeline import timeline
    from mother.web.data import count_label

    assert [count_label(n) for n in (0, 7, 7.5, 950, 5000, 10000, 12500, 2_000_000)] == [
        "0", "7", "7.5", "950", "5k", "10k", "12.5k", "2M",
    ]  # fmt: skip
    run = {"created_at": "2026-11-28T00:00:00.000Z", "terminated_at": None}
    opened = [
        {"type": "run_submitted", "at": "2026-11-28T00:00:00.000Z", "data": {}},
        {"type": "gate_opened", "at": "2026-11-28T00:00:01.000Z", "data": {"gate_id": "g-1"}},
    ]
    waiting = timeline(run, opened, None, now="2026-11-28T00:05:01.000Z")
    assert waiting["gate_wait_ms"] == waiting["gates"][0]["wait_ms"] == 300_000
    ended = {"created_at": "2026-11-28T00:00:00.000Z", "terminated_at": "2026-11-28T00:00:02.500Z"}
    assert timeline(ended, opened[:1], None)["admission_wait_ms"] == 2500


def test_the_hosts_page_and_cli_show_each_hosts_work(stack, web) -> None:
    """The hosts page, /api/hosts and `mother hosts list --json` (one reader): each host the stack
    enrolled, live, its worker busy or free, the attempt it runs now (a slow run's, on the host whose
    heartbeat names it), how long ago it beat, and the phases it finished and failed in the last hour,
    against counts made here from the activity stream."""
    from tests.conftest import beating, cli

    p = stack.p
    slow = p.client.submit(
        example("worker-killed", scripts={"writer": [{"text": "finished", "delay_seconds": 3}]})
    )
    key = keys.attempt_heartbeat_key(slow, 0, 1)
    wait_until(lambda: beating(p.redis.get(key)), timeout=30)
    runner = str(p.redis.get(key)).split(":")[0]
    rows = {r["name"]: r for r in web.get("/api/hosts").json()}
    assert set(rows) == {"local-0", "local-1"}
    assert {r["state"] for r in rows.values()} == {"live"}
    assert rows[runner]["running"] == [{"run_id": slow, "phase_index": 0, "attempt": 1}]
    assert rows[runner]["busy"] == 1 and rows[runner]["workers"] == 1
    assert all(0 <= r["beat_ms_ago"] <= 3000 for r in rows.values())
    done: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    now_ms = int(p.redis.execute_command("FCALL", "mh_now", 0))
    for _id, e in p.redis.xrange(keys.ACTIVITY_STREAM, min=f"{now_ms - 3_600_000}-0"):
        worker = orjson.loads(e.get("data") or "{}").get("worker") or ""
        if e["type"] in ("phase_completed", "phase_failed") and worker:
            (done if e["type"] == "phase_completed" else failed)[worker.split(".")[0]] += 1
    assert sum(done.values()) >= 5
    for name, row in rows.items():
        assert (row["done_last_hour"], row["failed_last_hour"]) == (done[name], failed[name])
    page = web.get("/hosts")
    assert page.status_code == 200 and f'data-host="{runner}"' in page.text and slow in page.text
    listed = cli("hosts", "list", "--json", url=p.url)
    assert listed.exit_code == 0, listed.output
    by_cli = {r["name"]: r for r in orjson.loads(listed.stdout)}
    for name in rows:
        assert by_cli[name]["done_last_hour"] == rows[name]["done_last_hour"]
        assert by_cli[name]["running"] == rows[name]["running"]
    assert p.wait(slow, 60).termination.reason == "success"


PROMETHEUS = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"


def test_the_shipped_alert_rules_pass_promtool_and_name_only_exported_metrics(web) -> None:
    """deploy/prometheus/rules.yml (recording rules, the success objective, the alerts) passes
    `promtool check rules`, and `promtool test rules` makes each alert fire and not fire from input
    series (tests.yml); every metric the rules read is one /metrics exports."""
    import re
    import subprocess

    from prometheus_client.parser import text_string_to_metric_families

    promtool = shutil.which("promtool")
    need(None if promtool else "no promtool on this machine (Debian's `prometheus` package)")
    assert promtool is not None
    for args in (("check", "rules", "rules.yml"), ("test", "rules", "tests.yml")):
        done = subprocess.run(
            [promtool, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
    text = (PROMETHEUS / "rules.yml").read_text()
    alerts = set(re.findall(r"- alert: (\w+)", text))
    assert alerts == {
        "MotherRedisDown",
        "MotherNoLeader",
        "MotherSuccessRatioLow",
        "MotherRunsWaitingPastWarning",
        "MotherQueueDepthGrowing",
        "MotherGCNotRun",
        "MotherSecurityViolation",
    }
    tested = set(re.findall(r"alertname: (\w+)", (PROMETHEUS / "tests.yml").read_text()))
    assert tested == alerts
    exported = set()
    for family in text_string_to_metric_families(web.get("/metrics").text):
        exported.add(family.name)
        exported.update(sample.name for sample in family.samples)
        if family.type == "counter":
            exported.add(family.name + "_total")
        if family.type == "histogram":
            exported.add(family.name + "_bucket")
    read = set(re.findall(r"\b(mother_[a-z_]+)\b", text))
    assert read and read <= exported, read - exported


def test_the_leader_the_violations_and_the_gcs_start_are_metrics(stack, web, r) -> None:
    """What the alerts read: mother_leader is 1 while a Mother holds the lease (0 when none does), a
    recorded violation counts under its kind (a host's own kind under host_reported), the newest GC
    report's start is a timestamp, and runs waiting past their gate's warning are counted."""
    from prometheus_client.parser import text_string_to_metric_families

    from mother.clock import ServerClock
    from mother.security import record_violation

    p = stack.p

    def scrape() -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {}
        for family in text_string_to_metric_families(web.get("/metrics").text):
            for sample in family.samples:
                found.setdefault(sample.name, []).append(sample)
        return found

    before = scrape()
    assert [s.value for s in before["mother_leader"]] == [1.0]
    now = ServerClock(p.redis).now_iso()
    record_violation(p.redis, "probe_violation", at=now, maxlen=1000, activity=False)
    record_violation(
        p.redis, "made_up", at=now, maxlen=1000, activity=False, counted_as="host_reported"
    )
    after = scrape()

    def violations(found: dict[str, list[Any]], kind: str) -> float:
        return sum(
            s.value
            for s in found.get("mother_security_violations_total", [])
            if s.labels == {"kind": kind}
        )

    assert violations(after, "probe_violation") == violations(before, "probe_violation") + 1
    assert violations(after, "host_reported") == violations(before, "host_reported") + 1
    assert violations(after, "made_up") == 0
    assert [s.value for s in after["mother_runs_waiting_past_warning"]] == [
        float(
            p.redis.zcard(keys.RUNS_WAITING)
            - p.redis.zcount(keys.GATE_WARNINGS, f"({ServerClock(p.redis).now_ms()}", "+inf")
        )
    ]
    assert after["mother_gc_last_started_timestamp_seconds"][0].value >= 0
    # a server no Mother leads
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from mother.web.metrics import RedisCollector

    alone = CollectorRegistry()
    alone.register(RedisCollector(r))
    assert "mother_leader 0.0" in generate_latest(alone).decode()


def test_the_costs_page_and_cli_add_up_the_runs_budgets(stack, web) -> None:
    """/costs, /api/costs and `mother costs --json` (one reader): the runs created in the period, by user
    and by day, and the most expensive, against sums made here from each run's budget counters; spend
    by model against the metrics counters; a period that is not one is a 400 naming it."""
    from tests.conftest import cli

    p = stack.p
    ids = p.redis.zrange(keys.RUNS_INDEX, 0, -1)
    spend: dict[str, int] = Counter()
    runs: dict[str, int] = Counter()
    each: dict[str, int] = {}
    for run_id in ids:
        doc = orjson.loads(p.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
        spend[doc["user_id"]] += doc["spend_micro_usd"]
        runs[doc["user_id"]] += 1
        each[run_id] = doc["spend_micro_usd"]
    assert sum(spend.values()) > 0
    got = web.get("/api/costs?since=30d&top=3").json()
    assert got["runs"] == len(ids) and got["spend_micro_usd"] == sum(spend.values())
    assert {r["user"]: (r["runs"], r["spend_micro_usd"]) for r in got["by_user"]} == {
        u: (runs[u], spend[u]) for u in runs
    }
    assert [r["spend_micro_usd"] for r in got["by_user"]] == sorted(spend.values(), reverse=True)
    assert sum(d["runs"] for d in got["by_day"]) == len(ids)
    costliest = sorted(each.values(), reverse=True)[:3]
    assert [r["spend_micro_usd"] for r in got["top"]] == costliest
    counters = p.redis.hgetall(keys.METRICS_COUNTERS)
    for row in got["by_model"]:
        assert row["spend_micro_usd"] == int(
            counters.get(f"model_spend_micro_usd|{row['model']}", 0)
        )
        assert row["calls"] == int(counters[f"model_calls|{row['model']}"])
    page = web.get("/costs?since=30d&top=3")
    assert page.status_code == 200 and got["top"][0]["run_id"] in page.text
    listed = cli("costs", "--since", "30d", "--top", "3", "--json", url=p.url)
    assert listed.exit_code == 0, listed.output
    assert orjson.loads(listed.stdout)["by_user"] == got["by_user"]
    bad = web.get("/api/costs?since=yesterday")
    assert bad.status_code == 400 and "since" in bad.json()["error"]


def _records(r: Any) -> dict[str, dict[str, Any]]:
    """Every stored run's record, by id."""
    return {
        run_id: orjson.loads(r.execute_command("JSON.GET", keys.run_key(run_id)))
        for run_id in r.zrange(keys.RUNS_INDEX, 0, -1)
    }


def test_search_filters_and_sorts_find_what_the_records_hold(stack, web) -> None:
    """Full-text search over the task and the history's details (errors, why a run stopped), filters on
    phase, model, host, cost and duration, and sorts by duration and cost: each page and `mother runs`
    list exactly the runs the test finds in the records, in order."""
    import re

    from tests.conftest import cli

    p = stack.p
    records = _records(p.redis)

    def listed(query: str) -> list[str]:
        got = web.get(f"/api/runs?limit=500&{query}")
        assert got.status_code == 200, got.text
        return [row["run_id"] for row in got.json()["rows"]]

    def words(record: dict[str, Any]) -> set[str]:
        text = " ".join([record["spec"]["task"], *(h["detail"] for h in record["history"])])
        return {w.lower() for w in re.findall(r"\w+", text)}

    wanted = {r for r, rec in records.items() if {"exceeded", "timeout"} <= words(rec)}
    assert wanted and set(listed("search=exceeded+timeout")) == wanted
    assert listed("search=zzzqqq") == []
    phase = next(rec["phase"] for rec in records.values() if rec.get("phase"))
    assert set(listed(f"phase={phase}")) == {
        r for r, rec in records.items() if rec.get("phase") == phase
    }
    large = {
        r
        for r, rec in records.items()
        if any(s["model"] == "scripted-large" for s in rec["spec"]["pipeline"])
    }
    assert set(listed("model=scripted-large")) == large
    host = next(rec["host"] for rec in records.values() if rec.get("host"))
    assert set(listed(f"host={host}")) == {
        r for r, rec in records.items() if rec.get("host") == host
    }
    ended = {r: rec for r, rec in records.items() if "spend_micro_usd" in rec}
    assert len(ended) >= 10
    by_cost = listed("sort=cost")
    assert set(by_cost) == set(ended)
    costs = [ended[r]["spend_micro_usd"] for r in by_cost]
    assert costs == sorted(costs, reverse=True) and costs[0] > 0
    middle = sorted(costs)[len(costs) // 2] / 1_000_000
    assert set(listed(f"cost_min={middle}")) == {
        r for r, rec in ended.items() if rec["spend_micro_usd"] >= round(middle * 1_000_000)
    }
    by_duration = listed("sort=duration&order=asc")
    durations = [ended[r]["duration_ms"] for r in by_duration]
    assert durations == sorted(durations) and set(by_duration) == set(ended)
    assert set(listed("duration_min=1")) == {
        r for r, rec in ended.items() if rec["duration_ms"] >= 1000
    }
    assert web.get("/runs?search=exceeded+timeout").status_code == 200
    for bad in ("search=%21%21", "phase=a%20b", "cost_min=-1", "sort=size"):
        got = web.get(f"/api/runs?{bad}")
        assert got.status_code == 400 and "\n" not in got.json()["error"], bad
    # the CLI: the same filters
    out = cli("runs", "--search", "exceeded timeout", "--json", "--limit", "500", url=p.url)
    assert {orjson.loads(line)["run_id"] for line in out.stdout.splitlines()} == wanted
    out = cli("runs", "--sort", "cost", "--json", "--limit", "500", url=p.url)
    assert [orjson.loads(line)["run_id"] for line in out.stdout.splitlines()] == by_cost


def test_a_listing_exports_every_run_it_selects_as_csv(stack, web) -> None:
    """`mother runs --csv --limit 2` (pages of 2: every page is read) and the runs page's "all N as CSV"
    (/runs.csv with the page's filters): every run the filters select, a header first."""
    import csv
    import io

    from mother.observe import listing
    from tests.conftest import cli

    p = stack.p
    records = _records(p.redis)
    out = cli("runs", "--csv", "--limit", "2", url=p.url)
    failed = cli("runs", "--csv", "--not-success", "--limit", "2", url=p.url)
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert tuple(rows[0]) == listing.CSV_COLUMNS
    assert sorted(r["run_id"] for r in rows) == sorted(records)
    not_success = {
        r
        for r, rec in records.items()
        if rec.get("reason") not in (None, "success") and rec["status"] == "terminated"
    }
    assert {r["run_id"] for r in csv.DictReader(io.StringIO(failed.stdout))} == not_success
    page = web.get("/runs?outcome=not_success")
    assert "/runs.csv?outcome=not_success" in page.text
    got = web.get("/runs.csv?outcome=not_success")
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/csv")
    assert {r["run_id"] for r in csv.DictReader(io.StringIO(got.text))} == not_success


def test_an_index_made_before_its_new_fields_gets_them(r) -> None:
    """idx:runs made by an earlier version (status, user, reason, ended, created) is given the search
    text, phase, model, host, duration and cost fields at Mother's start (FT.ALTER), stored records
    indexed: a search finds a run written before."""
    from mother.observe.listing import RUN_FIELDS, RunQuery, ensure_index, list_runs
    from mother.records._json import index_fields

    r.execute_command(
        "FT.CREATE", keys.RUN_SEARCH_INDEX, "ON", "JSON", "PREFIX", "1", keys.RUN_PREFIX, "SCHEMA",
        "$.status", "AS", "status", "TAG", "$.created_ms", "AS", "created", "NUMERIC", "SORTABLE",
    )  # fmt: skip
    try:
        record = {"run_id": "old-1", "status": "terminated", "created_ms": 1, "phase": "build",
                  "spec": {"task": "migrate the ledger", "pipeline": []}, "history": []}  # fmt: skip
        r.execute_command("JSON.SET", keys.run_key("old-1"), "$", orjson.dumps(record))
        assert ensure_index(r)
        assert index_fields(r, keys.RUN_SEARCH_INDEX) >= {name for _, name, _ in RUN_FIELDS}
        found = wait_until(lambda: list_runs(r, RunQuery(search="ledger", phase="build")).rows)
        assert [row["run_id"] for row in found] == ["old-1"]
    finally:
        r.execute_command("FT.DROPINDEX", keys.RUN_SEARCH_INDEX)


def test_a_principal_acts_from_the_pages_as_itself_in_chromium(stack) -> None:
    """In Debian's chromium: signed out, no page offers an action and a POST is refused. alice-svc signs
    in (its password checked by Redis) and, from the pages, approves one gate, denies another, answers a
    question and cancels the 30 runs a listing's filter selects (the count shown first, the same Mother
    finds); each decision is recorded with alice-svc as its actor. Its approval of bob-svc's run is
    refused with Mother's one line and changes nothing; a form without its CSRF token is refused; after
    signing out the forms are gone."""
    need(None if CHROMIUM else "no chromium on this machine (Debian's `chromium` package)")
    from mother.client import MotherClient
    from mother.config import load_settings
    from mother.identities import party_url, principals
    from mother.observe.listing import RunQuery

    p = stack.p
    made = {}
    for name, user in (("alice-svc", "alice-web"), ("bob-svc", "bob-web")):
        if principals.load(p.redis, name) is not None:
            principals.remove(p.redis, name)
        _, password = principals.add(
            p.redis,
            name,
            ["submit", "approve", "answer", "cancel"],
            [user],
            "2026-12-06T00:00:00.000Z",
        )
        made[name] = (
            password,
            MotherClient(settings=load_settings(redis_url=party_url(p.url, name, password))),
        )
    alice, bob = made["alice-svc"][1], made["bob-svc"][1]
    approve_me, deny_me = (
        alice.submit(gated_spec("alice-web")),
        alice.submit(gated_spec("alice-web")),
    )
    question = alice.submit(
        example("conflict-ask-user", user_id="alice-web", approvers=["alice-svc"])
    )
    bobs = bob.submit(gated_spec("bob-web"))
    bulk = [alice.submit(gated_spec("alice-web", task=f"Deploy batch {i}")) for i in range(30)]
    for run_id in [approve_me, deny_me, question, bobs, *bulk]:
        wait_for_person(p, run_id, timeout=90)

    try:
        with _in_chromium(p.url) as (base, _browser, page):
            page.goto(base + "/waiting")
            assert page.locator("form.action").count() == 0
            assert page.locator("#sign-in").is_visible()
            refused = page.request.post(f"{base}/runs/{approve_me}/approve", form={"reason": "x"})
            assert refused.status == 401

            page.click("#sign-in")
            page.fill("input[name=name]", "alice-svc")
            page.fill("input[name=password]", "not its password")
            page.click("#login-form button")
            assert "wrong principal name or password" in page.locator("#login-error").inner_text()
            page.fill("input[name=name]", "alice-svc")
            page.fill("input[name=password]", made["alice-svc"][0])
            page.click("#login-form button")
            page.wait_for_selector("#me")
            assert page.locator("#me").inner_text() == "alice-svc" and page.url.endswith("/waiting")

            def decide(run_id: str, kind: str, **fields: str) -> str:
                form = page.locator(f'#waiting-table tr[data-run="{run_id}"] form.{kind}')
                for name, value in fields.items():
                    form.locator(f"[name={name}]").fill(value)
                form.locator("button").click()
                page.wait_for_selector("#said-title")
                said = page.locator("#said").inner_text()
                page.goto(base + "/waiting")
                return said

            assert "approved as alice-svc" in decide(approve_me, "approve", reason="go ahead")
            assert "denied as alice-svc" in decide(deny_me, "deny", reason="not today")
            assert "answered as alice-svc" in decide(
                question, "answer", answer="Use UTC.", reason="ops"
            )
            refused_line = decide(bobs, "approve", reason="not mine")
            assert "alice-svc may not" in refused_line, refused_line
            assert p.wait(approve_me, 60).termination.reason == "success"
            assert p.wait(deny_me, 60).termination.reason == "approval_denied"
            assert p.wait(question, 90).termination.reason == "success"
            assert p.client.status(bobs).status == "waiting"
            for run_id, decision in (
                (approve_me, "approve"),
                (deny_me, "deny"),
                (question, "answer"),
            ):
                (gate,) = [g for g in p.client.status(run_id).gates if g.decision]
                assert (gate.decision.decision, gate.decision.actor) == (decision, "alice-svc")

            # no CSRF token: refused, nothing changes
            forged = page.request.post(f"{base}/runs/{bobs}/deny", form={"reason": "forged"})
            assert forged.status == 403 and "CSRF" in forged.text()
            assert p.client.status(bobs).status == "waiting"

            # cancel what a filter selects: the count first
            page.goto(base + "/runs?user=alice-web&status=waiting")
            page.click("#cancel-all button")
            page.wait_for_selector("#cancel-all-count")
            mothers = len(p.client.select(RunQuery(user="alice-web", status="waiting")))
            assert mothers == 30
            assert page.locator("#cancel-all-count b").inner_text() == "30"
            page.fill("#cancel-all-confirm input[name=reason]", "batch withdrawn")
            page.click("#cancel-all-confirm button")
            page.wait_for_selector("#said-title")
            assert "cancel asked for 30 run(s) as alice-svc" in page.locator("#said").inner_text()
            for run_id in bulk:
                record = p.wait(run_id, 60).termination
                assert record.reason == "user_cancelled"
                assert record.details == "Cancelled by alice-svc: batch withdrawn"

            page.click("#sign-out")
            page.goto(base + f"/runs/{bobs}")
            assert (
                page.locator("form.action").count() == 0 and page.locator("#sign-in").is_visible()
            )
    finally:
        bob.cancel(bobs, reason="done")


def test_the_live_stream_sends_an_event_for_each_activity_entry(stack, web) -> None:
    """/events (server-sent events): an entry Mother appends to the activity stream after the stream
    opened comes as an `activity` event naming its type and run; a stream past the limit is refused
    with 503 (the page then polls)."""
    from mother.web.live import Live

    p = stack.p
    with web.stream("GET", "/events") as events:
        assert events.status_code == 200
        assert events.headers["content-type"].startswith("text/event-stream")
        run_id = p.client.submit(example("three-phase"))
        seen: list[dict[str, Any]] = []
        for line in events.iter_lines():
            if line.startswith("data: "):
                seen.append(orjson.loads(line[6:]))
                if any(e["run_id"] == run_id and e["type"] == "terminated" for e in seen):
                    break
    kinds = [e["type"] for e in seen if e["run_id"] == run_id]
    assert kinds[0] == "run_submitted" and kinds[-1] == "terminated"
    full = Live(p.redis, max_streams=0)
    from starlette.applications import Starlette
    from starlette.routing import Route
    from starlette.testclient import TestClient

    with TestClient(Starlette(routes=[Route("/events", full.endpoint)])) as client:
        refused = client.get("/events")
    assert refused.status_code == 503 and "polls" in refused.text


def test_an_oversized_form_is_refused_in_one_line(web) -> None:
    """A form body past MAX_FORM_BYTES, to the sign-in as to an action, is a 413 with one line (the
    sign-in's was a 500)."""
    from mother.web.actions import MAX_FORM_BYTES

    body = "name=x&password=" + "a" * (MAX_FORM_BYTES + 1)
    headers = {"content-type": "application/x-www-form-urlencoded"}
    signed_in = web.post("/login", content=body, headers=headers)
    assert signed_in.status_code == 413 and "the form is over" in signed_in.text
    # an action without a session is refused before its body is read
    acted = web.post("/runs/run-x/approve", content=body, headers=headers)
    assert acted.status_code == 401
