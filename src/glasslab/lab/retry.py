"""Retry policy: how many times a failed step is tried again, and how long to wait in between.

A retry happens within one executor run, in the same output folder (so a trainer resumes from its
checkpoints); each one is a ``step_retried`` event in the lab log. A step stopped because the executor
itself was told to stop (SIGTERM) is not retried. An attempt the pool *lost* (its worker died without a
word: on Ray, the worker or its whole node, a preempted spot machine) is not the step failing: it is a
``node_lost`` incident and is tried again, on Ray wherever the cluster places it, up to ``lost`` times in a
run, apart from ``count``.
"""

from __future__ import annotations

from dataclasses import dataclass

from glasslab.errors import UserError


@dataclass(frozen=True)
class RetryPolicy:
    """``count`` retries after the first failure; the n-th waits ``backoff_s * factor**(n-1)`` seconds,
    capped at ``max_backoff_s``. ``lost`` more attempts after attempts the pool lost, with the same waits."""

    count: int = 0
    backoff_s: float = 1.0
    factor: float = 2.0
    max_backoff_s: float = 300.0
    lost: int = 3

    def __post_init__(self) -> None:
        for name in ("count", "lost"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise UserError(f"retry.{name}={value!r}: expected an integer >= 0")
        if not (self.backoff_s >= 0 and self.factor >= 1 and self.max_backoff_s >= 0):
            raise UserError(
                f"retry backoff_s={self.backoff_s!r} factor={self.factor!r} "
                f"max_backoff_s={self.max_backoff_s!r}: expected backoff_s >= 0, factor >= 1, "
                "max_backoff_s >= 0"
            )

    def should_retry(self, failures: int) -> bool:
        """True when a step that has failed ``failures`` times in this run gets another try."""
        return failures <= self.count

    def delay_s(self, failures: int) -> float:
        """Seconds to wait before the try that follows failure number ``failures`` (1-based)."""
        return min(self.backoff_s * self.factor ** (failures - 1), self.max_backoff_s)
