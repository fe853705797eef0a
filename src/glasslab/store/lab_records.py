"""The lab-wide records that several nodes write: the prediction registry, experiment cards, the event log.

A step folder has one writer at a time (its lock); these records do not: every node registers predictions
and logs events at the lab root. They therefore take forms that need no lock and lose no node's record,
the same on a local folder and on an object-store root:

- **entries created once** (the registry, ``predictions/<number>.json``): a writer creates the next
  number with a conditional create — ``layout.create_file_once`` in a folder, ``If-None-Match: *`` on the
  root of an object-store lab (then the node's working copy gets the same bytes) — so of two nodes
  writing at once one wins and the other reads again and takes the next number; readers read the union
  in number order. On an object-store lab the entry is on the root when the call returns, so a node
  killed a moment later has lost nothing it registered.
  Experiment cards keep their runs and conclusions the same way (:func:`append_record`, ``cards/<name>/runs/``
  and ``notes/``), and their versions ``v<N>.json`` are created once too.
- **a segment per node** (the event log, ``events/<node>.db``): only its node writes it, so pushing it
  never overwrites another node's; it is pushed after every event it receives, and readers merge the
  segments. :mod:`glasslab.store.mirror` never pushes another node's segment nor an entry file.
"""

from __future__ import annotations

from pathlib import Path

from glasslab.layout import create_file_once, json_text, lab_events_segment, read_json, write_bytes_atomic
from glasslab.store.mirror import mirror_of


def create_record_once(lab_root: str | Path, relative: str, data: bytes) -> bool:
    """Create the lab file ``relative`` (a ``/``-separated path under ``lab_root``) holding ``data`` unless it
    exists — on the object-store root first when the lab is one, then locally; False when it existed."""
    mirror = mirror_of(lab_root)
    if mirror is None:
        return create_file_once(Path(lab_root) / relative, data)
    if not mirror.root.put(relative, data, if_absent=True):
        return False
    write_bytes_atomic(mirror.work / relative, data)
    return True


def append_record(lab_root: str | Path, folder: str, entry: dict) -> int:
    """Add ``entry`` to the append-only record folder ``folder`` (``/``-separated, under ``lab_root``) as the file
    of the next number, ``<number:08d>.json``, created once (:func:`create_record_once`); a writer that loses
    the race for a number takes the next. Returns the number."""
    refresh_records(lab_root, folder)
    while True:
        number = max(_numbers(Path(lab_root) / folder), default=0) + 1
        if create_record_once(lab_root, f"{folder}/{number:08d}.json", json_text(entry).encode()):
            return number
        refresh_records(lab_root, folder)


def read_records(lab_root: str | Path, folder: str) -> list[dict]:
    """The entries of record folder ``folder`` in number order (an object-store lab's: as on the root now)."""
    refresh_records(lab_root, folder)
    return [read_json(Path(lab_root) / folder / f"{n:08d}.json") for n in sorted(_numbers(Path(lab_root) / folder))]


def _numbers(folder: Path) -> list[int]:
    return [int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()] if folder.is_dir() else []


def refresh_records(lab_root: str | Path, relative: str) -> None:
    """Bring folder ``relative`` of an object-store lab's working copy up to the root (what other nodes
    created there since); nothing to do on a local folder."""
    mirror = mirror_of(lab_root)
    if mirror is not None:
        mirror.pull(mirror.work / relative)


def push_own_segment(lab_root: str | Path) -> None:
    """Send this node's segment of the lab's event log to an object-store lab's root (as a consistent
    snapshot); nothing to do on a local folder."""
    mirror = mirror_of(lab_root)
    if mirror is not None:
        mirror.send([lab_events_segment(mirror.work)])
