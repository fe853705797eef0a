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
import time
from collections.abc import Callable
from pathlib import Path

QUIET_CORES = 0.5
"""Cores kept busy by other processes, on average over a ``LoadWatch`` window, above which the bench is not
alone on the machine."""

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


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


def cpu_by_process() -> dict[int, tuple[int, float]]:
    """Every live process's parent and CPU seconds (``/proc/<pid>/stat``: user and system time); none where
    there is no ``/proc`` (not Linux)."""
    table = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # ended while listed
            continue
        fields = text[text.rindex(")") + 2:].split()  # state, ppid, …; utime is the 12th, then stime
        table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) * TICK_S)
    return table


def others_cpu_seconds(root: int) -> dict[int, float]:
    """CPU seconds of every live process that is not ``root`` or below it, by process id."""
    table = cpu_by_process()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    ours, todo = set(), [root]
    while todo:
        ours.add(pid := todo.pop())
        todo.extend(children.get(pid, ()))
    return {pid: cpu for pid, (_, cpu) in table.items() if pid not in ours}


class LoadWatch:
    """Samples every ``every_s`` seconds while the bench runs the CPU seconds of every process outside the
    bench's own (this one and every process it started: workers, Ray, datatrove) and, on leaving the ``with``
    block, prints one warning line when they kept ``QUIET_CORES`` busy on average over any ``window_s``, so the
    ratios above it are not read as quiet figures. The load average cannot tell: a bench running 2 workers on 2
    cores makes it 2 by itself. A process counts over a window when it was alive at both ends of it."""

    def __init__(self, every_s: float = 1.0, window_s: float = 10.0):
        self.every_s, self.window_s = every_s, window_s
        self.samples: list[tuple[float, dict[int, float]]] = []  # (time, the others' CPU seconds by process)
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _take(self, last: bool = False) -> None:
        """One sample; the others' cores since the latest sample at least a window back (the first sample, on
        the last call of a run shorter than a window). Samples older than that one are dropped."""
        now, others = time.monotonic(), others_cpu_seconds(os.getpid())
        back = [i for i, (then, _) in enumerate(self.samples) if now - then >= self.window_s]
        if back:
            del self.samples[:back[-1]]
        start = self.samples[:1] if back or last else []
        if start and now > start[0][0]:
            then, before = start[0]
            used = sum(cpu - before[pid] for pid, cpu in others.items() if pid in before)
            self.peak = max(self.peak, used / (now - then))
        self.samples.append((now, others))

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self._take()

    def __enter__(self) -> LoadWatch:
        self._take()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._take(last=True)
        if exc[0] is None and not PROC.is_dir():
            print("note: no /proc on this machine: whether it was quiet during this run was not checked")
        elif exc[0] is None and self.peak > QUIET_CORES:
            print(f"warning: other processes kept {self.peak:.1f} cores busy (the most over {self.window_s:.0f} s) "
                  "during this run (machine not quiet): ratios are not quiet figures")
