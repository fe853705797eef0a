"""Optional copies of a run's metrics: JSONL always available, W&B offline and TensorBoard as extras.

The run store is the source of truth; sinks are conveniences. A sink that raises is reported once
as a ``sink_failed`` warning event by the tracker and then dropped, so it never stops a run. A run
chooses its sinks with ``train.sinks`` (any of :data:`SINK_NAMES`); each writes inside the run folder:

- ``jsonl``: ``<run>/metrics.jsonl``, one JSON object per scalar set, vector, event or sample;
- ``tensorboard``: ``<run>/tensorboard/`` (``tensorboard --logdir <run>/tensorboard``): scalars, vectors
  as histograms, events as text under ``events/<kind>``, samples as text under ``samples``;
- ``wandb``: ``<run>/wandb/offline-run-*`` (``wandb sync <run>/wandb/offline-run-*``) unless the
  environment sets ``WANDB_MODE`` (``online`` logs live): scalars, vectors as histograms, events and
  samples as incremental tables ``events`` and ``samples``.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glasslab.config import redact
from glasslab.errors import UserError

SINK_NAMES = ("jsonl", "wandb", "tensorboard")


class Sink:
    """What a sink receives; every method may raise and the tracker copes."""

    name = "sink"

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def log_vector(self, key: str, values: Sequence[float], step: int) -> None: ...

    def annotate(self, kind: str, title: str, body: str, step: int | None, severity: str) -> None: ...

    def sample(self, step: int, prompt: str, text: str) -> None: ...

    def close(self) -> None: ...


class JsonlSink(Sink):
    """One JSON object per line in ``<run>/metrics.jsonl``: {"step", "type", ...}."""

    name = "jsonl"

    def __init__(self, run_dir: Path) -> None:
        self.file = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")

    def _write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._write({"type": "scalars", "step": step, "metrics": {k: float(v) for k, v in metrics.items()}})

    def log_vector(self, key: str, values: Sequence[float], step: int) -> None:
        self._write({"type": "vector", "step": step, "key": key, "values": [float(v) for v in values]})

    def annotate(self, kind: str, title: str, body: str, step: int | None, severity: str) -> None:
        self._write({"type": "event", "step": step, "kind": kind, "title": title, "body": body,
                     "severity": severity})

    def sample(self, step: int, prompt: str, text: str) -> None:
        self._write({"type": "sample", "step": step, "prompt": prompt, "text": text})

    def close(self) -> None:
        self.file.close()


class WandbSink(Sink):
    """Weights & Biases under ``<run>/wandb``: offline (sync later with ``wandb sync``) unless the
    environment's ``WANDB_MODE`` says otherwise. Events and samples go into incremental tables logged
    with the next step's scalars (``commit=False``), because W&B drops anything logged at a step below
    its latest and events may be about earlier steps."""

    name = "wandb"
    EVENT_COLUMNS = ("step", "kind", "severity", "title", "body")
    SAMPLE_COLUMNS = ("step", "prompt", "text")

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        import wandb  # optional extra

        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb = wandb
        self.run = wandb.init(dir=str(run_dir), config=redact(config), mode=os.environ.get("WANDB_MODE", "offline"),
                              name=run_dir.name, reinit="create_new")
        self.tables: dict[str, Any] = {}

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_vector(self, key: str, values: Sequence[float], step: int) -> None:
        self.run.log({key: self.wandb.Histogram(list(values))}, step=step)

    def annotate(self, kind: str, title: str, body: str, step: int | None, severity: str) -> None:
        self._add_row("events", self.EVENT_COLUMNS, (step, kind, severity, title, body))

    def sample(self, step: int, prompt: str, text: str) -> None:
        self._add_row("samples", self.SAMPLE_COLUMNS, (step, prompt, text))

    def _add_row(self, name: str, columns: tuple[str, ...], row: tuple) -> None:
        if name not in self.tables:
            self.tables[name] = self.wandb.Table(columns=list(columns), log_mode="INCREMENTAL")
        self.tables[name].add_data(*row)
        self.run.log({name: self.tables[name]}, commit=False)

    def close(self) -> None:
        self.run.finish()


class TensorBoardSink(Sink):
    """TensorBoard event files under ``<run>/tensorboard`` via tensorboardX."""

    name = "tensorboard"

    def __init__(self, run_dir: Path) -> None:
        from tensorboardX import SummaryWriter  # optional extra

        self.writer = SummaryWriter(logdir=str(run_dir / "tensorboard"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, float(value), step)

    def log_vector(self, key: str, values: Sequence[float], step: int) -> None:
        import numpy as np

        self.writer.add_histogram(key, np.asarray(values, dtype=np.float64), step)

    def annotate(self, kind: str, title: str, body: str, step: int | None, severity: str) -> None:
        self.writer.add_text(f"events/{kind}", f"[{severity}] {title}\n\n{body}", step or 0)

    def sample(self, step: int, prompt: str, text: str) -> None:
        self.writer.add_text("samples", f"**{prompt}**{text}", step)

    def close(self) -> None:
        self.writer.close()


SINK_PACKAGES = {"wandb": ("wandb", "wandb"), "tensorboard": ("tensorboardX", "tensorboard")}
"""Sink → (module it imports, the glasslab extra that installs it)."""


def check_sinks(names: Sequence[str]) -> None:
    """A one-line UserError, before a run writes anything, when a sink's optional package is missing."""
    for name in names:
        if name not in SINK_NAMES:
            raise UserError(f"sink {name!r}: expected one of {', '.join(SINK_NAMES)}")
        module, extra = SINK_PACKAGES.get(name, (None, None))
        if module is not None and importlib.util.find_spec(module) is None:
            raise UserError(f"train.sinks: {name!r} needs the {module} package: pip install 'glasslab[{extra}]'")


def make_sink(name: str, run_dir: Path, config: dict[str, Any]) -> Sink:
    """Build a sink by name; a missing optional package is a one-line user error."""
    try:
        if name == "jsonl":
            return JsonlSink(run_dir)
        if name == "wandb":
            return WandbSink(run_dir, config)
        if name == "tensorboard":
            return TensorBoardSink(run_dir)
    except ImportError as exc:
        extra = SINK_PACKAGES[name][1]
        raise UserError(f"sink {name!r} needs an extra: pip install 'glasslab[{extra}]' ({exc})") from None
    raise UserError(f"sink {name!r}: expected one of {', '.join(SINK_NAMES)}")
