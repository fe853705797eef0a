"""What every step that runs a model shares in its config: where it runs, on how many CPU threads, and the
command that planned it.

All three say how a step came to be computed, not what, so none is in the step's hash (``UNVERSIONED``). A step config
that runs a model derives from :class:`StepRuntime` (its fields are keyword-only, so a derived config keeps
its own fields' positions) and its function calls :meth:`StepRuntime.use_threads` first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from glasslab.config import UNVERSIONED


@dataclass(frozen=True, kw_only=True)
class StepRuntime:
    """Where a step runs its model, on how many threads, and what planned it."""

    device: str = field(default="cpu", metadata=UNVERSIONED)
    """Where to run (``cpu``, ``cuda``): it changes where, not what, is computed."""
    threads: int = field(default=0, metadata=UNVERSIONED)
    """torch CPU threads for the step's process (0: torch's default)."""
    command: str = field(default="", metadata=UNVERSIONED)
    """The command that planned the step (``glasslab sft …``; empty: an experiment's step), recorded in the
    run's ``run.json`` for the run page's Reproduce box."""

    def recorded(self, record_extra: dict[str, Any]) -> dict[str, Any]:
        """``record_extra`` (the fields a run's ``run.json`` records beyond its config) with the command."""
        return {**record_extra, **({"command": self.command} if self.command else {})}

    def use_threads(self) -> None:
        """Set torch's CPU threads to ``threads`` (nothing when 0); torch is imported only then."""
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
