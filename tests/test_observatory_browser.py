"""The pages in headless Chromium: points drawn, a live step within a second, event markers, the
ladder's prediction band, the static export from file://, and XSS attempts rendered as text."""

from __future__ import annotations

import time

import pytest

from glasslab import track
from glasslab.observatory.publish import page_file, publish
from observatory_lab import XSS, build_lab, chromium_path, log_step, serve_lab

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = build_lab(tmp_path_factory.mktemp("obs") / "lab")
    (root / "<img src=x onerror=window.__xss=1>").mkdir()  # a hostile folder name
    track.init(root / "<img src=x onerror=window.__xss=1>", {}).finish()
    return root


def chart_points(page, title: str, series: int = 1) -> list:
    return page.evaluate(
        "([t, i]) => { const u = window.GLASSLAB_CHARTS[t];"
        " return u.data[0].map((x, j) => [x, u.data[i][j]]); }",
        [title, series],
    )


def test_run_page_draws_points_markers_and_live_steps(lab, page):
    with serve_lab(lab) as server:
        page.goto(f"{server.url}/run/hero-dddd4444")
        page.wait_for_selector("body[data-ready='1']")
        loss = [p for p in chart_points(page, "Loss", 2) if p[1] is not None]  # series 2: train/loss
        assert [x for x, _ in loss] == list(range(20))
        assert abs(loss[0][1] - 5.0) < 1e-9
        marker = page.locator(".event-marker").first
        assert page.locator(".event-marker").count() >= 1
        assert marker.get_attribute("href").startswith("#event-")
        assert "spike_skipped" in marker.get_attribute("title")
        page.wait_for_selector("#live.live-on", timeout=5000)
        run = track.init(lab / "hero-dddd4444", {}, reason="resume")
        try:
            logged = time.monotonic()
            log_step(run, 20)
            run.flush()
            page.wait_for_function(
                "() => window.GLASSLAB_CHARTS['Loss'].data[0].includes(20)", timeout=3000, polling=50
            )
            latency = time.monotonic() - logged
            run.annotate("rollback", "rolled back", step=20, severity="incident")
            page.wait_for_selector(".event-marker.sev-incident", timeout=3000)
        finally:
            run.finish()
        assert latency < 1.0, f"live step took {latency:.2f} s"


def test_live_header_advances_with_the_run(lab, page):
    with serve_lab(lab) as server:
        page.goto(f"{server.url}/run/rung-s-aaaa1111")
        page.wait_for_selector("#live.live-on", timeout=5000)
        header = page.locator("#run-header")
        assert header.inner_text().startswith("finished · 3.2M-A0.9M · rung · step 29 ·")
        run = track.init(lab / "rung-s-aaaa1111", {}, reason="resume")
        try:
            for step in (30, 31):
                log_step(run, step)
            run.flush()
            page.wait_for_function("() => document.querySelector('#run-header').textContent.includes('step 31')",
                                   timeout=3000, polling=50)
            text = header.inner_text()
            assert text.startswith("running · ") and "131.1k tokens" in text  # 32 steps × 4,096 tokens
        finally:
            run.finish()
        page.wait_for_function("() => document.querySelector('#run-header').textContent.startsWith('finished')",
                               timeout=3000, polling=50)


def test_page_reconnects_after_server_restart(lab, page):
    server = serve_lab(lab)
    port = server.port
    with server:
        page.goto(f"{server.url}/run/rung-m-bbbb2222")
        page.wait_for_selector("#live.live-on")
    page.wait_for_selector("#live.live-off", timeout=5000)
    run = track.init(lab / "rung-m-bbbb2222", {}, reason="resume")
    log_step(run, 40)
    run.finish()
    with serve_lab(lab, port=port):
        page.wait_for_function("() => window.GLASSLAB_CHARTS['Loss'].data[0].includes(40)", timeout=10_000)
        page.wait_for_selector("#live.live-on", timeout=5000)


def test_ladder_page_draws_band_over_hero(lab, page):
    with serve_lab(lab) as server:
        page.goto(f"{server.url}/ladder/ladder-cccc3333")
        page.wait_for_selector("body[data-ready='1']")
        chart = page.evaluate("""() => { const u = window.GLASSLAB_CHARTS.ladder;
            return {bands: u.bands.length, labels: u.series.map(s => s.label), n: u.data[0].length}; }""")
        assert chart["bands"] == 1
        assert {"prediction band hi", "prediction band lo"} <= set(chart["labels"])
        assert any(label.startswith("hero hero-dddd4444") for label in chart["labels"])
        hero_index = next(i for i, s in enumerate(chart["labels"]) if s.startswith("hero"))
        hero = [p for p in chart_points(page, "ladder", hero_index) if p[1] is not None]
        assert hero and abs(hero[0][0] - 5 * 4096 * 6.0e6) < 1  # x = tokens × the law's FLOPs per token
        # How far the prediction reaches (this fit predicts at its top rung's compute).
        assert "(1× the top rung's compute)" in page.locator("#prediction").inner_text()


def test_xss_renders_as_text(lab, page):
    with serve_lab(lab) as server:
        for path in ("/run/hero-dddd4444", "/data/data-abc12345", "/",
                     "/run/%3Cimg%20src=x%20onerror=window.__xss=1%3E"):
            page.goto(server.url + path)
            page.wait_for_selector("body[data-ready='1']")
            assert page.evaluate("() => window.__xss") is None, path
        page.goto(f"{server.url}/run/hero-dddd4444")
        page.wait_for_selector("body[data-ready='1']")
        assert page.locator("pre", has_text="<script>window.__xss = 1</script>").count() == 1
        assert page.evaluate("() => window.__xss") is None


def test_static_export_renders_from_file(lab, page, tmp_path):
    index = publish(lab, tmp_path / "site")
    page.goto(index.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("a", has_text="hero-dddd4444").count() >= 1
    page.locator("a", has_text="hero-dddd4444").first.click()
    page.wait_for_selector("body[data-ready='1']")
    assert page.url.endswith(page_file("run", "hero-dddd4444"))
    loss = [p for p in chart_points(page, "Loss", 2) if p[1] is not None]  # train/loss among the band's x
    assert [x for x, _ in loss[:3]] == [0, 1, 2]
    assert page.locator(".event-marker").count() >= 1
    assert page.locator("pre", has_text=XSS).count() == 1 and page.evaluate("() => window.__xss") is None
    page.goto((tmp_path / "site" / page_file("ladder", "ladder-cccc3333")).as_uri())
    page.wait_for_selector("body[data-ready='1']")
    assert page.evaluate("() => window.GLASSLAB_CHARTS.ladder.bands.length") == 1


def test_polling_fallback_without_event_streams(lab, browser):
    page = browser.new_page()
    page.add_init_script("delete window.EventSource")
    with serve_lab(lab) as server:
        page.goto(f"{server.url}/run/rung-s-aaaa1111")
        page.wait_for_selector("body[data-ready='1']")
        run = track.init(lab / "rung-s-aaaa1111", {}, reason="resume")
        log_step(run, 31)
        run.finish()
        page.wait_for_function("() => window.GLASSLAB_CHARTS['Loss'].data[0].includes(31)", timeout=5000)
    page.close()


def test_compare_switches_x_to_flops_and_log_scales(lab, page):
    with serve_lab(lab) as server:
        page.goto(f"{server.url}/compare?runs=rung-s-aaaa1111,rung-m-bbbb2222")
        page.wait_for_selector("body[data-ready='1']")
        labels = page.evaluate("() => window.GLASSLAB_CHARTS.compare.series.map(s => s.label)")
        assert labels[1].startswith("rung-s-aaaa1111") and labels[2].startswith("rung-m-bbbb2222")
        assert page.evaluate("() => window.GLASSLAB_CHARTS.compare.data[0].slice(0, 2)") == [0, 1]
        page.select_option("select[name=axis]", "flops")
        page.check("input[name=logx]")
        chart = page.evaluate("""() => { const u = window.GLASSLAB_CHARTS.compare;
            return {x0: u.data[0][0], distr: u.scales.x.distr}; }""")
        assert abs(chart["x0"] - 4096 * 6.0e6) < 1 and chart["distr"] == 3
