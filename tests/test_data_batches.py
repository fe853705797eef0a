"""``glasslab batch`` and the run page's batch panel: every step's batch of real tiny runs, rebuilt in a fresh
process from the run's config and recorded loader starts, has the hash the trainer recorded — across a
rollback, a SIGKILL and resume, and a fork that halves the batch."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import subprocess_env
from glasslab import track
from glasslab.cli import main as cli_main
from glasslab.config import from_dict
from glasslab.data.batches import rebuild_batch
from glasslab.track import RunReader
from glasslab.train.fork import ForkPoint
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from observatory_lab import chromium_path, serve_lab
from train_data import build_tiny_dataset, tiny_run_config

# Rolls back at step 6 (to the checkpoint at 4, skipping 2 batches) with the trainer's own mechanism, then
# is killed for real at step 11, between the checkpoints at 8 and 12.
FIRST_LIFE = """
import os, signal, sys
from glasslab.config import from_dict
from glasslab.train.run_config import RunConfig
from glasslab.train.hooks import TrainerHook
from glasslab.train.run import train

class RollBackThenDie(TrainerHook):
    def post_step(self, trainer, metrics):
        if trainer.step == 6 and trainer.rollbacks == 0:
            trainer.roll_back("forced by the test")
        elif trainer.step == 11:
            trainer.run.flush()
            os.kill(os.getpid(), signal.SIGKILL)

train(from_dict(RunConfig, CONFIG), sys.argv[1], hooks=[RollBackThenDie()])
"""

REBUILD_ALL = """
import json, sys
from glasslab.track import RunReader
from glasslab.data.batches import rebuild_batch

out = []
for run_dir in sys.argv[1:]:
    with RunReader(run_dir) as reader:
        pairs = [(s, a) for s, a, _ in reader.batch_hashes()]
    for step, attempt in pairs:
        batch = rebuild_batch(run_dir, step, attempt)
        out.append([run_dir, step, attempt, batch.hash, batch.recorded_hash, len(batch.rows)])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A run rolled back, SIGKILLed and resumed to step 16, and a fork of it at step 8 with half the batch."""
    root = tmp_path_factory.mktemp("batches")
    dataset = build_tiny_dataset(root)
    config = tiny_run_config(dataset, max_steps=16, checkpoint_interval=4, sample_prompts=[], keep_last=10,
                             eval_interval=0)
    parent = root / "lab" / "parent"
    killed = subprocess.run([sys.executable, "-c", FIRST_LIFE.replace("CONFIG", repr(config)), str(parent)],
                            env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-3000:]
    train(from_dict(RunConfig, config), parent, resume=True)
    forked = dict(config, train={**config["train"], "global_batch_tokens": 32 * 4, "max_steps": 12})
    train(from_dict(RunConfig, forked), root / "lab" / "fork", fork=ForkPoint.at(parent, 8))
    return {"parent": parent, "fork": root / "lab" / "fork", "dataset": dataset}


def test_every_recorded_batch_is_rebuilt_exactly_in_a_fresh_process(runs):
    with RunReader(runs["parent"]) as reader:
        reasons = [a["reason"] for a in reader.attempts()]
    assert reasons == ["start", "rollback", "resume"]
    done = subprocess.run([sys.executable, "-c", REBUILD_ALL, str(runs["parent"]), str(runs["fork"])],
                          env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rebuilt = json.loads(done.stdout)
    by_key = {(Path(r).name, step, attempt): (mine, recorded, rows)
              for r, step, attempt, mine, recorded, rows in rebuilt}
    assert all(mine == recorded for mine, recorded, _ in by_key.values()), [
        k for k, (m, r, _) in by_key.items() if m != r]
    # Every attempt's steps: 1-6 before the rollback, 5-11 after it (to the kill), 9-16 resumed from 8.
    parent = {(s, a) for name, s, a in by_key if name == "parent"}
    assert parent == {(s, 1) for s in range(1, 7)} | {(s, 2) for s in range(5, 12)} | {(s, 3) for s in range(9, 17)}
    # The rollback skipped two batches: steps 5 and 6 were drawn again from further on, so they differ.
    assert by_key[("parent", 5, 1)][0] != by_key[("parent", 5, 2)][0]
    # The fork continues the parent's stream at step 9 with 4 rows instead of 8.
    fork = sorted((s, rows) for (name, s, _), (_, _, rows) in by_key.items() if name == "fork")
    assert fork[0] == (9, 4) and fork[-1] == (12, 4) and len(fork) == 4


def test_the_command_prints_a_steps_documents_with_sources_and_boundaries(runs, capsys):
    step = random.randint(1, 16)
    assert cli_main(["batch", str(runs["parent"]), str(step), "--json"]) == 0
    batch = json.loads(capsys.readouterr().out)
    assert batch["matches"] and batch["step"] == step and len(batch["rows"]) == 8
    for row in batch["rows"]:
        assert row["domain"] in ("code", "prose")
        assert sum(p["tokens"] for p in row["pieces"]) == 33  # seq_len + 1
        for piece in row["pieces"]:
            assert piece["source"]["domain"] == row["domain"] and "module" in piece["source"]
            assert 0 <= piece["offset"] < piece["offset"] + piece["tokens"] <= piece["document_tokens"]
        assert all(p["ends_document"] for p in row["pieces"][:-1])  # a row moves on only at a document's end
    assert cli_main(["batch", str(runs["parent"]), "5", "--attempt", "1", "--rank", "0"]) == 0
    text = capsys.readouterr().out
    assert "attempt 1, start" in text and "matches the hash recorded" in text and "=== row 7 (rank 0)" in text
    assert "<<< end of document >>>" in text or text.count("--- document") == 8


def test_bad_input_is_one_line(runs, tmp_path, capsys):
    parent = str(runs["parent"])
    for args, expected in ((["17"], "beyond its last step"), (["5", "--attempt", "9"], "has attempts 1, 2, 3"),
                           (["13", "--attempt", "1"], "attempt 1 of parent trained steps 1..6"),
                           (["3", "--rank", "1"], "trained on 1 rank(s)")):
        assert cli_main(["batch", parent, *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
    track.init(tmp_path / "old", {}).finish()  # a run store without batches (trained before they were recorded)
    assert cli_main(["batch", str(tmp_path / "old"), "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "recorded no batches" in err
    moved = tmp_path / "moved"
    shutil.move(runs["dataset"], moved)
    try:
        with RunReader(parent):
            pass
        assert cli_main(["batch", parent, "3"]) == 2
        err = capsys.readouterr().err
        record = json.loads((runs["parent"] / "run.json").read_text())
        assert err.count("\n") == 1 and f"dataset {record['dataset']['manifest_hash'][:16]}" in err and "gone" in err
    finally:
        shutil.move(moved, runs["dataset"])


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_run_page_shows_the_documents_of_a_step_an_incident_and_a_chart_point(runs, browser):
    expected = rebuild_batch(runs["parent"], 9)
    errors = []
    with serve_lab(runs["parent"].parent) as server:
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/run/parent")
        page.wait_for_selector("body[data-ready='1']")
        order = page.eval_on_selector_all("section[data-section]", "els => els.map((e) => e.dataset.section)")
        assert order.index("charts") < order.index("batch") < order.index("samples")  # its slot: order 35
        page.fill("input[name=batch-step]", "9")
        page.click("#run-batch button")
        page.wait_for_selector("#run-batch[data-step='9'] .batch-row")
        rows, check = page.locator("#run-batch .batch-row"), page.locator("#run-batch .batch-check")
        assert rows.count() == 8 and "matches the hash recorded" in check.text_content()
        first = rows.first
        assert first.locator("pre").first.text_content() == expected.rows[0].pieces[0].text
        assert expected.rows[0].pieces[0].source["module"] in first.locator(".batch-source").first.text_content()
        page.click("tr.sev-incident")  # the rollback at step 6: the batch that attempt 1 trained there
        page.wait_for_selector("#run-batch[data-step='6'] .batch-row")
        assert "attempt 1 (start)" in check.text_content()
        assert page.url.endswith("#batch=6@1")
        over = page.locator(".u-over").first  # a chart: the batch of the step under the cursor
        over.scroll_into_view_if_needed()
        box = over.bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + box["height"] / 2)
        step = page.evaluate("() => { const over = document.querySelector('.u-over');"
                             " const u = Object.values(window.GLASSLAB_CHARTS).find((c) => c && c.over === over);"
                             " return u.data[0][u.cursor.idx]; }")
        page.mouse.click(box["x"] + box["width"] * 0.7, box["y"] + box["height"] / 2)
        page.wait_for_selector(f"#run-batch[data-step='{step}'] .batch-row")
        assert step not in (6, 9) and "matches the hash recorded" in check.text_content()
        page.close()
    assert not errors, errors


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_published_page_carries_the_incidents_batches_and_names_the_command_for_others(runs, tmp_path, browser):
    from glasslab.observatory.batch_view import PUBLISHED_TEXT_CHARS
    from glasslab.observatory.publish import batch_index_file, page_file, publish

    lab = runs["parent"].parent
    site = publish(lab, tmp_path / "site").parent
    index = json.loads((site / batch_index_file("parent")).read_text().split("] = ", 1)[1].rstrip(";\n"))
    # Step 1, 10 steps evenly spaced over the 16 planned (in the attempt in force), the rollback's spiked
    # step as attempt 1 trained it, and the resume's first step (9, attempt 3).
    assert set(index["files"]) == {"1@1", "2@1", "3@1", "5@2", "6@2", "6@1", "8@2", "9@3", "10@3", "11@3",
                                   "13@3", "14@3", "16@3"}
    fork = json.loads((site / batch_index_file("fork")).read_text().split("] = ", 1)[1].rstrip(";\n"))
    assert "9@1" in fork["files"]  # the fork's event at step 8: the first step it trained
    published = "".join(p.read_text() for p in site.rglob("*.js"))
    assert str(lab.parent) not in published and str(runs["dataset"]) not in published  # no local path

    expected = rebuild_batch(runs["parent"], 6, 1)
    errors = []
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto((site / page_file("run", "parent")).as_uri())
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("#run-batch .batch-published a")
    page.click("tr.sev-incident a.batch-link")  # the rollback at step 6: the batch attempt 1 spiked on
    page.wait_for_selector("#run-batch[data-step='6'] .batch-row")
    rows, check = page.locator("#run-batch .batch-row"), page.locator("#run-batch .batch-check")
    assert rows.count() == 8 and "attempt 1 (start)" in check.text_content()
    assert "matches the hash recorded" in check.text_content() and page.url.endswith("#batch=6@1")
    for row, texts in ((rows.first, expected.rows[0]), (rows.last, expected.rows[-1])):
        assert row.locator("pre").first.text_content() == texts.pieces[0].text[:PUBLISHED_TEXT_CHARS]
        assert texts.pieces[0].source["module"] in row.locator(".batch-source").first.text_content()
    page.fill("input[name=batch-step]", "7")  # not published: the command that rebuilds it
    page.click("#run-batch button")
    page.wait_for_selector("#run-batch[data-step='7'] .batch-command")
    assert page.locator("#run-batch .batch-command").text_content() == "glasslab batch parent 7"
    assert page.locator("#run-batch .batch-row").count() == 0
    page.click("#run-batch .batch-published a:text-is('9')")  # a published step in force
    page.wait_for_selector("#run-batch[data-step='9'] .batch-row")
    assert "attempt 3 (resume)" in check.text_content()
    page.close()
    assert not errors, errors


def test_an_event_points_to_the_batch_it_is_about_and_a_site_publishes_a_fixed_set():
    from glasslab.observatory.batch_view import MAX_EVENT_BATCHES, event_batch, published_batches

    spike = {"kind": "spike_skipped", "severity": "warning", "step": 31, "attempt": 1}
    assert event_batch(spike) == {"step": 31, "attempt": 1}  # the batch that attempt judged
    assert event_batch({"kind": "resume", "severity": "info", "step": 8, "attempt": 3}) == {"step": 9, "attempt": 3}
    export = {"kind": "export", "severity": "info", "step": 16, "attempt": None}
    assert event_batch(export) == {"step": 16, "attempt": None}  # in force
    assert event_batch({"kind": "step_failed", "severity": "incident", "step": None, "attempt": None}) is None
    trained = [(s, 1) for s in range(1, 41)] + [(s, 2) for s in range(31, 201)]
    events = [spike, *({**spike, "step": s, "attempt": 2} for s in range(32, 200))]
    chosen = published_batches(trained, events, planned_steps=200)
    fixed = {(1, 1), *((20 * k, 1 if 20 * k < 31 else 2) for k in range(1, 11))}
    assert fixed <= set(chosen) and (31, 1) in chosen
    assert len(chosen) == len(fixed | {(31, 1)} | {(s, 2) for s in range(32, 32 + MAX_EVENT_BATCHES - 1)})
