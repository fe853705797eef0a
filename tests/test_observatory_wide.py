"""A run at a real run's width in headless Chromium, on the live server and the static site alike: the
search box filters the charts and a reload restores the view (search, pins, per-chart smoothing);
the URL wins over the workspace the browser remembers; charts load as they come into view; a
per-layer family draws as a heatmap naming its top and bottom layers, a wide group as small
multiples (screenshots prove both render), and "lines" brings back one chart with a legend of the
extremes; the "what changed" strip finds the metric that jumped."""

from __future__ import annotations

import io
from urllib.parse import parse_qs, urlparse

import pytest

from glasslab.observatory.publish import page_file, publish
from observatory_lab import chromium_path, serve_lab, write_wide_run

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")

WIDE = "wide-run-0000aaaa"
LAYERS = 12
LOAD = "MoE load: max violation per layer"
DEBUG = "debug/…"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("wide") / "lab"
    # 180 metrics (more than the page draws at once), 12 layers × 8 experts every 20 steps.
    write_wide_run(root / WIDE, steps=240, metrics=180, layers=LAYERS, experts=8, vector_every=20, domains=6,
                   tasks=6)
    return root


@pytest.fixture(scope="module", params=["live", "static"])
def run_url(request, lab, tmp_path_factory):
    if request.param == "live":
        with serve_lab(lab) as server:
            yield f"{server.url}/run/{WIDE}"
    else:
        index = publish(lab, tmp_path_factory.mktemp("site") / "site")
        yield (index.parent / page_file("run", WIDE)).as_uri()


@pytest.fixture()
def page(browser):
    context = browser.new_context(viewport={"width": 1300, "height": 900})  # its own storage
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    yield page
    context.close()
    assert not problems, problems


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)


def shown_cards(page) -> list[str]:
    return page.evaluate("""() => [...document.querySelectorAll('#run-charts .card')]
        .filter(c => c.style.display !== 'none').map(c => c.dataset.panel)""")


def search(page, query: str) -> None:
    box = page.locator("input[name=q]")
    box.fill("")
    box.type(query)
    page.wait_for_function("q => document.body.dataset.filtered === q", arg=query, timeout=10_000)


def test_search_filters_the_charts_and_a_reload_restores_the_view(run_url, page):
    open_page(page, run_url)
    everything = shown_cards(page)
    assert len(everything) >= 15 and LOAD in everything
    search(page, "layer_1[01]/")  # a regular expression: layers 10 and 11 of every per-layer family
    cards = shown_cards(page)
    assert LOAD in cards and DEBUG not in cards and "Loss" not in cards
    assert page.locator(".search-status").inner_text() == "10 of 180 metrics in 5 charts · regular expression"
    # Two layers shown: the family draws as lines, one per layer.
    load = page.evaluate("l => window.GLASSLAB_CHARTS[l].series.map(s => s.label)", LOAD)
    assert load[1:] == ["moe/layer_10/load_max_violation", "moe/layer_11/load_max_violation"]
    timing = page.evaluate("() => window.GLASSLAB_TIMING.filter")
    assert timing["query"] == "layer_1[01]/" and 0 < timing["ms"] < 5000
    # Pin the loss chart and smooth it: both go into the URL with the search.
    search(page, "loss")
    page.locator("[data-panel='Loss'] [data-pin='Loss']").click()
    page.wait_for_selector(".pinned [data-panel='Loss']")
    page.locator(".pinned [data-panel='Loss'] select.tool").select_option("0.9")
    page.wait_for_function("() => window.GLASSLAB_CHARTS['Loss'].series.some(s => s.label.endsWith('(raw)'))")
    view = parse_qs(urlparse(page.url).query)
    assert view == {"q": ["loss"], "pin": ["Loss"], "smooth": ["0.9:Loss"]}
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("input[name=q]").input_value() == "loss"
    assert page.locator(".pinned .card").evaluate_all("cs => cs.map(c => c.dataset.panel)") == ["Loss"]
    assert "Loss" not in shown_cards(page)[1:]  # pinned charts leave the grid
    labels = page.evaluate("() => window.GLASSLAB_CHARTS['Loss'].series.map(s => s.label)")
    assert "train/loss (raw)" in labels and "train/loss" in labels
    assert set(shown_cards(page)[1:]) == {"Eval loss per domain"}


def test_the_url_wins_over_the_remembered_workspace(run_url, page):
    open_page(page, run_url)
    page.locator("[data-panel='Learning rate'] [data-pin='Learning rate']").click()
    page.wait_for_selector(".pinned [data-panel='Learning rate']")
    bare = run_url.split("?")[0]
    open_page(page, bare)  # no view in the URL: the browser remembers this lab's pins
    assert page.locator(".pinned .card").evaluate_all("cs => cs.map(c => c.dataset.panel)") == ["Learning rate"]
    assert parse_qs(urlparse(page.url).query) == {"pin": ["Learning rate"]}  # and shows them, ready to share
    open_page(page, f"{bare}?pin=Throughput&pin=Loss")
    assert page.locator(".pinned .card").evaluate_all("cs => cs.map(c => c.dataset.panel)") == ["Throughput", "Loss"]
    page.locator(".pinned [data-panel='Loss'] button", has_text="↑").click()  # reorder
    page.wait_for_function("() => document.querySelector('.pinned .card').dataset.panel === 'Loss'")
    assert parse_qs(urlparse(page.url).query)["pin"] == ["Loss", "Throughput"]


def test_charts_load_as_they_come_into_view(run_url, page):
    open_page(page, run_url)
    drawn = page.evaluate("() => document.querySelectorAll('#run-charts .slot.drawn').length")
    slots = page.evaluate("() => document.querySelectorAll('#run-charts .slot').length")
    assert 0 < drawn < slots / 2, (drawn, slots)  # what is in view, not the run
    assert page.evaluate("() => window.GLASSLAB_TIMING.firstChart") > 0
    page.locator(f"[data-panel='{DEBUG}']").scroll_into_view_if_needed()
    page.wait_for_function(f"() => document.querySelectorAll(\"[data-panel='{DEBUG}'] .slot.drawn\").length >= 6")
    assert page.evaluate("() => document.querySelectorAll('#run-charts .slot.drawn').length") > drawn


def colours(png: bytes) -> tuple[int, float]:
    """(distinct colours, share of pixels that are not white) of a screenshot."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        data = image.convert("RGB").tobytes()
    pixels = [data[i:i + 3] for i in range(0, len(data), 3)]
    return len(set(pixels)), sum(p != b"\xff\xff\xff" for p in pixels) / len(pixels)


def test_a_layer_family_draws_as_a_heatmap_and_a_wide_group_as_small_multiples(run_url, page):
    open_page(page, run_url)
    card = page.locator(f"[data-panel='{LOAD}']")
    card.scroll_into_view_if_needed()
    heat = card.locator(".heat")
    heat.wait_for()
    assert heat.locator(".heat-ytitle").inner_text() == "layer"
    assert heat.locator(".heat-yaxis .heat-tick").all_inner_texts() == ["0", "2", "4", "6", "8", "10"]
    # The hot layer (12 // 3 = 4) tops the newest step; the info line names top and bottom layers.
    info = heat.locator(".heat-info").inner_text()
    assert info.startswith("step 239: top layer 4 ") and " · bottom layer " in info, info
    count, inked = colours(heat.locator("canvas.heat-cells").screenshot())
    assert count >= 12 and inked > 0.95, (count, inked)  # a colour per cell value, the plot filled
    # Gradient norms are drawn on log axes: their layer heatmap colours by log10.
    grads = "Gradient norm: grad/norm/layer_*/attn"
    page.locator(f"[data-panel='{grads}']").scroll_into_view_if_needed()
    page.wait_for_function("g => window.GLASSLAB_HEATMAPS[g] !== undefined", arg=grads)
    assert page.evaluate("g => [window.GLASSLAB_HEATMAPS[g].opts.log, window.GLASSLAB_HEATMAPS[g].span]", grads)[0]
    card.scroll_into_view_if_needed()
    # "lines": one chart of 12 lines, whose legend names the extremes, not every layer.
    card.locator("[data-toggle='lines']").click()
    page.wait_for_function("l => window.GLASSLAB_CHARTS[l] && window.GLASSLAB_CHARTS[l].series.length === 13", arg=LOAD)
    legend = card.locator(".legend-compact").inner_text()
    assert "highest: moe/layer_4/load_max_violation" in legend and legend.count("moe/layer_") == 2, legend
    assert parse_qs(urlparse(page.url).query)["lines"] == [LOAD]
    # A group of 66 debug metrics: one small chart each, drawn as they come into view.
    group = page.locator(f"[data-panel='{DEBUG}']")
    assert group.locator(".mini").count() == 66
    first = group.locator(".mini").first
    first.scroll_into_view_if_needed()
    page.wait_for_function("d => document.querySelector(`[data-panel='${d}'] .slot`).classList.contains('drawn')",
                           arg=DEBUG)
    count, inked = colours(first.locator(".slot").screenshot())
    assert count >= 8 and 0.01 < inked < 0.9, (count, inked)  # axes, grid and a line; not blank, not solid
    assert page.evaluate("() => window.GLASSLAB_CHARTS['debug/metric_000'].data[1].filter(v => v != null).length") > 100


def test_what_changed_names_the_jump_and_finds_its_chart(run_url, page):
    open_page(page, run_url)
    first = page.locator("#run-changes ul.changes li").first
    assert first.inner_text().startswith("debug/metric_007 +") and "σ" in first.inner_text()
    experts = page.locator("#run-changes ul.experts-now").inner_text()
    assert "layers most out of balance (max / mean share): layer 4 " in experts
    first.locator("a").click()
    page.wait_for_function("() => document.body.dataset.filtered === '^debug/metric_007$'")
    assert page.locator("input[name=q]").input_value() == "^debug/metric_007$"
    assert shown_cards(page) == [DEBUG]  # one metric shown: a chart of its line, not a small multiple
    labels = page.evaluate("d => window.GLASSLAB_CHARTS[d].series.map(s => s.label)", DEBUG)
    assert labels == ["step", "debug/metric_007"]
    page.locator("#run-changes a[data-layer='4']").first.click()
    page.wait_for_function("() => document.querySelector('select[name=layer]').value === '4'")
    assert parse_qs(urlparse(page.url).query)["layer"] == ["4"]


def test_live_steps_reach_the_heatmap_and_the_small_multiples(browser, tmp_path):
    from glasslab.track.store import RunStore

    write_wide_run(tmp_path / "lab" / WIDE, steps=60, metrics=140, layers=LAYERS, experts=8, vector_every=20,
                   domains=4, tasks=4)
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    with serve_lab(tmp_path / "lab") as server:
        open_page(page, f"{server.url}/run/{WIDE}?q=%5Emoe%2F|debug%2Fmetric_00")
        page.wait_for_selector("#live.live-on", timeout=5000)
        page.locator(f"[data-panel='{LOAD}'] .heat").wait_for()
        assert page.evaluate("l => window.GLASSLAB_HEATMAPS[l].steps.slice(-1)[0]", LOAD) == 59
        page.locator(".mini[data-key='debug/metric_001']").scroll_into_view_if_needed()
        page.wait_for_function("() => window.GLASSLAB_CHARTS['debug/metric_001'] !== undefined")
        store = RunStore(tmp_path / "lab" / WIDE, reason="resume")
        store.log({**{f"moe/layer_{i}/load_max_violation": 0.5 for i in range(LAYERS)}, "debug/metric_001": 7.0}, 60)
        store.close()
        # A heatmap redraws at most once a second; a small multiple at the next frame.
        page.wait_for_function("l => window.GLASSLAB_HEATMAPS[l].steps.slice(-1)[0] === 60", arg=LOAD, timeout=5000)
        column = page.evaluate("l => window.GLASSLAB_HEATMAPS[l].values.slice(-1)[0]", LOAD)
        assert column == [0.5] * LAYERS
        page.wait_for_function("() => window.GLASSLAB_CHARTS['debug/metric_001'].data[0].includes(60)", timeout=5000)
        page.goto("about:blank")
    context.close()
    assert not errors, errors
