"""A step's lease on an object-store lab root: one node at a time runs a step, with no shared disk.

An object store has no ``flock`` and no rename, but it has a conditional create (S3 ``If-None-Match: *``,
GCS ``ifGenerationMatch=0``): of two nodes that create the same key at once, exactly one succeeds. The
lease is therefore a numbered series of keys, ``<step>/.lease-00000000``, ``-00000001``, …; the holder is
whoever created the highest one. To take a free lease (released, or stale: its heartbeat older than the
lease, or the caller's own test, e.g. a dead process on this host) a node creates the NEXT number; of
two racers one wins and the other sees a live holder. The holder rewrites its own key (nobody else
writes it) to renew the heartbeat and to release it, and learns on its next renewal that it lost the
lease when a higher number exists. Older numbers are removed by the node that created a newer one.

Clocks: a heartbeat is the writer's ``time.time()``; nodes must agree within a fraction of the lease.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from glasslab.store.url import MissingObject, ObjectRoot

LEASE_PREFIX = ".lease-"


class RootLease:
    """The lease on step folder ``step`` (its name under the lab root) as seen by one ``owner``."""

    def __init__(
        self,
        root: ObjectRoot,
        step: str,
        owner: str,
        lease_s: float,
        is_stale: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.root, self.step, self.owner, self.lease_s = root, step, owner, lease_s
        self._is_stale = is_stale or (lambda record: time.time() - float(record.get("heartbeat", 0)) > lease_s)
        self.number: int | None = None
        """The number of the key this owner created, while it holds the lease."""
        self.taken_over: dict[str, Any] | None = None
        """The stale holder's record when this owner's last :meth:`acquire` took the lease over (not a
        released one): the node that was lost, and its last heartbeat."""

    def _numbers(self) -> list[int]:
        try:
            names = self.root.call("list leases", self.root.fs.ls, self.root.key(self.step), detail=False, refresh=True)
        except MissingObject:  # a step never pushed has no "folder" on the store yet
            return []
        numbers = (
            name.rsplit("/", 1)[-1][len(LEASE_PREFIX) :]
            for name in names
            if name.rsplit("/", 1)[-1].startswith(LEASE_PREFIX)
        )
        return sorted(int(n) for n in numbers if n.isdigit())

    def _key(self, number: int) -> str:
        return f"{self.step}/{LEASE_PREFIX}{number:08d}"

    def _read(self, number: int) -> dict[str, Any] | None:
        data = self.root.get(self._key(number))
        try:
            return json.loads(data) if data else None
        except ValueError:
            return None

    def holder(self) -> dict[str, Any] | None:
        """The live holder's record (released or stale ones are not), or None."""
        numbers = self._numbers()
        record = self._read(numbers[-1]) if numbers else None
        return None if record is None or record.get("released") or self._is_stale(record) else record

    def acquire(self, record: dict[str, Any]) -> bool:
        """Take the lease with ``record`` (owner, host, pid, heartbeat…) if it is free, stale or ours;
        False while another node holds it, or when another node won the race for it."""
        numbers = self._numbers()
        current = numbers[-1] if numbers else -1
        held = self._read(current) if numbers else None
        if held is not None and held.get("owner") == self.owner:
            self.number = current
            return self.refresh(record)
        if held is not None and not held.get("released") and not self._is_stale(held):
            return False
        body = json.dumps({**record, "owner": self.owner, "taken_over": held}).encode()
        if not self.root.put(self._key(current + 1), body, if_absent=True):
            return False
        self.number = current + 1
        self.taken_over = held if held is not None and not held.get("released") else None
        for old in numbers:
            self.root.call("remove an old lease", self.root.fs.rm_file, self.root.key(self._key(old)))
        return True

    def refresh(self, record: dict[str, Any]) -> bool:
        """Renew the heartbeat with ``record``; False (and no write) when another node took the lease."""
        if self.number is None or self._numbers()[-1:] != [self.number]:
            self.number = None
            return False
        self.root.put(self._key(self.number), json.dumps({**record, "owner": self.owner}).encode())
        return True

    def release(self) -> None:
        """Mark the lease released if it is still ours (the next node takes the next number at once)."""
        if self.number is not None and self._numbers()[-1:] == [self.number]:
            record = self._read(self.number) or {}
            self.root.put(self._key(self.number), json.dumps({**record, "released": True}).encode())
        self.number = None
