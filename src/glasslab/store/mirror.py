"""A node's working copy of an object-store lab, kept in step with the root.

Every part of glasslab reads and writes a local folder (memory-mapped shards, SQLite run stores,
``flock``-guarded locks). On an ``s3://`` lab root each node therefore works in a local working folder
(``$GLASSLAB_WORK``, default ``~/.cache/glasslab/labs/<hash of the URL>``) that mirrors the root, whole
files through fsspec:

- **pull** at the start of a command: every object the working copy lacks, or holds an older or
  different-sized copy of, is fetched (written locally with a temp name and renamed, its time set to
  the object's), so a resume on another node finds the run's checkpoints and run store; but the datasets'
  token shards stay on the root, where readers take what they need by range (``store/ranges.py``);
- **push** at every checkpoint (the trainer's ``on_checkpoint``, for its own run folder) and when a step
  ends (before its lease is released), and the lab's own files (the site) as the command ends:
  every file the root does not hold as it is now is sent with one PUT (atomic: a reader sees the old object
  or the whole new one). A checkpoint's files go before its manifest and ``step.json`` goes last, so a reader
  of the root never trusts a partial checkpoint or a step that is not there yet. A SQLite file
  (``metrics.db``, a segment of the event log) is sent as a consistent snapshot (SQLite's online
  backup), never as a file that a writer is changing. A checkpoint folder that retention removed
  locally is removed from the root by the same push. The event log and the registry have forms of
  their own that several nodes write (``lab_records.py``): a push sends only this node's segment of
  the log, and never a registry entry or a card's file (each is created on the root).

Node-local files never leave the node: temp names, ``.lock``/``.lock.guard``, SQLite's ``-wal``/``-shm``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import sqlite3
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.layout import (
    CARDS_DIR,
    CHECKPOINTS_DIR,
    LAB_EVENTS_DIR,
    MANIFEST_FILE,
    PREDICTIONS_DIR,
    STEP_RECORD,
    TEMP_PREFIX,
    is_token_shard,
    lab_events_segment,
    move_into_place,
    temp_path,
)
from glasslab.store.lease import LEASE_PREFIX, RootLease
from glasslab.store.url import MissingObject, ObjectRoot, is_url, local_folder, open_root

LAB_URL_ENV = "GLASSLAB_LAB_URL"
"""Set for the processes of a command run on an object-store lab: the root's URL."""
WORK_ENV = "GLASSLAB_WORK"
"""The node's local working folder for an object-store lab (the lab root every part sees)."""
LEASE_RETRY_S = 1.0
"""How often a node waiting for another's step asks the root for its lease again."""
SQLITE_SUFFIXES = (".db",)
NODE_LOCAL_SUFFIXES = ("-wal", "-shm", "-journal", ".lock", ".lock.guard")


def _node_local(relative: str) -> bool:
    parts = relative.split("/")
    return any(p.startswith((TEMP_PREFIX, LEASE_PREFIX)) for p in parts) or relative.endswith(NODE_LOCAL_SUFFIXES)


def _push_order(relative: str) -> int:
    """Files first, then checkpoint manifests, then step records: what trusts a file comes after it."""
    name = relative.rsplit("/", 1)[-1]
    if name == STEP_RECORD:
        return 2
    return 1 if name == MANIFEST_FILE and f"/{CHECKPOINTS_DIR}/" in relative else 0


class Mirror:
    """The object-store root ``root`` and this node's working copy ``work``."""

    def __init__(self, root: ObjectRoot, work: Path, *, shards_by_range: bool = True) -> None:
        self.root, self.work = root, Path(work)
        self.shards_by_range = shards_by_range
        """Whether a pull leaves the datasets' token shards on the root for readers to read by range
        (``store/ranges.py``): a working copy does; a view, which pages read with no mirror active, does not."""
        self.sent: dict[str, tuple[tuple[int, float], int]] = {}
        """What this process has put on the root: lab-relative path → (the local file's size and change time
        when it was read for sending, the object's size). An object's time is the store's, often whole
        seconds, so a file written in the second of its PUT looks newer than its object: this, not the
        times, tells the next push that the file is there already."""
        self.refused_at: dict[str, float] = {}
        """When another node last held each step's lease (step name → time): an executor waiting for a step
        asks the store again after :data:`LEASE_RETRY_S`, not at every turn of its loop."""

    def _remote(self, folder: Path) -> dict[str, dict[str, Any]]:
        """Objects under ``folder`` of the working copy as lab-relative path → fsspec info (size, LastModified)."""
        under = folder.relative_to(self.work).as_posix() if folder != self.work else ""
        fs, base = self.root.fs, self.root.key(under)
        fs.invalidate_cache(base)
        found = self.root.call("list the lab", fs.find, base, detail=True)
        return {self.root.relative(k): v for k, v in found.items()
                if v.get("type") != "directory" and not _node_local(self.root.relative(k))}  # s3fs may list a prefix

    def pull(self, folder: Path | None = None) -> int:
        """Fetch what ``folder`` (default: the whole working copy) lacks or holds an older copy of (all at
        once, each into a temp name, then renamed into place with the object's time); returns the number
        of files. A step folder pulled on its own is one no process of this node is writing (a step this node
        is about to run or has seen end): its checkpoints the root no longer has (retention removed them
        where the step ran) are removed here too."""
        folder = Path(folder or self.work)
        wanted = {}
        own_segment = lab_events_segment(self.work)
        remote = self._remote(folder)
        if folder != self.work:
            self._drop_checkpoints_not_on_root(folder, remote)
        for relative, info in remote.items():
            local = self.work / relative
            if local == own_segment and local.is_file():  # only this node writes it: the root's is never newer
                continue
            if self.shards_by_range and is_token_shard(relative) and not local.is_file():
                continue
            if local.is_file() and local.stat().st_size == info["size"] and local.stat().st_mtime >= _mtime(info):
                continue
            wanted[relative] = (local, temp_path(local), _mtime(info))
            local.parent.mkdir(parents=True, exist_ok=True)
        try:
            if wanted:
                self.root.call(
                    "read the lab",
                    self.root.fs.get,
                    [self.root.key(r) for r in wanted],
                    [str(tmp) for _, tmp, _ in wanted.values()],
                )
            for relative, (local, tmp, remote_time) in wanted.items():
                if relative.endswith(SQLITE_SUFFIXES):  # a stale -wal beside a replaced database would corrupt it
                    for suffix in ("-wal", "-shm"):
                        local.with_name(local.name + suffix).unlink(missing_ok=True)
                move_into_place(tmp, local)
                os.utime(local, (remote_time, remote_time))
        finally:
            for _, tmp, _ in wanted.values():
                tmp.unlink(missing_ok=True)
        return len(wanted)

    def _drop_checkpoints_not_on_root(self, folder: Path, remote: dict[str, dict[str, Any]]) -> None:
        on_root = {r.split(f"/{CHECKPOINTS_DIR}/")[1].split("/")[0] for r in remote if f"/{CHECKPOINTS_DIR}/" in r}
        local = folder / CHECKPOINTS_DIR
        for checkpoint in (p for p in local.iterdir() if p.is_dir()) if local.is_dir() else ():
            if checkpoint.name not in on_root and not checkpoint.name.startswith(TEMP_PREFIX):
                shutil.rmtree(checkpoint)

    def push(self, folder: Path | None = None) -> int:
        """Send every file of step folder ``folder`` the root does not hold as it is, in the order that keeps the root
        trustworthy (each group's files at once), and drop the checkpoints retention removed; returns the
        number sent. Without ``folder``: the lab's own files (this node's event log, cards, site), never a
        step folder — those go only from the node that held the step's lock, so a node's stale copy of a
        step another node is running is never sent over the newer one."""
        whole_lab = folder is None
        folder = Path(folder or self.work)
        remote = self._remote(folder)
        steps = {p.parent.name for p in self.work.glob(f"*/{STEP_RECORD}")} if whole_lab else set()
        groups: list[list[Path]] = [[], [], []]
        for path in _files_under(folder):
            relative = path.relative_to(self.work).as_posix()
            if relative.split("/", 1)[0] in steps or _node_local(relative) or self._written_elsewhere(path):
                continue
            try:
                if not self._on_root(relative, _signature(path), remote.get(relative)):
                    groups[_push_order(relative)].append(path)
            except FileNotFoundError:  # retention removed it since the walk: the next push drops its object
                continue
        for group in groups:
            self.send(group)
        if not whole_lab:
            self._drop_removed_checkpoints(folder, remote)
        return sum(len(g) for g in groups)

    def _on_root(self, relative: str, signature: tuple[int, float], info: dict[str, Any] | None) -> bool:
        """Whether the root's object ``info`` of ``relative`` holds the local file whose size and change time
        are ``signature``: this process sent it as it is, or the object is as large and no older."""
        if info is None:
            return False
        if self.sent.get(relative) == (signature, info["size"]):
            return True
        return info["size"] == signature[0] and signature[1] <= _mtime(info)

    def _written_elsewhere(self, path: Path) -> bool:
        """Whether ``path`` reaches the root by another way than a push (``store/lab_records.py``): a registry
        entry or a card's file (created on the root itself), or another node's segment of the event log (never
        sent from here)."""
        top = path.relative_to(self.work).parts[0]
        return top in (PREDICTIONS_DIR, CARDS_DIR) or (top == LAB_EVENTS_DIR and path != lab_events_segment(self.work))

    def send(self, paths: list[Path]) -> None:
        """One atomic PUT per file of the working copy, concurrently; a SQLite file as a consistent snapshot."""
        relative = {p: p.relative_to(self.work).as_posix() for p in paths}
        key = {p: self.root.key(relative[p]) for p in paths}
        try:  # before reading: a change while it travels is sent again
            signature = {p: _signature(p) for p in paths}
        except FileNotFoundError as exc:  # retention removed it since the walk, as if the PUT had not found it
            raise MissingObject(str(exc)) from None
        databases = [p for p in paths if p.name.endswith(SQLITE_SUFFIXES)]
        files = [p for p in paths if p not in databases]
        if databases:
            snapshots = {p: sqlite_snapshot(p) for p in databases}
            self.root.call("write run stores", self.root.fs.pipe, {key[p]: data for p, data in snapshots.items()})
            self.sent.update({relative[p]: (signature[p], len(data)) for p, data in snapshots.items()})
        if files:
            self.root.call("write the lab", self.root.fs.put, [str(p) for p in files], [key[p] for p in files])
            self.sent.update({relative[p]: (signature[p], signature[p][0]) for p in files})

    def _drop_removed_checkpoints(self, folder: Path, remote: dict[str, dict[str, Any]]) -> None:
        gone = [
            r
            for r in remote
            if f"{CHECKPOINTS_DIR}/" in r
            and not (self.work / r).exists()
            and (self.work / r.split(f"/{CHECKPOINTS_DIR}/")[0] / CHECKPOINTS_DIR).is_dir()
        ]
        manifests = [r for r in gone if r.endswith(f"/{MANIFEST_FILE}")]
        for batch in (manifests, [r for r in gone if r not in manifests]):  # a manifest goes before its files
            if batch:  # one request per thousand keys
                self.root.call(f"remove {batch[0]}", self.root.fs.rm, [self.root.key(r) for r in batch])
        for relative in gone:
            self.sent.pop(relative, None)

    def lease(self, folder: Path, owner: str, lease_s: float, is_stale: Any) -> RootLease | None:
        """The root lease on step folder ``folder``; None when it is not a step folder of the working copy."""
        if Path(folder).resolve().parent != self.work.resolve():
            return None
        return RootLease(self.root, Path(folder).name, owner, lease_s, is_stale)


def _files_under(folder: Path) -> Iterator[Path]:
    """The files under ``folder``, walked while a trainer may be removing a checkpoint folder in it (a folder
    that vanishes during the walk is passed over, not an error)."""
    for parent, _, names in os.walk(folder):
        yield from (Path(parent) / name for name in names)


def _mtime(info: dict[str, Any]) -> float:
    modified = info.get("LastModified") or info.get("mtime") or info.get("updated")
    return modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)


def _signature(path: Path) -> tuple[int, float]:
    """The size and change time of local file ``path``."""
    return path.stat().st_size, _changed_at(path)


def _changed_at(path: Path) -> float:
    """When ``path`` last changed; a SQLite file's write-ahead log counts."""
    try:
        wal = path.with_name(path.name + "-wal").stat().st_mtime
    except FileNotFoundError:  # none, or checkpointed into the database since
        wal = 0.0
    return max(path.stat().st_mtime, wal)


def sqlite_snapshot(path: Path) -> bytes:
    """A consistent copy of the SQLite database at ``path`` (online backup; writers may be active)."""
    tmp = temp_path(path)
    try:
        source, copy = sqlite3.connect(path), sqlite3.connect(tmp)
        try:
            source.backup(copy)
        finally:
            source.close()
            copy.close()
        return tmp.read_bytes()
    finally:
        tmp.unlink(missing_ok=True)


def default_work_folder(url: str) -> Path:
    """The local working folder of the lab at ``url`` on this node when ``$GLASSLAB_WORK`` is not set."""
    return Path.home() / ".cache" / "glasslab" / "labs" / hashlib.sha256(url.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=4)
def mirror_for(url: str, work: str, shards_by_range: bool = True) -> Mirror:
    """The mirror of the root at ``url`` and the working copy ``work`` (one per pair in a process)."""
    return Mirror(open_root(url), Path(work), shards_by_range=shards_by_range)


def active_mirror() -> Mirror | None:
    """The mirror of the object-store lab this process works for (set by :func:`lab_workspace`, and
    inherited by the step processes it starts), or None on a local lab."""
    url, work = os.environ.get(LAB_URL_ENV), os.environ.get(WORK_ENV)
    return mirror_for(url, work) if url and work else None


def mirror_of(lab_root: str | Path) -> Mirror | None:
    """The active mirror when its working copy is ``lab_root`` (an object-store lab), else None (a local folder)."""
    mirror = active_mirror()
    return mirror if mirror is not None and Path(lab_root).resolve() == mirror.work.resolve() else None


def work_folder(url: str) -> Path:
    """This node's working copy of the lab at ``url``: ``$GLASSLAB_WORK``, else the default for the URL."""
    return Path(os.environ.get(WORK_ENV) or default_work_folder(url)).resolve()


def view_folder(url: str) -> Path:
    """The node's read-only copy of the lab at ``url`` (``publish``, ``serve``): beside the working copy, never
    it, so a pull for a reader never replaces a file a command on this node is writing."""
    work = work_folder(url)
    return work.with_name(work.name + "-view")


@contextlib.contextmanager
def lab_workspace(value: str) -> Iterator[Path]:
    """The local lab root a command works in for ``--lab value``: the folder itself, or for an
    object-store URL the node's working copy, pulled first and pushed at the end (also after a failure,
    so a resume elsewhere finds what was done). One-line UserError when the URL cannot be used."""
    if not is_url(value) or value.startswith("file://"):
        yield Path(local_folder(value))
        return
    work = work_folder(value)
    mirror = mirror_for(value, str(work))  # opens the root: nothing is made locally for a bad URL
    work.mkdir(parents=True, exist_ok=True)
    mirror.pull()
    saved = {k: os.environ.get(k) for k in (LAB_URL_ENV, WORK_ENV)}
    os.environ.update({LAB_URL_ENV: value, WORK_ENV: str(work)})
    try:
        yield work
    finally:
        try:
            mirror.push()
        finally:
            for key, old in saved.items():
                os.environ.pop(key) if old is None else os.environ.__setitem__(key, old)


@contextlib.contextmanager
def lab_snapshot(value: str, refresh_s: float = 0.0) -> Iterator[Path]:
    """The local lab root a reader (``publish``, ``serve``) reads for ``--lab value``: the folder itself, or for
    an object-store URL the node's view folder (:func:`view_folder`) pulled from the root, and pulled again
    every ``refresh_s`` seconds in a background thread while the caller reads it (0: once). Nothing is
    pushed back. One-line UserError when the URL cannot be used."""
    if not is_url(value) or value.startswith("file://"):
        yield Path(local_folder(value))
        return
    view = view_folder(value)
    mirror = mirror_for(value, str(view), shards_by_range=False)
    view.mkdir(parents=True, exist_ok=True)
    mirror.pull()
    stop = threading.Event()
    if refresh_s > 0:
        threading.Thread(target=_keep_pulling, args=(mirror, refresh_s, stop), name="lab-view", daemon=True).start()
    try:
        yield view
    finally:
        stop.set()


def _keep_pulling(mirror: Mirror, every_s: float, stop: threading.Event) -> None:
    """Pull the root into ``mirror``'s folder every ``every_s`` seconds until ``stop``; a failed pull is said
    in one line, and a pull that met an object removed after it was listed (a checkpoint that retention
    dropped on another node) is tried again at the next turn."""
    while not stop.wait(every_s):
        try:
            mirror.pull()
        except MissingObject:
            continue
        except UserError as exc:
            print(f"{exc}; the pages show the last copy", file=sys.stderr, flush=True)
