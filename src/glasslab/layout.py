"""The lab-root file contract: what every file under the lab root is called and how it is written.

Every part that writes into the lab (the executor, the trainer, a data build, a ladder fit, an export,
the publisher) and every part that reads it back (the observatory, ``glasslab note``, the ladder) uses
the names here, so a file's name is spelled once. Writes are atomic: a temp name in the same folder,
fsync, then one ``os.replace``, so a reader (or a later step) sees the old file or the whole new one,
never half of one — the same rule for a JSON record, a page, a checkpoint folder or a dataset. On an
object-store lab root (``s3://``) there is no rename: one PUT of the whole object is the atomic write
(:func:`put_object_atomic`), and a conditional create stands in for ``O_EXCL``.

This module sits at the bottom of the import order beside ``config`` and ``errors``: it imports no
other part (only ``errors``, for the one-line error about a file that does not parse).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from glasslab.errors import UserError

# --- file names -----------------------------------------------------------------------------------

STEP_RECORD = "step.json"
"""Every step folder: name, config, dependencies, status, attempts, timings (``lab/status.py``)."""
RUN_RECORD = "run.json"
"""A training run's immutable record: resolved config, code and package versions, prediction."""
RESULT_FILE = "result.json"
"""A finished training run's final metrics and counters."""
METRICS_DB = "metrics.db"
"""A run's SQLite run store (scalars, vectors, events, samples)."""
LAB_EVENTS_DIR = "events"
"""The lab-wide event log (step started/succeeded/failed/retried, predictions, a lost node): one SQLite
segment per node, ``events/<node>.db`` (:func:`lab_events_segment`), written only by that node and read
merged (``track/lab_events.py``), so nodes that share no disk never overwrite one another's events."""
LAB_EVENTS_DB = "events.db"
"""The lab-wide event log of labs made before the segments: read with them, never written."""
FIT_FILE = "fit.json"
"""A ladder fit: laws, predicted curve, back-test."""
REPORT_FILE = "report.json"
"""A dataset's composition report."""
MANIFEST_FILE = "manifest.json"
"""A dataset's or checkpoint's manifest: every file with its size and sha256."""
BUILD_RECORD = "build.json"
"""A dataset's build record (config, the funnel, each stage's tasks, throughput and reruns)."""
BUILD_PROGRESS = "build-progress.json"
"""A dataset build's progress while it runs (each stage's tasks done, MB/s, documents kept); the data page
shows a build in progress from it, and it goes when the build ends."""
SHARDS_DIR = "shards"
"""A dataset's token shards, ``shards/<domain>/<split>.bin`` (and each one's index, provenance and flags)."""
TOKEN_SHARD_SUFFIX = ".bin"
CHECKPOINTS_DIR = "checkpoints"
"""A run's checkpoint folders, ``checkpoints/step-XXXXXXX/``."""
CHECKPOINT_PREFIX = "step-"
CHECKPOINT_LIST = "checkpoints.json"
"""A run's list of its kept checkpoints (step, tokens, each file's sha256, the weights' canonical sha256),
rewritten by the trainer after every checkpoint; the published site carries it."""
EXTRA_CHECKPOINT = "extra"
"""Set in a checkpoint's manifest when it was written only for the published schedule (``train.keep_log``):
a rollback passes it by, so kept checkpoints never change where training returns to."""
MODEL_STATE = "model.pt"
"""The checkpoint part holding the model's parameters and buffers (what SFT starts from)."""
TRAINER_STATE = "trainer.pt"
"""The checkpoint part holding counters, loader, balancer, guard and RNG state."""
CHECKPOINT_CONFIG = "config.json"
"""The run's full (unredacted) config beside a checkpoint's manifest, readable without unpickling."""
SHARDED_MODEL = "model"
"""A sharded (FSDP2) run's checkpoint holds its model state in this folder (torch distributed checkpoint,
one file per rank) instead of ``model.pt``."""

TOKENIZER_DIR = "tokenizer"
"""A dataset's tokenizer folder (``tokenizer.json`` and what ``transformers`` reads beside it); an export
holds the same files at its top."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
"""The tokenizer's files, as ``data.tokenizer.save_tokenizer`` writes them and an export copies them."""

SPLIT_TRAIN = "train.jsonl"
"""A post-training data folder's training records, one per line: conversations ``{"messages": [...]}`` for
SFT, preference pairs ``{"prompt", "chosen", "rejected"}`` for DPO."""
SPLIT_HELDOUT = "heldout.jsonl"
"""A post-training data folder's held-out records (the held-out SFT loss, DPO's preference accuracy)."""

EXPORT_MANIFEST = "export.json"
"""A Hugging Face export's manifest (run, step, glasslab version, ``max_logit_diff`` and the logit
check, every file with its size and sha256); written last, so a folder holding it is a finished export
(``model/export.py``)."""
MODEL_CARD = "README.md"
"""A Hugging Face export's model card (the name the Hub shows)."""

PREDICTIONS_DIR = "predictions"
"""The lab's append-only registry of pre-registered predictions: one file per entry,
``predictions/<number:08d>.json``, each created once and never rewritten (:func:`create_file_once`, or a
conditional create on an object store), read in number order (``lab/registry.py`` says what an entry
holds); it lives at the lab root and outlives ``--force``."""
PREDICTIONS_FILE = "predictions.jsonl"
"""The registry of labs made before :data:`PREDICTIONS_DIR`, one entry per line: read before the entry
files, never written."""

CARDS_DIR = "cards"
"""Experiment cards at the lab root: ``cards/<experiment>/v<N>.json`` (each stored version of the card),
``runs/<number:08d>.json`` (one per run of the experiment: card version, step folders) and
``notes/<number:08d>.json`` (conclusions), every file created once and never rewritten, so nodes sharing an
object-store root add theirs side by side (``store/lab_records.py``); ``lab/card.py`` says what they hold."""
CARD_RUNS_DIR = "runs"
CARD_NOTES_DIR = "notes"
CARD_RUNS_FILE = "runs.jsonl"
"""The runs of a card in a lab made before :data:`CARD_RUNS_DIR`, one per line: read first, never written."""
CARD_NOTES_FILE = "notes.jsonl"
"""The conclusions of a lab made before :data:`CARD_NOTES_DIR`: read first, never written."""

TEMP_PREFIX = ".tmp-"
"""Temp files and folders start with this; a reader skips them and a writer's sweep removes them."""


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    """Where the checkpoint taken after ``step`` optimiser steps lives."""
    return Path(run_dir) / CHECKPOINTS_DIR / f"{CHECKPOINT_PREFIX}{step:07d}"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Completed checkpoint folders of a run as (step, path), oldest first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    found = []
    for path in root.glob(f"{CHECKPOINT_PREFIX}*") if root.is_dir() else ():
        suffix = path.name[len(CHECKPOINT_PREFIX):]
        if path.is_dir() and suffix.isdigit():
            found.append((int(suffix), path))
    return sorted(found)


def checkpoint_problem(path: str | Path) -> str | None:
    """Why the checkpoint folder at ``path`` cannot be trusted, or None when its files match its manifest
    (each file's size and sha256: a checkpoint is written whole or not at all, so a mismatch is damage)."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable {MANIFEST_FILE} ({type(exc).__name__})"
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        size = file.stat().st_size
        if size != expected["bytes"]:
            return f"{name} has {size} bytes, manifest says {expected['bytes']} (truncated?)"
        if file_sha256(file) != expected["sha256"]:
            return f"{name} does not match its sha256 in the manifest (corrupted)"
    return None


def latest_checkpoint(run_dir: str | Path, on_fallback: Callable[[int, str], None] | None = None,
                      at_most: int | None = None, skip_extra: bool = False) -> tuple[int, Path] | None:
    """The newest intact checkpoint (at step ``<= at_most`` when given; not one written only for the
    published schedule when ``skip_extra``) as (step, path), reporting each damaged one to
    ``on_fallback(step, problem)``; None when there is none."""
    for step, path in reversed(list_checkpoints(run_dir)):
        if at_most is not None and step > at_most:
            continue
        if skip_extra and is_extra_checkpoint(path):
            continue
        problem = checkpoint_problem(path)
        if problem is None:
            return step, path
        if on_fallback is not None:
            on_fallback(step, problem)
    return None


def is_extra_checkpoint(path: str | Path) -> bool:
    """Whether the checkpoint folder ``path`` was written only for the published schedule (its manifest
    says :data:`EXTRA_CHECKPOINT`)."""
    manifest = read_json(Path(path) / MANIFEST_FILE)
    return isinstance(manifest, dict) and bool(manifest.get(EXTRA_CHECKPOINT))


def intact_checkpoint(run_dir: str | Path, step: int) -> Path:
    """The checkpoint of ``run_dir`` at ``step``; a one-line UserError naming the steps there are, or what
    is wrong with it when its files do not match its manifest."""
    run_dir = Path(run_dir)
    path = checkpoint_path(run_dir, step)
    if not path.is_dir():
        available = ", ".join(str(s) for s, _ in list_checkpoints(run_dir)) or "none"
        raise UserError(f"{run_dir.name}@{step}: no checkpoint at step {step} (available: {available})")
    problem = checkpoint_problem(path)
    if problem is not None:
        raise UserError(f"{path}: damaged checkpoint ({problem})")
    return path


def is_sharded(path: str | Path) -> bool:
    """Whether the checkpoint folder ``path`` holds its model as shards (a sharded run's) or one file."""
    return (Path(path) / SHARDED_MODEL).is_dir()


def checkpoint_config(path: str | Path) -> dict[str, Any]:
    """The run's full (unredacted) config stored beside the checkpoint in folder ``path``."""
    config = read_json(Path(path) / CHECKPOINT_CONFIG)
    if config is None:
        raise UserError(f"{path}: no {CHECKPOINT_CONFIG} (a checkpoint from before configs were stored as JSON)")
    return config


def is_token_shard(relative: str) -> bool:
    """Whether lab-relative path ``relative`` is a dataset's token shard, ``<step>/shards/<domain>/<split>.bin``
    (what an object-store lab's working copy reads by range rather than fetch whole: ``store/ranges.py``)."""
    parts = relative.split("/")
    return len(parts) == 4 and parts[1] == SHARDS_DIR and parts[3].endswith(TOKEN_SHARD_SUFFIX)


def lab_events_segment(lab_root: str | Path) -> Path:
    """This node's segment of the lab's event log: named by a hash of the host and the lab folder (the lab
    itself, or the node's working copy of an object-store lab), so every process of a node shares one file,
    two nodes never share one, and the name tells no host."""
    node = hashlib.sha256(f"{socket.gethostname()}:{Path(lab_root).resolve()}".encode()).hexdigest()[:16]
    return Path(lab_root) / LAB_EVENTS_DIR / f"{node}.db"


def card_dir(lab_root: str | Path, experiment: str) -> Path:
    """The folder of experiment ``experiment``'s card versions, runs and notes."""
    if not experiment or "/" in experiment or experiment.startswith("."):
        raise UserError(f"experiment name {experiment!r}: expected a plain name (no '/', not starting with '.')")
    return Path(lab_root) / CARDS_DIR / experiment


def card_version_path(lab_root: str | Path, experiment: str, version: int) -> Path:
    """Where version ``version`` (1, 2, …) of an experiment's card is stored."""
    return card_dir(lab_root, experiment) / f"v{version}.json"


# --- atomic writes -----------------------------------------------------------------------------------


def temp_path(path: str | Path) -> Path:
    """A fresh temp name beside ``path`` (same folder, so the final rename is atomic)."""
    path = Path(path)
    return path.with_name(f"{TEMP_PREFIX}{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def atomic_path(path: str | Path, *, replace: bool = True) -> Iterator[Path]:
    """Yield a temp path beside ``path`` to write a file or folder into; move it to ``path`` on success.

    On an exception the temp file or folder is removed and ``path`` is untouched. An existing folder at
    ``path`` is replaced (moved aside first, then removed) unless ``replace`` is false, in which case
    an existing ``path`` raises ``FileExistsError`` and the temp is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        yield tmp
        if path.exists() and not replace:
            raise FileExistsError(f"{path} exists")
        move_into_place(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # on read-only media even removing a file never made fails
            remove(tmp)
        if exc.filename is not None and Path(exc.filename).name.startswith(TEMP_PREFIX):
            # Name the file the user knows, not our temp name beside it.
            raise type(exc)(exc.errno, exc.strerror, str(_named_by_user(path))) from None
        raise
    except BaseException:
        remove(tmp)
        raise


def _named_by_user(path: Path) -> Path:
    """``path`` without the temp names :func:`temp_path` wrapped it in (``.tmp-step.json-PID-X`` → ``step.json``)."""
    name = path.name
    while name.startswith(TEMP_PREFIX) and name.count("-") >= 3:
        name = name[len(TEMP_PREFIX):].rsplit("-", 2)[0]
    return path.with_name(name)


def move_into_place(source: str | Path, path: str | Path) -> None:
    """Rename the finished file or folder ``source`` to ``path`` (same file system), replacing what is
    there: an old folder is moved aside first and removed after, so ``path`` is never half of either."""
    source, path = Path(source), Path(path)
    if path.is_dir() and not path.is_symlink():
        old = temp_path(path)
        os.replace(path, old)
        os.replace(source, path)
        remove(old)
    else:
        os.replace(source, path)
    _fsync_dir(path.parent)


def remove(path: str | Path) -> None:
    """Remove a file or a folder tree if it exists."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename); returns ``path``."""
    with atomic_path(path) as tmp:
        _write_synced(tmp, data)
    return Path(path)


def create_file_once(path: str | Path, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists (the local conditional create): the whole file is
    written under a temp name, then hard-linked to ``path``, which fails when ``path`` exists, so of two
    writers exactly one succeeds and a reader never sees half a file. False when ``path`` existed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        _write_synced(tmp, data)
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    return True


def put_object_atomic(fs: Any, key: str, data: bytes, *, if_absent: bool = False, **options: Any) -> bool:
    """The object-store form of :func:`write_bytes_atomic`: ``data`` as one whole object at ``key`` on the
    fsspec filesystem ``fs`` (an ``s3://`` or ``gs://`` lab root). There is no rename on an object store;
    instead a single PUT is atomic (S3 and GCS both make a new object visible whole or not at all, and
    reads after a PUT are strongly consistent), so no temp key is written. ``if_absent``: a conditional
    create (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``) that fails when ``key`` exists; returns
    False then, True when this call wrote the object. Objects over the single-PUT size go as a multipart
    upload, which S3 also makes visible only when completed. ``options`` go to ``fs.pipe_file`` (fsspec's
    ``timeout``: a deadline for the whole call)."""
    try:
        fs.pipe_file(key, data, mode="create" if if_absent else "overwrite", **options)
    except FileExistsError:
        if not if_absent:
            raise
        return False
    return True


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def json_text(data: Any, *, indent: int | None = 2, sort_keys: bool = False, allow_nan: bool = True) -> str:
    """The JSON every lab file uses: UTF-8 (not escaped), one trailing newline; objects that are not
    JSON types (paths, dates) are written as strings. ``allow_nan=False`` refuses NaN and infinities
    (files a browser parses)."""
    return json.dumps(data, indent=indent, sort_keys=sort_keys, ensure_ascii=False, allow_nan=allow_nan,
                      default=str) + "\n"


def write_json_atomic(path: str | Path, data: Any, *, indent: int | None = 2, sort_keys: bool = False,
                      allow_nan: bool = True) -> Path:
    """Write ``data`` as JSON to ``path`` atomically."""
    return write_text_atomic(path, json_text(data, indent=indent, sort_keys=sort_keys, allow_nan=allow_nan))


class UnreadableFile(UserError, ValueError):
    """A lab file that is not what glasslab wrote (edited by hand, damaged on disk); one line naming it."""


def read_json(path: str | Path) -> Any | None:
    """The JSON in ``path``, or None when the file is absent (atomic writes rule out torn files, so a
    file that does not parse was changed by something else: :class:`UnreadableFile`)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UnreadableFile(f"{path}: not valid JSON ({exc}); expected the file as glasslab wrote it") from None


def append_json_line(path: str | Path, record: Any) -> None:
    """Append ``record`` as one JSON line to ``path`` (created if absent), under an exclusive lock and
    fsynced, so concurrent appenders never interleave and a returned call is on disk."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json_text(record, indent=None, allow_nan=False).encode("utf-8")
    with open(path, "ab") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read_json_lines(path: str | Path) -> list[Any]:
    """Every record of a file written by :func:`append_json_line` (empty when absent). A last line
    without its newline is a writer killed mid-append: it never counted, so it is left out."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    return [json.loads(line) for line in lines[:-1] if line.strip()]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some file systems do not open folders; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- hashes and versions ---------------------------------------------------------------------------------


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def code_version(path: str | Path | None = None) -> dict[str, Any]:
    """Git commit of the checkout holding ``path`` (default: this package), whether it has uncommitted
    changes, and a hash of that diff; all None outside a git checkout (an installed wheel)."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        commit = _git(where, "rev-parse", "HEAD").strip()
        diff = _git(where, "diff", "HEAD")
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None, "diff_sha256": None}
    return {
        "commit": commit,
        "dirty": bool(diff),
        "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
    }


def _git(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=where, capture_output=True, text=True, check=True, timeout=10
    ).stdout
