"""Processing stages on small real text: normalise, quality filters, dedup, eval split, decontamination."""

from __future__ import annotations

import numpy as np

from data_helpers import topic_texts
from glasslab.data.config import DedupConfig, EvalSplitConfig, FilterConfig
from glasslab.data.decontaminate import Decontaminator, choose_eval, eval_count, split_key
from glasslab.data.dedup import ExactDedup, NearDedup
from glasslab.data.filters import FILTER_NAMES, first_failed_filter
from glasslab.data.normalize import normalize


def test_normalize_nfc_line_ends_and_blank_runs():
    decomposed = "Cafe\u0301\r\nline two   \r\n\n\n\n\n\n    indented\x00\t\n\n"
    assert normalize(decomposed) == "Caf\u00e9\nline two\n\n\n    indented"
    assert normalize("\n \n\t\n") == ""


def test_each_filter_drops_what_it_names_and_keeps_real_prose():
    cfg = FilterConfig()
    good = normalize(topic_texts()[3])
    assert first_failed_filter(good, cfg) is None
    bad = {
        "length": "too short to keep",
        "mean_word_length": " ".join(["a b c d e f g h"] * 20),
        "symbol_ratio": " ".join(["# heading words here and there"] * 20),
        "alpha_ratio": " ".join(f"{i + 1000} 4567.25 ---- 9999 word" for i in range(30)),
        "duplicate_lines": "\n".join(["the same line of text repeated over"] * 10 + [good[:400]]),
        "top_ngram": " ".join(["green apple"] * 30 + good.split()[:60]),
        "duplicate_ngrams": " ".join(good.split()[:40] * 2),
    }
    assert set(bad) == set(FILTER_NAMES)
    for name, text in bad.items():
        assert first_failed_filter(text, cfg) == name, name
        assert first_failed_filter(text, cfg, skip=(name,)) != name


def test_exact_and_near_dedup():
    texts = topic_texts()
    base = texts[5]
    words = base.split()
    near = " ".join(words[:-3] + ["changed", "ending", "here"])  # same text but the last few words
    exact = ExactDedup()
    assert exact.is_new(base) and not exact.is_new(base) and exact.is_new(near)
    index = NearDedup(DedupConfig(threshold=0.8))
    kept = [t for t in [base, near, texts[6], texts[7], base] if index.is_new(t)]
    assert kept == [base, texts[6], texts[7]]
    assert index.signature(base).jaccard(index.signature(near)) > 0.8
    assert index.signature(base).jaccard(index.signature(texts[6])) < 0.3


def test_eval_split_is_seeded_bounded_and_order_free():
    texts = topic_texts()
    sizes = np.array([len(t.encode()) for t in texts])
    cfg = EvalSplitConfig(fraction=0.1, min_documents=2, max_documents=5, min_bytes=0)
    keys = np.array([split_key(t, seed=0) for t in texts])
    mask = choose_eval(keys, sizes, cfg)
    assert mask.sum() == eval_count(len(texts), cfg) == min(max(round(0.1 * len(texts)), 2), 5)
    chosen = {t for t, m in zip(texts, mask, strict=True) if m}
    reversed_mask = choose_eval(keys[::-1].copy(), sizes[::-1].copy(), cfg)
    assert chosen == {t for t, m in zip(texts[::-1], reversed_mask, strict=True) if m}
    other_seed = choose_eval(np.array([split_key(t, seed=1) for t in texts]), sizes, cfg)
    assert not np.array_equal(mask, other_seed)
    assert eval_count(1, cfg) == 0  # a lone document stays in training


def test_eval_split_grows_to_min_bytes_within_max_documents():
    texts = topic_texts()
    sizes = np.array([len(t.encode()) for t in texts])
    keys = np.array([split_key(t, seed=0) for t in texts])
    cfg = EvalSplitConfig(fraction=0.01, min_documents=1, max_documents=40, min_bytes=30_000)
    mask = choose_eval(keys, sizes, cfg)
    held = sizes[mask].sum()
    last_added = np.flatnonzero(mask)[np.argmax(keys[mask])]  # held out in increasing key order
    assert held >= 30_000 > held - sizes[last_added] and mask.sum() > 1
    small_cap = choose_eval(
        keys, sizes, EvalSplitConfig(fraction=0.01, min_documents=1, max_documents=2, min_bytes=10**9)
    )
    assert small_cap.sum() == 2
    # The growing split keeps the documents the fraction alone picks.
    assert np.all(
        mask[choose_eval(keys, sizes, EvalSplitConfig(fraction=0.01, min_documents=1, min_bytes=0))]
    )


def test_decontamination_drops_training_text_that_quotes_eval():
    texts = topic_texts()
    held_out = texts[10]
    decontaminator = Decontaminator(ngram_words=13)
    decontaminator.add_eval(held_out)
    quote = " ".join(held_out.split()[40:53])  # exactly one 13-word span
    assert not decontaminator.is_clean(texts[11] + "\n" + quote + "\n" + texts[12])
    assert not decontaminator.is_clean(held_out)
    assert decontaminator.is_clean(texts[11])
    assert decontaminator.is_clean(" ".join(held_out.split()[40:52]))  # 12 words is below the bar
