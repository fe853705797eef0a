"""The data page and a build: its stages with their throughput once done, and a build in progress (from
the progress file a running build keeps), live in headless Chromium as it moves on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from data_helpers import build_small
from glasslab.data.progress import Progress
from glasslab.layout import BUILD_PROGRESS, STEP_RECORD
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.page_data import build_page
from observatory_lab import CHROMIUM_ARGS, chromium_path, serve_lab

DONE, RUNNING = "data-aaaa1111", "data-bbbb2222"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A lab with one finished data build (a real one) and one whose build is running."""
    root = tmp_path_factory.mktemp("databuild") / "lab"
    root.mkdir()
    build_small(root.parent, name=f"lab/{DONE}", num_workers=2)
    (root / DONE / STEP_RECORD).write_text(json.dumps({"name": "data", "status": "succeeded", "attempts": 1}))
    (root / RUNNING).mkdir()
    (root / RUNNING / STEP_RECORD).write_text(json.dumps({"name": "data", "status": "running", "attempts": 1,
                                                          "pid": os.getpid()}))
    progress = Progress(root / RUNNING / BUILD_PROGRESS, enabled=False, workers=2)
    stats = progress.start("read", 10)
    stats.tasks_done, stats.input_bytes, stats.documents_kept = 10, 40_000_000, 900
    progress.end()
    stats = progress.start("exact", 8)
    stats.tasks_done, stats.documents_kept = 3, 300
    progress.update(force=True)
    return root


def test_page_data_has_the_stages_of_a_finished_build_and_of_one_in_progress(lab):
    done = build_page(Lab(lab), "data", DONE)
    assert done["build"]["state"] == "done" and done["build"]["workers"] == 2 and done["report"]
    stages = [s["stage"] for s in done["build"]["stages"]]
    assert stages == ["read", "exact", "buckets", "verify", "clusters", "survivors", "tokenizer", "ngrams",
                      "tokenize", "assemble"]
    assert all(s["status"] == "done" and s["tasks_done"] == s["tasks"] for s in done["build"]["stages"])
    running = build_page(Lab(lab), "data", RUNNING)
    assert running["report"] is None and running["build"]["state"] == "running"  # its process (this one) lives
    assert [(s["stage"], s["tasks_done"], s["status"]) for s in running["build"]["stages"]] == [
        ("read", 10, "done"), ("exact", 3, "running")]
    progress = json.loads((lab / RUNNING / BUILD_PROGRESS).read_text())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (lab / RUNNING / BUILD_PROGRESS).write_text(json.dumps({**progress, "pid": dead.pid}))
    try:
        assert build_page(Lab(lab), "data", RUNNING)["build"]["state"] == "interrupted"  # killed: its pid is gone
    finally:
        (lab / RUNNING / BUILD_PROGRESS).write_text(json.dumps(progress))


@pytest.mark.skipif(chromium_path() is None, reason="no chromium on PATH")
def test_the_data_page_shows_a_build_in_progress_then_its_stages(lab):
    from playwright.sync_api import sync_playwright

    with serve_lab(lab) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/data/{RUNNING}")
        page.wait_for_selector("body[data-ready='1']")
        box = page.locator("#build-progress")
        assert "Build in progress" in box.inner_text() and "2 local worker process(es)" in box.inner_text()
        assert page.locator("tr[data-stage='exact'][data-status='running']").count() == 1
        assert "3/8" in page.locator("tr[data-stage='exact']").inner_text()
        # the build moves on: the page redraws from the progress file by itself
        progress = json.loads((lab / RUNNING / BUILD_PROGRESS).read_text())
        progress["stages"][1].update(tasks_done=8, status="done")
        (lab / RUNNING / BUILD_PROGRESS).write_text(json.dumps(progress))
        page.wait_for_selector("tr[data-stage='exact'][data-status='done']", timeout=10_000)
        page.goto(f"{server.url}/data/{DONE}")
        page.wait_for_selector("body[data-ready='1']")
        rows = page.locator("table.build-stages tbody tr")
        assert rows.count() == 10 and "MB/s" in page.locator("table.build-stages thead").inner_text()
        assert page.locator("table.funnel").count() == 1  # the funnel stays
        browser.close()
    assert not errors, errors
