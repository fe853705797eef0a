"""An SFT run on its observatory page, in a real headless Chromium: its base run linked, its samples drawn
as a conversation, and the base model's reply to the same prompt beside each reply."""

from __future__ import annotations

import pytest

from glasslab import track
from glasslab.posttrain.samples import chat_turns
from observatory_lab import CHROMIUM_ARGS, build_lab, chromium_path, serve_lab

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
PROMPT = "What does `json.dumps` do?"


def test_sft_run_page_links_its_base_and_shows_replies_beside_the_bases(tmp_path):
    from playwright.sync_api import sync_playwright

    lab = build_lab(tmp_path / "lab")
    base = {"metrics": {"eval/sft/loss": 5.1},
            "samples": [{"prompt": chat_turns("user", PROMPT), "text": chat_turns("assistant", "def f(x):")}]}
    run = track.init(lab / "sft-eeee5555", {"sft": {"packing": "packed"}}, record_extra={
        "role": "sft", "parent": {"run": "hero-dddd4444", "run_dir": str(lab / "hero-dddd4444"), "step": 19},
        "base": base})
    for step in range(5):
        run.log({"sft/loss": 4.0 - 0.1 * step, "sft/assistant_tokens": 100.0 * (step + 1)}, step)
    run.log({"eval/sft/loss": 4.6}, 4)
    run.sample(4, chat_turns("user", PROMPT), chat_turns("assistant", "Serialize obj to a JSON string."))
    run.finish("finished")
    with sync_playwright() as p, serve_lab(lab) as server:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/run/sft-eeee5555")
        page.wait_for_selector("body[data-ready='1']")
        links = page.locator(".run-link", has_text="fine-tuned from")
        assert "hero-dddd4444" in links.inner_text() and "step 19" in links.inner_text()
        assert links.locator("a").get_attribute("href").endswith("hero-dddd4444")
        table = page.locator("table.samples")
        assert "base model's reply (step 19)" in table.locator("thead").inner_text()
        row = table.locator("tbody tr").first
        assert row.locator(".turn-user").inner_text() == f"user: {PROMPT}"
        replies = row.locator(".turn-assistant").all_inner_texts()
        assert replies == ["assistant: Serialize obj to a JSON string.", "assistant: def f(x):"]
        assert page.locator(".chart").count() >= 1 and "SFT loss" in page.content()
        # The post-training panels are run-page sections: counts and before/after first, the chat before the
        # samples; "now" is read from the series source (the page's data holds no series).
        order = page.eval_on_selector_all("section[data-section]", "els => els.map((e) => e.dataset.section)")
        assert order.index("posttrain") < order.index("charts") < order.index("chat") < order.index("samples")
        assert "batch" not in order  # its batches are not the pretraining loader's
        assert "Post-training: supervised fine-tuning" in page.locator("#run-posttrain h2").inner_text()
        cells = page.locator("table.before-after tbody tr").first.locator("td").all_inner_texts()
        assert cells[0] == "eval/sft/loss" and cells[2].startswith("4.6") and "0.5" in cells[3], cells
        browser.close()
    assert not errors, errors
