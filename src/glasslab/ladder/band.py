"""Watching a hero run against its pre-registered prediction band, live.

The prediction is a curve: a point and a 90% interval at every 5% of training. While the hero
trains, :class:`BandWatcher` reads its run store (read-only, from a thread beside the trainer) and
records a ``prediction_out_of_band`` event when an ``eval/macro/loss`` point leaves the band at its
fraction of training — once per excursion, and again only after the loss has come back inside.
Events are appended without the writer lease, as notes are, so the trainer is never disturbed.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from glasslab import track
from glasslab.errors import UserError
from glasslab.ladder.fit import TARGET_METRIC

POLL_SECONDS = 0.5


def band_at(curve: list[dict[str, float]], fraction: float) -> tuple[float, float, float]:
    """(lo, point, hi) of the predicted curve at ``fraction`` of training, linear between the 5% marks.

    Before the first mark there is no prediction: the band is open (−inf, nan, inf).
    """
    fractions = np.array([c["fraction"] for c in curve])
    if fraction < fractions[0]:
        return float("-inf"), float("nan"), float("inf")
    interp = lambda key: float(np.interp(fraction, fractions, [c[key] for c in curve]))
    return interp("lo"), interp("point"), interp("hi")


class BandWatcher:
    """Context manager: a thread that flags eval losses outside the band while the block runs."""

    def __init__(self, run_dir: str | Path, prediction: dict[str, Any], total_steps: int) -> None:
        self.run_dir = Path(run_dir)
        self.curve = prediction["curve"]
        self.total_steps = total_steps
        self.last_step = -1
        self.outside = False
        self.flagged: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="band-watcher", daemon=True)

    def __enter__(self) -> BandWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.check()  # the final eval lands just before training returns

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self.check()

    def check(self) -> None:
        """Compare eval points logged since the last check with the band; record excursions."""
        try:
            with track.RunReader(self.run_dir) as reader:
                steps, losses = reader.scalars(TARGET_METRIC, after_step=self.last_step)
        except UserError:
            return  # the store does not exist yet
        for step, loss in zip(steps, losses, strict=True):
            self.last_step = step
            lo, point, hi = band_at(self.curve, step / self.total_steps)
            inside = lo <= loss <= hi
            if not inside and not self.outside:
                self.flagged.append(step)
                track.append_event(
                    self.run_dir, "prediction_out_of_band",
                    f"eval/macro/loss {loss:.4f} left the predicted band [{lo:.4f}, {hi:.4f}]",
                    f"At step {step} ({step / self.total_steps:.0%} of training) the pre-registered prediction "
                    f"was {point:.4f} with a 90% interval [{lo:.4f}, {hi:.4f}].",
                    step=step, severity="warning")
            self.outside = not inside
