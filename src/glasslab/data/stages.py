"""The stages after dedup, as tasks: survivors and the eval split's candidates, eval n-gram counts, the
tokenizer, tokenization, and the shards' assembly.

Per read task, in order: **survivors** (the task's documents inside its source's cap, less exact and
near duplicates; the funnel up to there; its smallest eval split keys) → **n-grams** (how many
surviving training documents hold each eval n-gram) → **tokenize** (the final training and eval
documents into token pieces with their provenance, and which eval tokens the held-out loss counts).
Between them the driver makes the whole-corpus choices from small inputs: the eval documents (the
smallest split keys of each domain), the eval n-grams training holds too, the tokenizer (one task, on
the first training bytes of each domain in canonical order). **assemble** concatenates each domain's
pieces in canonical order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glasslab.data.decontaminate import EvalNgrams, scored_tokens, text_ngrams
from glasslab.data.dedup_stages import task_folder
from glasslab.data.docstore import TaskDocuments, local_of
from glasslab.data.filters import ALL_FILTER_NAMES
from glasslab.data.inputs import KEY_BITS
from glasslab.data.shards import SPLITS, token_dtype
from glasslab.layout import TOKEN_SHARD_SUFFIX, file_sha256

CANDIDATE = np.dtype([("split_key", "<u8"), ("size", "<u8"), ("key", "<i8")])
PROVENANCE = np.dtype([("ref", "<u4"), ("position", "<u8")])
"""Per document in a shard: which entry of ``shards/refs.jsonl`` it came from, and its line, row or record
(0 for a whole file or module): 12 bytes a document."""
ENCODE_CHARS = 1 << 20
"""Text encoded in one batch by a tokenize task."""


def _removed_here(files: tuple[str, ...], task: int) -> np.ndarray:
    """Local indices of ``task``'s documents among the sorted keys in ``files``."""
    low, high = task << KEY_BITS, (task + 1) << KEY_BITS
    found = []
    for name in files:
        keys = np.load(name, mmap_mode="r")
        found.append(np.asarray(keys[np.searchsorted(keys, low) : np.searchsorted(keys, high)]))
    return local_of(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class SurvivorArgs:
    work: Path
    task: int
    raw_limit: int
    """Raw documents of the task inside its source's cap."""
    filters: tuple[str, ...]
    """The funnel's filter stages, in order."""
    exact_removed: tuple[str, ...]
    near_removed: tuple[str, ...]
    candidates: int
    """Smallest split keys handed to the eval split (its ``max_documents``)."""


def survivor_stage(args: SurvivorArgs, folder: Path) -> dict:
    """The task's documents left after dedup (``keep.npy``), the funnel up to there, and eval candidates."""
    read = task_folder(args.work, "read", args.task)
    store = TaskDocuments(read)
    raw = np.load(read / "raw.npy")[: args.raw_limit]
    limit = store.kept_limit(args.raw_limit)
    sizes = store.sizes()[:limit]
    exact = np.unique(_removed_here(args.exact_removed, args.task))
    near = np.setdiff1d(_removed_here(args.near_removed, args.task), exact)
    exact, near = exact[exact < limit], near[near < limit]
    alive = np.ones(limit, dtype=bool)
    alive[exact] = False
    after_exact = (int(alive.sum()), int(sizes[alive].sum()))
    alive[near] = False
    keep = np.flatnonzero(alive)
    np.save(folder / "keep.npy", keep)
    funnel = {"raw": (len(raw), int(raw["bytes"].sum()))}
    nonempty = raw["outcome"] != 0
    funnel["normalized"] = (int(nonempty.sum()), int(raw["normalized"][nonempty].sum()))
    # a document is still there after filter j unless it was dropped by filter j or an earlier one
    stage_of = np.full(256, len(args.filters), dtype=np.int64)  # KEPT: past every filter
    for j, name in enumerate(args.filters):
        stage_of[1 + ALL_FILTER_NAMES.index(name)] = j
    dropped_at = stage_of[raw["outcome"]]
    for j, name in enumerate(args.filters):
        left = nonempty & (dropped_at > j)
        funnel[f"filter:{name}"] = (int(left.sum()), int(raw["normalized"][left].sum()))
    funnel["exact_dedup"] = after_exact
    funnel["near_dedup"] = (len(keep), int(sizes[keep].sum()))
    drops = {name: int(np.sum(dropped_at[nonempty] == j)) for j, name in enumerate(args.filters)}
    order = np.lexsort((keep, np.asarray(store.docs["split_key"])[keep]))[: args.candidates]
    chosen = keep[order]
    candidates = np.zeros(len(chosen), dtype=CANDIDATE)
    candidates["split_key"] = store.docs["split_key"][chosen]
    candidates["size"] = sizes[chosen]
    candidates["key"] = (args.task << KEY_BITS) + chosen
    np.save(folder / "candidates.npy", candidates)
    return {"documents_in": limit, "documents_kept": len(keep), "funnel": funnel, "filters": drops}


@dataclass(frozen=True)
class NgramArgs:
    work: Path
    task: int
    ngram_words: int


def ngram_stage(args: NgramArgs, folder: Path) -> dict:
    """How many of the task's surviving training documents hold each eval n-gram (``counts.npy``); the
    training documents are all kept."""
    eval_ngrams = EvalNgrams(np.load(args.work / "eval" / "ngrams.npy"))
    store = TaskDocuments(task_folder(args.work, "read", args.task))
    train = np.setdiff1d(_keep(args.work, args.task), _eval_here(args.work, args.task))
    counts = np.zeros(len(eval_ngrams), dtype=np.int64)
    sharing = 0
    if len(eval_ngrams):
        for local in train.tolist():
            found = eval_ngrams.hits(text_ngrams(store.text(local).split(), args.ngram_words))
            counts[found] += 1
            sharing += bool(len(found))
    np.save(folder / "counts.npy", counts)
    return {"documents_in": len(train), "documents_kept": len(train), "sharing": sharing}


def _keep(work: Path, task: int) -> np.ndarray:
    return np.load(task_folder(work, "survivors", task) / "keep.npy")


def _eval_here(work: Path, task: int) -> np.ndarray:
    return _removed_here((str(work / "eval" / "keys.npy"),), task)


def final_documents(work: Path, task: int) -> tuple[np.ndarray, np.ndarray]:
    """Local indices of the task's training and eval documents, in canonical order: the survivors, the eval
    ones apart. No training document is dropped for sharing text with the eval split: the eval split's
    tokens inside such text are left out of its loss instead (:func:`~glasslab.data.decontaminate.scored_tokens`)."""
    keep, held_out = _keep(work, task), _eval_here(work, task)
    return np.setdiff1d(keep, held_out), held_out


@dataclass(frozen=True)
class TokenizerArgs:
    work: Path
    domains: tuple[tuple[str, tuple[int, ...]], ...]
    """Each domain and its read tasks in canonical order."""
    sample_bytes: int
    vocab_size: int
    min_frequency: int


def tokenizer_stage(args: TokenizerArgs, folder: Path) -> dict:
    """Train the BPE on the first ``sample_bytes / domains`` bytes of each domain's training text (in
    canonical order) and save it in ``folder/tokenizer``."""
    from glasslab.data.tokenizer import TOKENIZER_DIR, save_tokenizer, train_tokenizer

    taken = {"documents": 0, "bytes": 0}

    def sample():
        per_domain = args.sample_bytes // len(args.domains)
        for _, tasks in args.domains:
            held = 0
            for task in tasks:
                store = TaskDocuments(task_folder(args.work, "read", task))
                for local in final_documents(args.work, task)[0].tolist():
                    if held >= per_domain:
                        break
                    text = store.text(local)
                    held += len(text.encode("utf-8", "surrogatepass"))
                    taken["documents"] += 1
                    yield text
                if held >= per_domain:
                    break
            taken["bytes"] += held

    tokenizer = train_tokenizer(sample(), args.vocab_size, args.min_frequency)
    save_tokenizer(tokenizer, folder / TOKENIZER_DIR)
    return {"documents_in": taken["documents"], "documents_kept": taken["documents"], "bytes": taken["bytes"]}


@dataclass(frozen=True)
class TokenizeArgs:
    work: Path
    task: int
    tokenizer: Path
    """The tokenizer.json to encode with."""
    line_base: int
    """Lines of the task's file before its byte range (JSONL ranges), added to its positions."""
    ngram_words: int
    """Words per n-gram of the overlap between the eval split and training."""


_encoders: dict[str, object] = {}


def _encoder(path: Path):
    from tokenizers import Tokenizer

    if str(path) not in _encoders:
        # One process per core already; the tokenizer's own threads would only compete with the others.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.encode_special_tokens = True  # "<|endoftext|>" inside a document stays text
        _encoders[str(path)] = tokenizer
    return _encoders[str(path)]


def _encode_documents(tokenizer, texts: list[str], out, shared: EvalNgrams | None, n: int) -> tuple[list, list]:
    """Write the ids of ``texts`` (each followed by ``<|endoftext|>``) to ``out``; returns tokens per text and,
    when ``shared`` is given (the eval split), which tokens its loss counts (:func:`scored_tokens`; the
    end-of-text id always counts)."""
    eot = tokenizer.token_to_id("<|endoftext|>")
    dtype = token_dtype(tokenizer.get_vocab_size())
    lengths, scored = [], []
    # offsets cost time, and only the eval split (a few hundred documents a domain) needs them
    encode = tokenizer.encode_batch if shared is not None else tokenizer.encode_batch_fast
    for text, encoding in zip(texts, encode(texts, add_special_tokens=False), strict=True):
        ids = np.array(encoding.ids + [eot], dtype=dtype)
        out.write(ids.tobytes())
        lengths.append(len(ids))
        if shared is not None:
            scored.append(np.append(scored_tokens(text, encoding.offsets, shared, n), True))
    return lengths, scored


def tokenize_stage(args: TokenizeArgs, folder: Path) -> dict:
    """Encode the task's final training and eval documents into ``<split>.bin`` (ids, each document followed by
    ``<|endoftext|>``), ``<split>.len.npy`` (tokens per document), ``<split>.prov.npy`` (:data:`PROVENANCE`)
    and, for the eval split, ``eval.scored.npy`` (bool per token: counted by the held-out loss)."""
    tokenizer = _encoder(args.tokenizer)
    store = TaskDocuments(task_folder(args.work, "read", args.task))
    shared = EvalNgrams(np.load(args.work / "eval" / "shared.npy"))
    result: dict = {"splits": {}}
    for split, locals_ in zip(SPLITS, final_documents(args.work, args.task), strict=True):
        lengths, scored, nbytes = [], [], 0
        with open(folder / f"{split}{TOKEN_SHARD_SUFFIX}", "wb") as out:
            batch: list[str] = []
            size = 0
            for local in [*locals_.tolist(), None]:
                if local is not None:
                    batch.append(store.text(local))
                    size += len(batch[-1])
                if batch and (local is None or size >= ENCODE_CHARS):
                    counts, marks = _encode_documents(tokenizer, batch, out, shared if split == "eval" else None,
                                                      args.ngram_words)
                    lengths += counts
                    scored += marks
                    nbytes += sum(len(t.encode("utf-8", "surrogatepass")) for t in batch)
                    batch, size = [], 0
        np.save(folder / f"{split}.len.npy", np.array(lengths, dtype=np.int64))
        if split == "eval":
            np.save(folder / "eval.scored.npy", np.concatenate(scored) if scored else np.zeros(0, dtype=bool))
        provenance = np.zeros(len(locals_), dtype=PROVENANCE)
        provenance["ref"] = store.docs["ref"][locals_]
        positions = np.asarray(store.docs["position"][locals_], dtype=np.uint64)
        provenance["position"] = positions + np.uint64(args.line_base)
        np.save(folder / f"{split}.prov.npy", provenance)
        result["splits"][split] = {"documents": len(locals_), "tokens": int(sum(lengths)), "bytes": nbytes}
    documents = sum(s["documents"] for s in result["splits"].values())
    kept_bytes = sum(s["bytes"] for s in result["splits"].values())
    result.update(documents_in=documents, documents_kept=documents, bytes=kept_bytes)
    return result


@dataclass(frozen=True)
class AssembleArgs:
    work: Path
    split: str
    pieces: tuple[tuple[int, tuple[int, ...]], ...]
    """(tokenize task, its global reference ids by local reference id), in canonical order."""
    dtype: str


def assemble_stage(args: AssembleArgs, folder: Path) -> dict:
    """One domain's split: the pieces back to back into ``tokens.bin``, document ends (``ends.npy``),
    provenance (``prov.npy``) and, for the eval split, the tokens its loss counts (``scored.npy``), with
    their sha256."""
    ends, provenance, scored, total = [], [], [], 0
    with open(folder / "tokens.bin", "wb") as out:
        for task, refs in args.pieces:
            piece = task_folder(args.work, "tokenize", task)
            with open(piece / f"{args.split}{TOKEN_SHARD_SUFFIX}", "rb") as handle:
                while chunk := handle.read(1 << 24):
                    out.write(chunk)
            lengths = np.load(piece / f"{args.split}.len.npy")
            ends.append(np.cumsum(lengths) + total)
            total += int(lengths.sum())
            records = np.load(piece / f"{args.split}.prov.npy")
            records["ref"] = np.asarray(refs, dtype=np.int64)[records["ref"]] if len(records) else records["ref"]
            provenance.append(records)
            if args.split == "eval":
                scored.append(np.load(piece / "eval.scored.npy"))
    np.save(folder / "ends.npy", np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64))
    np.save(folder / "prov.npy", np.concatenate(provenance) if provenance else np.zeros(0, dtype=PROVENANCE))
    names = ["tokens.bin", "ends.npy", "prov.npy"]
    if args.split == "eval":
        np.save(folder / "scored.npy", np.concatenate(scored) if scored else np.zeros(0, dtype=bool))
        names.append("scored.npy")
    documents = int(sum(len(e) for e in ends))
    return {"documents_in": documents, "documents_kept": documents, "tokens": total,
            "scored_tokens": int(sum(int(m.sum()) for m in scored)) if scored else total,
            "sha256": {name: file_sha256(folder / name) for name in names}}
