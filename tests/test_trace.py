"""``glasslab trace``: a text copied from a training document traces back to it and its provenance through
the suffix-array index (a lab step, built once); a random text traces to nothing; counts agree with a
brute-force scan; common spans are dropped by their unigram probability; bad input is one line."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from glasslab.cli import main as cli_main
from glasslab.config import from_dict
from glasslab.data.provenance import document_provenance
from glasslab.data.shards import manifest_hash, open_shard
from glasslab.data.token_index import TokenIndex, index_for
from glasslab.data.tokenizer import load_tokenizer, shard_encoder
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict[str, Path]:
    """A tiny dataset, a 2-step run on it, and its lab (the index is built by the first trace)."""
    root = tmp_path_factory.mktemp("trace")
    dataset = build_tiny_dataset(root)
    config = tiny_run_config(dataset, max_steps=2, checkpoint_interval=2, sample_prompts=[], eval_interval=0)
    train(from_dict(RunConfig, config), root / "lab" / "tiny")
    return {"root": root, "lab": root / "lab", "dataset": dataset, "run": root / "lab" / "tiny"}


def document_text(dataset: Path, domain: str, index: int) -> str:
    return load_tokenizer(dataset).decode(open_shard(dataset, domain, "train").document(index)[:-1].tolist())


def trace_json(lab: dict[str, Path], target: str, text: str, *args: str, capsys) -> dict:
    assert cli_main(["trace", target, text, "--json", "--lab", str(lab["lab"]), *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_copied_text_traces_to_its_document_and_source(lab, capsys):
    shard = open_shard(lab["dataset"], "code", "train")
    document = int(np.argmax(shard.lengths))
    text = document_text(lab["dataset"], "code", document)
    middle = text[len(text) // 3: len(text) // 3 + 1500]
    out = trace_json(lab, "tiny", "Here is what it wrote: " + middle, capsys=capsys)  # the run's dataset
    assert out["manifest_hash"] == manifest_hash(lab["dataset"])
    assert Path(out["index"]).parent == lab["lab"] and Path(out["index"]).name.startswith("index-")
    longest = max(out["spans"], key=lambda s: s["end"] - s["start"])
    assert longest["end"] - longest["start"] >= 0.9 * (out["tokens"] - 8)  # all but the prefix and the edges
    assert longest["text"].strip() in middle and longest["count"] >= 1
    assert longest["documents"][0]["domain"] == "code" and longest["documents"][0]["document"] == document
    assert longest["documents"][0]["source"] == document_provenance(lab["dataset"], "code", "train", document)
    assert "module" in longest["documents"][0]["source"] and longest["heldout_count"] == 0
    sa = Path(out["index"]) / "sa.npy"
    built = sa.stat().st_mtime_ns
    again = trace_json(lab, str(lab["dataset"]), middle, capsys=capsys)  # the dataset itself: same index
    assert again["index"] == out["index"] and sa.stat().st_mtime_ns == built
    assert cli_main(["trace", "tiny", middle[:400], "--lab", str(lab["lab"]), "--max-docs", "1"]) == 0
    printed = capsys.readouterr().out
    assert "1 occurrence(s)" in printed and f"<- code document {document} · " in printed


def test_a_held_out_text_is_said_to_be_in_the_held_out_split_with_its_documents(lab, capsys):
    """Not "0 spans" and nothing else: the text is the held-out split's, and which documents hold it."""
    shard = open_shard(lab["dataset"], "prose", "eval")
    document = int(np.argsort(shard.lengths)[len(shard.lengths) // 2])  # a document of median length
    text = load_tokenizer(lab["dataset"]).decode(shard.document(document)[:-1].tolist())
    out = trace_json(lab, "tiny", text, capsys=capsys)
    longest = max(out["heldout_spans"], key=lambda s: s["end"] - s["start"])
    assert (longest["start"], longest["end"]) == (0, out["tokens"]) and longest["count"] >= 1
    assert longest["documents"][0]["domain"] == "prose" and longest["documents"][0]["document"] == document
    assert longest["documents"][0]["source"] == document_provenance(lab["dataset"], "prose", "eval", document)
    assert all(span["end"] - span["start"] < out["tokens"] for span in out["spans"])  # not all of it trained on
    assert cli_main(["trace", "tiny", text, "--lab", str(lab["lab"])]) == 0
    printed = capsys.readouterr().out
    assert "the whole text is in the held-out split" in printed, printed
    assert f"<- prose held-out document {document} · " in printed


def test_a_random_text_traces_to_nothing(lab, capsys):
    rng = random.Random(0)
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(600))
    out = trace_json(lab, "tiny", text, capsys=capsys)
    assert out["tokens"] >= 100 and out["spans"] == out["heldout_spans"] == [] and out["dropped_common"] == 0


def test_counts_and_longest_matches_agree_with_a_scan(lab):
    index = index_for(lab["dataset"], lab["lab"])
    tokens = np.concatenate([open_shard(lab["dataset"], d, "train").tokens for d in ("code", "prose")]).astype(np.int64)
    rng = np.random.default_rng(0)
    for start in rng.integers(0, len(tokens) - 20, 30):
        for length in (1, 3, 8):
            gram = tokens[start:start + length]
            windows = np.lib.stride_tricks.sliding_window_view(tokens, length)
            lo, hi = index.train.count(gram.tolist())
            assert hi - lo == int((windows == gram).all(axis=1).sum())
            assert all((tokens[int(p):int(p) + length] == gram).all() for p in index.train.sa[lo:hi])
    # A training window with one token changed: its longest match is found at least up to the change,
    # and it is the longest (one more token occurs nowhere).
    ids = tokens[1000:1040].copy()
    ids[20] = (ids[20] + 1) % 500 + 2
    length = index.train.longest_match(index.train.bytes(ids))
    assert length >= 20
    lo, hi = index.train.count(ids[:length].tolist())
    assert hi > lo and (length == len(ids) or np.subtract(*index.train.count(ids[:length + 1].tolist())) == 0)


def test_spans_the_held_out_split_holds_too_are_marked_with_their_count_there(lab):
    index = index_for(lab["dataset"], lab["lab"])
    heldout = np.concatenate([open_shard(lab["dataset"], d, "eval").tokens for d in ("code", "prose")]).astype(np.int64)
    marked = 0
    for start in range(0, len(heldout) - 100, 90):  # overlapping held-out windows: their spans are in both
        spans, _ = index.trace(heldout[start:start + 100].tolist())
        for span in spans:
            gram = heldout[start + span.start:start + span.end]
            windows = np.lib.stride_tricks.sliding_window_view(heldout, len(gram))
            assert span.heldout_count == int((windows == gram).all(axis=1).sum()) >= 1
            marked += 1
    assert marked >= 1


def test_a_span_of_common_tokens_is_dropped_however_often_it_occurs(lab):
    index = index_for(lab["dataset"], lab["lab"])
    tokens = np.concatenate([open_shard(lab["dataset"], d, "train").tokens for d in ("code", "prose")]).astype(np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(tokens, 8)
    common = windows[np.argmax(index.log_probs[windows].sum(axis=1))]  # the most probable 8 tokens in the data
    assert np.subtract(*index.train.count(common.tolist())[::-1]) >= 1
    spans, dropped = index.trace(common.tolist())
    assert spans == [] and dropped == 1
    assert index.trace(common.tolist(), max_log10_unigram_prob=0.0)[0][0].end == 8  # found when not cut


def test_common_spans_are_dropped_and_counted(lab):
    index = TokenIndex(index_for(lab["dataset"], lab["lab"]).folder)
    text = document_text(lab["dataset"], "code", 0)[:800]
    ids = shard_encoder(load_tokenizer(lab["dataset"])).encode(text, add_special_tokens=False).ids
    spans, dropped = index.trace(ids)
    assert spans and dropped == 0
    threshold = min(s.log10_unigram_prob for s in spans) - 1  # rarer than every span found
    kept, dropped = index.trace(ids, max_log10_unigram_prob=threshold)
    assert kept == [] and dropped == len(spans)


def test_bad_input_is_one_line(lab, tmp_path, capsys):
    for args, expected in (([str(lab["dataset"]), "   "], "the text to trace is empty"),
                           ([str(tmp_path), "some text"], "neither a built dataset"),
                           ([str(lab["dataset"]), "x", "--min-tokens", "0"], "--min-tokens 0"),
                           ([str(lab["dataset"]), "x", "--max-prob", "0"], "--max-prob 0.0: expected")):
        assert cli_main(["trace", *args, "--lab", str(lab["lab"])]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
    moved = tmp_path / "moved"
    shutil.move(lab["dataset"], moved)
    try:
        assert cli_main(["trace", "tiny", "some text", "--lab", str(lab["lab"])]) == 2
        err = capsys.readouterr().err
        digest = json.loads((lab["run"] / "run.json").read_text())["dataset"]["manifest_hash"]
        assert err.count("\n") == 1 and f"dataset {digest[:16]}" in err and "gone" in err, err
    finally:
        shutil.move(moved, lab["dataset"])
