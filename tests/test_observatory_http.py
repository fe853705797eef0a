"""The server over HTTP: pages and API answer, nothing writes, traversal and unknown ids are 404,
secrets stay redacted, half-written files never break a page, the poll cursor returns only new rows."""

from __future__ import annotations

import http.client
import json
import threading
import time

import httpx
import pytest

from glasslab import track
from observatory_lab import SECRET, build_lab, chromium_path, log_step, serve_lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = build_lab(tmp_path_factory.mktemp("obs") / "lab")
    # a run being created (empty store file), a damaged store, and a half-written run.json
    (root / "new-run-00000000").mkdir()
    (root / "new-run-00000000" / "metrics.db").write_bytes(b"")
    (root / "broken-11111111").mkdir()
    (root / "broken-11111111" / "metrics.db").write_bytes(b"this is not sqlite" * 100)
    (root / "broken-11111111" / "run.json").write_text('{"config": {"lr": ')
    (root / "data-abc12345" / "step.json").write_text('{"name": "da')
    return root


@pytest.fixture(scope="module")
def server(lab):
    with serve_lab(lab) as srv:
        yield srv


def raw_get(server, path: str, method: str = "GET") -> int:
    """Send ``path`` byte for byte (httpx would normalise the dots away)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request(method, path)
    status = conn.getresponse().status
    conn.close()
    return status


def test_every_page_and_its_data_answer(server):
    for path in ("/", "/run/hero-dddd4444", "/compare", "/compare?runs=rung-s-aaaa1111,rung-m-bbbb2222",
                 "/ladder/ladder-cccc3333", "/data/data-abc12345", "/provenance/hero-dddd4444",
                 "/run/new-run-00000000", "/run/broken-11111111", "/provenance/broken-11111111"):
        assert httpx.get(server.url + path).status_code == 200, path
    csp = httpx.get(f"{server.url}/run/hero-dddd4444").headers["content-security-policy"]
    assert "script-src 'self' 'sha256-" in csp and "unsafe-inline'; style" not in csp
    run = httpx.get(f"{server.url}/api/page/run", params={"id": "hero-dddd4444"}).json()
    assert [c["title"] for c in run["charts"]][:3] == ["Loss", "Learning rate", "Gradient norm"]
    assert "series" not in run and "vectors" not in run  # the page asks for the charts it draws
    assert run["events"][0]["kind"] == "spike_skipped"
    series = httpx.get(f"{server.url}/api/series", params=[("id", "hero-dddd4444"), ("key", "train/loss"),
                                                             ("key", "never/logged")]).json()
    assert list(series) == ["train/loss"] and series["train/loss"]["steps"] == list(range(20))
    coarse = httpx.get(f"{server.url}/api/series", params={"id": "hero-dddd4444", "key": "train/loss", "points": "5"})
    assert coarse.json()["train/loss"]["steps"] == list(range(20))  # at least 50 points are always allowed
    vectors = httpx.get(f"{server.url}/api/vectors", params={"id": "hero-dddd4444", "key": "moe/layer_0/expert_load"})
    assert vectors.json()["moe/layer_0/expert_load"]["steps"][-1] == 19
    for path in ("/api/series?id=nope&key=train/loss", "/api/vectors?key=train/loss"):
        assert httpx.get(server.url + path).status_code == 404, path
    rung = httpx.get(f"{server.url}/api/page/run", params={"id": "rung-s-aaaa1111"}).json()
    assert [e["kind"] for e in rung["events"]] == ["spike_skipped", "step_retried"]  # the executor's too
    overview = httpx.get(f"{server.url}/api/page/overview").json()
    by_id = {r["id"]: r for r in overview["runs"]}
    assert by_id["broken-11111111"]["unreadable"] and by_id["new-run-00000000"]["step"] is None
    assert by_id["hero-dddd4444"]["predicted"]["lo"] < by_id["hero-dddd4444"]["predicted"]["hi"]
    ladder = httpx.get(f"{server.url}/api/page/ladder", params={"id": "ladder-cccc3333"}).json()
    hero = ladder["hero"]
    assert hero["id"] == "hero-dddd4444" and hero["flops_per_token"] == 6.0e6
    assert hero["series"]["eval/macro/loss"]["tokens"][0] == 5 * 4096
    assert len(ladder["prediction"]["curve"]) == 20


def test_traversal_unknown_ids_and_writes_are_refused(server):
    for path in ("/run/../../etc/passwd", "/run/%2e%2e/%2e%2e/etc/passwd", "/run/..%2f..%2fetc%2fpasswd",
                 "/static/../app.py", "/static/%2e%2e/app.py", "/static/..%2fapp.py", "/static/page.html",
                 "/run/nope", "/ladder/hero-dddd4444", "/data/../data-abc12345", "/provenance/%2e%2e",
                 "/api/page/run?id=../../etc/passwd", "/api/page/nope", "/api/page/run",
                 "/api/stream?page=run&id=%2e%2e%2fx", "/nothing"):
        assert raw_get(server, path) == 404, path
    for method in ("POST", "PUT", "DELETE"):
        assert raw_get(server, "/run/hero-dddd4444", method) == 405
        assert raw_get(server, "/api/page/overview", method) == 405


def test_secrets_stay_redacted(server):
    for path in ("/api/page/run?id=hero-dddd4444", "/api/page/provenance?id=hero-dddd4444",
                 "/api/page/overview", "/api/page/compare"):
        assert SECRET not in httpx.get(server.url + path).text
    record = httpx.get(f"{server.url}/api/page/provenance", params={"id": "hero-dddd4444"}).json()["record"]
    assert record["config"]["sinks"]["wandb"]["api_key"] == "***redacted***"
    assert record["config"]["train"]["lr"] == 3e-3


def test_pages_stay_whole_while_a_run_writes(server, lab):
    """A trainer flushing batches while pages load: every answer is whole and its steps in order."""
    stop = threading.Event()

    def write() -> None:
        run = track.init(lab / "hero-dddd4444", {}, reason="resume")
        step = 20
        while not stop.is_set():
            log_step(run, step)
            run.flush()
            step += 1
            time.sleep(0.002)
        run.finish()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        seen = []
        for _ in range(8):
            for path in ("/api/page/run?id=hero-dddd4444", "/api/page/overview",
                         "/api/page/ladder?id=ladder-cccc3333"):
                response = httpx.get(server.url + path)
                assert response.status_code == 200, path
            series = response.json()["hero"]["series"]["train/loss"]
            assert all(a < b for a, b in zip(series["steps"], series["steps"][1:], strict=False))
            assert None not in series["values"]
            seen.append(series["steps"][-1])
    finally:
        stop.set()
        writer.join()
    assert seen[-1] > seen[0] >= 20


def test_run_status_follows_the_writer_lease():
    from glasslab.observatory.runs import run_status

    assert run_status({"pid": 1, "heartbeat": time.time()}, "finished", None) == "running"  # resumed
    assert run_status({"pid": 1, "heartbeat": time.time() - 3600}, None, "running") == "stalled"  # killed
    assert run_status(None, "finished", "running") == "finished"
    assert run_status(None, None, "failed") == "failed"


def test_poll_cursor_returns_only_new_rows(server, lab):
    page = httpx.get(f"{server.url}/api/page/run", params={"id": "rung-s-aaaa1111"}).json()
    cursor = json.dumps(page["cursors"])
    quiet = httpx.get(f"{server.url}/api/delta", params={"page": "run", "id": "rung-s-aaaa1111",
                                                          "cursor": cursor}).json()
    assert quiet["runs"] == {}
    run = track.init(lab / "rung-s-aaaa1111", {}, reason="resume")
    log_step(run, 30)
    run.annotate("note", "picked up again", step=30)
    run.finish()
    delta = httpx.get(f"{server.url}/api/delta", params={"page": "run", "id": "rung-s-aaaa1111",
                                                          "cursor": cursor}).json()["runs"]["rung-s-aaaa1111"]
    assert {s for _, s, _ in delta["scalars"]} == {30}
    assert [e["title"] for e in delta["events"]] == ["picked up again"]
    assert [v[1] for v in delta["vectors"]] == [30, 30]


def test_the_printed_address_accepts_connections_before_the_server_has_started():
    """``glasslab serve`` prints its URL once the port is bound; a client that reads it and connects before
    uvicorn runs waits in the backlog (a bound socket that is not listening refuses it: a bench's first
    request under load was refused that way)."""
    import socket

    from glasslab.observatory.app import bind

    server = bind("127.0.0.1", 0)
    try:
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
    finally:
        server.close()



def _comma_lab(root):
    run = track.init(root / "commas-0000aaaa", {})
    for step in range(3):
        run.log({"train/loss": 3.0 - step, "loss,smoothed": 2.0 - step}, step)
    run.finish()
    return root


def test_compare_takes_one_key_per_metric_whole_and_older_keys_lists_split(tmp_path):
    """One ``key=`` per metric, its name whole (a comma in it too); older links' ``keys=a,b`` still split."""
    with serve_lab(_comma_lab(tmp_path / "lab")) as srv:
        picked = httpx.get(f"{srv.url}/api/page/compare", params=[("key", "loss,smoothed"), ("key", "train/loss")])
        assert picked.json()["keys"] == ["loss,smoothed", "train/loss"]
        assert picked.json()["series"]["commas-0000aaaa"]["loss,smoothed"]["values"] == [2.0, 1.0, 0.0]
        older = httpx.get(f"{srv.url}/api/page/compare?keys=train/loss,grad/norm&key=loss,smoothed").json()
        assert older["keys"] == ["train/loss", "grad/norm", "loss,smoothed"]
        page = httpx.get(f"{srv.url}/compare?key=loss,smoothed&key=train/loss").text
        assert '"query":[["key","loss,smoothed"],["key","train/loss"]]' in page  # repeated keys reach the page


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_compare_page_draws_and_links_a_metric_whose_name_holds_a_comma(tmp_path, browser):
    from urllib.parse import parse_qs, urlparse

    with serve_lab(_comma_lab(tmp_path / "lab")) as srv:
        page = browser.new_page()
        try:
            page.goto(f"{srv.url}/compare?keys=train/loss&key=loss,smoothed")  # an older link's keys= too
            page.wait_for_selector("body[data-ready='1']", timeout=10_000)
            charts = page.evaluate("() => Object.keys(window.GLASSLAB_CHARTS).filter(k => k.startsWith('compare:'))")
            view = parse_qs(urlparse(page.evaluate("() => location.href")).query)
        finally:
            page.close()
    assert charts == ["compare:train/loss", "compare:loss,smoothed"]
    assert view["key"] == ["train/loss", "loss,smoothed"] and "keys" not in view
