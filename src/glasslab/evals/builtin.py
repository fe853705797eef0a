"""Built-in tasks, made from a dataset's held-out documents and checked against its training shards.

Every built-in task is a pure function of the dataset (its eval split, tokenizer and training shards,
all pinned by the manifest's sha256) and of this module's ``GENERATOR_VERSION``: items are drawn with
a fixed seed, so a run, a ladder and ``glasslab eval`` rebuild the same items, and the task's
sha256 (in ``run.json``) says which questions were asked. Three kinds:

- ``next_word`` (any domain): which word comes next? Context: the 24 tokens before a word that
  follows a space; choices: that word and three other words drawn from the word occurrences of the
  same domain's held-out text, so the distractors are as frequent as the answer on average and only
  the context tells them apart. On code this is "which keyword or identifier completes the line".
- ``continuation`` (any domain): which of four 8-token continuations is the real one? Distractors
  are continuations that follow other contexts of the same domain, cut at the same kind of boundary.
- ``docstring`` (a domain of Python source): which docstring belongs to this function signature?
  Context: ``def name(args):`` and the opening quotes; choices: first docstring lines of functions.

Contexts end just before a word that starts with a space, which is a pre-token boundary of the
byte-level BPE: the context's tokens are then a prefix of the context-plus-answer's tokens, and the
delimiter is empty (each choice brings its own leading space).

Decontamination: the build keeps training documents that share text with held-out ones and flags the
held-out tokens inside a word 13-gram that training holds (``eval.scored.npy``); ``next_word`` and
``continuation`` answers are drawn only where every answer token is flagged as scored. A short answer
can still appear verbatim in training text (boilerplate code): an item whose answer sits inside a
token 13-gram that also occurs in the training shards is dropped, and the number dropped is reported
with the task.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from glasslab.data.handle import DatasetHandle, as_dataset
from glasslab.data.shards import open_shard
from glasslab.data.tokenizer import load_tokenizer
from glasslab.errors import UserError
from glasslab.evals.task import Item

GENERATOR_VERSION = 2
"""Bumped whenever a generator's output for the same dataset changes."""
NUM_ITEMS = 600
"""Items drawn per task before decontamination (the demo needs at least 500 left)."""
NUM_CHOICES = 4
CONTEXT_TOKENS = 24
"""Tokens of context before the answer: short enough to fit the quick demo's 32-token sequences."""
CONTINUATION_TOKENS = 8
MAX_CONTINUATION_TOKENS = 12
"""A continuation ends at the first word boundary from CONTINUATION_TOKENS tokens on, and no later than this."""
NGRAM_TOKENS = 13
"""An answer inside a token n-gram of this length seen in training makes its item contaminated."""
SEED = 1234
WORD = re.compile(r"(?<= )[A-Za-z_][A-Za-z0-9_]*")
"""A word preceded by a space (its space is the start of a BPE pre-token)."""


@dataclass(frozen=True)
class BuiltinTask:
    """A built-in task's items and what was dropped making them."""

    name: str
    domain: str
    items: tuple[Item, ...]
    contaminated: int
    """Candidate items dropped because their answer occurs in the training shards."""
    source: str


def builtin_names() -> list[str]:
    return sorted(GENERATORS)


def make_builtin(dataset: str | Path | DatasetHandle, builtin: str, domain: str = "") -> BuiltinTask:
    """Build built-in task ``builtin`` from ``domain`` of the dataset (the only domain when empty)."""
    dataset = as_dataset(dataset)
    return _made(dataset, builtin, resolve_domain(dataset, builtin, domain))


def resolve_domain(dataset: str | Path | DatasetHandle, builtin: str, domain: str = "") -> str:
    """The domain built-in ``builtin`` is made from; a one-line error for an unknown name or domain."""
    if builtin not in GENERATORS:
        raise UserError(f"task.builtin={builtin!r}: expected one of {', '.join(builtin_names())}")
    domains = sorted(as_dataset(dataset).domains)
    if not domain:
        if len(domains) != 1:
            raise UserError(f"task.builtin={builtin!r}: the dataset has domains {', '.join(domains)}; "
                            "expected task.domain to say which one")
        domain = domains[0]
    if domain not in domains:
        raise UserError(f"task.domain={domain!r}: expected one of the dataset's domains {', '.join(domains)}")
    return domain


@functools.lru_cache(maxsize=16)
def _made(dataset: DatasetHandle, builtin: str, domain: str) -> BuiltinTask:
    """Make a built-in task once per process (the run record and the evaluator ask for the same one)."""
    dataset_dir, manifest, manifest_sha256 = str(dataset.path), dataset.manifest, dataset.manifest_hash
    tokenizer = load_tokenizer(dataset_dir)
    held_out = HeldOut(heldout_texts(dataset_dir, domain, tokenizer, manifest),
                       heldout_scored(dataset_dir, domain, manifest))
    rng = np.random.default_rng([SEED, GENERATOR_VERSION, zlib.crc32(builtin.encode()), zlib.crc32(domain.encode())])
    candidates = GENERATORS[builtin](held_out, tokenizer, rng)
    if not candidates:
        raise UserError(f"task {builtin} on domain {domain!r}: the held-out split has nothing to ask "
                        f"(expected {'Python functions with docstrings' if builtin == 'docstring' else 'words'})")
    seen = training_ngrams(dataset)
    items = tuple(item for item in candidates if not seen.contains_answer(item, tokenizer))
    source = f"builtin:{builtin} v{GENERATOR_VERSION} of {domain} in dataset {manifest_sha256[:16]}"
    return BuiltinTask(builtin, domain, items, len(candidates) - len(items), source)


@functools.lru_cache(maxsize=2)
def training_ngrams(dataset: DatasetHandle) -> TrainingNgrams:
    """The dataset's :class:`TrainingNgrams`, built once per process (its folder and manifest hash key the cache)."""
    return TrainingNgrams(str(dataset.path), dataset.manifest)


def heldout_texts(dataset_dir: str, domain: str, tokenizer: Tokenizer, manifest: dict) -> list[str]:
    """The held-out documents of ``domain`` as text (the eval shard decoded, one string each)."""
    shard = open_shard(dataset_dir, domain, "eval", manifest)
    return tokenizer.decode_batch([shard.document(i).tolist() for i in range(len(shard.ends))])


def heldout_scored(dataset_dir: str, domain: str, manifest: dict) -> list[np.ndarray | None]:
    """Per held-out document of ``domain``, which of its tokens a held-out loss counts (None: all, in a
    dataset built without the flags)."""
    shard = open_shard(dataset_dir, domain, "eval", manifest)
    if shard.scored is None:
        return [None] * len(shard.ends)
    starts = np.concatenate([[0], shard.ends[:-1]])
    return [np.asarray(shard.scored[int(a) : int(b)]) for a, b in zip(starts, shard.ends, strict=True)]


@dataclass(frozen=True)
class HeldOut:
    """A domain's held-out documents as text, and which tokens of each are clean to ask about."""

    texts: list[str]
    scored: list[np.ndarray | None]


class TrainingNgrams:
    """Every token n-gram of the training shards (all domains) as sorted 64-bit hashes."""

    def __init__(self, dataset_dir: str, manifest: dict, n: int = NGRAM_TOKENS) -> None:
        self.n = n
        hashes = [_ngram_hashes(np.asarray(open_shard(dataset_dir, d, "train", manifest).tokens), n)
                  for d in sorted(manifest["domains"])]
        self.hashes = np.unique(np.concatenate(hashes)) if hashes else np.zeros(0, np.uint64)

    def contains(self, ids: np.ndarray) -> bool:
        """Whether any n-gram of ``ids`` occurs in training (never, for fewer than n ids)."""
        found = _ngram_hashes(np.asarray(ids), self.n)
        if not len(found) or not len(self.hashes):
            return False
        positions = np.minimum(np.searchsorted(self.hashes, found), len(self.hashes) - 1)
        return bool(np.any(self.hashes[positions] == found))

    def contains_answer(self, item: Item, tokenizer: Tokenizer) -> bool:
        """Whether an n-gram overlapping the item's right answer (after its context) occurs in training."""
        context = tokenizer.encode(item.context, add_special_tokens=False).ids
        answer = tokenizer.encode(item.context + item.choices[item.answer], add_special_tokens=False).ids
        start = max(0, len(context) - self.n + 1)
        return self.contains(np.asarray(answer[start:], dtype=np.int64))


def _ngram_hashes(ids: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit polynomial hash of every window of ``n`` ids (wrapping uint64 arithmetic)."""
    if len(ids) < n or n == 0:
        return np.zeros(0, np.uint64)
    ids = ids.astype(np.uint64) + np.uint64(1)
    base = np.uint64(1_000_003)
    out = np.zeros(len(ids) - n + 1, np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            out = out * base + ids[j : len(ids) - n + 1 + j]
    return out


# --- generators: texts → candidate items (before decontamination) ----------------------------------


def _draw_positions(held_out: HeldOut, tokenizer: Tokenizer, rng: np.random.Generator, need_after: int = 0,
                    ) -> list[tuple[int, int, int, int]]:
    """Up to NUM_ITEMS (document, context start, answer start, answer end) character positions, in
    document order, drawn from every place a word follows a space with CONTEXT_TOKENS tokens before it
    and whose answer tokens are all scored (none inside text that training holds).

    The answer starts at that space. With ``need_after`` it runs at least that many tokens on, to the
    next such space (whole words, at most MAX_CONTINUATION_TOKENS tokens); without, it is the one word.
    """
    found = []
    for d, (text, scored) in enumerate(zip(held_out.texts, held_out.scored, strict=True)):
        token_starts = np.array([start for start, _ in tokenizer.encode(text, add_special_tokens=False).offsets])
        words = list(WORD.finditer(text))
        spaces = np.array([m.start() - 1 for m in words], dtype=np.int64)
        if not len(spaces):
            continue
        token = np.searchsorted(token_starts, spaces)
        ok = token >= CONTEXT_TOKENS
        if need_after:
            ok &= token + need_after < len(token_starts)
            after = np.searchsorted(spaces, token_starts[np.minimum(token + need_after, len(token_starts) - 1)])
            ok &= after < len(spaces)
            ends = spaces[np.minimum(after, len(spaces) - 1)]
            last = token_starts[np.minimum(token + MAX_CONTINUATION_TOKENS, len(token_starts) - 1)]
            ok &= ends <= last
        else:
            ends = np.array([m.end() for m in words], dtype=np.int64)
        if scored is not None:  # the decoded text encodes back to the shard's ids, so token k is scored[k]
            unscored = np.concatenate([[0], np.cumsum(~scored[: len(token_starts)])])
            last_token = np.searchsorted(token_starts, ends, side="left")
            ok &= unscored[np.minimum(last_token, len(token_starts))] == unscored[np.minimum(token, len(token_starts))]
        for i in np.flatnonzero(ok):
            # A span's trailing whitespace (the next line's indentation) is not part of the answer.
            end = spaces[i] + 1 + len(text[spaces[i] + 1 : ends[i]].rstrip())
            found.append((d, int(token_starts[token[i] - CONTEXT_TOKENS]), int(spaces[i]), int(end)))
    if len(found) > NUM_ITEMS:
        chosen = rng.choice(len(found), NUM_ITEMS, replace=False)
        found = [found[i] for i in sorted(chosen)]
    return found


def _distractors(answer: str, pool: list[str], rng: np.random.Generator) -> list[str] | None:
    """NUM_CHOICES − 1 distinct strings from ``pool`` (drawn by occurrence), none equal to the answer."""
    picked: list[str] = []
    for _ in range(50 * NUM_CHOICES):
        candidate = pool[int(rng.integers(len(pool)))]
        if candidate != answer and candidate not in picked:
            picked.append(candidate)
            if len(picked) == NUM_CHOICES - 1:
                return picked
    return None


def _item(context: str, answer: str, distractors: list[str], rng: np.random.Generator) -> Item:
    slot = int(rng.integers(NUM_CHOICES))
    choices = list(distractors)
    choices.insert(slot, answer)
    return Item(context, tuple(choices), slot)


def next_word_items(held_out: HeldOut, tokenizer: Tokenizer, rng: np.random.Generator) -> list[Item]:
    """Which word follows the context (distractors: other word occurrences of the domain)."""
    texts = held_out.texts
    pool = [" " + m.group() for text in texts for m in WORD.finditer(text)]
    items = []
    for d, start, at, end in _draw_positions(held_out, tokenizer, rng):
        answer = texts[d][at:end]
        distractors = _distractors(answer, pool, rng)
        if distractors is not None:
            items.append(_item(texts[d][start:at], answer, distractors, rng))
    return items


def continuation_items(held_out: HeldOut, tokenizer: Tokenizer, rng: np.random.Generator) -> list[Item]:
    """Which CONTINUATION_TOKENS-token span follows the context (distractors: spans after other contexts)."""
    texts = held_out.texts
    positions = _draw_positions(held_out, tokenizer, rng, need_after=CONTINUATION_TOKENS)
    pool = [texts[d][at:end] for d, _, at, end in positions]
    items = []
    for d, start, at, end in positions:
        answer = texts[d][at:end]
        distractors = _distractors(answer, pool, rng)
        if distractors is not None:
            items.append(_item(texts[d][start:at], answer, distractors, rng))
    return items


def docstring_items(held_out: HeldOut, tokenizer: Tokenizer, rng: np.random.Generator) -> list[Item]:
    """Which first docstring line belongs to this ``def`` (distractors: other functions' first lines; only the
    token n-gram check keeps training text out of these)."""
    pairs = [pair for text in held_out.texts for pair in _signatures_and_docstrings(text)]
    if len(pairs) > NUM_ITEMS:
        pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), NUM_ITEMS, replace=False))]
    pool = [line for _, line in pairs]
    items = []
    for signature, line in pairs:
        distractors = _distractors(line, pool, rng)
        if distractors is not None:
            items.append(_item(signature, line, distractors, rng))
    return items


def _signatures_and_docstrings(source: str) -> list[tuple[str, str]]:
    """(``def …:`` up to and including the docstring's opening quotes, dedented; first docstring line)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines(keepends=True)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
            continue
        doc = node.body[0]
        if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)):
            continue
        first = doc.value.value.strip().split("\n", 1)[0].strip()
        opening = lines[doc.lineno - 1][: doc.col_offset + 3] if doc.lineno <= len(lines) else ""
        if len(first.split()) < 3 or not opening.endswith(('"""', "'''")):
            continue
        signature = textwrap.dedent("".join(lines[node.lineno - 1 : doc.lineno - 1]) + opening)
        found.append((signature, first))
    return found


GENERATORS: dict[str, Callable[[HeldOut, Tokenizer, np.random.Generator], list[Item]]] = {
    "next_word": next_word_items,
    "continuation": continuation_items,
    "docstring": docstring_items,
}
