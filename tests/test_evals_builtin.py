"""Built-in tasks: made from the held-out split, reproducible, and decontaminated against training shards."""

from __future__ import annotations

import numpy as np
import pytest

from glasslab.data.shards import open_shard, read_manifest
from glasslab.data.tokenizer import load_tokenizer
from glasslab.errors import UserError
from glasslab.evals import builtin as builtins
from glasslab.evals.builtin import NGRAM_TOKENS, TrainingNgrams, heldout_texts, make_builtin
from glasslab.evals.load import load_task
from glasslab.evals.task import Item, TaskConfig
from train_data import build_tiny_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return build_tiny_dataset(tmp_path_factory.mktemp("builtin"))


def _training_ngrams_naive(dataset) -> set[tuple[int, ...]]:
    manifest = read_manifest(dataset)
    grams = set()
    for domain in manifest["domains"]:
        ids = open_shard(dataset, domain, "train").tokens.tolist()
        grams.update(tuple(ids[i : i + NGRAM_TOKENS]) for i in range(len(ids) - NGRAM_TOKENS + 1))
    return grams


@pytest.mark.parametrize("name, domain", [("next_word", "code"), ("continuation", "prose"), ("docstring", "code")])
def test_builtin_items_come_from_held_out_text_and_none_answers_from_training(dataset, name, domain):
    builtins._made.cache_clear()
    made = make_builtin(str(dataset), name, domain)
    tokenizer = load_tokenizer(dataset)
    heldout = "\n".join(heldout_texts(str(dataset), domain, tokenizer, read_manifest(dataset)))
    assert len(made.items) >= (40 if name == "docstring" else 400)
    seen = _training_ngrams_naive(dataset)
    for item in made.items:
        assert len(item.choices) == 4 and len(set(item.choices)) == 4
        right = item.choices[item.answer]
        if name == "docstring":
            assert item.context.startswith("def ") and item.context.endswith(('"""', "'''")) and right in heldout
        else:
            assert item.context + right in heldout  # the context and its true continuation, verbatim
        # Decontaminated: no token 13-gram overlapping the answer occurs in the training shards.
        context = tokenizer.encode(item.context).ids
        ids = tokenizer.encode(item.context + right).ids
        for end in range(max(len(context), NGRAM_TOKENS), len(ids) + 1):
            assert tuple(ids[end - NGRAM_TOKENS : end]) not in seen
    task = load_task(TaskConfig(builtin=name, domain=domain), dataset)
    assert task.chance == 0.25 and task.name == f"{name}_{domain}" and task.target_delimiter == ""
    builtins._made.cache_clear()
    builtins.training_ngrams.cache_clear()
    assert load_task(TaskConfig(builtin=name, domain=domain), dataset).sha256 == task.sha256  # reproducible


def test_items_whose_answer_occurs_in_training_are_dropped_and_counted(dataset, monkeypatch):
    tokenizer = load_tokenizer(dataset)
    train_text = tokenizer.decode(open_shard(dataset, "code", "train").document(3).tolist())
    words = train_text.split(" ")
    leaked = Item(" ".join(words[10:40]), (" " + " ".join(words[40:50]), " a b", " c d", " e f"), 0)
    clean = Item("unseen context words", (" zq xv wk", " a b", " c d", " e f"), 0)
    seen = TrainingNgrams(str(dataset), read_manifest(dataset))
    assert seen.contains_answer(leaked, tokenizer) and not seen.contains_answer(clean, tokenizer)
    assert seen.contains(np.asarray(open_shard(dataset, "prose", "train").tokens[100:120]))

    monkeypatch.setitem(builtins.GENERATORS, "next_word", lambda texts, tok, rng: [leaked, clean, leaked])
    builtins._made.cache_clear()
    made = make_builtin(str(dataset), "next_word", "code")
    builtins._made.cache_clear()
    assert made.items == (clean,) and made.contaminated == 2
    task = load_task(TaskConfig(builtin="next_word", domain="code"), dataset)
    builtins._made.cache_clear()
    assert task.describe()["dropped"] == 2 and task.describe()["items"] == 1


def test_bad_builtin_names_and_domains_get_one_line(dataset):
    with pytest.raises(UserError, match="expected one of continuation, docstring, next_word"):
        load_task(TaskConfig(builtin="trivia"), dataset)
    with pytest.raises(UserError, match="domains code, prose; expected task.domain"):
        load_task(TaskConfig(builtin="next_word"), dataset)
    with pytest.raises(UserError, match="task.domain='web': expected one of"):
        load_task(TaskConfig(builtin="next_word", domain="web"), dataset)
    with pytest.raises(UserError, match="built-in tasks are made from a dataset"):
        load_task(TaskConfig(builtin="next_word", domain="code"))
