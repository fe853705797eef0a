"""The held-out split is made clean by leaving text that training holds out of its loss, not by dropping
training documents: a synthetic corpus where every document shares a rare 15-word passage with its
neighbour, built for real."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil

import numpy as np
import pytest
import torch
from torch import nn

from data_helpers import write_jsonl
from glasslab.data.build import build_dataset
from glasslab.data.config import BuildConfig, EvalSplitConfig, SourceConfig, TokenizerConfig
from glasslab.data.decontaminate import EvalNgrams, scored_tokens, text_ngrams
from glasslab.data.loader import eval_batches
from glasslab.data.shards import open_shard
from glasslab.data.tokenizer import load_tokenizer
from glasslab.observatory.data_page import warnings
from glasslab.train.evals import heldout_loss

NUM_DOCUMENTS, DUPLICATES = 60, 12


def _words(rng: np.random.Generator, count: int, prefix: str = "") -> str:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return " ".join(prefix + "".join(rng.choice(letters, size=rng.integers(3, 8))) for _ in range(count))


def _corpus() -> tuple[list[str], list[str]]:
    """Documents of seeded pseudo-words; document i quotes passage i and passage i+1 (15 words each), so each
    passage is in exactly two documents; the first DUPLICATES documents appear twice (exact dedup takes them:
    over 10% of the domain)."""
    rng = np.random.default_rng(7)
    passages = [_words(rng, 15, "q") for _ in range(NUM_DOCUMENTS)]
    texts = [f"{_words(rng, 60)}\n{passages[i]}\n{_words(rng, 60)}\n{passages[(i + 1) % NUM_DOCUMENTS]}\n"
             f"{_words(rng, 40)}" for i in range(NUM_DOCUMENTS)]
    return texts + texts[:DUPLICATES], passages


@pytest.fixture(scope="module")
def quoted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("heldout")
    texts, passages = _corpus()
    cfg = BuildConfig(sources=(SourceConfig(domain="prose", kind="jsonl",
                                            path=str(write_jsonl(tmp / "corpus.jsonl", texts))),),
                      eval=EvalSplitConfig(fraction=0.1, min_documents=6, min_bytes=0),
                      tokenizer=TokenizerConfig(vocab_size=400), num_workers=1)
    console = io.StringIO()
    with contextlib.redirect_stderr(console):
        build_dataset(cfg, tmp / "ds", progress=True)
    return tmp / "ds", passages, console.getvalue()


def _documents(ds, split: str, tokenizer) -> list[str]:
    shard = open_shard(ds, "prose", split)
    return [tokenizer.decode(shard.document(i)[:-1].tolist(), skip_special_tokens=False)
            for i in range(len(shard.ends))]


def test_no_training_document_is_dropped_and_no_scored_token_is_in_training_text(quoted):
    ds, passages, console = quoted
    manifest = json.loads((ds / "manifest.json").read_text())
    tokenizer = load_tokenizer(ds)
    train, held_out = _documents(ds, "train", tokenizer), _documents(ds, "eval", tokenizer)
    assert len(train) + len(held_out) == NUM_DOCUMENTS and len(held_out) == 6
    in_training = [p for p in passages if any(p in t for t in train)]
    shard = open_shard(ds, "prose", "eval")
    masked = 0
    for i, text in enumerate(held_out):
        encoding = tokenizer.encode(text, add_special_tokens=False)
        scored = np.asarray(shard.scored[int(shard.ends[i - 1]) if i else 0 : int(shard.ends[i])])
        assert encoding.ids == shard.document(i)[:-1].tolist() and scored[-1]  # the end-of-text id counts
        covered = np.zeros(len(text) + 1, dtype=bool)
        for passage in in_training:
            for found in re.finditer(re.escape(passage), text):
                covered[found.start() : found.end()] = True
        expected = [not covered[start:end].any() for start, end in encoding.offsets]
        assert scored[:-1].tolist() == expected, i
        masked += len(expected) - sum(expected)
    assert masked > 0
    entry = manifest["domains"]["prose"]["eval"]
    assert manifest["format"] == "glasslab-dataset/3" and entry["scored_tokens"] == int(shard.scored.sum())
    report = json.loads((ds / "report.json").read_text())
    composition = report["domains"]["prose"]["heldout"]
    assert composition["document_share"] == pytest.approx(6 / NUM_DOCUMENTS)
    assert composition["scored_share"] == pytest.approx(entry["scored_tokens"] / entry["tokens"])
    assert 0.5 < composition["scored_share"] < 0.95  # two of about 15 lines a document quote training
    # exact dedup took 12 of 72 documents: said on the console, in the report and on the data page
    removal = "prose: exact_dedup removed 17% of its documents (12 of 72)"
    assert f"warning: {removal}" in console
    assert [r["stage"] for r in report["large_removals"]] == ["exact_dedup"]
    page = warnings(report, [])
    assert [w["kind"] for w in page] == ["large_removal"] and page[0]["text"].startswith(removal)


def test_scored_tokens_leave_out_exactly_the_shared_words():
    rng = np.random.default_rng(3)
    shared_text = _words(rng, 14)
    text = f"{_words(rng, 20)}  {shared_text}\n{_words(rng, 5)}"
    words = shared_text.split()
    shared = EvalNgrams(np.sort(text_ngrams(words, 13)))
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\S", text)]  # one token a character
    scored = scored_tokens(text, offsets, shared, 13)
    start = text.index(shared_text)
    expected = [not (start <= a < start + len(shared_text)) for a, _ in offsets]
    assert scored.tolist() == expected
    assert scored_tokens("too short", [(0, 3), (4, 9)], EvalNgrams(text_ngrams(["too", "short"], 13)), 13).tolist() \
        == [False, False]


class _Bigram(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.logits = nn.Embedding(vocab, vocab)

    def forward(self, tokens):
        return self.logits(tokens)


def test_heldout_loss_counts_only_scored_targets_and_an_old_dataset_counts_all(quoted, tmp_path):
    ds, _, _ = quoted
    torch.manual_seed(0)
    model = _Bigram(load_tokenizer(ds).get_vocab_size())
    batches = list(eval_batches(ds, "prose", seq_len=31, batch_size=4))
    tokens = torch.cat([b for b, _ in batches])
    scored = torch.cat([s for _, s in batches])[:, 1:]
    losses = nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten(),
                                         reduction="none")
    assert 0 < scored.sum() < scored.numel()
    assert heldout_loss(model, batches, torch.device("cpu")) == pytest.approx(
        losses[scored.flatten()].mean().item(), rel=1e-5)
    # A glasslab-dataset/2 folder (no flags) is still read: every held-out token counts, as before.
    old = tmp_path / "old"
    shutil.copytree(ds, old)
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["format"] = "glasslab-dataset/2"
    for splits in manifest["domains"].values():
        for entry in splits.values():
            entry.pop("scored", None)
            entry.pop("scored_sha256", None)
            entry.pop("scored_tokens", None)
    (old / "manifest.json").write_text(json.dumps(manifest))
    old_batches = list(eval_batches(old, "prose", seq_len=31, batch_size=4))
    assert all(s.all() for _, s in old_batches)
    assert heldout_loss(model, old_batches, torch.device("cpu")) == pytest.approx(losses.mean().item(), rel=1e-5)
