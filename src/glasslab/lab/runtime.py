"""What every step that runs a model shares in its config: where it runs and on how many CPU threads.

Both say how a step computes, not what, so neither is in the step's hash (``UNVERSIONED``). A step config
that runs a model derives from :class:`StepRuntime` (its fields are keyword-only, so a derived config keeps
its own fields' positions) and its function calls :meth:`StepRuntime.use_threads` first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glasslab.config import UNVERSIONED


@dataclass(frozen=True, kw_only=True)
class StepRuntime:
    """Where a step runs its model and on how many threads."""

    device: str = field(default="cpu", metadata=UNVERSIONED)
    """Where to run (``cpu``, ``cuda``): it changes where, not what, is computed."""
    threads: int = field(default=0, metadata=UNVERSIONED)
    """torch CPU threads for the step's process (0: torch's default)."""

    def use_threads(self) -> None:
        """Set torch's CPU threads to ``threads`` (nothing when 0); torch is imported only then."""
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
