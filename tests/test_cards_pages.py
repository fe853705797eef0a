"""The demo's experiment card in headless Chromium, on the live server and in the demo's own static
site: the overview's Experiments section shows the card's verdict, and the card page shows the same
prediction, band, actual value, verdict and incidents as ``glasslab card demo --markdown``."""

from __future__ import annotations

import re

import pytest

from cli_runner import run_cli
from glasslab.lab.card_results import card_results
from glasslab.observatory.publish import page_file
from observatory_lab import chromium_path, serve_lab

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")


@pytest.fixture(scope="module", params=["live", "static"])
def urls(request, demo_lab):
    """(overview URL, card page URL) on the live server or in the site ``glasslab demo`` published."""
    if request.param == "live":
        with serve_lab(demo_lab.root) as server:
            yield f"{server.url}/", f"{server.url}/experiment/demo"
    else:
        site = demo_lab.root / "site"
        yield (site / "index.html").as_uri(), (site / page_file("experiment", "demo")).as_uri()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)
    return page, problems


def test_overview_and_card_page_show_the_cards_numbers(browser, urls, demo_lab):
    overview_url, card_url = urls
    card = card_results(demo_lab.root, "demo")
    markdown = run_cli("card", "demo", "--markdown", "--lab", str(demo_lab.root)).stdout

    page, problems = open_page(browser, overview_url)
    first = page.locator("section h2").first.inner_text()
    assert first == "Experiments"  # the cards come first on the overview
    row = page.locator("section", has=page.locator("h2", has_text="Experiments")).locator("tbody tr")
    assert row.count() == 1
    assert row.locator(".verdict-word").inner_text() == card["verdict"]
    assert card["title"] in row.inner_text()
    row.locator("a").click()
    page.wait_for_selector("body[data-ready='1'] h1")
    assert page.locator("h1").inner_text() == card["title"]
    page.close()
    assert not problems, problems

    page, problems = open_page(browser, card_url)
    assert page.locator(".verdict-line .verdict-word").inner_text() == card["verdict"]
    assert card["question"] in page.locator(".card-question").inner_text()
    cells = page.locator("table.expectations tbody tr").first.locator("td").all_inner_texts()
    hero = card["expectations"][0]
    shown = {"predicted": cells[4], "band": cells[5], "actual": cells[6], "result": cells[7]}
    assert shown == {"predicted": hero["point_text"], "band": hero["band_text"], "actual": hero["actual_display"],
                     "result": hero["inside_text"]}
    # The same digits; the Markdown's footnotes name the sources the page shows on hover.
    notes = dict(re.findall(r"^\[\^(\d+)\]: (?:read from )?`(.+)`$", markdown, re.M))
    row = re.search(rf"\| {re.escape(shown['predicted'])}\[\^(\d+)\] \| {re.escape(shown['band'])} \| "
                    rf"{re.escape(shown['actual'])}\[\^(\d+)\] \| {shown['result']} \|", markdown)
    assert row, markdown
    first = page.locator("table.expectations tbody tr").first
    assert first.locator(".predicted").get_attribute("data-source") == notes[row.group(1)]
    assert first.locator(".actual").get_attribute("data-source") == notes[row.group(2)]
    assert hero["actual"] is not None and shown["actual"] not in ("", "missing")
    if card["incidents"]:
        assert page.locator("table.incidents tbody tr").count() == len(card["incidents"])
    else:
        assert page.locator(".incidents-none").inner_text() == "none" and "## Incidents\n\nnone" in markdown
    page.close()
    assert not problems, problems
