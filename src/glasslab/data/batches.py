"""The batch of any training step, rebuilt: the documents the model read, checked against what it trained on.

The loader's position is not a function of the step alone: per-domain cursors accumulate over earlier
draws, epoch caps drop domains, a rollback skips the windows that spiked, a fork may change the batch.
So the trainer records two things in the run store (``track/store.py``):

- ``loader_starts``: as each attempt begins (a fresh start, a resume from a checkpoint, a rollback after
  its skip, a fork with its changed batch), the loader's state (step and per-domain cursors, a few
  integers) and the world size;
- ``batches``: every step, a hash of the tokens rank 0 read (:func:`batch_hash`: blake2b-128 of the
  int64 rows and their shape, as text).

:func:`rebuild_batch` takes the attempt in force at the step (the latest that trained it) or the one
asked for, replays that attempt's draws from its start with the run's data config (the draws need no
tokens: each is a few random numbers per row), reads the step's rows, and hashes rank 0's rows again:
``matches`` says the rebuilt batch is the one trained on. Each row is cut at document boundaries, each
piece with its document, the piece's place in it, the document's provenance and its decoded text.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from glasslab import config as configs
from glasslab.data.config import DataConfig
from glasslab.data.provenance import ProvenanceIndex
from glasslab.data.shards import manifest_hash, read_manifest
from glasslab.data.tokenizer import load_tokenizer
from glasslab.errors import UserError
from glasslab.layout import MANIFEST_FILE
from glasslab.track import RunReader, read_record

if TYPE_CHECKING:
    import torch

    from glasslab.data.loader import Loader


def batch_hash(batch: np.ndarray | torch.Tensor) -> str:
    """blake2b-128 of a batch of token ids (shape, dtype and values; a tensor on the host), as 32 hex digits."""
    array = np.ascontiguousarray(batch)
    digest = hashlib.blake2b(f"{array.shape}{array.dtype.str}".encode(), digest_size=16)
    digest.update(array.data)
    return digest.hexdigest()


@dataclass
class Piece:
    """The part of a row that comes from one document."""

    document: int
    """The document's index in its domain's training shard."""
    offset: int
    """Where the piece starts in the document, in tokens."""
    tokens: int
    document_tokens: int
    """The document's length, its end-of-text token included: a piece ending there ends the document."""
    source: dict | None
    """Where the document came from (``data/provenance.py``); None for a dataset built without it."""
    text: str

    @property
    def ends_document(self) -> bool:
        return self.offset + self.tokens == self.document_tokens


@dataclass
class Row:
    index: int
    """The row's place in the global batch."""
    rank: int
    domain: str
    """The row's domain, or its bucket (``<domain>/<cluster>``) under a mixture by cluster."""
    pieces: list[Piece] = field(default_factory=list)


@dataclass
class StepBatch:
    """One step's rebuilt batch (all ranks' rows, or one rank's) and its check."""

    run: str
    step: int
    attempt: int
    reason: str
    """Why the attempt began: start, resume, rollback, fork."""
    world_size: int
    seq_len: int
    rows: list[Row]
    hash: str
    """Hash of the rebuilt rows of rank 0."""
    recorded_hash: str

    @property
    def matches(self) -> bool:
        return self.hash == self.recorded_hash

    def to_json(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "rows"},
                "matches": self.matches,
                "rows": [{"index": r.index, "rank": r.rank, "domain": r.domain,
                          "pieces": [{**dataclasses.asdict(p), "ends_document": p.ends_document} for p in r.pieces]}
                         for r in self.rows]}


def trained_dataset(run_dir: str | Path, manifest_digest: str | None = None) -> Path:
    """The dataset folder the run in ``run_dir`` trained on, checked against the manifest hash it recorded
    (``manifest_digest`` when its record names none): the path it recorded, else — a lab moved or copied
    whole — the folder of the recorded name beside the run. One line when it is gone or holds another
    dataset, naming the dataset by that hash."""
    dataset = (read_record(run_dir) or {}).get("dataset") or {}
    path, digest = Path(dataset.get("path", "")), dataset.get("manifest_hash", manifest_digest)
    if not digest:
        raise UserError(f"{run_dir}: the run's record names no dataset")
    candidates = [path] if dataset.get("path") else []
    candidates += [Path(run_dir).parent / dataset["folder"]] if dataset.get("folder") else []
    built = [c for c in candidates if (c / MANIFEST_FILE).is_file()]
    for candidate in built:
        if manifest_hash(candidate) == digest:
            return candidate
    if not built:
        raise UserError(f"dataset {digest[:16]} (manifest sha256) is gone: {path} holds no built dataset; "
                        "build it again from the run's data config")
    raise UserError(f"{built[0]}: holds another dataset than the one the run trained on (manifest sha256 "
                    f"{digest[:16]}); build that one again")


def rebuild_batch(run_dir: str | Path, step: int, attempt: int | None = None, rank: int | None = None) -> StepBatch:
    """The batch of ``step`` (as logged: the first step is 1) of the run in ``run_dir``, for the attempt in
    force (``attempt``: another that trained it), all ranks' rows (``rank``: that rank's).

    One-line UserErrors: a step the run did not train, an attempt that does not exist or did not train
    the step, a rank outside the run's world, a run without recorded batches, a dataset folder that is
    gone or holds another dataset (named by the manifest hash the run trained on).
    """
    run_dir = Path(run_dir)
    with RunReader(run_dir) as reader:
        hashes = reader.batch_hashes()
        starts = reader.loader_starts()
        reasons = {a["attempt"]: a["reason"] for a in reader.attempts()}
    if not hashes or not starts:
        raise UserError(f"{run_dir}: the run recorded no batches (trained before glasslab recorded them, or "
                        "not by the pretraining loader)")
    by_attempt = {(s, a): h for s, a, h in hashes}
    attempt = _attempt_of(run_dir, step, attempt, hashes, starts)
    loader, path, world_size = attempt_loader(run_dir, starts[attempt], attempt)
    if rank is not None and not 0 <= rank < world_size:
        raise UserError(f"--rank {rank}: the run trained on {world_size} rank(s) (0..{world_size - 1})")
    loader.skip(step - 1 - starts[attempt][0])  # the attempt's draws before this step, no tokens read
    plan = loader.next_plan()
    rows_per_rank = loader.global_batch // world_size
    rows, rank0 = _read_rows(loader, plan, path, rows_per_rank, rank)
    rebuilt = batch_hash(np.stack(rank0))
    return StepBatch(run_dir.name, step, attempt, reasons.get(attempt, ""), world_size, loader.seq_len, rows,
                     rebuilt, by_attempt[(step, attempt)])


def attempt_loader(run_dir: Path, start: tuple[int, dict], attempt: int) -> tuple[Loader, Path, int]:
    """A loader where ``attempt`` of the run began (its recorded ``loader_starts`` entry ``start``), the dataset
    it trained on, and the attempt's world size; one line when the attempt was not the pretraining loader's."""
    from glasslab.data.loader import Loader  # torch: only when draws are replayed, not for trained_dataset

    state, world_size = start[1]["loader"], int(start[1]["world_size"])
    if "cursors" not in state:
        raise UserError(f"{run_dir}: attempt {attempt} was not trained by the pretraining loader")
    record = read_record(run_dir) or {}
    path = trained_dataset(run_dir, state["manifest_hash"])
    data_cfg = dataclasses.replace(configs.from_dict(DataConfig, record["config"]["data"], "data"),
                                   path=str(path), build="")
    loader = Loader(data_cfg, int(state["seq_len"]), int(state["global_batch"]), prefetch=False)
    loader.load_state_dict(state)
    return loader, path, world_size


def _attempt_of(run_dir: Path, step: int, attempt: int | None, hashes: list[tuple[int, int, str]],
                starts: dict[int, tuple[int, dict]]) -> int:
    """The attempt whose batch of ``step`` is rebuilt: ``attempt`` when it trained the step, else the
    latest that did; one line when the step or the attempt is not the run's."""
    if attempt is None:
        trained = sorted({s for s, _, _ in hashes})
        if step not in trained:
            raise UserError(f"step {step}: {run_dir.name} trained steps {trained[0]}..{trained[-1]}"
                            + (" (beyond its last step)" if step > trained[-1] else ""))
        return max(a for s, a, _ in hashes if s == step)
    if attempt not in starts:
        raise UserError(f"--attempt {attempt}: {run_dir.name} has attempts {', '.join(map(str, sorted(starts)))}")
    if not any(s == step and a == attempt for s, a, _ in hashes):
        own = [s for s, a, _ in hashes if a == attempt]
        span = f"steps {own[0]}..{own[-1]}" if own else "no step"
        raise UserError(f"step {step}: attempt {attempt} of {run_dir.name} trained {span}")
    return attempt


def _read_rows(loader: Loader, plan: list, path: Path, rows_per_rank: int,
               rank: int | None) -> tuple[list[Row], list[np.ndarray]]:
    """The rows of ``plan`` (all ranks', or ``rank``'s) cut into documents with their provenance and text,
    and rank 0's rows as int64 token arrays (always read: they carry the check)."""
    tokenizer = load_tokenizer(path)
    provenance = ProvenanceIndex(path) if "provenance" in read_manifest(path) else None
    rows, rank0 = [], []
    for index, (bucket, position) in enumerate(plan):
        row_rank = index // rows_per_rank
        if row_rank > 0 and rank not in (None, row_rank):
            continue
        documents = loader.row_documents(bucket, position)
        if row_rank == 0:
            rank0.append(np.concatenate([tokens for _, _, tokens in documents]).astype(np.int64))
        if rank not in (None, row_rank):
            continue
        row = Row(index, row_rank, bucket)
        for document, offset, tokens in documents:
            row.pieces.append(Piece(
                document, offset, len(tokens), loader.document_tokens(bucket, document),
                provenance.record(loader.domain_of(bucket), "train", document) if provenance else None,
                tokenizer.decode(tokens.tolist(), skip_special_tokens=True)))
        rows.append(row)
    return rows, rank0
