"""On an object-store lab, a run's folder goes to the root at every checkpoint.

The trainer writes its checkpoints and run store (``metrics.db``) in the node's working copy of the
lab (``store/mirror.py``); this callback pushes the run's folder after each checkpoint — the
checkpoint's files, then its manifest, the run store as a consistent snapshot, ``checkpoints.json`` —
so a resume on another node, which pulls the root first, restores both where this node left them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glasslab.store.mirror import Mirror
from glasslab.train.callbacks import Callback


class RootSync(Callback):
    """Push the run folder to the lab's object-store root after every checkpoint (the main rank's job)."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror

    def on_checkpoint(self, trainer: Any, path: Path) -> None:
        if trainer.ctx.is_main:
            self.mirror.push(Path(trainer.run_dir))
