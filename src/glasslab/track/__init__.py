"""The tracker: what a training run logs, where it goes, and who may write it.

    run = track.init(run_dir, config)          # takes the writer lease, writes run.json once
    run.log({"train/loss": 3.2}, step=10)
    run.log_vector("moe/layer_0/expert_load", loads, step=10)
    run.annotate("spike_skipped", "loss 9.1 > mean + 6σ", step=11, severity="warning")
    run.sample(step=100, prompt="def ", text="main():")
    run.finish()

The run store (``metrics.db``, SQLite in WAL mode) is the source of truth; sinks (JSONL, W&B
offline, TensorBoard) receive the same values. This part never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from glasslab.track.lab_events import log_lab_event, read_lab_events
from glasslab.track.reader import RunReader
from glasslab.track.run_record import build_record, read_record, write_record
from glasslab.track.sinks import Sink, check_sinks, make_sink
from glasslab.track.store import RunStore, append_event

__all__ = [
    "Sink", "check_sinks",
    "Run", "RunReader", "init", "note", "log_lab_event", "read_lab_events", "read_record", "append_event",
]


class Run:
    """An open run: the store's writer plus any sinks. Use :func:`init` to make one."""

    def __init__(self, run_dir: Path, store: RunStore, sinks: list[Sink]) -> None:
        self.run_dir = run_dir
        self.store = store
        self.sinks = sinks

    @property
    def attempt(self) -> int:
        return self.store.attempt

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Log scalars for ``step`` (names as in DESIGN.md, e.g. ``train/loss``)."""
        self.store.log(metrics, step)
        self._to_sinks("log", metrics, step)

    def log_vector(self, key: str, values: Sequence[float], step: int) -> None:
        """Log a vector (per-expert loads, router biases) for ``step``."""
        self.store.log_vector(key, values, step)
        self._to_sinks("log_vector", key, values, step)

    def annotate(self, kind: str, title: str, body: str = "", step: int | None = None,
                 severity: str = "info") -> None:
        """Record an event (kinds and severities from DESIGN.md); written at once."""
        self.store.annotate(kind, title, body, step, severity)
        self._to_sinks("annotate", kind, title, body, step, severity)

    def log_batch(self, step: int, digest: str) -> None:
        """Record the hash of the tokens trained on at ``step`` (the store only: no sink wants it)."""
        self.store.log_batch(step, digest)

    def set_loader_start(self, step: int, state: dict) -> None:
        """Record where this attempt's data loader starts (after step ``step``): the batch replay's origin."""
        self.store.set_loader_start(step, state)

    def sample(self, step: int, prompt: str, text: str) -> None:
        """Store one generation from ``prompt`` at ``step``."""
        self.store.sample(step, prompt, text)
        self._to_sinks("sample", step, prompt, text)

    def new_attempt(self, reason: str) -> int:
        """After a rollback: the steps logged from now on supersede those logged before."""
        return self.store.new_attempt(reason)

    def flush(self) -> None:
        """Commit everything logged so far (the trainer calls this at checkpoints)."""
        self.store.flush()

    def finish(self, status: str = "finished") -> None:
        """Flush, close sinks, record ``status`` and release the writer lease."""
        for sink in list(self.sinks):
            self._call_sink(sink, "close")
        self.store.close(status)

    def _to_sinks(self, method: str, *args: Any) -> None:
        for sink in list(self.sinks):
            self._call_sink(sink, method, *args)

    def _call_sink(self, sink: Sink, method: str, *args: Any) -> None:
        try:
            getattr(sink, method)(*args)
        except Exception as exc:  # a sink never stops a run: report once, then drop it
            self.sinks.remove(sink)
            self.store.annotate(
                "sink_failed", f"sink {sink.name} failed and was dropped", f"{type(exc).__name__}: {exc}",
                severity="warning",
            )


def init(
    run_dir: str | Path,
    config: dict[str, Any],
    *,
    sinks: Iterable[str] = (),
    record_extra: dict[str, Any] | None = None,
    reason: str = "start",
) -> Run:
    """Open ``run_dir`` for writing: take the lease, write ``run.json`` if absent, start sinks.

    ``config`` is the resolved config as plain data; ``record_extra`` adds fields to ``run.json``
    (size name, parameter counts, data manifest hash, prediction). ``reason`` names the attempt
    (``start``, ``resume``, ``fork``).
    """
    run_dir = Path(run_dir)
    store = RunStore(run_dir, reason=reason)
    try:
        if read_record(run_dir) is None:
            write_record(run_dir, build_record(config, record_extra))
        built = [make_sink(name, run_dir, config) for name in sinks]
    except BaseException:
        store.close("failed")
        raise
    return Run(run_dir, store, built)


def note(run_dir: str | Path, text: str, step: int | None = None) -> None:
    """Add a lab-notebook entry to a run from any process (no writer lease needed)."""
    title, _, body = text.strip().partition("\n")
    append_event(run_dir, "note", title, body.strip(), step=step)
