"""On an object-store lab, a run's folder goes to the root at every checkpoint, while training goes on.

The trainer writes its checkpoints and run store (``metrics.db``) in the node's working copy of the
lab (``store/mirror.py``); this callback pushes the run's folder after each checkpoint — the
checkpoint's files, then its manifest, the run store as a consistent snapshot, ``checkpoints.json`` —
so a resume on another node, which pulls the root first, restores both where this node left them.

The push runs in a thread of its own, so the next steps train while a checkpoint travels: checkpoints
that come while a push is under way are sent together by the next one. The run's end (finished,
preempted with its emergency checkpoint, or failed) waits for the last push. A file that retention
removed while a push was sending it makes that push start over (a file that keeps vanishing with no
checkpoint made meanwhile is a fault, not a loop); a push the store refused is said as it
happens and, unless the run is already failing, fails the run at its end (the step's own push at its end
would meet the same store).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from glasslab.store.mirror import Mirror
from glasslab.store.url import MissingObject
from glasslab.train.callbacks import Callback

MAX_RESTARTS = 3
"""How many times in a row a push may start over because a file it was sending was removed with no checkpoint
made meanwhile (a checkpoint's retention removes older ones while a push sends them: that loss is no fault)."""


class RootSync(Callback):
    """Push the run folder to the lab's object-store root after every checkpoint (the main rank's job), in a
    background thread; :meth:`on_end` waits for it."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self._folder: Path | None = None
        self._changed = threading.Condition()
        self._wanted = False
        self._closing = False
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    def on_checkpoint(self, trainer: Any, path: Path) -> None:
        if not trainer.ctx.is_main:
            return
        self._folder = Path(trainer.run_dir)
        if self._thread is None:
            self._thread = threading.Thread(target=self._push_when_wanted, name="root-sync", daemon=True)
            self._thread.start()
        with self._changed:
            self._wanted = True
            self._changed.notify_all()

    def on_end(self, trainer: Any, status: str) -> None:
        if self._thread is None:
            return
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()
        if self._failure is not None and status != "failed":  # a failing run's own error is the one to raise
            raise self._failure

    def _push_when_wanted(self) -> None:
        restarts = 0
        while True:
            with self._changed:
                while not self._wanted and not self._closing:
                    self._changed.wait()
                if not self._wanted:
                    return
                self._wanted = False
            try:
                self.mirror.push(self._folder)
                restarts = 0
            except MissingObject as exc:  # retention removed a file this push was sending: send the folder again
                with self._changed:  # a checkpoint made during the push explains it (retention) and is no fault
                    restarts = 1 if self._wanted else restarts + 1
                    self._wanted = restarts <= MAX_RESTARTS
                if restarts > MAX_RESTARTS:
                    self._fail(exc)
            except Exception as exc:  # noqa: BLE001 — kept, said now, raised at the run's end
                self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        print(f"[root sync] a checkpoint did not reach the lab's root: {exc}", file=sys.stderr, flush=True)
        if self._failure is None:
            self._failure = exc
