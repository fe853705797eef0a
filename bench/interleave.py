"""Side-by-side timing that survives a noisy machine: two sides run interleaved, the headline is a median
with its spread, and the run says when the machine was not quiet.

A ratio taken from all-A-then-all-B runs absorbs whatever the machine did in between (another process,
a thermal step, a cache warmed by A); interleaving A B A B … and dividing each A by the B beside it
cancels most of that drift, and the spread of the per-pair ratios says how much is left.

    from interleave import LoadWatch, interleaved, paired_ratios, headline

    with LoadWatch():  # prints the load warning as the bench's last line, if any
        times = interleaved({"ours": run_ours, "theirs": run_theirs}, repeats=5)
        print(f"speedup: {headline(paired_ratios(times['theirs'], times['ours']), 'target >= 1.5')}")
"""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Callable

QUIET_LOAD = 1.0
"""A 1-minute load average above this means something else ran beside the bench."""


def interleaved(sides: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Call each side once per repetition, in turn (A B A B …), ``repeats`` times; each callable returns its
    own measurement (seconds, a rate, …). Returns each side's measurements in repetition order."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, measure in sides.items():
            samples[name].append(float(measure()))
    return samples


def paired_ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Each repetition's ratio, numerator over the denominator measured beside it (same length lists)."""
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def headline(values: list[float], note: str, digits: int = 2) -> str:
    """``"1.42  (median of 5; spread 1.31–1.55; <note>)"``: the median of ``values`` then its min–max."""
    def fmt(value: float) -> str:
        return f"{value:.{digits}f}"
    spread = f"spread {fmt(min(values))}–{fmt(max(values))}"
    return f"{fmt(statistics.median(values))}  (median of {len(values)}; {spread}; {note})"


class LoadWatch:
    """Samples the 1-minute load average every ``every_s`` seconds while the bench runs (a daemon thread)
    and, on leaving the ``with`` block, prints one warning line when any sample was above
    ``QUIET_LOAD``, so the ratios above it are not read as quiet figures."""

    def __init__(self, every_s: float = 1.0):
        self.every_s = every_s
        self.peak = os.getloadavg()[0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, os.getloadavg()[0])

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, os.getloadavg()[0])
        if exc[0] is None and self.peak > QUIET_LOAD:
            print(f"warning: load average reached {self.peak:.1f} during this run (machine not quiet): "
                  "ratios are not quiet figures")
