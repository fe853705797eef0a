"""The lab-wide records that several nodes write: the prediction registry and the lab's event log.

A step folder has one writer at a time (its lock); these records do not: every node registers predictions
and logs events at the lab root. They therefore take forms that need no lock and lose no node's record,
the same on a local folder and on an object-store root:

- **entries created once** (the registry, ``predictions/<number>.json``): a writer creates the next
  number with a conditional create — ``layout.create_file_once`` in a folder, ``If-None-Match: *`` on the
  root of an object-store lab (then the node's working copy gets the same bytes) — so of two nodes
  writing at once one wins and the other reads again and takes the next number; readers read the union
  in number order. On an object-store lab the entry is on the root when the call returns, so a node
  killed a moment later has lost nothing it registered.
- **a segment per node** (the event log, ``events/<node>.db``): only its node writes it, so pushing it
  never overwrites another node's; it is pushed after every event it receives, and readers merge the
  segments. :mod:`glasslab.store.mirror` never pushes another node's segment nor an entry file.
"""

from __future__ import annotations

from pathlib import Path

from glasslab.layout import create_file_once, lab_events_segment, write_bytes_atomic
from glasslab.store.mirror import Mirror, active_mirror


def _mirror_of(lab_root: str | Path) -> Mirror | None:
    """The mirror whose working copy is ``lab_root`` (an object-store lab), or None (a local folder)."""
    mirror = active_mirror()
    return mirror if mirror is not None and Path(lab_root).resolve() == mirror.work.resolve() else None


def create_record_once(lab_root: str | Path, relative: str, data: bytes) -> bool:
    """Create the lab file ``relative`` (a ``/``-separated path under ``lab_root``) holding ``data`` unless it
    exists — on the object-store root first when the lab is one, then locally; False when it existed."""
    mirror = _mirror_of(lab_root)
    if mirror is None:
        return create_file_once(Path(lab_root) / relative, data)
    if not mirror.root.put(relative, data, if_absent=True):
        return False
    write_bytes_atomic(mirror.work / relative, data)
    return True


def refresh_records(lab_root: str | Path, relative: str) -> None:
    """Bring folder ``relative`` of an object-store lab's working copy up to the root (what other nodes
    created there since); nothing to do on a local folder."""
    mirror = _mirror_of(lab_root)
    if mirror is not None:
        mirror.pull(mirror.work / relative)


def push_own_segment(lab_root: str | Path) -> None:
    """Send this node's segment of the lab's event log to an object-store lab's root (as a consistent
    snapshot); nothing to do on a local folder."""
    mirror = _mirror_of(lab_root)
    if mirror is not None:
        mirror.send([lab_events_segment(mirror.work)])
