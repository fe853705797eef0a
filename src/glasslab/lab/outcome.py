"""What became of a run of the executor: one :class:`StepOutcome` per planned step, in a :class:`RunReport`."""

from __future__ import annotations

from dataclasses import dataclass, field

from glasslab.lab.plan import Plan


@dataclass
class StepOutcome:
    """What became of one planned step in this run.

    ``status``: ``succeeded``/``failed`` (run here), ``cached`` (succeeded before, or meanwhile by
    another executor), ``skipped`` (a dependency did not succeed), ``interrupted`` (stopped by a
    signal to the executor), ``lost`` (another executor took the lock over).
    """

    status: str
    attempts: int = 0
    duration_s: float | None = None
    error: str | None = None
    by: str = "here"
    """``here`` or ``elsewhere`` (another executor ran it while this one waited)."""

    @property
    def ok(self) -> bool:
        return self.status in ("succeeded", "cached")


@dataclass
class RunReport:
    plan: Plan
    outcomes: dict[str, StepOutcome] = field(default_factory=dict)
    """Folder name → outcome, for every planned step (empty for a dry run)."""
    interrupted: str | None = None
    """The signal's name when the executor was told to stop."""

    @property
    def ok(self) -> bool:
        """Every planned step has succeeded (now or before); False for a dry run."""
        done = len(self.outcomes) == len(self.plan.steps)
        return done and self.interrupted is None and all(o.ok for o in self.outcomes.values())

    def keys(self, status: str, by: str | None = None) -> list[str]:
        return [k for k, o in self.outcomes.items() if o.status == status and (by is None or o.by == by)]

    @property
    def executed(self) -> list[str]:
        """Folders whose function this executor ran (succeeded or failed)."""
        return [k for k, o in self.outcomes.items() if o.by == "here" and o.status in ("succeeded", "failed",
                                                                                      "interrupted")]
