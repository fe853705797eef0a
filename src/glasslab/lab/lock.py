"""The step lock: one executor at a time runs a step, and a dead holder's lock is taken over.

``<folder>/.lock`` is a small JSON record naming its holder (a random owner id, host, executor pid,
the step's worker pid when known) and a heartbeat the holder refreshes every few seconds. A lock is
*stale*, and may be taken over, when its heartbeat is older than ``stale_after_s`` or, on the same
host, when neither the executor nor the worker process is alive any more (so a SIGKILLed executor's
steps are taken over at once on a rerun, not after the timeout).

Every read-check-write of the lock happens under ``flock`` on ``<folder>/.lock.guard``, held for
microseconds; the kernel drops it if the process dies, so the guard itself never goes stale. Two
executors that both find a stale lock therefore cannot both take it over, and a holder that was
suspended past the timeout learns on its next heartbeat that it lost the lock.

On an object-store lab (``--lab s3://…``) the folder is this node's working copy and ``flock`` guards
only this node: the lock also takes the step's lease on the root (``store/lease.py``: a conditional
create, the same record and staleness rule, renewed with every heartbeat); once it holds the lease it
pulls the step's folder from the root, and on release it first pushes it, so the next holder on any
node finds what this one did.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from glasslab.layout import write_json_atomic
from glasslab.store.mirror import LEASE_RETRY_S, active_mirror

LOCK_FILE = ".lock"
GUARD_FILE = ".lock.guard"


def process_alive(pid: int | None) -> bool:
    """True when ``pid`` names a live (not zombie) process on this host."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class StepLock:
    """The lock on one step folder, as seen by one executor (``owner``)."""

    def __init__(self, folder: Path, owner: str, stale_after_s: float) -> None:
        self.folder = folder
        self.owner = owner
        self.stale_after_s = stale_after_s
        self.path = folder / LOCK_FILE
        self.taken_over: dict[str, Any] | None = None
        """The stale record this lock replaced when acquired by takeover (for the event log)."""
        self.mirror = active_mirror()
        self.remote = self.mirror.lease(folder, owner, stale_after_s, self.is_stale) if self.mirror else None
        """The step's lease on an object-store lab root (None on a local lab)."""

    @contextmanager
    def _guard(self) -> Iterator[None]:
        with open(self.folder / GUARD_FILE, "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(guard, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def holder(self) -> dict[str, Any] | None:
        """The live holder's record, or None when the lock is free or stale."""
        record = self._read()
        if record is None and self.remote is not None:
            return self.remote.holder()
        return None if record is None or self.is_stale(record) else record

    def is_stale(self, record: dict[str, Any]) -> bool:
        if time.time() - float(record.get("heartbeat", 0)) > self.stale_after_s:
            return True
        if record.get("host") == socket.gethostname():
            return not (process_alive(record.get("pid")) or process_alive(record.get("worker_pid")))
        return False

    def try_acquire(self) -> bool:
        """Take the lock if it is free, stale or already ours; never blocks on another holder."""
        with self._guard():
            record = self._read()
            if record is not None and record.get("owner") != self.owner:
                if not self.is_stale(record):
                    return False
                self.taken_over = record
            now = time.time()
            record = {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(), "worker_pid": None,
                      "acquired": now, "heartbeat": now}
            if self.remote is not None:
                if now - self.mirror.refused_at.get(self.folder.name, 0.0) < LEASE_RETRY_S:
                    return False  # another node held it a moment ago: the store is asked once a second
                if not self.remote.acquire(record):
                    self.mirror.refused_at[self.folder.name] = now
                    return False  # another node holds the step
                self.taken_over = self.taken_over or self.remote.taken_over
                self.mirror.pull(self.folder)  # what the last holder pushed (it may have finished the step)
            write_json_atomic(self.path, record)
            return True

    def refresh(self, worker_pid: int | None = None) -> bool:
        """Renew the heartbeat (and record the worker pid when given); False when the lock was lost."""
        with self._guard():
            record = self._read()
            if record is None or record.get("owner") != self.owner:
                return False
            record["heartbeat"] = time.time()
            if worker_pid is not None:
                record["worker_pid"] = worker_pid
            if self.remote is not None and not self.remote.refresh(record):
                return False
            write_json_atomic(self.path, record)
            return True

    def release(self) -> None:
        """Drop the lock if it is still ours (on an object-store lab: push the folder, then the lease)."""
        with self._guard():
            record = self._read()
            if record is not None and record.get("owner") == self.owner:
                if self.remote is not None:
                    self.mirror.push(self.folder)
                    self.remote.release()
                self.path.unlink()


def new_owner_id() -> str:
    """A fresh id for one executor run (hosts and pids repeat; this does not)."""
    return uuid.uuid4().hex
