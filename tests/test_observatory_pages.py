"""What a reader sees on each page, in headless Chromium, on the live server and on the static site
from file:// alike: the ladder's verdict, the band on the hero's page, the compare page's view,
heatmap axes and colour bar, readable axes (no log tick reading 0, no repeated labels, nothing cut
off), the links between pages, a sortable run table, and no console error or failed request."""

from __future__ import annotations

import math
import re
from urllib.parse import parse_qs, urlparse

import pytest

from glasslab.observatory.publish import page_file, publish
from observatory_lab import build_lab, chromium_path, loss_at, prediction, serve_lab

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")

HERO, RUNG_S, RUNG_M, FORK = "hero-dddd4444", "rung-s-aaaa1111", "rung-m-bbbb2222", "fork-eeee5555"
LADDER, DATA = "ladder-cccc3333", "data-abc12345"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return build_lab(tmp_path_factory.mktemp("pages") / "lab")


class Site:
    """Page URLs on the live server or in the published folder (file://)."""

    def __init__(self, kind: str, base: str) -> None:
        self.kind, self.base = kind, base

    def url(self, page: str, item_id: str | None = None, query: str = "") -> str:
        if self.kind == "live":
            path = {"overview": "/", "compare": "/compare"}.get(page) or f"/{page}/{item_id}"
        else:
            path = "/" + page_file(page, item_id)
        return self.base + path + (f"?{query}" if query else "")


@pytest.fixture(scope="module", params=["live", "static"])
def site(request, lab, tmp_path_factory):
    if request.param == "live":
        with serve_lab(lab) as server:
            yield Site("live", server.url)
    else:
        index = publish(lab, tmp_path_factory.mktemp("site") / "site")
        yield Site("static", index.parent.as_uri())


@pytest.fixture()
def page(browser):
    """A page that fails the test on any console error, page error or failed request (a favicon too)."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    # A page left for another aborts its event stream: that is not a failure.
    page.on("requestfailed", lambda r: "ERR_ABORTED" not in (r.failure or "") and problems.append(
        f"request failed: {r.url} {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status}: {r.url}"))
    yield page
    page.close()
    assert not problems, problems


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)


AXIS_REPORT = """() => {
    const out = {};
    const ctx = document.createElement("canvas").getContext("2d");
    for (const [name, u] of Object.entries(window.GLASSLAB_CHARTS)) {
        const labels = u.glasslabLabels || {};
        const x = u.axes[0], xs = (labels[0] || []).filter(Boolean);
        ctx.font = x.font[0];
        // the last x label is centred on its tick: it must end inside the canvas
        const splits = (x._splits || []).filter((v, i) => (labels[0] || [])[i]);
        const last = splits.length ? splits[splits.length - 1] : null;
        const lastRight = last == null ? 0 : u.valToPos(last, "x") + u.bbox.left / devicePixelRatio
            + ctx.measureText(xs[xs.length - 1]).width / 2;
        const y = u.axes[1];
        ctx.font = y.font[0];
        const widest = Math.max(0, ...(labels[1] || []).filter(Boolean).map((t) => ctx.measureText(t).width));
        out[name] = {x: labels[0] || [], y: labels[1] || [], logx: u.scales.x.distr === 3,
                     logy: u.scales.y.distr === 3, lastRight, width: u.width, ySize: y._size, widest};
    }
    return out;
}"""


def check_axes(page) -> dict:
    """Every chart's axes: no label "0" on a log axis, no repeated label, nothing cut off."""
    report = page.evaluate(AXIS_REPORT)
    assert report
    for name, axes in report.items():
        for axis, log in (("x", axes["logx"]), ("y", axes["logy"])):
            labels = [t for t in axes[axis] if t]
            assert len(labels) == len(set(labels)), (name, axis, labels)
            if log:
                assert "0" not in labels and all(not re.fullmatch(r"-?0(\.0*)?", t) for t in labels), (name, labels)
        assert axes["lastRight"] <= axes["width"] + 0.5, (name, axes)
        assert axes["widest"] + 10 <= axes["ySize"], (name, axes)  # the y labels fit their axis
    return report


def test_ladder_page_states_the_verdict_first(site, page):
    open_page(page, site.url("ladder", LADDER))
    verdict = page.locator("#verdict")
    # The hero's last eval (step 19) against the registered band: outside, above it.
    actual = loss_at(19) + 0.1
    pred = prediction(40 * 4096 * 6.0e6)
    error = 100 * (pred["point"] - actual) / actual
    expected = (f"hero {actual:.3f} vs predicted {pred['point']:.3f} [{pred['lo']:.3f}, {pred['hi']:.3f}]: "
                f"{error:+.1f}%, above the band")
    assert verdict.inner_text() == f"Verdict: {expected}"
    assert page.locator("main > *").nth(1).get_attribute("id") == "verdict"  # first, under the title
    assert "outside" in verdict.get_attribute("class")
    # Where the floor came from (a fit written before fits said it in words: from its mode and value).
    assert page.locator("#floor").inner_text() == "Floor: fitted freely to the rungs by L(C): L∞ = 1.900"
    # The fit the gate refused, and the hero that ran anyway, say so under the floor.
    assert page.locator("#gate").inner_text() == ("Registration gate: REFUSED: span of N: largest N / smallest N = 4 "
                                                  "(expected ≥ 10 for a free floor); the hero ran FORCED")
    chart = page.evaluate("""() => { const u = window.GLASSLAB_CHARTS.ladder;
        return {labels: u.series.map(s => s.label), bands: u.bands.length}; }""")
    assert {"prediction band hi", "prediction band lo", "rung seed 0", "rung seed 1", f"hero {HERO}",
            "rung mean ± std over seeds"} <= set(chart["labels"])
    assert chart["bands"] == 1
    spread = page.locator("table", has_text="loss per seed").locator("tr", has_text="rung-s").inner_text()
    assert re.search(r"\d\.\d+, \d\.\d+\s+\d\.\d+ ± 0\.02828", spread), spread  # two seeds, mean ± std
    # The law's parameters rounded to their uncertainty, not 17 digits; the registry with its history.
    assert page.locator("table.law td", has_text="1.90 ± 0.10").count() == 1
    registry = page.locator("table.registry tbody tr")
    assert registry.count() == 2
    assert "replaced by #2" in registry.nth(0).inner_text() and "in force" in registry.nth(1).inner_text()
    assert "outside" in registry.nth(1).inner_text()
    check_axes(page)


def test_hero_run_page_draws_its_band_and_links(site, page):
    open_page(page, site.url("run", HERO))
    chart = page.evaluate("""() => { const u = window.GLASSLAB_CHARTS['Loss'];
        const i = u.series.findIndex(s => s.label === 'prediction band hi');
        return {labels: u.series.map(s => s.label), bands: u.bands.map(b => b.series),
                band: u.data[0].map((x, j) => [x, u.data[i][j]]).filter(p => p[1] != null)}; }""")
    assert "pre-registered prediction" in chart["labels"]
    hi_index = chart["labels"].index("prediction band hi")
    assert [hi_index, hi_index + 1] in chart["bands"]
    pred = prediction(40 * 4096 * 6.0e6)
    first, last = chart["band"][0], chart["band"][-1]
    assert math.isclose(first[0], 0.05 * 19) and math.isclose(first[1], pred["curve"][0]["hi"])
    assert math.isclose(last[0], 19) and math.isclose(last[1], pred["hi"])
    assert "above the band" in page.locator("#verdict").inner_text()
    links = page.locator("p.links")
    assert links.locator("a", has_text=DATA).count() == 1 and links.locator("a", has_text="demo").count() == 1
    assert links.locator("a", has_text="export-ffff6666").count() == 1
    assert page.locator("#export-0", has_text="3e-6").count() == 1
    evaluations = page.locator("section", has_text="Task evaluations (glasslab eval)").locator("tr")
    assert [" ".join(evaluations.nth(1).inner_text().split())] == [
        "eval-export-ffff6666-9999aaaa export 19 next_word_code 600 25% 41.5% 39.5% 1.939"]
    reproduce = page.locator("#reproduce").inner_text()
    assert reproduce.startswith("git checkout ")
    assert "glasslab train run-config.json data.path=lab/data-abc12345" in reproduce
    kept = page.locator("#checkpoint-19").inner_text().split("\t")  # the hero's kept checkpoints, each exportable
    assert kept == ["19", "77.82k", "19" * 8, f"glasslab export {HERO}@19"]
    assert page.locator("tr[id^=checkpoint-]").count() == 5
    replay = page.locator("#replay").inner_text()  # a published page names itself as what to replay
    assert replay.startswith("glasslab reproduce ") and (page.url in replay if site.kind == "static"
                                                           else f"/{HERO} --lab replay" in replay)
    header = page.locator("#run-header").inner_text()
    assert "step 19 of 19 (100%)" in header and "81.92k tokens" in header
    # Task accuracy in percent with its chance line; peak memory in GB.
    report = check_axes(page)
    assert all(t.endswith("%") for t in report["Task accuracy"]["y"] if t)
    assert any(t.endswith(" GB") for t in report["Peak memory"]["y"])
    assert any(t.startswith("1e-") for t in report["Gradient norm"]["y"])  # 1e-5, not 0


def test_fork_links_to_its_parent_and_the_parent_to_its_fork(site, page):
    open_page(page, site.url("run", FORK))
    assert "forked from rung-m-bbbb2222 at step 20" in page.locator("p.links").inner_text()
    page.locator("p.links a", has_text=RUNG_M).click()
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("p.links", has_text="forks").locator("a", has_text=FORK).count() == 1


def test_heatmaps_have_axes_a_colour_bar_and_name_the_expert(site, page):
    open_page(page, site.url("run", HERO))
    heat = page.locator(".heat[data-key='moe/layer_0/router_bias']")
    assert heat.locator(".heat-ytitle").inner_text() == "expert"
    assert heat.locator(".heat-xtitle").inner_text() == "step"
    assert heat.locator(".heat-yaxis .heat-tick").all_inner_texts() == ["0", "1", "2", "3"]
    assert heat.locator(".heat-xaxis .heat-tick").count() >= 3
    # Signed: the colour bar is centred on 0 (symmetric ends, 0 in the middle).
    bar = heat.locator(".heat-colorbar-labels .heat-tick").all_inner_texts()
    assert len(bar) == 3 and bar[1] == "0" and bar[0] == bar[2].lstrip("-")
    assert heat.locator(".heat-colorbar-scale").is_visible()
    # Hover expert 3 at the last step: the hover names the expert, and the linked line's cursor moves.
    heat.scroll_into_view_if_needed()
    box = heat.locator("canvas.heat-cells").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] * 7 / 8)
    info = heat.locator(".heat-info").inner_text()
    assert info.startswith("step 19 · expert 3: ") and "row" not in info
    idx = page.evaluate("() => window.GLASSLAB_CHARTS['moe-layer'].cursor.idx")
    assert page.evaluate(f"() => window.GLASSLAB_CHARTS['moe-layer'].data[0][{idx}]") == 19
    # Hover the parameter-norm chart: the heatmaps name the experts that lead at that step.
    norms = page.locator("[data-panel='Parameter norms per group'] .u-over")
    norms.scroll_into_view_if_needed()
    over = norms.bounding_box()
    page.mouse.move(over["x"] + over["width"] / 2, over["y"] + over["height"] / 2)
    led = page.locator(".heat[data-key='moe/layer_0/router_bias'] .heat-info").inner_text()
    assert re.match(r"step \d+: largest \|value\|: expert [03] ", led), led
    load = page.locator(".heat[data-key='moe/layer_0/expert_load']")
    assert load.locator(".heat-colorbar-labels .heat-tick").all_inner_texts()[1] != "0"  # loads: sequential


def test_compare_plots_a_third_metric_for_picked_runs_smoothed(site, page):
    open_page(page, site.url("compare", query=f"runs={RUNG_S},{RUNG_M},{HERO}"))
    assert page.evaluate("() => Object.keys(window.GLASSLAB_CHARTS).filter(k => k.startsWith('compare:'))") == [
        "compare:train/loss", "compare:eval/macro/loss"]
    page.uncheck(f"input[name=run][value='{HERO}']")
    page.wait_for_function("() => window.GLASSLAB_CHARTS['compare:train/loss'].series.length === 3")
    page.select_option("select[name=add-metric]", "grad/norm/total")
    page.wait_for_function("() => window.GLASSLAB_CHARTS['compare:grad/norm/total'] !== undefined")
    page.locator("input[name=smooth]").fill("0.8")
    page.wait_for_function("() => window.GLASSLAB_CHARTS['compare:grad/norm/total'].series.length === 5")
    chart = page.evaluate("""() => { const u = window.GLASSLAB_CHARTS['compare:grad/norm/total'];
        return {labels: u.series.map(s => s.label), data: u.data}; }""")
    assert chart["labels"][1:] == [f"{RUNG_S} (3.2M-A0.9M) (raw)", f"{RUNG_S} (3.2M-A0.9M)",
                                   f"{RUNG_M} (3.2M-A0.9M) (raw)", f"{RUNG_M} (3.2M-A0.9M)"]
    xs, raw, smooth = chart["data"][0], chart["data"][3], chart["data"][4]
    assert xs[:3] == [0, 1, 2] and raw[:3] == [1.0, 0.5, pytest.approx(1 / 3)]
    # Debiased EMA: the first point is the raw one, later points lag behind a falling curve.
    expected, last = [], 0.0
    for n, y in enumerate(raw[:5], start=1):
        last = 0.8 * last + 0.2 * y
        expected.append(last / (1 - 0.8 ** n))
    assert smooth[:5] == pytest.approx(expected) and smooth[4] > raw[4]
    # Hover one chart: the others' cursors follow to the same step.
    loss_chart = page.locator(".panel[data-key='train/loss'] .u-over")
    loss_chart.scroll_into_view_if_needed()
    box = loss_chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    hovered = page.evaluate("""() => ['train/loss', 'grad/norm/total'].map(k => {
        const u = window.GLASSLAB_CHARTS['compare:' + k]; return u.data[0][u.cursor.idx]; })""")
    assert hovered[0] is not None and hovered[0] == hovered[1]
    # The view is in the URL: loading it again draws the same charts.
    view = parse_qs(urlparse(page.evaluate("() => location.href")).query)
    assert view["runs"] == [f"{RUNG_S},{RUNG_M}"] and view["smooth"] == ["0.8"]
    assert view["key"] == ["train/loss", "eval/macro/loss", "grad/norm/total"] and "keys" not in view
    page.select_option("select[name=axis]", "flops")
    page.check("input[name=logx]")
    query = urlparse(page.evaluate("() => location.href")).query
    page.goto("about:blank")
    open_page(page, site.url("compare", query=query))
    again = page.evaluate("""() => { const u = window.GLASSLAB_CHARTS['compare:grad/norm/total'];
        return {labels: u.series.map(s => s.label), x0: u.data[0][0], distr: u.scales.x.distr}; }""")
    assert again["labels"] == ["flops", *chart["labels"][1:]] and again["distr"] == 3
    assert math.isclose(again["x0"], 4096 * 6.0e6)
    check_axes(page)


def test_compare_search_filters_the_charts_and_picks_metrics_by_prefix(site, page):
    query = f"runs={RUNG_S},{RUNG_M}&keys=train/loss,eval/macro/loss,grad/norm/total&q=loss"
    open_page(page, site.url("compare", query=query))
    shown = "() => Object.keys(window.GLASSLAB_CHARTS).filter(k => k.startsWith('compare:'))"
    assert page.evaluate(shown) == ["compare:train/loss", "compare:eval/macro/loss"]
    assert page.locator(".search-status").inner_text() == "2 of 3 charts · 4 metrics in the lab match"
    # The lab's metric names by prefix, with counts; picking one adds its chart (the search stays).
    page.locator(".key-list > summary").click()
    eval_group = page.locator("details.key-group[data-prefix='eval/']")
    assert eval_group.locator("summary").inner_text() == "eval/ 3 of 5"
    eval_group.locator("summary .muted").click()
    eval_group.locator("button[data-key='eval/web/loss']").click()
    page.wait_for_function("() => window.GLASSLAB_CHARTS['compare:eval/web/loss'] !== undefined")
    view = parse_qs(urlparse(page.evaluate("() => location.href")).query)
    assert view["key"] == ["train/loss", "eval/macro/loss", "grad/norm/total", "eval/web/loss"]
    assert view["q"] == ["loss"]
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    assert page.evaluate(shown) == ["compare:train/loss", "compare:eval/macro/loss", "compare:eval/web/loss"]
    assert page.locator("input[name=q]").input_value() == "loss"


def test_overview_table_sorts_filters_and_flags_incidents(site, page):
    open_page(page, site.url("overview"))
    assert page.title() == "Overview · glasslab observatory" and "Lab lab" not in page.content()
    assert page.locator("link[rel=icon]").get_attribute("href").startswith("data:image/svg+xml")  # no favicon 404
    rows = page.locator("table.runs tbody tr")
    assert rows.count() == 4
    hero = page.locator(f"table.runs tr[data-run='{HERO}']")
    assert "1 spike skipped" in hero.inner_text() and "outside (-7." in hero.inner_text()
    page.fill("input.filter", "rung")
    assert rows.count() == 2
    page.fill("input.filter", "")
    page.locator("table.runs th", has_text="tokens").click()  # largest first
    assert page.locator("table.runs tbody tr").first.get_attribute("data-run") == RUNG_M
    page.locator("table.runs th", has_text="tokens").click()
    assert page.locator("table.runs tbody tr").first.get_attribute("data-run") == FORK
    assert "outside" in page.locator("table", has_text="compare its runs").inner_text()


def test_data_page_shows_the_funnel_per_domain_warnings_and_runs(site, page):
    open_page(page, site.url("data", DATA))
    warnings = page.locator("#data-warnings li")
    kinds = warnings.evaluate_all("items => items.map(i => i.dataset.kind)")
    assert "eval_ge_train" in kinds and "repetition" in kinds
    assert "code: the eval split (10,300 tokens) is as large" in page.locator("#data-warnings").inner_text()
    funnel = page.locator("table.funnel")
    assert funnel.locator("th").all_inner_texts() == ["stage", "web", "code", "all domains"]
    assert "600 (86%)" in funnel.locator("tr", has_text="exact_dedup").inner_text()
    runs = page.locator("table.domain-runs tbody tr")
    assert runs.count() == 4  # every run of the synthetic lab names this dataset (by manifest hash or field)
    assert "70% ·" in runs.first.inner_text()
