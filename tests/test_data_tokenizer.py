"""The byte-level BPE: exact round trips on any UTF-8, specials, and loading through transformers offline."""

from __future__ import annotations

import random

import pytest

from data_helpers import topic_texts
from glasslab.data.tokenizer import (
    EOT,
    SPECIAL_TOKENS,
    load_tokenizer,
    save_tokenizer,
    shard_encoder,
    train_tokenizer,
)

ODD_TEXTS = [
    "",
    " leading space and trailing  ",
    "e\u0301 vs \u00e9, \u212b, ﬁ ligature, Ａ full width",
    "emoji 🌍🏳️‍🌈 👩‍👩‍👧‍👦 flags 🇯🇵 skin 👍🏽",
    "中文 日本語 한국어 العربية עברית हिन्दी ไทย",
    "\u200b zero width \u200d joiner \ufeff bom \u2028 line sep \u0000 nul \x7f del",
    "tabs\t\tand\r\nCRLF\rCR\n\n\nblank",
    "surrogate-adjacent \ud7ff \ue000 \U0010ffff \U0001f600",
    f"specials in text {EOT} and <|pad|> and <|im_start|>user",
    "def f(x):\n    return x ** 2  # comment\n",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(topic_texts()[:40], vocab_size=600)


def test_roundtrip_exact_for_odd_and_random_unicode(tokenizer):
    encoder = shard_encoder(tokenizer)
    rng = random.Random(0)
    randoms = [
        "".join(
            chr(rng.choice([rng.randrange(32, 0xD800), rng.randrange(0xE000, 0x110000)]))
            for _ in range(rng.randrange(1, 60))
        )
        for _ in range(200)
    ]
    for text in ODD_TEXTS + randoms:
        ids = encoder.encode(text, add_special_tokens=False).ids
        assert encoder.decode(ids, skip_special_tokens=False) == text, repr(text)


def test_specials_and_vocab(tokenizer):
    assert tokenizer.get_vocab_size() == 600
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    # Inside shards, a document's literal "<|endoftext|>" is plain text, never the separator id.
    ids = shard_encoder(tokenizer).encode(f"a {EOT} b").ids
    assert tokenizer.token_to_id(EOT) not in ids
    # Trained merges compress English: well under one token per byte.
    text = topic_texts()[41]
    assert len(tokenizer.encode(text).ids) < 0.6 * len(text.encode())


def test_save_load_and_transformers_offline(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    folder = save_tokenizer(tokenizer, tmp_path / "tokenizer")
    assert {p.name for p in folder.iterdir()} == {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    loaded = load_tokenizer(tmp_path)
    sample = ODD_TEXTS[3] + ODD_TEXTS[4]
    assert loaded.encode(sample).ids == tokenizer.encode(sample).ids
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(folder))
    assert hf.eos_token == EOT and hf.eos_token_id == 0 and hf.pad_token == "<|pad|>"
    assert hf.encode(sample, add_special_tokens=False) == tokenizer.encode(sample).ids
    assert hf.decode(hf.encode(sample, add_special_tokens=False)) == sample
