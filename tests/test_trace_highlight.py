"""Traced spans shown where generated text is read: a run page's samples (live and on the static site), an SFT
run's recorded replies, and ``glasslab chat --trace``. A sample that copies a slice of a training document
is highlighted, and the highlight leads to that document and its source; before the dataset's index is
built, the page and the command name the command that builds it."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from glasslab import track
from glasslab.cli import main as cli_main
from glasslab.config import from_dict
from glasslab.data.provenance import document_provenance
from glasslab.data.shards import manifest_hash, open_shard
from glasslab.data.tokenizer import load_tokenizer
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.page_data import build_page
from glasslab.observatory.publish import page_file, publish
from glasslab.posttrain.samples import chat_turns
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from observatory_lab import chromium_path, serve_lab
from train_data import build_tiny_dataset, tiny_run_config

PREFIX = "It went on: "


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A tiny dataset; a 2-step run on it (a checkpoint to chat with); a run and an SFT run whose samples copy
    a slice of the longest code document. No index yet."""
    root = tmp_path_factory.mktemp("highlight")
    dataset = build_tiny_dataset(root)
    lab = root / "lab"
    config = tiny_run_config(dataset, max_steps=2, checkpoint_interval=2, sample_prompts=[], eval_interval=0)
    train(from_dict(RunConfig, config), lab / "tiny")
    shard = open_shard(dataset, "code", "train")
    document = int(np.argmax(shard.lengths))
    text = load_tokenizer(dataset).decode(shard.document(document)[:-1].tolist())
    copied = text[len(text) // 2: len(text) // 2 + 300]
    record = {"dataset": {"folder": dataset.name, "path": str(dataset.resolve()),
                          "manifest_hash": manifest_hash(dataset)}}
    run = track.init(lab / "sampled", {"train": {}}, record_extra=record)  # left open: a live sample comes later
    run.log({"train/loss": 3.0}, 0)
    run.sample(0, "def ", PREFIX + copied)
    run.flush()
    sft = track.init(lab / "sft-aaaa1111", {"sft": {}}, record_extra={**record, "role": "sft"})
    sft.log({"sft/loss": 2.0}, 0)
    sft.sample(0, chat_turns("user", "Show me some code."), chat_turns("assistant", PREFIX + copied))
    sft.finish("finished")
    yield {"root": root, "lab": lab, "dataset": dataset, "document": document, "copied": copied, "text": text,
           "run": run}
    run.finish("finished")


def test_without_an_index_the_page_and_chat_name_the_command_then_spans_point_into_the_text(lab, capsys):
    data = build_page(Lab(lab["lab"]), "run", "sampled")
    assert data["trace"]["status"] == "no_index"
    assert data["trace"]["command"] == "glasslab trace sampled --lab lab"
    assert cli_main(["chat", "tiny", "--prompt", "hi", "--trace", "--lab", str(lab["lab"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no trace index" in err and f"glasslab trace {lab['dataset'].resolve()}" in err, err

    assert cli_main(["trace", "tiny", "--lab", str(lab["lab"])]) == 0  # no text: only the index is built
    assert "trace index of dataset" in capsys.readouterr().out
    data = build_page(Lab(lab["lab"]), "run", "sampled")
    trace = data["trace"]
    assert trace["status"] == "traced" and trace["index"].startswith("index-")
    sample = data["samples"][0]
    spans = trace["spans"][str(sample["id"])]
    longest = max(spans, key=lambda s: s["char_end"] - s["char_start"])
    text = sample["text"]
    assert text[longest["char_start"]:longest["char_end"]] == longest["text"]
    assert longest["char_start"] >= len(PREFIX) - 2 and longest["char_end"] - longest["char_start"] >= 250
    first = longest["documents"][0]
    assert (first["domain"], first["document"]) == ("code", lab["document"])
    assert first["source"] == document_provenance(lab["dataset"], "code", "train", lab["document"])
    assert first["before"] and first["after"]  # the document's text around the match
    assert (first["before"] + longest["text"] + first["after"]).strip() in load_tokenizer(lab["dataset"]).decode(
        open_shard(lab["dataset"], "code", "train").document(lab["document"]).tolist())
    sft = build_page(Lab(lab["lab"]), "run", "sft-aaaa1111")
    (reply,) = sft["trace"]["spans"].values()  # the conversation's last turn is traced, offsets into its content
    assert reply[0]["char_start"] >= len(PREFIX) - 2 and reply[-1]["documents"][0]["document"] == lab["document"]


@pytest.fixture
def copying_model(lab, monkeypatch) -> str:
    """Every chat model loaded is the 2-step run's, replying with a copied slice of the document (what is
    tested is the trace of a reply, not what a 2-step model says); returns that reply."""
    from glasslab.posttrain import chat as chat_module

    load = chat_module.load_chat_model
    reply = PREFIX + lab["copied"]

    def copying(ref, *args, **kwargs):
        chat = load(str(lab["lab"] / "tiny"), *args, **kwargs)
        ids = chat.encoder.tokenizer.encode(reply, add_special_tokens=False).ids + [chat.encoder.im_end_id]
        chat.tokens = lambda *a: iter(ids)
        return chat

    monkeypatch.setattr(chat_module, "load_chat_model", copying)
    return reply


def test_chat_trace_prints_the_reply_with_its_spans_and_their_documents(lab, capsys, copying_model):
    assert cli_main(["trace", "tiny", "--lab", str(lab["lab"])]) == 0  # the index (cached when built before)
    capsys.readouterr()
    assert cli_main(["chat", "tiny", "--prompt", "hi", "--trace", "--lab", str(lab["lab"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith(copying_model)
    assert "traced: " in out and "[1]" in out and "x in the training data" in out
    assert f"<- code document {lab['document']} · " in out
    source = document_provenance(lab["dataset"], "code", "train", lab["document"])
    assert source["module"] in out


def test_the_chat_panel_gets_its_replys_spans_with_the_reply(lab, copying_model):
    assert cli_main(["trace", "tiny", "--lab", str(lab["lab"])]) == 0
    with serve_lab(lab["lab"]) as server:
        answer = httpx.post(f"{server.url}/api/chat", content=json.dumps({"model": "tiny", "text": "hi"}),
                            headers={"Content-Type": "application/json"}, timeout=60)
    lines = [json.loads(line) for line in answer.text.splitlines()]
    assert "".join(x["text"] for x in lines[:-1]) == copying_model and lines[-1]["done"]
    longest = max(lines[-1]["trace"], key=lambda s: s["char_end"] - s["char_start"])
    assert copying_model[longest["char_start"]:longest["char_end"]] == longest["text"]
    assert longest["documents"][0]["document"] == lab["document"] and len(longest["text"]) >= 250


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_run_page_highlights_the_copied_span_and_links_to_its_document(lab, browser, tmp_path, copying_model):
    assert cli_main(["trace", "tiny", "--lab", str(lab["lab"])]) == 0  # the index (cached when built before)
    source = document_provenance(lab["dataset"], "code", "train", lab["document"])
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def check(url: str, section: str) -> None:
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        marks = page.locator(f"#run-{section} a.traced-span")
        assert marks.count() >= 1
        longest = max(marks.all(), key=lambda m: len(m.inner_text()))
        assert len(longest.inner_text()) >= 250 and longest.inner_text() in PREFIX + lab["copied"]
        assert longest.locator("mark").count() == 1
        assert f"code document {lab['document']}" in longest.get_attribute("title")
        entry_id = longest.get_attribute("href").removeprefix("#")
        longest.click()
        entry = page.locator(f"[id='{entry_id}']")
        assert entry.is_visible()  # the span's list opened on the click
        assert f"code document {lab['document']} · {source['source']}: module {source['module']}" in entry.inner_text()
        assert entry.locator(".trace-context mark").first.inner_text() == longest.inner_text()

    with serve_lab(lab["lab"]) as server:
        check(f"{server.url}/run/sft-aaaa1111", "samples")
        # The live chat panel: the reply, once streamed, is drawn again with its spans marked.
        page.fill("textarea[name='message']", "Show me some code.")
        page.click("button[name='send']")
        reply = page.locator(".chat-log[data-side='tuned'] .turn-assistant[data-done='1']")
        reply.wait_for(timeout=60_000)
        marks = reply.locator("a.traced-span mark").all_inner_texts()
        assert max(map(len, marks)) >= 250 and all(m in copying_model for m in marks)
        reply.locator("a.traced-span").first.click()
        assert f"code document {lab['document']}" in reply.locator(".trace-docs").inner_text()
        check(f"{server.url}/run/sampled", "samples")
        # A sample logged while the page is open arrives traced: another slice of the document, highlighted.
        later = lab["text"][len(lab["text"]) // 4: len(lab["text"]) // 4 + 200]
        lab["run"].sample(1, "def ", PREFIX + later)
        lab["run"].flush()
        page.wait_for_selector("#run-samples tbody tr:nth-child(2)")
        mark = page.locator("#run-samples tbody tr").first.locator("a.traced-span mark").first
        assert len(mark.inner_text()) >= 150 and mark.inner_text() in PREFIX + later
    site = tmp_path / "site"
    publish(lab["lab"], site)
    check((site / page_file("run", "sampled")).as_uri(), "samples")
    check((site / page_file("run", "sft-aaaa1111")).as_uri(), "chat")  # the recorded replies, on the static site
    published = site / "data" / f"{page_file('run', 'sampled').removesuffix('.html')}.js"
    assert str(lab["root"]) not in published.read_text()  # no local path in the published spans
    assert not errors, errors


def test_a_lab_moved_whole_traces_its_samples_from_the_dataset_beside_its_runs(lab, tmp_path, capsys):
    """A lab copied elsewhere (its runs' records still name the old path): the run's dataset is the folder of
    the recorded name beside the run, checked by manifest hash, for the page, `glasslab trace` and batches."""
    import shutil

    from glasslab.data.batches import trained_dataset

    moved = tmp_path / "moved"
    shutil.copytree(lab["lab"] / "sampled", moved / "sampled")
    shutil.copytree(lab["dataset"], moved / lab["dataset"].name)
    record = json.loads((moved / "sampled" / "run.json").read_text())
    record["dataset"]["path"] = str(tmp_path / "where-it-was" / lab["dataset"].name)
    (moved / "sampled" / "run.json").write_text(json.dumps(record))
    assert trained_dataset(moved / "sampled") == moved / lab["dataset"].name
    assert build_page(Lab(moved), "run", "sampled")["trace"]["status"] == "no_index"  # found; not indexed yet
    assert cli_main(["trace", "sampled", "--lab", str(moved)]) == 0
    capsys.readouterr()
    trace = build_page(Lab(moved), "run", "sampled")["trace"]
    assert trace["status"] == "traced" and trace["spans"]
