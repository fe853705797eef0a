"""Steps replayed after a resume or rollback log their events and samples again: the reader, the page
data and the page itself (loaded and live, in headless Chromium) show each once, the latest attempt."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from glasslab import track
from glasslab.track import RunReader
from observatory_lab import CHROMIUM_ARGS, chromium_path, serve_lab

RUN = "run-eeee5555"


def log_attempt(run_dir: Path, steps: range, reason: str, tag: str) -> None:
    """One writer session as the trainer writes it: a resume event, then each step's rows."""
    run = track.init(run_dir, {}, reason=reason)
    if reason == "resume":
        run.annotate("resume", f"resumed at step {steps.start - 1}", step=steps.start - 1)
    for step in steps:
        run.log({"train/loss": 5.0 - 0.1 * step}, step)
        if step % 2 == 0:
            run.sample(step, "def ", f"{tag} sample at {step}")
        if step == 3:  # the same spike in every replay of step 3
            run.annotate("spike_skipped", f"step {step} not applied", step=step, severity="warning")
    run.finish()


@pytest.fixture()
def lab(tmp_path) -> Path:
    run_dir = tmp_path / "lab" / RUN
    log_attempt(run_dir, range(1, 5), "start", "first")  # killed after step 4; checkpoint at 2
    track.note(run_dir, "looked at the spike", step=3)  # a note from another process, no attempt
    log_attempt(run_dir, range(3, 7), "resume", "second")  # replays 3-4, killed after 6; checkpoint at 4
    log_attempt(run_dir, range(5, 7), "resume", "third")  # replays 5-6, finishes
    return tmp_path / "lab"


def test_reader_shows_each_replayed_event_and_sample_once(lab):
    with RunReader(lab / RUN) as reader:
        samples = [(s["step"], s["text"]) for s in reader.samples()]
        events = [(e["kind"], e["step"], e["attempt"]) for e in reader.events()]
        all_samples = reader.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        assert reader.scalars("train/loss")[0] == [1, 2, 3, 4, 5, 6]
    assert all_samples == 5  # history is kept in the store; readers choose
    assert samples == [(2, "first sample at 2"), (4, "second sample at 4"), (6, "third sample at 6")]
    assert sorted(events, key=str) == sorted([("note", 3, None), ("spike_skipped", 3, 2), ("resume", 2, 2),
                                              ("resume", 4, 3)], key=str)


def test_page_data_and_the_page_show_them_once_also_when_a_replay_arrives_live(lab):
    if chromium_path() is None:
        pytest.skip("chromium is not installed")
    from playwright.sync_api import sync_playwright

    with serve_lab(lab) as server, sync_playwright() as p:
        with urllib.request.urlopen(f"{server.url}/api/page/run?id={RUN}") as answer:
            data = json.load(answer)
        assert [s["step"] for s in data["samples"]] == [2, 4, 6]
        assert [e["kind"] for e in data["events"]].count("spike_skipped") == 1
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{server.url}/run/{RUN}")
            page.wait_for_selector("body[data-ready='1']")
            page.wait_for_selector("#live.live-on", timeout=5000)
            samples = page.locator("section:has(h2:text-is('Samples')) tr:has(td)")
            timeline = page.locator("section:has(h2:text-is('Event timeline')) tr:has(td)")
            loaded = (samples.count(), timeline.filter(has_text="spike_skipped").count())

            log_attempt(lab / RUN, range(3, 5), "resume", "fourth")  # a replay while the page is open
            page.wait_for_function("() => document.body.textContent.includes('fourth sample at 4')", timeout=5000)
            texts = samples.all_inner_texts()
            live = (timeline.filter(has_text="spike_skipped").count(), timeline.filter(has_text="resume").count())
        finally:
            browser.close()
    assert loaded == (3, 1)
    assert len(texts) == 3 and not any("second sample at 4" in t for t in texts)
    assert live == (1, 3)  # one spike at step 3; each of the three resumes
